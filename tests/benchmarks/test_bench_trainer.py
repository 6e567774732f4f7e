"""benchmarks/bench_trainer.py's pairs run on one OpenMP runtime and its timers are read strictly (the benchmark itself
is run by hand)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_trainer
from verl_ext.cpu import openmp


@pytest.mark.parametrize("switch", ["0", "1", None])
def test_verl_variants_get_the_preload_verl_ext_applies(monkeypatch, switch):
    """verl_ext's entry point preloads Intel's OpenMP only with VERL_EXT_CPU_IOMP=1; verl's entry point never does,
    so the benchmark passes verl's runs the same LD_PRELOAD then, and nothing otherwise."""
    if switch is None:
        monkeypatch.delenv(openmp.SWITCH, raising=False)
    else:
        monkeypatch.setenv(openmp.SWITCH, switch)
    expected = [f"++ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD={openmp.library()}"] if switch == "1" else []
    assert bench_trainer.same_openmp_runtime() == expected


def test_every_verl_ext_variant_is_paired_with_verl_s_own():
    for name, spec in bench_trainer.VARIANTS.items():
        if spec["entry"] == "verl_ext.main_ppo":
            base = bench_trainer.VARIANTS[spec["baseline"]]
            assert base["entry"] == "verl.trainer.main_ppo" and base["loss"] == spec["loss"], name


def test_round_ratios_pair_the_runs_of_each_round():
    """A machine that is slow for one round slows both runs of it: the median of the per-round ratios stays at the
    pair's true ratio (1.01 here) where the ratio of the variants' medians does not."""
    def run(update: float) -> dict:
        return {"step_s": 3.0, "train_s": 1.0, "update_actor_s": update, "peak_rss_gb": 1.0, "selection_s": 0.0,
                "fetch_store_s": 0.0, "adv_s": 0.05, "fields_s": 0.0, "update_adv_s": update + 0.05}  # fmt: skip

    verl = [0.60, 0.80, 0.61]  # round 2: a slow machine for both runs
    ours = [0.606, 0.808, 0.80]  # round 3: verl_ext's run alone slow
    table = bench_trainer.summarise({"verl clip_cov": [run(u) for u in verl],
                                     "verl_ext clip_cov": [run(u) for u in ours]})  # fmt: skip
    row = table["verl_ext clip_cov"]
    assert row["update_ratio_rounds"] == pytest.approx(1.01)
    assert row["update_ratio"] == pytest.approx(0.80 / 0.61)
    assert row["update_adv_ratio_rounds"] == pytest.approx(0.858 / 0.85)


def _rows(steps: int = 4, **extra: float) -> list[dict]:
    """A run's steps as verl's V1 trainer logs them, plus ``extra`` timers at every step."""
    return [{"step": step, "timing_s/step": 3.0, "timing_s/gen": 2.0, "timing_s/update_actor": 0.6,
             "timing_s/adv": 0.05, "actor/perf/max_memory_allocated_gb": 1.0 + step / 10, **extra}
            for step in range(1, steps + 1)]  # fmt: skip


def test_a_run_logged_with_every_timer_gives_its_figures():
    clip_cov = bench_trainer.VARIANTS["verl_ext clip_cov"]
    rows = _rows(**{bench_trainer.SELECTION_TIMER: 0.001, bench_trainer.FIELDS_TIMER: 0.004})
    got = bench_trainer.figures(rows, "run.jsonl", bench_trainer.driver_timers(clip_cov))
    assert got["train_s"] == pytest.approx(1.0) and got["update_adv_s"] == pytest.approx(0.65)
    assert (got["selection_s"], got["fields_s"], got["fetch_store_s"]) == (0.001, 0.004, 0.0)  # no round trip logged
    assert got["peak_rss_gb"] == pytest.approx(1.4)
    verl_spec = bench_trainer.VARIANTS["verl clip_cov"]
    verl = bench_trainer.figures(_rows(), "run.jsonl", bench_trainer.driver_timers(verl_spec))
    assert (verl["selection_s"], verl["fields_s"]) == (0.0, 0.0)  # verl's trainer has no driver-side selection


@pytest.mark.parametrize("key", ["timing_s/adv", "timing_s/gen", "actor/perf/max_memory_allocated_gb",
                                 "timing_s/verl_ext/cov_selection", "timing_s/verl_ext/advantage_fields"])
def test_a_timer_missing_at_a_step_is_an_error_naming_it_the_log_and_the_step(key):
    rows = _rows(**{bench_trainer.SELECTION_TIMER: 0.001, bench_trainer.FIELDS_TIMER: 0.004})
    del rows[2][key]  # step 3
    logged = bench_trainer.driver_timers(bench_trainer.VARIANTS["verl_ext kl_cov"])
    with pytest.raises(ValueError, match=rf"run_3\.jsonl: step 3 logged no '{key}'"):
        bench_trainer.figures(rows, "run_3.jsonl", logged)


def test_a_round_trip_is_read_at_every_step_and_a_timer_the_variant_does_not_log_is_an_error():
    fetch, store = bench_trainer.ROUND_TRIP_TIMERS
    logged = bench_trainer.driver_timers(bench_trainer.VARIANTS["verl_ext clip_cov"])
    rows = _rows(**{bench_trainer.SELECTION_TIMER: 0.001, bench_trainer.FIELDS_TIMER: 0.004, fetch: 0.02, store: 0.01})
    assert bench_trainer.figures(rows, "run.jsonl", logged)["fetch_store_s"] == pytest.approx(0.03)
    del rows[1][store]
    with pytest.raises(ValueError, match=f"step 2 logged no '{store}'"):
        bench_trainer.figures(rows, "run.jsonl", logged)
    vanilla, spec = _rows(**{bench_trainer.SELECTION_TIMER: 0.001}), bench_trainer.VARIANTS["verl_ext vanilla"]
    with pytest.raises(ValueError, match=r"steps \[2, 3, 4\] logged 'timing_s/verl_ext/cov_selection', which this"):
        bench_trainer.figures(vanilla, "run.jsonl", bench_trainer.driver_timers(spec))


def test_summarise_only_reads_each_runs_log_and_names_it(tmp_path):
    spec = bench_trainer.VARIANTS["verl vanilla"]
    log = tmp_path / f"{bench_trainer.run_name('verl vanilla', 1)}.jsonl"
    rows = _rows()
    del rows[3]["timing_s/update_actor"]
    log.write_text("".join(json.dumps({"step": r.pop("step"), "data": r}) + "\n" for r in rows))
    with pytest.raises(ValueError, match=rf"{log.name}: step 4 logged no 'timing_s/update_actor'"):
        bench_trainer.read_figures(tmp_path, "verl vanilla", spec, 1)
