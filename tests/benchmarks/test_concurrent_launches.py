"""benchmarks/concurrent_launches.py: its summary of the measured rounds (the launches themselves run only in the
benchmark)."""

from __future__ import annotations

import pytest

from benchmarks import concurrent_launches as bench


def _round(alone_wall: float, pair_wall: float) -> dict:
    return {"alone": {"wall_s": alone_wall, "busy_cores": 1.3, "peak_memory_gib": 4.0},
            "pair": {"wall_s": pair_wall, "busy_cores": 1.9, "peak_memory_gib": 8.5}}  # fmt: skip


def test_summary_gives_the_median_ratio_of_the_pair_to_two_launches_in_a_row():
    data = {"machine": "a CPU, 2 cores, 24 GiB", "steps": 3,
            "rounds": [_round(100.0, 140.0), _round(90.0, 135.0), _round(80.0, 200.0)]}  # fmt: skip
    text = bench.summarise(data)
    # ratios 0.70, 0.75, 1.25: median 0.75; wall medians 90 and 140
    assert "two at once / two one after the other: 0.75x (a CPU, 2 cores, 24 GiB; toy recipe, 3 steps; median of 3" in text
    assert "| alone | 1 | 90.0 | 1.30 | 4.00 |" in text and "| pair | 2 | 140.0 | 1.90 | 8.50 |" in text


def test_busy_jiffies_count_every_field_but_idle_and_iowait(monkeypatch, tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 5 100 20 2 3 4 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n")

    class FakePath(type(tmp_path)):
        def __new__(cls, *args):
            return type(tmp_path)(stat) if args == ("/proc/stat",) else type(tmp_path)(*args)

    monkeypatch.setattr(bench, "Path", FakePath)
    assert bench.busy_jiffies() == (10 + 1 + 5 + 2 + 3 + 4, 145)


def test_rounds_and_steps_must_be_positive():
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0"])
