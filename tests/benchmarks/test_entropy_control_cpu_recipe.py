"""``benchmarks/entropy_control_cpu_recipe.py``'s summary: a run with its own, moving target (``relative_linear``) is
compared with the target it logged at each step, and its table gives that target and the log gap."""

from __future__ import annotations

import math
import re

import pytest


def record(variant: str, entropy: list[float], targets: list[float], controlled: bool) -> dict:
    half = len(entropy) // 2
    return {"variant": variant, "seed": 0, "entropy": entropy, "target_second_half": targets[half:],
            "tracking_error": sum(abs(h - t) / t for h, t in zip(entropy[half:], targets[half:])) / (len(entropy) - half),
            "overshoot": None if variant == "relative_linear" else 0.0, "entropy_last": entropy[-1], "reward_last": 0.5,
            "step_time": 1.0, **({"saturated_share": 0.0} if controlled else {})}  # fmt: skip


def test_a_moving_target_adds_its_schedule_and_the_log_gap_against_each_steps_target():
    """relative_linear's entropy sits 10 % above its schedule at every step: bias 10 %, log gap log 1.1; a summary
    that used the constant --target (2.6) instead would give other figures. Without such a run the table keeps its
    columns."""
    from benchmarks.entropy_control_cpu_recipe import summary

    steps = 10
    schedule = [3.0 * (1 - 0.5 * (t - 1) / (steps - 1)) for t in range(1, steps + 1)]  # 1.0 -> 0.5 x H_1 = 3.0
    moving = record("relative_linear", [1.1 * t for t in schedule], schedule, True)
    plain = record("vanilla", [2.6] * steps, [2.6] * steps, False)
    table = summary([plain, moving], 2.6).splitlines()
    assert table[0].startswith("| run | H* | bias to H* (2nd half) |") and "log H - log H*" in table[0]
    assert len(table[1].split("|")) == len(re.split(r"(?<!\\)\|", table[0]))  # a column per header (\| is text)
    row = table[3].split(" | ")
    assert row[1] == "linear 1.0 -> 0.5 x H_1"
    assert row[2].startswith("10.0% ") and float(row[5]) == pytest.approx(math.log(1.1), abs=5e-4)
    assert row[6] == "-"  # no overshoot of a moving target
    assert table[2].split(" | ")[1] == "2.6" and float(table[2].split(" | ")[5]) == 0.0
    classic = summary([plain], 2.6).splitlines()
    assert classic[0].startswith("| run | bias to H*=2.6 (2nd half) | gap on 5-step blocks | per-step gap")


def test_overrides_reach_every_run_and_a_finished_seed_is_read_not_run_again(tmp_path, monkeypatch):
    """``-- KEY=VALUE`` goes to the demo after its own flags; a seed whose runs all logged every step is not run again,
    one with a run cut short is."""
    import json

    from benchmarks import entropy_control_cpu_recipe as bench

    calls = []
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, check: calls.append(cmd))
    out = bench.demo(0, 2.6, 3, tmp_path, False, ("clip_high",), overrides=("actor_rollout_ref.actor.ppo_mini_batch_size=2",))
    assert calls[-1][-2:] == ["--", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    log = out / "runs" / "clip_high.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps({"step": s, "data": {}}) + "\n" for s in (1, 2)))
    bench.demo(0, 2.6, 3, tmp_path, False, ("clip_high",))
    assert len(calls) == 2  # cut short at step 2 of 3: run again
    log.write_text(log.read_text() + json.dumps({"step": 3, "data": {}}) + "\n")
    bench.demo(0, 2.6, 3, tmp_path, False, ("clip_high",))
    assert len(calls) == 2  # every step logged: read, not run
