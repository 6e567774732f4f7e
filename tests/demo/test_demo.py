"""The CPU demo (``python -m verl_ext.demo``): a fast variant of the real command, determinism, bad input."""

from __future__ import annotations

import csv
import math

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the demo's CPU platform is never active next to a GPU")

LOSS_METRIC = {
    "vanilla": "actor/pg_clipfrac",
    "clip_cov": "actor/clip_cov/batch_selected_frac",
    "kl_cov": "actor/kl_cov/selected_frac",
    "grpo_erc": "actor/erc/kept_frac",
}


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_main(out, *extra: str) -> int:
    from verl_ext.demo.cli import main

    return main(["--out", str(out), "--no-progress", "--prompts-per-step", "8", *extra])


def test_demo_fast_variant_writes_finite_metrics_csv_jsonl_and_png(tmp_path, capsys):
    from verl_ext.analysis.run_reader import read_runs

    losses = list(LOSS_METRIC)
    assert run_main(tmp_path, "--steps", "3", "--losses", ",".join(losses)) == 0
    printed = capsys.readouterr().out
    for loss in losses:
        assert loss in printed  # the terminal table has one row per loss

    rows = read_csv(tmp_path / "metrics.csv")
    assert [(r["run"], r["step"]) for r in rows] == [(loss, str(s)) for loss in losses for s in (1, 2, 3)]
    for row in rows:
        for key in ("actor/entropy", "critic/score/mean", "actor/pg_loss", "actor/grad_norm", LOSS_METRIC[row["run"]]):
            assert row[key] != "", (row["run"], key)
            assert math.isfinite(float(row[key])), (row["run"], key, row[key])
        assert 0.0 <= float(row["critic/score/mean"]) <= 1.0
        assert 0.0 < float(row["actor/entropy"]) < math.log(200)
    kept = [float(r["actor/erc/kept_frac"]) for r in rows if r["run"] == "grpo_erc"]
    assert all(0.0 < k <= 1.0 for k in kept)  # ERC received both entropies (first mini-batch: ratio 1)
    selected = [float(r["actor/clip_cov/batch_selected_frac"]) for r in rows if r["run"] == "clip_cov"]
    assert all(0.0 <= s <= 0.02 + 1e-6 for s in selected)  # never more than clip_cov_ratio

    for loss in losses:  # verl's FileLogger output, readable by verl_ext.analyze
        (run,) = read_runs(str(tmp_path / "runs" / f"{loss}.jsonl"))
        steps, values = run.series("actor/entropy")
        assert steps.tolist() == [1, 2, 3]
        assert values.tolist() == pytest.approx([float(r["actor/entropy"]) for r in rows if r["run"] == loss])
    png = tmp_path / "entropy_demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_same_seed_same_curves_other_seed_other_curves(tmp_path):
    keys = ("actor/entropy", "critic/score/mean", "actor/pg_loss")
    curves = []
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        assert run_main(tmp_path / name, "--steps", "2", "--losses", "vanilla", "--seed", seed) == 0
        curves.append([tuple(r[k] for k in keys) for r in read_csv(tmp_path / name / "metrics.csv")])
    assert curves[0] == curves[1]
    assert curves[0] != curves[2]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--losses", "vanilla,ppo"], "allowed: vanilla"),
        (["--losses", "vanilla,vanilla"], "twice"),
        (["--steps", "0"], "allowed an integer >= 1"),
    ],
)
def test_bad_arguments_are_rejected_with_the_allowed_values(tmp_path, capsys, argv, message):
    from verl_ext.demo.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_batch_shape_is_an_error_naming_the_setting(tmp_path, capsys):
    from verl_ext.demo.cli import main

    assert main(["--out", str(tmp_path), "--prompts-per-step", "3"]) == 2  # 3 x 8 = 24 responses, mini-batch 32
    assert "mini_batch_size" in capsys.readouterr().err


def test_task_reward_is_the_share_of_slots_holding_the_digit():
    from verl_ext.demo.task import RepeatDigitTask

    task = RepeatDigitTask(response_length=4)
    ids = torch.tensor([[7, 7, 1, 7], [7, 7, 7, 7], [2, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]])  # EOS cut the last two responses
    rewards = task.rewards(ids, mask, torch.tensor([7, 7, 7]))
    assert rewards.tolist() == [0.75, 0.5, 0.25]


def test_entropy_target_adds_the_autopilot_run_which_follows_the_pi_law(tmp_path, capsys):
    """``--entropy-target`` adds the ``autopilot`` run (clip_cov); its ratio each step is the documented PI law in
    log space (defaults kp = 10, ki = 2, start at the demo's ratio 0.02, bounds [1e-3, 0.5], anti-windup),
    recomputed here from the logged entropies, and the selection never exceeds it."""
    from verl_ext.analysis.run_reader import read_runs

    target = 3.0
    assert run_main(tmp_path, "--steps", "3", "--losses", "vanilla", "--entropy-target", str(target)) == 0
    printed = capsys.readouterr().out
    assert "autopilot: entropy autopilot over the last" in printed and f"(target {target} nats per token)" in printed
    (run,) = read_runs(str(tmp_path / "runs" / "autopilot.jsonl"))
    steps, entropy = run.series("entropy_control/entropy")
    assert steps.tolist() == [1, 2, 3]
    assert run.series("entropy_control/entropy")[1].tolist() == pytest.approx(run.series("actor/entropy")[1].tolist())
    assert run.series("entropy_control/target")[1].tolist() == [target] * 3

    lo, hi, integral, expected = math.log(1e-3), math.log(0.5), 0.0, []
    for h in entropy.tolist():
        e = math.log(target) - math.log(h)
        u = math.log(0.02) + 10.0 * e + 2.0 * (integral + e)
        if not ((u > hi and e > 0) or (u < lo and e < 0)):
            integral += e
        expected.append(math.exp(min(max(u, lo), hi)))
    ratio = run.series("entropy_control/ratio")[1].tolist()
    assert ratio == pytest.approx(expected, rel=1e-9)
    tokens = run.series("response_length/mean")[1] * 8 * 8  # 8 prompts x 8 responses
    for r, frac, n in zip(ratio, run.series("actor/clip_cov/batch_selected_frac")[1].tolist(), tokens.tolist()):
        assert 0.0 <= frac <= max(r, 1.0 / n) + 1e-9
