"""``python -m verl_ext.analyze``: reading verl runs, the entropy-law fit R = -a*exp(H) + b, the CLI."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from verl_ext.analysis.cli import main
from verl_ext.analysis.entropy_law import FitError, fit_entropy_law, paired_points
from verl_ext.analysis.run_reader import METRIC_KEYS, Run, RunReadError, read_runs

A, B = 0.7, 0.9
ENTROPY = "actor/entropy"
REWARD = "critic/score/mean"


def law_records(n: int = 40, a: float = A, b: float = B, noise: float = 0.0) -> list[tuple[int, dict]]:
    """(step, metrics) with entropies spread over [0.1, 2.0] and R = -a exp(H) + b (+ deterministic noise)."""
    entropy = np.linspace(2.0, 0.1, n)
    records = []
    for i, h in enumerate(entropy):
        step = i + 1
        reward = -a * math.exp(h) + b + noise * math.sin(3.0 * step)
        records.append((step, {ENTROPY: float(h), REWARD: reward, "actor/pg_loss": 0.01 * step,
                               "actor/ppo_kl": 1e-3 * step, "actor/clip_cov/selected_frac": 2e-4}))
    return records


def write_jsonl(path: Path, records: list[tuple[int, dict]]) -> Path:
    """Lines as verl's FileLogger writes them: compact ``{"step": s, "data": {...}}``, NaN as null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for step, data in records:
            clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()}
            f.write(json.dumps({"step": step, "data": clean}, separators=(",", ":")) + "\n")
    return path


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["run"]: row for row in csv.DictReader(f)}


# ---------------------------------------------------------------- the fit


def test_fit_recovers_known_a_and_b_exactly_without_noise() -> None:
    h = np.linspace(0.1, 2.0, 25)
    fit = fit_entropy_law(h, -A * np.exp(h) + B)
    assert fit.a == pytest.approx(A, abs=1e-10)
    assert fit.b == pytest.approx(B, abs=1e-10)
    assert fit.ceiling == pytest.approx(B - A, abs=1e-10)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.n == 25


def test_fit_matches_polyfit_oracle_on_noisy_data() -> None:
    rng = np.random.default_rng(0)
    h = rng.uniform(0.05, 2.5, 60)
    r = -0.3 * np.exp(h) + 1.4 + rng.normal(0, 0.2, h.size)
    fit = fit_entropy_law(h, r)
    slope, intercept = np.polyfit(np.exp(h), r, 1)  # independent least squares in x = exp(H)
    assert fit.a == pytest.approx(-slope, rel=1e-9)
    assert fit.b == pytest.approx(intercept, rel=1e-9)
    assert fit.r2 == pytest.approx(np.corrcoef(np.exp(h), r)[0, 1] ** 2, rel=1e-9)
    assert 0.0 < fit.r2 < 0.99  # noisy: the oracle comparison is not the trivial R^2 = 1 case


def test_fit_drops_non_finite_pairs_and_rejects_degenerate_input() -> None:
    h = np.array([0.5, 1.0, np.nan, 1.5, 2.0])
    r = np.array([-A * math.exp(0.5) + B, -A * math.exp(1.0) + B, 0.3, np.inf, -A * math.exp(2.0) + B])
    fit = fit_entropy_law(h, r)
    assert fit.n == 3
    assert fit.a == pytest.approx(A) and fit.b == pytest.approx(B)
    with pytest.raises(FitError, match="need at least 3"):
        fit_entropy_law([0.5, 1.0], [0.1, 0.2])
    with pytest.raises(FitError, match="constant"):
        fit_entropy_law([0.7] * 5, [0.1, 0.2, 0.3, 0.4, 0.5])


# ---------------------------------------------------------------- reading runs


def test_cli_reads_the_file_written_by_verls_own_file_logger(tmp_path: Path, monkeypatch, capsys) -> None:
    from verl.utils import tracking
    path = tmp_path / "logs" / "clip_cov_run.jsonl"
    path.parent.mkdir()
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = tracking.FileLogger(project_name="proj", experiment_name="ignored_when_path_is_set")
    for step, data in law_records(noise=2e-3):
        logger.log(data={k: np.float32(v) if k == ENTROPY else v for k, v in data.items()}, step=step)
    logger.log(data={"val-core/gsm8k/acc/mean@1": 0.5, REWARD: float("nan")}, step=41)  # NaN -> null
    logger.finish()
    capsys.readouterr()

    rc, out, _ = run_cli(capsys, str(path), "--no-plot", "--csv", str(tmp_path / "fit.csv"))
    assert rc == 0, out
    row = csv_rows(tmp_path / "fit.csv")["clip_cov_run"]  # labelled by the file stem
    assert float(row["a"]) == pytest.approx(A, abs=1e-2)
    assert float(row["b"]) == pytest.approx(B, abs=1e-2)
    assert float(row["ceiling"]) == pytest.approx(B - A, abs=1e-2)
    assert float(row["r2"]) > 0.999
    assert int(row["points"]) == 40  # the step whose reward was logged as null is not a point
    assert row["entropy_key"] == ENTROPY and row["reward_key"] == REWARD
    assert "clip_cov_run" in out and "0.20" in out


def test_repeated_steps_merge_and_non_numeric_values_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [(1, {ENTROPY: 1.0, "note": "text", "flag": True, "arr": [1, 2]}),
                       (1, {REWARD: 0.25}), (2, {ENTROPY: 0.5}), (2, {ENTROPY: 0.4})])
    (run,) = read_runs(str(path))
    assert run.metrics == {ENTROPY: {1: 1.0, 2: 0.4}, REWARD: {1: 0.25}}
    steps, values = run.series(ENTROPY)
    assert steps.tolist() == [1, 2] and values.tolist() == [1.0, 0.4]


def test_paired_points_keep_steps_with_both_metrics_finite(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [(1, {ENTROPY: 1.0, REWARD: 0.1}), (2, {ENTROPY: 0.9}),
                                                (3, {ENTROPY: float("nan"), REWARD: 0.2}), (4, {REWARD: 0.3}),
                                                (5, {ENTROPY: 0.5, REWARD: 0.4})])
    steps, h, r = paired_points(read_runs(str(path))[0], ENTROPY, REWARD)
    assert steps.tolist() == [1, 5] and h.tolist() == [1.0, 0.5] and r.tolist() == [0.1, 0.4]


def test_metric_table_first_present_key_wins() -> None:
    def resolve(quantity: str, keys: list[str]) -> str | None:
        return Run("r", Path("r"), {k: {1: 0.0} for k in keys}).resolve(METRIC_KEYS[quantity])

    assert resolve("selected_frac", ["actor/kl_cov/selected_frac", "actor/clip_cov/selected_frac"]) == \
        "actor/clip_cov/selected_frac"
    assert resolve("selected_frac", ["actor/clip_cov/batch_selected_frac"]) == "actor/clip_cov/batch_selected_frac"
    assert resolve("kl", ["actor/kl_clip/raw_kl", "actor/kl_loss"]) == "actor/kl_loss"
    assert resolve("reward", ["val-core/math/acc/mean@4", "val-aux/math/acc/std@4", REWARD]) == REWARD
    assert resolve("reward", ["val-core/math/acc/mean@4", "val-core/math/acc/maj@4/mean"]) == \
        "val-core/math/acc/mean@4"
    assert resolve("entropy", ["actor/entropy_loss"]) is None


def test_directory_of_jsonl_files_gives_one_run_per_file_and_label_syntax(tmp_path: Path, capsys) -> None:
    write_jsonl(tmp_path / "proj" / "kl_cov.jsonl", law_records(a=0.5, b=1.0))
    write_jsonl(tmp_path / "proj" / "erc.jsonl", law_records(a=0.2, b=0.6))
    single = write_jsonl(tmp_path / "other" / "x=y.jsonl", law_records(a=0.1, b=0.3))  # '=' in a real path
    out_csv = tmp_path / "fits.csv"
    rc, out, err = run_cli(capsys, str(tmp_path / "proj"), f"mine={single}", str(single),
                           "--no-plot", "--csv", str(out_csv))
    assert rc == 0, err
    rows = csv_rows(out_csv)
    assert set(rows) == {"kl_cov", "erc", "mine", "x=y"}
    assert float(rows["kl_cov"]["a"]) == pytest.approx(0.5) and float(rows["erc"]["b"]) == pytest.approx(0.6)
    assert float(rows["mine"]["a"]) == pytest.approx(0.1) and float(rows["x=y"]["a"]) == pytest.approx(0.1)
    assert any(line.startswith("mine ") for line in out.splitlines())


def test_two_runs_write_a_png_grid(tmp_path: Path, capsys) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", law_records())
    b = write_jsonl(tmp_path / "b.jsonl", [(s, {ENTROPY: d[ENTROPY], REWARD: d[REWARD]}) for s, d in law_records()])
    out = tmp_path / "plots" / "cmp.png"
    rc, stdout, err = run_cli(capsys, str(a), str(b), "--out", str(out))
    assert rc == 0, err
    assert f"wrote {out}" in stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    import matplotlib.image

    assert matplotlib.image.imread(str(out)).shape[:2] == (900, 1600)


def test_no_plot_writes_no_png(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", law_records())
    rc, _, _ = run_cli(capsys, "a.jsonl", "--no-plot")
    assert rc == 0 and not (tmp_path / "analysis.png").exists()
    rc, _, _ = run_cli(capsys, "a.jsonl")
    assert rc == 0 and (tmp_path / "analysis.png").stat().st_size > 0


def test_reward_key_override_fits_validation_accuracy(tmp_path: Path, capsys) -> None:
    records = [(s, {ENTROPY: d[ENTROPY], REWARD: 0.0, "val-core/gsm8k/acc/mean@1": d[REWARD]})
               for s, d in law_records()]
    path = write_jsonl(tmp_path / "v.jsonl", records)
    rc, out, _ = run_cli(capsys, str(path), "--no-plot", "--csv", str(tmp_path / "f.csv"),
                         "--reward-key", "val-core/gsm8k/acc/mean@1")
    assert rc == 0, out
    row = csv_rows(tmp_path / "f.csv")["v"]
    assert float(row["a"]) == pytest.approx(A) and row["reward_key"] == "val-core/gsm8k/acc/mean@1"


# ---------------------------------------------------------------- fit failures and bad input


def test_unfittable_run_is_reported_per_run(tmp_path: Path, capsys) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", law_records())
    short = write_jsonl(tmp_path / "short.jsonl", law_records()[:2])
    rc, out, _ = run_cli(capsys, str(good), str(short), "--no-plot")
    assert rc == 0
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "cannot fit: 2 step(s)" in lines["short"]
    assert "0.7000" in lines["good"] and "cannot fit" not in lines["good"]
    rc, out, _ = run_cli(capsys, str(short), "--no-plot")
    assert rc == 1 and "cannot fit" in out


def test_missing_path_is_exit_2_naming_it(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.jsonl"
    rc, _, err = run_cli(capsys, str(missing), "--no-plot")
    assert rc == 2 and str(missing) in err and "no such file" in err


def test_empty_file_is_exit_2(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "run.jsonl"
    empty.write_text("\n")
    rc, _, err = run_cli(capsys, str(empty), "--no-plot")
    assert rc == 2 and str(empty) in err and "empty file" in err


def test_bad_json_line_names_file_and_line(tmp_path: Path, capsys) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", law_records(5))
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-7]  # truncated record on line 3
    path.write_text("\n".join(lines) + "\n")
    rc, _, err = run_cli(capsys, str(path), "--no-plot")
    assert rc == 2 and f"{path}:3: invalid JSON" in err


def test_json_that_is_not_a_logger_record_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "gen.jsonl"
    path.write_text('{"step": 1, "data": {"actor/entropy": 1.0}}\n{"input": "q", "output": "a"}\n')
    with pytest.raises(RunReadError, match=r"gen\.jsonl:2: not a verl file-logger record"):
        read_runs(str(path))


def test_missing_metric_names_it_and_lists_the_run_keys(tmp_path: Path, capsys) -> None:
    path = write_jsonl(tmp_path / "noreward.jsonl", [(s, {ENTROPY: 1.0 / s, "actor/pg_loss": 0.1}) for s in (1, 2, 3)])
    rc, _, err = run_cli(capsys, str(path), "--no-plot")
    assert rc == 2
    assert str(path) in err and "no reward metric" in err and REWARD in err
    assert "actor/pg_loss" in err  # what the run does log
    rc, _, err = run_cli(capsys, str(path), "--no-plot", "--entropy-key", "actor/entropy_mean")
    assert rc == 2 and "no entropy metric" in err and "actor/entropy_mean" in err


# ---------------------------------------------------------------- TensorBoard


def _write_tensorboard(directory: Path, records: list[tuple[int, dict]]) -> None:
    from torch.utils.tensorboard import SummaryWriter  # needs tensorboard, which verl requires

    writer = SummaryWriter(str(directory))  # what verl's tensorboard logger uses
    for step, data in records:
        for key, value in data.items():
            writer.add_scalar(key, value, step)
    writer.close()


def test_tensorboard_event_dir_is_read_and_fitted(tmp_path: Path, capsys) -> None:
    _write_tensorboard(tmp_path / "tensorboard_log" / "proj" / "exp_tb", law_records())
    rc, out, err = run_cli(capsys, f"tb={tmp_path / 'tensorboard_log' / 'proj' / 'exp_tb'}",
                           str(tmp_path / "tensorboard_log"), "--no-plot", "--csv", str(tmp_path / "f.csv"))
    assert rc == 0, err
    rows = csv_rows(tmp_path / "f.csv")
    assert set(rows) == {"tb", "exp_tb"}  # an explicit label, and the event dir's name for a parent dir
    for row in rows.values():
        assert float(row["a"]) == pytest.approx(A, abs=1e-4)  # event files store float32
        assert float(row["b"]) == pytest.approx(B, abs=1e-4)
        assert int(row["points"]) == 40


def test_tensorboard_without_the_package_says_how_to_install(tmp_path: Path, capsys, monkeypatch) -> None:
    directory = tmp_path / "tb"
    directory.mkdir()
    (directory / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_accumulator", None)
    rc, _, err = run_cli(capsys, str(directory), "--no-plot")
    assert rc == 2 and "pip install tensorboard" in err and str(directory) in err
