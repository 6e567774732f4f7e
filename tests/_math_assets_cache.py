"""The ``SCALE=cpu`` recipes' tiny-model assets (prepared data and warmed-up model), built once per machine and source.

The fast tier measures on them the property every DAPO launch at ``SCALE=cpu`` rests on
(tests/cpu/test_math_assets.py), and the end-to-end tier's recipe launches start from them
(tests/e2e/test_recipes_cpu.py): built by the fast tier, they are not built again in the launch (~35 s on 2 cores).
They are built by what a recipe's start-up runs (``verl_ext.testbed.assets.ensure``: the synthetic sources, the
repository's ``scripts/data/prepare_*.py``, the warm-up; here in this process, with the same arguments) into a folder under the system's temporary folder whose name is a stamp of everything
the build reads - the builder's and the preparation scripts' sources, torch's and transformers' versions, the CPU's
model and flags - so a changed builder, library or machine builds anew. The folder is complete once its
``stamp.json`` is written (last).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
def _stamp() -> str:
    import torch
    import transformers

    digest = hashlib.sha256()
    sources = [REPO / "verl_ext" / "testbed" / name for name in ("math_assets.py", "tiny_model.py")]
    sources += sorted((REPO / "scripts" / "data").glob("*.py"))
    for path in sources:
        digest.update(path.name.encode() + path.read_bytes())
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = "".join(line for line in f if line.startswith(("model name", "flags")))[:4096]
    except OSError:
        pass
    digest.update(f"{torch.__version__} {transformers.__version__} {cpu}".encode())
    return digest.hexdigest()[:16]


def folder() -> Path:
    """Where this machine's and these sources' assets are (built or not)."""
    return Path(tempfile.gettempdir()) / "verl_ext_test_assets" / f"math_tiny_{_stamp()}"


def built() -> Path | None:
    """The complete assets' folder (``data/``, ``model/``), or ``None`` if they were not built."""
    path = folder()
    return path if (path / "stamp.json").is_file() else None


PREPARE = (("prepare_gsm8k.py", "gsm8k_train", ("--splits", "train")), ("prepare_gsm8k.py", "gsm8k_test", ("--splits", "test")),
           ("prepare_dapo_math.py", "dapo_math", ()), ("prepare_aime.py", "aime2024", ("--year", "2024")),
           ("prepare_aime.py", "aime2025", ("--year", "2025")))  # fmt: skip
"""The preparation steps of ``verl_ext.testbed.assets.prepare_math_data``, with its arguments: (script, source,
arguments)."""


def _prepare(script: str, argv: list[str], cache: Path) -> None:
    """``scripts/data/<script> ARGV`` in this process (its ``main``; it imports its helpers from its folder), offline,
    with ``datasets``' cache in ``cache`` (as ``prepare_math_data`` gives the scripts' processes)."""
    import importlib.util
    import os
    import sys
    from unittest import mock

    import datasets

    folder = REPO / "scripts" / "data"
    spec = importlib.util.spec_from_file_location(f"_cache_{script[:-3]}", folder / script)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(cache)}
    try:
        with mock.patch.dict(os.environ, offline), mock.patch.object(datasets.config, "HF_DATASETS_CACHE", cache):
            spec.loader.exec_module(module)
            assert module.main(argv) == 0, (script, argv)
    finally:
        sys.path.remove(str(folder))


def build() -> Path:
    """Build the assets with what a recipe's start-up runs (``verl_ext.testbed.assets.ensure``: the synthetic sources,
    the repository's ``scripts/data/prepare_*.py``, ``verl_ext.testbed.math_assets.build_model``), in this process and
    with the same arguments, once - an existing complete folder is kept - and return their folder."""
    from verl_ext.testbed.assets import PREPARED
    from verl_ext.testbed.math_assets import build_model, write_sources

    done = built()
    if done is not None:
        return done
    path = folder()
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        src = write_sources(work / "sources")  # the recipes' sources: the command line's defaults
        common = ["--no-progress", "--output-dir", str(work / "data")]
        for script, source, args in PREPARE:
            _prepare(script, [*args, *common, "--local-path", src[source]], work / "hf_cache")
        assert sorted(p.name for p in (work / "data").glob("*.parquet")) == sorted(PREPARED)
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the same weights, bit for bit, as with the machine's threads (checked on 2 cores);
        try:  # beside the other test worker, one thread is ~2x faster than two that fight for the cores
            build_model(work / "data", work / "model")
        finally:
            torch.set_num_threads(threads)
        (work / "stamp.json").write_text(json.dumps({"stamp": path.name}))
        try:
            work.rename(path)
        except OSError:  # built meanwhile by another process: keep that one
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def seed(work_dir: Path) -> bool:
    """Copy the built assets into a recipe's work folder (``data/``, ``model/``: what ``verl_ext.testbed.assets``
    looks for before it builds); ``False`` (nothing copied) if they were not built."""
    path = built()
    if path is None:
        return False
    for name in ("data", "model"):
        shutil.copytree(path / name, work_dir / name, dirs_exist_ok=True)
    return True
