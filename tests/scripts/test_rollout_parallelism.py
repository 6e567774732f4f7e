"""The rollout's tensor-parallel size against verl 0.9.1's own rule for hybrid rollout replicas
(``verl_ext.checks.recipe_checks.check_rollout_parallelism``): a replica may span nodes (TP 16 on 2 x 8 GPUs), and the
check refuses exactly the sizes verl cannot build replicas with, naming the key and the sizes it allows.

The oracle builds the replicas as verl does: verl's own ``RolloutReplica`` constructor (its size assertion), the
split of the trainer's worker group into replicas (``engine_workers.py``), and the placement of each replica's vLLM
servers, one per node slice of consecutive workers (``vLLMReplica.launch_servers``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from recipe_pins import compose_script

from verl_ext.recipe.launch_env import BY_NAME
from verl_ext.checks.recipe_checks import TP_KEY, check_rollout_parallelism
from verl_ext.config import ConfigError


def verl_builds(nnodes: int, gpus_per_node: int, tp: int, dp: int = 1) -> bool:
    """Whether verl 0.9.1 builds hybrid rollout replicas of ``tp x dp`` GPUs on ``nnodes x gpus_per_node`` GPUs."""
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.replica import RolloutReplica

    replica_cls = type("Replica", (RolloutReplica,), {"launch_servers": lambda self: None})
    gpus = nnodes * gpus_per_node
    try:  # verl's own check of a replica's size
        replica = replica_cls(0, RolloutConfig(name="vllm", tensor_model_parallel_size=tp, data_parallel_size=dp),
                              None, gpus_per_node=gpus_per_node)  # fmt: skip
    except AssertionError:
        return False
    world = replica.world_size
    if gpus % world:  # the worker group splits into whole replicas (engine_workers.py's assertion)
        return False
    node_of = [rank // gpus_per_node for rank in range(gpus)]  # the trainer's pool: gpus_per_node workers a node
    for rank in range(gpus // world):
        workers = list(range(rank * world, (rank + 1) * world))  # RolloutReplica.init_hybrid's slice
        step = replica.gpus_per_replica_node
        for start in range(0, world, step):  # one vLLM server per slice, on its first worker's node
            if len({node_of[w] for w in workers[start:start + step]}) != 1:
                return False
            if dp > 1 and step % tp:  # vLLM's data-parallel server splits its node's GPUs by the TP size
                return False
    return True


def sizes(nnodes: int, gpus_per_node: int, tp: int, dp: int = 1):
    return OmegaConf.create({
        "trainer": {"nnodes": nnodes, "n_gpus_per_node": gpus_per_node},
        "actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": tp, "data_parallel_size": dp,
                                          "pipeline_model_parallel_size": 1,
                                          "n_gpus_per_node": "${oc.select:trainer.n_gpus_per_node,8}"}},
    })  # fmt: skip


def refusal(config) -> str | None:
    try:
        check_rollout_parallelism(config)
    except ConfigError as exc:
        return str(exc)
    return None


GRID = [(n, g, dp) for n in (1, 2, 3) for g in (1, 2, 4, 6, 8) for dp in (1, 2)]


@pytest.mark.parametrize(("nnodes", "gpus_per_node", "dp"), GRID)
def test_the_check_refuses_exactly_what_verl_cannot_build(nnodes, gpus_per_node, dp):
    """Every TP size from 1 to twice the GPUs: refused iff verl cannot build the replicas; a refusal names the key and
    lists the sizes verl builds."""
    gpus = nnodes * gpus_per_node
    builds = {tp: verl_builds(nnodes, gpus_per_node, tp, dp) for tp in range(1, 2 * gpus + 1)}
    allowed = [tp for tp, ok in builds.items() if ok]
    for tp, ok in builds.items():
        message = refusal(sizes(nnodes, gpus_per_node, tp, dp))
        assert (message is None) == ok, (tp, message)
        if message is not None:
            assert message.startswith(f"{TP_KEY}: {tp} is invalid on trainer.nnodes={nnodes} x "
                                      f"trainer.n_gpus_per_node={gpus_per_node}"), message  # fmt: skip
            if allowed:
                listed = re.search(r"allowed ([0-9, ]+)$", message)
                assert listed and [int(x) for x in listed.group(1).split(", ")] == allowed, message
            else:  # data parallelism alone needs more GPUs than there are
                assert message.endswith("; no tensor-parallel size fits these sizes"), message


def test_a_replica_spans_nodes_where_verl_allows_it():
    """The cases of the brief, against the oracle and the check."""
    assert verl_builds(2, 8, 16) and refusal(sizes(2, 8, 16)) is None  # one replica on two whole nodes
    assert verl_builds(2, 8, 4) and refusal(sizes(2, 8, 4)) is None
    assert not verl_builds(3, 8, 16)  # 24 GPUs do not split into replicas of 16
    assert refusal(sizes(3, 8, 16)) == (f"{TP_KEY}: 16 is invalid on trainer.nnodes=3 x trainer.n_gpus_per_node=8: "
                                        "the 24 GPUs must split into whole replicas of 16 GPUs (verl's rollout device "
                                        "mesh); allowed 1, 2, 4, 8, 24")  # fmt: skip
    assert not verl_builds(1, 8, 3) and "allowed 1, 2, 4, 8" in refusal(sizes(1, 8, 3))
    assert not verl_builds(1, 8, 12) and "may span nodes only as whole nodes of 8 GPUs" in refusal(sizes(1, 8, 12))
    assert not verl_builds(3, 8, 3) and "would straddle two nodes" in refusal(sizes(3, 8, 3))


@pytest.mark.parametrize("key", ["data_parallel_size", "pipeline_model_parallel_size"])
def test_a_bad_rollout_size_is_named(key):
    config = sizes(1, 8, 2)
    config.actor_rollout_ref.rollout[key] = 0
    assert refusal(config) == f"actor_rollout_ref.rollout.{key}: 0 is invalid: allowed an integer >= 1"


# through the entry point's own composition (recipe/<name>.sh PRINT_CMD=1, composed in-process) and the dry run's
# validation (verl_ext.checks.dry_run.validate: verl_ext's checks, then verl's)
LAUNCHES = {
    "tp16_on_2x8": ({"NNODES": "2", "GPUS_PER_NODE": "8", "GEN_TP": "16"}, None),
    "tp4_on_2x8": ({"NNODES": "2", "GPUS_PER_NODE": "8", "GEN_TP": "4"}, None),
    "tp16_on_3x8": ({"NNODES": "3", "GPUS_PER_NODE": "8", "GEN_TP": "16"},
                    f"{TP_KEY}: 16 is invalid on trainer.nnodes=3 x trainer.n_gpus_per_node=8: the 24 GPUs must split"),
    "tp3_on_1x8": ({"NNODES": "1", "GPUS_PER_NODE": "8", "GEN_TP": "3"},
                   f"{TP_KEY}: 3 is invalid on trainer.nnodes=1 x trainer.n_gpus_per_node=8: "),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(LAUNCHES))
def test_the_recipe_launch_validates_or_names_the_key(case, tmp_path):
    from verl_ext.checks.dry_run import validate

    variables, line = LAUNCHES[case]
    (tmp_path / "home").mkdir()
    config = compose_script("dapo_grpo_erc", variables, tmp_path)
    assert config.actor_rollout_ref.rollout.tensor_model_parallel_size == int(variables["GEN_TP"])
    assert config.trainer.nnodes == int(variables["NNODES"])
    if line is None:
        validate(config)
    else:
        with pytest.raises(ConfigError) as err:
            validate(config)
        assert str(err.value).startswith(line), str(err.value)


def test_the_gen_tp_variable_says_a_replica_may_span_nodes():
    meaning = BY_NAME["GEN_TP"].meaning
    assert "divides GPUS_PER_NODE, or a multiple of it dividing NNODES x GPUS_PER_NODE" in meaning, meaning
    docs = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    assert "it must divide trainer.n_gpus_per_node" not in docs


@pytest.mark.parametrize("value", [0, "eight", True])
def test_a_bad_rollout_gpus_per_node_is_refused_naming_it(value):
    """``actor_rollout_ref.rollout.n_gpus_per_node`` sizes the replicas: a bad value is an error, not replaced."""
    from omegaconf import OmegaConf

    from verl_ext.checks.recipe_checks import check_rollout_parallelism
    from verl_ext.config import ConfigError

    config = OmegaConf.create({"trainer": {"nnodes": 2, "n_gpus_per_node": 8},
                               "actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": 16,
                                                                 "n_gpus_per_node": value}}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.rollout\.n_gpus_per_node: .* allowed an integer >= 1"):
        check_rollout_parallelism(config)
