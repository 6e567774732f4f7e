"""``python -m verl_ext.analyze``'s figure: a panel is drawn when at least one run logs its metric and left out (with a
line saying so) when none does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from verl_ext.analysis.cli import main

ENTROPY, REWARD, KEPT, KL = "actor/entropy", "critic/score/mean", "actor/erc/kept_frac", "actor/ppo_kl"
ACTUATOR = "entropy_control/ratio"
"""The entropy control's actuator value as the trainer logs it (verl_ext.contract.CONTROL_RATIO)."""

STEP_TITLES = ["policy entropy", "reward / accuracy", "selected-token fraction", "KL"]
LAW_TITLE = "R = -a·exp(H) + b (fit)"
CONTROL_TITLE = "entropy control: actuator value"


def write_run(path: Path, *extra_keys: str, steps: int = 6) -> Path:
    """A verl file-logger JSONL with entropy, reward, ERC's kept fraction and KL per step, plus ``extra_keys``."""
    with open(path, "w") as f:
        for step in range(1, steps + 1):
            data = {ENTROPY: 2.0 - 0.2 * step, REWARD: 0.1 * step, KEPT: 1.0 - 0.01 * step, KL: 1e-3 * step}
            data.update({key: 0.01 * step for key in extra_keys})
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


@pytest.fixture
def drawn_titles(monkeypatch) -> list[list[str]]:
    """The titles of every panel of each figure saved during the test."""
    saved: list[list[str]] = []
    real_savefig = Figure.savefig

    def savefig(self, *args, **kwargs):
        saved.append([ax.get_title() for ax in self.axes])
        return real_savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def test_a_run_without_entropy_control_metrics_gets_no_actuator_panel(tmp_path, capsys, drawn_titles):
    run = write_run(tmp_path / "erc.jsonl")
    out = tmp_path / "fig.png"
    assert main([str(run), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert drawn_titles == [[*STEP_TITLES, LAW_TITLE]]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"left out the panel '{CONTROL_TITLE}': no run logs entropy_control/ratio, entropy_control/value" in stdout


def test_a_run_with_entropy_control_metrics_gets_the_actuator_panel(tmp_path, capsys, drawn_titles):
    run = write_run(tmp_path / "controlled.jsonl", ACTUATOR)
    assert main([str(run), "--out", str(tmp_path / "fig.png")]) == 0
    assert drawn_titles == [[*STEP_TITLES, LAW_TITLE, CONTROL_TITLE]]
    assert "left out" not in capsys.readouterr().out


def test_one_run_logging_a_metric_is_enough_for_its_panel(tmp_path, capsys, drawn_titles):
    plain, controlled = write_run(tmp_path / "plain.jsonl"), write_run(tmp_path / "controlled.jsonl", ACTUATOR)
    assert main([str(plain), str(controlled), "--out", str(tmp_path / "fig.png")]) == 0
    assert drawn_titles == [[*STEP_TITLES, LAW_TITLE, CONTROL_TITLE]]


def test_only_entropy_and_reward_draw_three_panels_on_one_row(tmp_path, capsys):
    run = tmp_path / "bare.jsonl"
    run.write_text("".join(json.dumps({"step": s, "data": {ENTROPY: 2.0 - 0.2 * s, REWARD: 0.1 * s}}) + "\n"
                           for s in range(1, 7)))  # fmt: skip
    out = tmp_path / "fig.png"
    assert main([str(run), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    for title in ("selected-token fraction", "KL", CONTROL_TITLE):
        assert f"left out the panel '{title}'" in stdout
    import matplotlib.image

    assert matplotlib.image.imread(str(out)).shape[:2] == (450, 1600)  # one row of three, 100 dpi
