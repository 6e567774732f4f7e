"""benchmarks/profile_update.py's attribution of py-spy samples (the profile itself is a benchmark, run by hand)."""

from __future__ import annotations

import pytest

from benchmarks import profile_update

WORKER = 'process 11:"ray::WorkerDict"'
UPDATE = "ActorRolloutRefWorker.update_actor (verl/workers/engine_workers.py:714)"  # py-spy: Class.method


def test_only_a_workers_update_is_charged_each_frame_once_per_sample(tmp_path):
    raw = tmp_path / "run.txt"
    raw.write_text("\n".join([
        f"{WORKER};main (ray/worker.py:10);{UPDATE};ppo_loss (verl_ext/trainer/actor_loss.py:90);"
        "agg (verl/trainer/ppo/core_algos.py:5);ppo_loss (verl_ext/trainer/actor_loss.py:120) 30",  # recursion
        f"{WORKER};main (ray/worker.py:10);{UPDATE};fetch (transfer_queue/client.py:7) 20",
        'process 9:"python -m verl_ext.main_ppo";fit (verl/trainer/ppo/v1/trainer_base.py:1);'
        "PPOTrainer.update_actor (verl/trainer/ppo/v1/trainer_base.py:600);get (ray/_private/worker.py:3) 500",  # the driver
        f"{WORKER};wait (threading.py:320) 400",  # an idle thread of the worker
    ]) + "\n")  # fmt: skip
    seconds = profile_update.worker_update_profile(profile_update.parse_raw(raw), rate=100)
    assert seconds == pytest.approx({"<update_actor>": 0.5, "ppo_loss (verl_ext/trainer/actor_loss.py)": 0.3,
                                     "agg (verl/trainer/ppo/core_algos.py)": 0.3,
                                     "fetch (transfer_queue/client.py)": 0.2})  # fmt: skip
    ms = profile_update.per_step_rank_ms(seconds, steps=5, ranks=2)
    assert ms["<update_actor>"] == pytest.approx(50.0)


def test_comparison_lists_the_largest_differences_first():
    rows = profile_update.compare({"a": {"x": 10.0, "y": 3.0, "z": 0.5}, "b": {"x": 9.0, "y": 8.0}}, top=2)
    assert [(r["frame"], r["difference_ms"]) for r in rows] == [("y", -5.0), ("x", 1.0)]
