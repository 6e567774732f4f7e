"""The rollout servers' HTTP health, as the watchdog (:mod:`verl_ext.driver.watchdog`) asks it.

verl's ``vLLMHttpServer`` actors serve vLLM's own app; its ``/health`` answers 200 while the engine lives and 503 once
the engine client raises ``EngineDeadError``. :func:`engine_health` asks it straight to the server - never through a
proxy of the environment (``http_proxy``: clusters set one, with a ``no_proxy`` in CIDR form that Python's ``urllib``
ignores, and a proxy's refusal is not the engine's) - and reads only 503 or a connection refused by the server's own
address as a dead engine; anything else is no answer. :class:`ServerAddresses` collects each server's address without
waiting, :class:`Probe` runs one check in a thread of its own so that a poll asks every server at once.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from typing import Any

HEALTH_TIMEOUT_S = 10.0
"""Seconds a ``/health`` request may take; longer is a busy engine, not a dead one (default of the key)."""
DEAD_ENGINE_STATUS = 503
"""What vLLM's ``/health`` answers for a dead engine (``vllm/entrypoints/serve/instrumentator/health.py``: 503 on
``EngineDeadError``, 200 otherwise)."""


def http_address(host: str, port: int | str) -> str:
    """``host:port``, an IPv6 host in brackets (``[::1]:8000``)."""
    host = str(host)
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class ServerAddresses:
    """``host:port`` of each rollout server actor's HTTP endpoint (its ``get_server_address``), asked without waiting:
    while a server starts, the call is queued behind its construction or fails (``port is None``); its answer is
    collected at a later poll, so no call is left unread (Ray would log an unread failure as an unhandled error)."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] = {}

    def __call__(self, entry: dict[str, Any]) -> str | None:
        """The server's address, or ``None`` while it has none (asked again at the next poll)."""
        import ray

        key = str(entry.get("ActorID"))
        ref = self._pending.get(key)
        if ref is None:
            handle = ray.get_actor(entry["Name"], namespace=entry.get("RayNamespace"))
            ref = self._pending[key] = handle.get_server_address.remote()
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            return None
        del self._pending[key]
        try:
            host, port = ray.get(ref)
        except Exception:  # its HTTP server not up yet: ask again
            return None
        return http_address(host, port) if host and port else None


def engine_health(address: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool | None:
    """Ask vLLM's ``/health`` at ``address`` (``host:port`` or ``[v6 host]:port``), straight to the server: no proxy
    of the environment is used. ``True``: it answered 200; ``False``: the engine is dead (503, vLLM's answer for a dead
    engine, or the connection refused by the server's address); ``None``: no answer (a timeout, a reset, any other
    status or failure)."""
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        connection.request("GET", "/health")
        status = connection.getresponse().status
    except ConnectionRefusedError:
        return False
    except (OSError, http.client.HTTPException):  # timeouts, resets, unreachable: no answer
        return None
    finally:
        connection.close()
    return True if status == 200 else False if status == DEAD_ENGINE_STATUS else None


class Probe(threading.Thread):
    """One ``/health`` check in a daemon thread of its own (a hung check never holds the process at exit)."""

    def __init__(self, health: Callable[[str], bool | None], address: str) -> None:
        super().__init__(name="verl_ext-watchdog-probe", daemon=True)
        self._health, self.address = health, address
        self.answer: bool | None = None
        self.error: Exception | None = None

    def run(self) -> None:  # noqa: D102 (threading.Thread)
        try:
            self.answer = self._health(self.address)
        except Exception as exc:  # said by the watchdog; no answer
            self.error = exc


__all__ = ["DEAD_ENGINE_STATUS", "HEALTH_TIMEOUT_S", "Probe", "ServerAddresses", "engine_health", "http_address"]
