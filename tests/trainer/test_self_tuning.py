"""``controller=auto`` (``verl_ext.control.self_tuning``): its keys, estimates, checkpoint and actuators; then on the
plants fitted from the committed logs (``verl_ext.analysis.plant``), the bounds it meets and today's PI gains fail,
and its robustness to a wrong gain prior, a wrong noise prior, a wrong lag and a candidate cap.

The figures are medians over 60 simulated seeds of steps 21-40 (``verl_ext.analysis.control``): bias
``|geomean(H / H*) - 1|``, the gap on 5-step blocks, the share of steps on a bound, the per-step gap."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl_ext.analysis.plant import fitted_plant, median_figures, simulate
from verl_ext.control import self_tuning
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SEEDS = range(60)
NOMINAL = {"bias": 0.15, "block_gap": 0.35, "bound_share": 0.30}
"""The issue's bounds on the real model (steps 21-40, median over seeds)."""
TOY_GAP = 0.10
"""On the toy, whose measurement noise is below what its logs resolve, the per-step gap has no floor: the bound is on
it (the toy demo's target is 5 %; the fitted toy's white process noise, 0.044 a step with a lag of one, sets ~5 % as
the least any controller reaches there)."""
TARGET = {"real_entropy_coef": 0.3, "toy_cov_ratio": 2.6}
AUTO_RANGE = {"entropy_coef": dict(coef_min=-0.1, coef_max=0.1), "cov_ratio": dict(ratio_min=1e-3, ratio_max=0.5)}
"""Not the defaults: the opt-in two-sided coefficient (below 0 it minimises entropy) and the committed runs' ratio
range, for the robustness tests below; what the defaults do is :func:`test_the_defaults_on_the_real_model`'s."""
PI_RANGE = {"entropy_coef": dict(coef_min=1e-4, coef_max=0.1, coef_init=0.005),
            "cov_ratio": dict(ratio_min=1e-3, ratio_max=0.5)}  # fmt: skip


@pytest.fixture(scope="module")
def plants():
    return {name: fitted_plant(name, BENCH)[0] for name in TARGET}


def controller(plant, kind="auto", prior=None, **keys):
    """``auto`` (``prior``: its gain prior as a multiple of the plant's true gain) or ``(kp, ki)`` for ``pi``, with the
    committed runs' ranges; Clip-Cov's ratio starts from the toy recipe's 0.02."""
    init = {"ratio_init": 0.02} if plant.actuator == "cov_ratio" else {}
    if kind == "auto":
        cfg = EntropyControlConfig(enable=True, controller="auto", actuator=plant.actuator, target=TARGET[plant.name],
                                   **AUTO_RANGE[plant.actuator], **init, **keys)  # fmt: skip
        made = EntropyController(cfg)
        if prior is not None:
            made.controller.prior_gain = plant.gain * prior
        return made
    kp, ki = kind
    return EntropyController(EntropyControlConfig(enable=True, controller="pi", actuator=plant.actuator, kp=kp, ki=ki,
                                                  target=TARGET[plant.name], **PI_RANGE[plant.actuator], **init))  # fmt: skip


def figures(plant, kind="auto", sim=None, **kw):
    runs = [simulate(plant, controller(plant, kind, **kw), seed=s, **(sim or {})) for s in SEEDS]
    return median_figures(runs, TARGET[plant.name])


def meets(got: dict, bounds: dict) -> list[str]:
    return [f"{k} {got[k]:.3f} > {v}" for k, v in bounds.items() if got[k] > v]


# ----------------------------------------------------------------------------------------------------------
# the controller


def test_auto_logs_its_estimates_each_step():
    cfg = EntropyControlConfig(enable=True, controller="auto", actuator="entropy_coef", target=0.3)
    made = EntropyController(cfg)
    for step, h in enumerate([0.3, 0.25, 0.35, 0.2, 0.22], start=1):
        value, metrics = made.update(step, h)
        for key in self_tuning.ESTIMATE_KEYS:
            assert math.isfinite(metrics[key]), key
        assert 0.0 <= value <= 0.1 and metrics["entropy_control/entropy_coef"] == value
        x, b, g, *_ = made.controller.state.estimate
        assert (metrics["entropy_control/gain"], metrics["entropy_control/drift"]) == (g, b)
        assert metrics["entropy_control/filtered_entropy"] == pytest.approx(math.exp(x))
    assert 0.15 < metrics["entropy_control/filtered_entropy"] < 0.4


def test_auto_learns_a_gain_the_data_show():
    """A noiseless plant ``log H_{t+1} = log H_t + 2 c_t`` (gain 2 per unit coefficient, twice the prior, no drift)
    with a two-sided range, so that the controller's own moves show the gain: the logged gain starts at the prior
    (1 per unit) and after 30 steps has moved more than a quarter of the way to 2 without passing it (the priors and
    the forgetting over ``auto_memory`` steps keep it from getting all the way on a few informative steps)."""
    cfg = EntropyControlConfig(enable=True, controller="auto", actuator="entropy_coef", target=0.3, coef_min=-0.1)
    made = EntropyController(cfg)
    log_h = math.log(0.6)
    gains = []
    for step in range(1, 31):
        value, metrics = made.update(step, math.exp(log_h))
        gains.append(metrics["entropy_control/gain"])
        log_h += 2.0 * value
    assert gains[0] == pytest.approx(self_tuning.RATE_PRIOR / self_tuning.REFERENCE_REACH["entropy_coef"])
    assert 1.25 < gains[-1] <= 2.0, gains


def test_auto_with_the_default_bounds_takes_only_enable_target_and_actuator():
    """Only enable, target and actuator set: every actuator's first values are finite, inside its default range and
    logged under its own name."""
    ranges = {"entropy_coef": (0.0, 0.1), "pos_weight": (-1.0, 1.0), "cov_ratio": (1e-4, 0.2)}
    for actuator, (lo, hi) in ranges.items():
        cfg = EntropyControlConfig(enable=True, controller="auto", actuator=actuator, target=0.3)
        made = EntropyController(cfg, ratio_init=0.002)
        for step, h in enumerate([0.3, 0.6, 0.15], start=1):
            value, metrics = made.update(step, h)
            assert math.isfinite(value) and lo <= value <= hi, (actuator, step, value)
            assert metrics[f"entropy_control/{'ratio' if actuator == 'cov_ratio' else actuator}"] == value


def test_the_coefficient_range_defaults_per_controller():
    """Unset, the coefficient's range is [0, 0.1] with auto and Skywork-OR1's [0, 0.005] with the fixed laws: it only
    ever raises entropy unless the user sets coef_min < 0 (auto only); a value the user sets is kept; another actuator
    leaves coef_max null (nothing reads it)."""
    auto = EntropyControlConfig(enable=True, controller="auto", target=0.3)
    assert (auto.actuator, auto.coef_min, auto.coef_max) == ("entropy_coef", 0.0, 0.1)
    assert (EntropyControlConfig(enable=True, controller="auto", actuator="entropy_coef", target=0.3, coef_max=0.02)
            .coef_min) == 0.0  # fmt: skip
    assert (EntropyControlConfig(enable=True, controller="auto", target=0.3, coef_min=-0.05).coef_min) == -0.05
    assert (EntropyControlConfig(enable=True, controller="auto", actuator="entropy_coef", target=0.3, coef_min=0.0)
            .coef_max) == 0.1  # fmt: skip
    for controller in ("pi", "skywork", "entropic"):
        cfg = EntropyControlConfig(enable=True, controller=controller, actuator="entropy_coef", target=0.3)
        assert (cfg.coef_min, cfg.coef_max) == (0.0, 0.005), controller
    ratio = EntropyControlConfig(enable=True, controller="auto", actuator="cov_ratio", target=0.3)
    assert (ratio.coef_min, ratio.coef_max) == (0.0, None)


def test_auto_moves_each_actuator_the_way_that_raises_a_low_entropy():
    """Entropy far below the target: the coefficient and the ratio go up, EntroPIC's alpha down (direction -1)."""
    for actuator, keys in (("entropy_coef", dict(coef_min=-0.1, coef_max=0.1)), ("pos_weight", {}),
                           ("cov_ratio", dict(ratio_init=0.002))):  # fmt: skip
        made = EntropyController(EntropyControlConfig(enable=True, controller="auto", actuator=actuator, target=1.0,
                                                      **keys))  # fmt: skip
        values = [made.update(step, 0.2)[0] for step in range(1, 6)]
        rest = {"entropy_coef": 0.0, "pos_weight": 0.0, "cov_ratio": 1e-4}[actuator]
        assert (values[-1] > rest) if actuator != "pos_weight" else (values[-1] < rest), (actuator, values)


def test_auto_state_survives_a_checkpoint_as_json():
    """The state (filters, normal equations, recent actions) goes through JSON as the driver saves it, and the resumed
    controller continues exactly."""
    cfg = EntropyControlConfig(enable=True, controller="auto", actuator="cov_ratio", target=0.5, ratio_init=0.01)
    whole, first = EntropyController(cfg), EntropyController(cfg)
    entropies = [0.6, 0.45, 0.52, 0.4, 0.48, 0.43, 0.5]
    expected = [whole.update(s, h) for s, h in enumerate(entropies, start=1)]
    for s, h in enumerate(entropies[:4], start=1):
        first.update(s, h)
    resumed = EntropyController(cfg)
    resumed.load_state_dict(json.loads(json.dumps({"entropy_control": first.state_dict()}))["entropy_control"])
    for s, h in enumerate(entropies[4:], start=5):
        value, metrics = resumed.update(s, h)
        assert value == expected[s - 1][0] and metrics == expected[s - 1][1], s
    with pytest.raises(Exception, match="controller=auto, actuator=cov_ratio"):
        EntropyController(EntropyControlConfig(enable=True, controller="pi", target=0.5), ratio_init=0.01).load_state_dict(
            first.state_dict())


def test_auto_learns_from_what_the_selection_applied():
    """Clip-Cov's candidates cut the asked ratio: the controller records the applied fraction for its filter."""
    cfg = EntropyControlConfig(enable=True, controller="auto", actuator="cov_ratio", target=1.0, ratio_init=0.01)
    made = EntropyController(cfg)
    value, metrics = made.update(1, 0.5)
    made.actuator_limited(True, metrics, applied=value / 10)
    assert made.controller.state.actions[-1] == pytest.approx(math.log(value / 10 / 1e-4))
    assert metrics["entropy_control/limited"] == 1.0


# ----------------------------------------------------------------------------------------------------------
# on the fitted plants: the bounds it meets and PI fails


DEFAULTS_ON_THE_REAL_MODEL = {"bias": 0.173, "block_gap": 0.321, "bound_share": 0.15}
"""The defaults' medians on the fitted real plant (``EntropyControlConfig(enable=True, target=0.3)``, 60 seeds)."""


def defaults_figures(plant) -> dict:
    runs = [simulate(plant, EntropyController(EntropyControlConfig(enable=True, target=0.3)), seed=s) for s in SEEDS]
    return median_figures(runs, 0.3)


def test_the_defaults_on_the_real_model(plants):
    """Nothing but ``enable`` and ``target``: auto on the coefficient in [0, 0.1] keeps the block gap and the share on
    a bound within their bounds; its bias is what the next test records."""
    got = defaults_figures(plants["real_entropy_coef"])
    assert not meets(got, {"block_gap": NOMINAL["block_gap"], "bound_share": NOMINAL["bound_share"]}), got
    assert {k: got[k] for k in DEFAULTS_ON_THE_REAL_MODEL} == pytest.approx(DEFAULTS_ON_THE_REAL_MODEL, abs=0.005)


@pytest.mark.xfail(strict=True, reason="the defaults' median bias on the fitted real plant is 0.17 > 0.15: the "
                   "coefficient (coef_min=0) can only raise entropy, and after an overshoot rests on 0")  # fmt: skip
def test_the_defaults_meet_the_bias_bound_on_the_real_model(plants):
    assert defaults_figures(plants["real_entropy_coef"])["bias"] <= NOMINAL["bias"]


def test_on_the_real_model_auto_meets_the_bounds_that_pi_10_2_fails_by_saturation(plants):
    """The real model's plant on the entropy coefficient (noise 0.5 in log H): ``auto`` meets bias <= 0.15, block gap
    <= 0.35, on a bound <= 30 %; PI with the toy's gains (10 / 2) runs the coefficient into its bounds (~65 % of the
    steps, the demo logged 53 %), PI with the gains the docs gave for this model (1 / 0.25) lags (bias ~0.24)."""
    plant = plants["real_entropy_coef"]
    auto = figures(plant)
    assert not meets(auto, NOMINAL), auto
    pi_toy = figures(plant, (10.0, 2.0))
    assert pi_toy["bound_share"] > NOMINAL["bound_share"], pi_toy
    pi_real = figures(plant, (1.0, 0.25))
    assert pi_real["bias"] > NOMINAL["bias"], pi_real


def test_on_the_toy_auto_holds_the_gap_that_pi_1_025_misses(plants):
    """The toy's plant on Clip-Cov's ratio: ``auto`` keeps the per-step gap within 10 % (as PI 10 / 2, sized there,
    does), PI 1 / 0.25 (sized for the real model) does not. On this plant the ratio's reach is small against the
    toy's per-step process noise (its whole range moves log H by +-0.02 a step around the ratio that holds 2.6
    nats, the noise 0.044), so ``auto`` sits on a bound in ~30 % of the steps: not held to the real model's bound."""
    plant = plants["toy_cov_ratio"]
    auto = figures(plant)
    assert not meets(auto, {"bias": NOMINAL["bias"], "block_gap": NOMINAL["block_gap"], "gap": TOY_GAP}), auto
    assert figures(plant, (1.0, 0.25))["gap"] > TOY_GAP
    assert figures(plant, (10.0, 2.0))["gap"] <= TOY_GAP


# ----------------------------------------------------------------------------------------------------------
# robustness: a wrong gain prior, a wrong noise prior, a wrong lag, a candidate cap


@pytest.mark.parametrize(("case", "kw", "sim", "bounds"), [
    ("gain prior 4x too small", dict(prior=0.25), None, NOMINAL),
    ("gain prior 4x too large", dict(prior=4.0), None, {**NOMINAL, "bias": 0.30}),
    ("controller lag 2, plant lag 0", dict(auto_lag=2), None, {**NOMINAL, "bias": 0.20}),
    ("controller lag 1, plant lag 2", {}, dict(lag=2), {**NOMINAL, "bias": 0.20, "block_gap": 0.40}),
    ("measurement noise 4x below the fit", {}, "noise/4", NOMINAL),
])  # fmt: skip
def test_robust_on_the_real_model(plants, case, kw, sim, bounds):
    """The real model's plant with the controller's assumptions off. Where the bounds are looser than the nominal
    ones, the docs say so: a gain over-estimated 4x makes ``auto`` slow (bias ~0.27: its drift estimate has to carry
    the difference); a lag off by a step costs a few hundredths of bias (~0.15), a plant two steps late also widens
    the block gap (~0.35)."""
    plant = plants["real_entropy_coef"]
    if sim == "noise/4":
        sim = dict(measure_sigma=plant.measure_sigma / 4)
    got = figures(plant, sim=sim, **kw)
    assert not meets(got, bounds), (case, got)


@pytest.mark.parametrize("scale", [4.0, 0.25])
def test_robust_to_a_noise_prior_4x_off(plants, monkeypatch, scale):
    """The noise ``auto`` starts from (:data:`~verl_ext.control.self_tuning.PRIOR_NOISE`) 4x off either way: it
    measures its own, and meets the nominal bounds on the real model and the gap on the toy."""
    monkeypatch.setattr(self_tuning, "PRIOR_NOISE", self_tuning.PRIOR_NOISE * scale)
    assert not meets(figures(plants["real_entropy_coef"]), NOMINAL)
    assert figures(plants["toy_cov_ratio"])["gap"] <= TOY_GAP


@pytest.mark.parametrize(("case", "kw", "sim"), [
    ("gain prior 4x too small", dict(prior=0.25), None),
    ("gain prior 4x too large", dict(prior=4.0), None),
    ("controller lag 0, plant lag 1", dict(auto_lag=0), None),
    ("controller lag 1, plant lag 2", {}, dict(lag=2)),
    ("a candidate cap of 0.002 over steps 6-20, then released", {}, dict(cap=lambda t, h: 0.002 if 6 <= t <= 20 else 1.0)),
])  # fmt: skip
def test_robust_on_the_toy(plants, case, kw, sim):
    """The toy's plant with the controller's assumptions off: bias <= 0.15 and a per-step gap within 12 % (10 %
    nominal). Under the cap the ratio asked cannot act; ``auto`` learns from the applied fraction and has no
    integrator to wind up, so it holds the target once the cap releases."""
    got = figures(plants["toy_cov_ratio"], sim=sim, **kw)
    assert not meets(got, {"bias": NOMINAL["bias"], "gap": 0.12}), (case, got)


def test_the_capped_plant_holds_the_value_below_the_cap(plants):
    """The cap does act in the simulation: while it binds the applied ratio is 0.002 whatever ``auto`` asks."""
    plant = plants["toy_cov_ratio"]
    run = simulate(plant, controller(plant), seed=0, cap=lambda t, h: 0.002 if 6 <= t <= 20 else 1.0)
    assert all(a <= 0.002 for a in run.applied[5:20]) and max(run.value[5:20]) > 0.002


# ----------------------------------------------------------------------------------------------------------
# the gain it learns does not depend on the range the user sets


GAIN_STEPS, GAIN_MEMORY, GAIN_SEEDS = 200, 1000, range(30)
"""200 steps with a memory that keeps them all, 30 seeds: what the data say, not what forgetting leaves."""


@pytest.mark.parametrize("coef_max", [0.005, 0.02, 0.1])
def test_the_learned_gain_approaches_the_real_models_at_any_range(plants, coef_max):
    """On the real model's fitted plant (gain ~1.8 log H per unit coefficient per step), at Skywork-OR1's coef_max
    0.005, at 0.02 and at auto's default 0.1 (coef_min 0): the gain's floor lies below the true gain, the median
    learned gain over seeds is within a factor 2 of it, and the truth lies within 2 of the estimate's own standard
    deviations in at least 80 % of the seeds. A narrow range moves log H by at most ``gain x coef_max`` a step
    (0.009 at 0.005, against a measurement noise of 0.5), so the data there barely inform the gain and the estimate
    stays near the prior (1 per unit), whose spread covers the truth; at 0.1 the data pull it to within 25 %."""
    plant = plants["real_entropy_coef"]
    floor = self_tuning.GAIN_FLOOR * self_tuning.RATE_PRIOR / self_tuning.REFERENCE_REACH["entropy_coef"]
    assert floor < plant.gain
    learned, covered = [], 0
    for seed in GAIN_SEEDS:
        made = EntropyController(EntropyControlConfig(enable=True, controller="auto", target=0.3, coef_max=coef_max,
                                                      auto_memory=GAIN_MEMORY))  # fmt: skip
        simulate(plant, made, steps=GAIN_STEPS, seed=seed)
        _, _, g, _, var_g, *_ = made.controller.state.estimate
        learned.append(g)
        covered += abs(g - plant.gain) <= 2.0 * math.sqrt(var_g)
    median = sorted(learned)[len(learned) // 2]
    assert 0.5 < median / plant.gain < 2.0, (coef_max, median, plant.gain)
    assert covered >= 0.8 * len(GAIN_SEEDS), (coef_max, covered)
    if coef_max == 0.1:
        assert median == pytest.approx(plant.gain, rel=0.25), median


def test_the_outlier_gate_rarely_skips_an_honest_measurement(plants):
    """On the fitted real plant (Gaussian noise, nothing a gate should skip), 60 seeds x 40 steps: at most 1 % of the
    steps are skipped as outliers (a 4-sigma gate on a young noise estimate would skip ~2 %: its prediction errors
    spread ~2x its predicted standard deviation over the first 10 steps)."""
    plant = plants["real_entropy_coef"]
    runs = [simulate(plant, controller(plant), seed=s) for s in SEEDS]
    flags = [m[self_tuning.OUTLIER] for run in runs for m in run.metrics]
    assert sum(flags) <= 0.01 * len(flags), sum(flags)
