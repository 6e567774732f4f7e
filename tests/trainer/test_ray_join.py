"""A CPU-mode driver joining a running Ray on 127.0.0.1 keeps that address (``verl_ext.startup.on_loopback``): Ray
would replace it by the machine's own address, where a loopback-bound cluster does not listen, and wait there for
ever. The e2e tier's launches join such a cluster (tests/e2e/_shared_ray.py), which proves the whole path."""

from __future__ import annotations

import pytest

from verl_ext.startup import on_loopback


@pytest.mark.parametrize("address", ["127.0.0.1:6379", "127.0.1.1:40000", "localhost:6379", "[::1]:6379", "127.0.0.1"])
def test_loopback_addresses_are_recognised(address):
    assert on_loopback(address)


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "192.0.2.2:35043", "head-node:6379", "auto", "[2001:db8::1]:6379",
                                     "ray://10.0.0.1:10001", "1270.0.0.1:6379"])
def test_other_addresses_are_not(address):
    assert not on_loopback(address)
