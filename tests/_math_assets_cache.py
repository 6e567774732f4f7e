"""The ``SCALE=cpu`` recipes' tiny-model assets (prepared data and warmed-up model), built once per machine and source.

The fast tier measures on them the property every DAPO launch at ``SCALE=cpu`` rests on
(tests/cpu/test_math_assets.py), and the end-to-end tier's recipe launches start from them
(tests/e2e/test_recipes_cpu.py): built by the fast tier, they are not built again in the launch (~35 s on 2 cores).
They are built by the recipes' own start-up code (``verl_ext.testbed.assets.ensure``: the synthetic sources, the
repository's ``scripts/data/prepare_*.py``, the warm-up) into a folder under the system's temporary folder whose name is a stamp of everything
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


def build() -> Path:
    """Build the assets as a recipe's start-up does (``verl_ext.testbed.assets.ensure``: the sources, the
    preparation scripts, ``python -m verl_ext.testbed.math_assets model``), once - an existing complete folder is
    kept - and return their folder."""
    from verl_ext.testbed.assets import AssetPlan, ensure

    done = built()
    if done is not None:
        return done
    path = folder()
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        assert ensure(AssetPlan(task="math", model="tiny", folder=work, data_dir=work / "data",
                                model_path=work / "model")) == ["data", "model"]  # fmt: skip
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
