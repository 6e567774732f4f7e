"""Shared fixtures: the tiny Qwen2 model (built once per session, no downloads) and the markers.

Tests mirror the packages (``tests/losses``, ``tests/trainer``, ``tests/cpu``, ``tests/analysis``, ``tests/demo``),
plus ``tests/scripts`` (recipes, data, cluster scripts) and ``tests/e2e`` (verl's whole trainer in CPU mode).
``tests`` is not a package (verl installs one named ``tests``); this file puts it on ``sys.path`` so that every
test module can import the float64 oracles, ``_oracles``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engine: runs verl's real FSDP2 TrainingWorker on CPU/gloo (slow-ish)")
    config.addinivalue_line("markers", "e2e: runs verl's whole trainer in CPU mode (Ray, FSDP2, vLLM's CPU engine; minutes)")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A randomly initialised tiny Qwen2 + tokenizer saved with ``save_pretrained`` (seed 0)."""
    from verl_ext.testbed.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2"), seed=0)
