"""``controller=auto`` (``verl_ext.control.self_tuning``): its keys, estimates, checkpoint and actuators; then, on
the plants fitted from the committed logs (``verl_ext.analysis.plant``), what its defaults reach against the nominal
bounds and today's PI gains, its robustness to a wrong gain prior, a wrong lag, a lower noise, a wrong noise prior
and a candidate cap, and the gain it learns.

Every case on the real model's plant builds its controller from ``EntropyControlConfig(enable=True, target=0.3)``
and the one key the case varies (:data:`REAL_CASES`). The figures are medians over 60 simulated seeds of steps 21-40
(``verl_ext.analysis.control``): bias ``|geomean(H / H*) - 1|``, the gap on 5-step blocks, the share of steps on a
bound (``bound_share``) and on a bound that acts (``reach_share``: not the actuator at rest), the per-step gap. The simulation is seeded, so the figures are exact: each docstring quotes them. Where a
case misses a nominal bound, the nominal bound stays in a strict ``xfail`` test that records the figure, and the
case's own test holds it to the measured figure plus a stated margin."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
from pathlib import Path

import pytest

from verl_ext.analysis.plant import Plant, fitted_plant, median_figures, simulate
from verl_ext.control import self_tuning
from verl_ext.control.entropy_control import EntropyControlConfig, EntropyController

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SEEDS = range(60)
NOMINAL = {"bias": 0.15, "block_gap": 0.35, "reach_share": 0.30}
"""The bounds on the real model (steps 21-40, median over seeds). The share on a bound counts the bounds that act (the
coefficient's maximum; both ends of a two-sided range): noise must not ride the actuator's reach. The one-sided
coefficient's 0 is where it belongs while the entropy is above the target (it falls there as fast as the closing share
allows and lets the policy's own decline act), so those steps are not held to it; ``bound_share`` counts them too."""
TOY_GAP = 0.10
"""On the toy, whose measurement noise is below what its logs resolve, the per-step gap has no floor: the bound is on
it (the toy demo's target is 5 %; the fitted toy's white process noise, 0.044 a step with a lag of one, sets ~5 % as
the least any controller reaches there)."""
REAL_TARGET, TOY_TARGET = 0.3, 2.6
TOY_KEYS = dict(actuator="cov_ratio", ratio_min=1e-3, ratio_max=0.5, ratio_init=0.02)
"""The toy's keys beyond enable and target: its committed runs (the ones its plant is fitted on) moved Clip-Cov's
ratio, not the coefficient, in [1e-3, 0.5] from the toy recipe's 0.02; the plant's coordinate is
``log(ratio / 1e-3)``, so it knows nothing below 1e-3."""
AUTO_REACH = dict(coef_max=0.1)
"""PI on the real model gets auto's default reach (``coef_max`` 0.1, not the fixed laws' default 0.005, whose whole
range moves log H by 0.009 a step against a drift of -0.049), so that the comparison is of the law, not the range."""


@functools.cache
def plant(name: str) -> Plant:
    return fitted_plant(name, BENCH)[0]


REAL_CASES = {
    # the defaults: enable and target only
    "defaults": ({}, None, None),
    # the opt-in two-sided coefficient (below 0 it minimises entropy)
    "two-sided coefficient (opt-in)": (dict(coef_min=-0.1), None, None),
    # the gain prior (not a key: the controller's prior_gain) as a multiple of the plant's true gain
    "gain prior 4x too small": ({}, 0.25, None),
    "gain prior 4x too large": ({}, 4.0, None),
    # auto_lag: the plant's lag is 0, the default 1
    "controller lag 2, plant lag 0": (dict(auto_lag=2), None, None),
    # the simulated plant's lag (the controller keeps its default 1)
    "controller lag 1, plant lag 2": ({}, None, dict(lag=2)),
    # the simulated plant's measurement noise
    "measurement noise 4x below the fit": ({}, None, dict(noise=0.25)),
    # the noise the controller starts from (self_tuning.PRIOR_NOISE) 4x off either way
    "noise prior 4x too large": ({}, None, dict(noise_prior=4.0)),
    "noise prior 4x too small": ({}, None, dict(noise_prior=0.25)),
}
"""Each case on the real model: ``(the config key it sets, the gain prior's multiple of the true gain, what the
simulation changes)``."""
TOY_CASES = {
    "nominal": ({}, None, None),
    "gain prior 4x too small": ({}, 0.25, None),
    "gain prior 4x too large": ({}, 4.0, None),
    # auto_lag: the toy's plant lag is 1, the default
    "controller lag 0, plant lag 1": (dict(auto_lag=0), None, None),
    "controller lag 1, plant lag 2": ({}, None, dict(lag=2)),
    "a candidate cap of 0.002 over steps 6-20, then released": ({}, None, dict(cap=True)),
    "noise prior 4x too large": ({}, None, dict(noise_prior=4.0)),
    "noise prior 4x too small": ({}, None, dict(noise_prior=0.25)),
}
"""The toy's cases, on :data:`TOY_KEYS`: as :data:`REAL_CASES`."""


def cap_6_20(step: int, entropy: float) -> float:
    """A candidate cap of 0.002 over steps 6-20, then released."""
    return 0.002 if 6 <= step <= 20 else 1.0


def config(plant_name: str, **key) -> EntropyControlConfig:
    """The real model's: enable, target and ``key``; the toy's: also :data:`TOY_KEYS`."""
    if plant_name.startswith("toy"):
        return EntropyControlConfig(enable=True, target=TOY_TARGET, **TOY_KEYS, **key)
    return EntropyControlConfig(enable=True, target=REAL_TARGET, **key)


def run_case(plant_name: str, key: dict, prior: float | None, sim: dict | None, seeds=SEEDS) -> dict:
    """The median figures of a case (:data:`REAL_CASES`) over ``seeds``."""
    fitted = plant(plant_name)
    sim = dict(sim or {})
    kw = {}
    if "noise" in sim:
        kw["measure_sigma"] = fitted.measure_sigma * sim.pop("noise")
    if "lag" in sim:
        kw["lag"] = sim.pop("lag")
    if sim.pop("cap", False):
        kw["cap"] = cap_6_20
    noise_prior = self_tuning.PRIOR_NOISE
    self_tuning.PRIOR_NOISE = noise_prior * sim.pop("noise_prior", 1.0)
    assert not sim, sim
    try:
        runs = []
        for seed in seeds:
            made = EntropyController(config(plant_name, **key))
            if prior is not None:
                made.controller.prior_gain = fitted.gain * prior
            runs.append(simulate(fitted, made, seed=seed, **kw))
    finally:
        self_tuning.PRIOR_NOISE = noise_prior
    return median_figures(runs, TOY_TARGET if plant_name.startswith("toy") else REAL_TARGET)


@functools.cache
def real(case: str) -> dict:
    got = run_case("real_entropy_coef", *REAL_CASES[case])
    print(f"real model, {case}: " + ", ".join(f"{k} {v:.3f}" for k, v in got.items()))
    return got


@functools.cache
def toy(case: str) -> dict:
    got = run_case("toy_cov_ratio", *TOY_CASES[case])
    print(f"toy, {case}: " + ", ".join(f"{k} {v:.3f}" for k, v in got.items()))
    return got


def pi_figures(plant_name: str, kp: float, ki: float, **key) -> dict:
    return run_case(plant_name, dict(controller="pi", kp=kp, ki=ki, **key), None, None)


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
    """A noiseless plant ``log H_{t+1} = log H_t - 0.05 + 2 c_t`` (gain 2 per unit coefficient, twice the prior; the
    drift about the real model's fitted -0.049) from 0.6 nats, with the defaults: the entropy falls to the target of
    0.3, the coefficient then rises off 0 to hold it, and those moves show the gain. The logged gain starts at the
    prior (1 per unit) and after 30 steps reads 1.71 (measured): asserted in (1.6, 2]. It stops short of 2 because
    the gain's prior (standard deviation its own size) and the forgetting over the default ``auto_memory`` (20
    steps) weigh against the ~10 informative steps."""
    made = EntropyController(EntropyControlConfig(enable=True, target=0.3))
    log_h = math.log(0.6)
    gains = []
    for step in range(1, 31):
        value, metrics = made.update(step, math.exp(log_h))
        gains.append(metrics["entropy_control/gain"])
        log_h += -0.05 + 2.0 * value
    assert gains[0] == pytest.approx(self_tuning.RATE_PRIOR / self_tuning.REFERENCE_REACH["entropy_coef"])
    assert 1.6 < gains[-1] <= 2.0, gains
    assert math.exp(log_h) == pytest.approx(0.3, rel=0.05)


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
    for actuator, keys in (("entropy_coef", {}), ("pos_weight", {}), ("cov_ratio", dict(ratio_init=0.002))):
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
        pi = EntropyController(EntropyControlConfig(enable=True, controller="pi", target=0.5), ratio_init=0.01)
        pi.load_state_dict(first.state_dict())


def test_auto_learns_from_what_the_selection_applied():
    """Clip-Cov's candidates cut the asked ratio: the controller records the applied fraction for its filter."""
    cfg = EntropyControlConfig(enable=True, controller="auto", actuator="cov_ratio", target=1.0, ratio_init=0.01)
    made = EntropyController(cfg)
    value, metrics = made.update(1, 0.5)
    made.actuator_limited(True, metrics, applied=value / 10)
    assert made.controller.state.actions[-1] == pytest.approx(math.log(value / 10 / 1e-4))
    assert metrics["entropy_control/limited"] == 1.0


# ----------------------------------------------------------------------------------------------------------
# the defaults on the fitted real plant, against the nominal bounds and PI


DEFAULTS_ON_THE_REAL_MODEL = {"bias": 0.159, "block_gap": 0.285, "bound_share": 0.50, "reach_share": 0.0}
"""The defaults' medians on the fitted real plant (``EntropyControlConfig(enable=True, target=0.3)``, 60 seeds)."""


def test_the_defaults_on_the_real_model_meet_the_block_gap_and_bound_bounds_that_pi_misses():
    """Nothing but ``enable`` and ``target``: auto on the coefficient in [0, 0.1] keeps the block gap (0.285) within
    its bound (0.35) and never reaches the coefficient's maximum (``reach_share`` 0); it rests on 0 in half the steps
    (``bound_share`` 0.50: the entropy above the target, the policy's decline left to act); its bias (0.159) is what
    the next test records. PI at the same reach (:data:`AUTO_REACH`) with the toy's gains (10 / 2) sits on a bound of
    its range in 65 % of the steps; with the gains the docs gave for this model (1 / 0.25) it lags: block gap 0.50,
    bias 0.55."""
    got = real("defaults")
    assert not meets(got, {"block_gap": NOMINAL["block_gap"], "reach_share": NOMINAL["reach_share"]}), got
    assert {k: got[k] for k in DEFAULTS_ON_THE_REAL_MODEL} == pytest.approx(DEFAULTS_ON_THE_REAL_MODEL, abs=0.005)
    pi_toy = pi_figures("real_entropy_coef", 10.0, 2.0, **AUTO_REACH)
    assert pi_toy["reach_share"] > NOMINAL["reach_share"] + 0.2, pi_toy
    pi_real = pi_figures("real_entropy_coef", 1.0, 0.25, **AUTO_REACH)
    assert pi_real["block_gap"] > NOMINAL["block_gap"] + 0.1 and pi_real["bias"] > NOMINAL["bias"] + 0.2, pi_real


@pytest.mark.xfail(strict=True, reason="the defaults' median bias on the fitted real plant is 0.159 > 0.15: the "
                   "coefficient (coef_min=0) can only raise entropy, and after an overshoot rests on 0")  # fmt: skip
def test_the_defaults_meet_the_bias_bound_on_the_real_model():
    assert real("defaults")["bias"] <= NOMINAL["bias"]


ABOVE_TARGET = 0.4
"""A target in the range a user of the real model picks (0.35-0.45 nats), below where the entropy starts."""


def test_above_the_target_the_coefficient_rests_and_lets_the_policys_decline_act():
    """The fitted real plant started at 1.5 x the target (0.6 nats at :data:`ABOVE_TARGET`; a policy whose entropy
    starts above what the user asks), the controller built from ``enable`` and ``target`` alone, 60 seeds. While the
    filtered entropy is more than 20 % above the target the coefficient is 0 in every step (median over seeds of its
    mean there: 0; a controller whose closing share towards 0 was limited by the room to ``-b / g`` kept it at 0.0036
    and a median bias over steps 21-40 of +0.177), and the entropy comes down with the policy's own decline: median
    signed bias +0.089 (asserted <= +0.12)."""
    fitted = dataclasses.replace(plant("real_entropy_coef"), start=1.5 * ABOVE_TARGET)
    above, signed = [], []
    for seed in SEEDS:
        run = simulate(fitted, EntropyController(EntropyControlConfig(enable=True, target=ABOVE_TARGET)), seed=seed)
        filtered = [m[self_tuning.FILTERED] for m in run.metrics]
        well_above = [v for v, f in zip(run.value, filtered) if f > 1.2 * ABOVE_TARGET]
        above.append(sum(well_above) / len(well_above) if well_above else 0.0)
        second = run.measured[20:]
        signed.append(math.exp(sum(math.log(h / ABOVE_TARGET) for h in second) / len(second)) - 1)
    assert statistics.median(above) == 0.0, statistics.median(above)
    assert statistics.median(signed) <= 0.12, statistics.median(signed)


def test_the_opt_in_two_sided_coefficient_meets_every_bound_on_the_real_model():
    """``coef_min=-0.1``, the opt-in two-sided coefficient (below 0 it minimises entropy), is the one key set: with
    it the coefficient can also pull entropy down after an overshoot, and the real model's figures (bias 0.122, block
    gap 0.269, on a bound 0.05) meet all three nominal bounds. The bias rests on the drift estimate (without it
    0.177)."""
    got = real("two-sided coefficient (opt-in)")
    assert not meets(got, NOMINAL), got


def test_on_the_toy_auto_holds_the_gap_that_pi_1_025_misses():
    """The toy's plant on Clip-Cov's ratio (:data:`TOY_KEYS`): ``auto`` keeps the per-step gap at 0.069 (bound 0.10)
    and its bias at 0.035, as PI 10 / 2, sized there, does (0.089); PI 1 / 0.25 (sized for the real model) does not
    (0.130). Without its drift estimate ``auto``'s gap is 0.123. On this plant the ratio's reach is small against the
    toy's per-step process noise (its whole range moves log H by +-0.02 a step around the ratio that holds 2.6 nats,
    the noise 0.044), so ``auto`` sits on a bound in ~30 % of the steps (half of them at the smallest ratio, its rest):
    not held to the real model's bound."""
    got = toy("nominal")
    assert not meets(got, {"bias": TOY_BIAS, "gap": TOY_GAP}), got
    assert pi_figures("toy_cov_ratio", 1.0, 0.25)["gap"] > TOY_GAP + 0.02
    assert pi_figures("toy_cov_ratio", 10.0, 2.0)["gap"] <= TOY_GAP


# ----------------------------------------------------------------------------------------------------------
# robustness: a wrong gain prior, a wrong lag, a lower noise, a wrong noise prior, a candidate cap


REAL_ROBUST = {
    "gain prior 4x too small": {**NOMINAL, "bias": 0.18},
    "gain prior 4x too large": {**NOMINAL, "bias": 0.30},
    "controller lag 2, plant lag 0": {**NOMINAL, "bias": 0.20},
    "controller lag 1, plant lag 2": {**NOMINAL, "bias": 0.22, "block_gap": 0.37},
    "measurement noise 4x below the fit": NOMINAL,
    "noise prior 4x too large": {**NOMINAL, "bias": 0.18},
    "noise prior 4x too small": {**NOMINAL, "bias": 0.18},
}
"""Per case, the bounds it is held to: the nominal ones, or where the case misses one, the measured figure plus a
margin of about 0.02 (the nominal bound is then in :func:`test_the_real_model_cases_that_miss_a_nominal_bound`)."""


@pytest.mark.parametrize("case", sorted(REAL_ROBUST))
def test_robust_on_the_real_model(case):
    """The real model's plant with one of the controller's assumptions off, measured (bias / block gap / on a bound
    that acts / at rest or on a bound; the defaults: 0.159 / 0.285 / 0 / 0.50):

    - gain prior 4x too small: 0.163 / 0.290 / 0 / 0.60;
    - gain prior 4x too large: 0.274 / 0.315 / 0 / 0.15 - slow (its drift estimate has to carry the difference);
    - controller lag 2, plant lag 0: 0.177 / 0.272 / 0 / 0.45;
    - controller lag 1, plant lag 2: 0.204 / 0.355 / 0 / 0.55;
    - measurement noise 4x below the fit: 0.123 / 0.216 / 0.05 / 0.55;
    - noise prior (``PRIOR_NOISE``) 4x too large: 0.159 / 0.290 / 0 / 0.50; 4x too small: 0.152 / 0.299 / 0 / 0.50
      - it measures its own noise."""
    got = real(case)
    assert not meets(got, REAL_ROBUST[case]), (case, got)


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=reason)) for case, reason in {
        "gain prior 4x too small": "bias 0.163 > 0.15 (the defaults' own is 0.159)",
        "gain prior 4x too large": "bias 0.274 > 0.15: a gain over-estimated 4x makes the steps 4x too timid",
        "controller lag 2, plant lag 0": "bias 0.177 > 0.15 (the defaults' own is 0.159)",
        "controller lag 1, plant lag 2": "bias 0.204 > 0.15 and block gap 0.355 > 0.35: a plant two steps late",
        "noise prior 4x too large": "bias 0.159 > 0.15 (the defaults' own is 0.159)",
        "noise prior 4x too small": "bias 0.152 > 0.15 (the defaults' own is 0.159)",
    }.items()])  # fmt: skip
def test_the_real_model_cases_that_miss_a_nominal_bound(case):
    """The nominal bounds on the cases that miss one (each ``reason`` quotes the measured figure)."""
    assert not meets(real(case), NOMINAL)


TOY_BIAS = 0.06
"""The toy's bias bound: the measured cases reach 0.027-0.043 (the cap's aside), so 0.15 would hold nothing there."""
TOY_ROBUST = {case: {"bias": TOY_BIAS, "gap": TOY_GAP} for case in TOY_CASES if case != "nominal"}
TOY_ROBUST["a candidate cap of 0.002 over steps 6-20, then released"] = {"bias": 0.10, "gap": 0.12}


@pytest.mark.parametrize("case", sorted(TOY_ROBUST))
def test_robust_on_the_toy(case):
    """The toy's plant with one of the controller's assumptions off, measured (bias / per-step gap):

    - gain prior 4x too small: 0.030 / 0.066;
    - gain prior 4x too large: 0.041 / 0.078;
    - controller lag 0, plant lag 1: 0.027 / 0.068; controller lag 1, plant lag 2: 0.038 / 0.081;
    - noise prior 4x too large: 0.049 / 0.080; 4x too small: 0.033 / 0.066;
    - a candidate cap of 0.002 over steps 6-20: 0.086 / 0.104, held to 0.10 / 0.12 (the nominal gap in
      :func:`test_the_toy_under_a_cap_misses_the_nominal_gap`): while the cap binds the entropy falls; after it the
      ratio climbs to its bound, whose whole reach barely outruns the drift."""
    got = toy(case)
    assert not meets(got, TOY_ROBUST[case]), (case, got)


@pytest.mark.xfail(strict=True, reason="the per-step gap is 0.104 > 0.10 over steps 21-40 after a cap of 0.002 "
                   "over steps 6-20 (the entropy fell while it bound); 0.097 when auto is not told the applied "
                   "fraction: test_learning_from_the_applied_fraction_helps_under_a_cap")  # fmt: skip
def test_the_toy_under_a_cap_misses_the_nominal_gap():
    assert toy("a candidate cap of 0.002 over steps 6-20, then released")["gap"] <= TOY_GAP


class WithoutTheAppliedFraction:
    """The controller's interface less ``actuator_limited``: the simulation does not tell it what a cap applied."""

    def __init__(self, made: EntropyController):
        self.made = made

    def update(self, step: int, entropy: float):
        return self.made.update(step, entropy)


@pytest.mark.xfail(strict=True, reason="learning from the applied fraction does not help under the cap: per-step gap "
                   "0.104 with it, 0.097 without it (bias 0.086 against 0.068) on the toy's fitted plant")  # fmt: skip
def test_learning_from_the_applied_fraction_helps_under_a_cap():
    """``auto`` learns from the fraction a cap let through (``actuator_limited(..., applied=...)``) rather than the
    ratio it asked: over steps 21-40 after a cap of 0.002 over steps 6-20, that should track no worse than a
    controller never told what the cap applied."""
    fitted = plant("toy_cov_ratio")
    told = toy("a candidate cap of 0.002 over steps 6-20, then released")
    runs = [simulate(fitted, WithoutTheAppliedFraction(EntropyController(config("toy_cov_ratio"))), seed=s,
                     cap=cap_6_20) for s in SEEDS]  # fmt: skip
    untold = median_figures(runs, TOY_TARGET)
    print(f"toy under the cap, applied fraction untold: {untold}")
    assert told["gap"] <= untold["gap"] and told["bias"] <= untold["bias"], (told, untold)


def test_the_capped_plant_holds_the_value_below_the_cap():
    """The cap does act in the simulation: while it binds the applied ratio is 0.002 whatever ``auto`` asks."""
    run = simulate(plant("toy_cov_ratio"), EntropyController(config("toy_cov_ratio")), seed=0, cap=cap_6_20)
    assert all(a <= 0.002 for a in run.applied[5:20]) and max(run.value[5:20]) > 0.002


# ----------------------------------------------------------------------------------------------------------
# the gain it learns, with the default memory


@functools.cache
def learned_gains(coef_max: float | None) -> tuple[list[float], list[float]]:
    """The gain and its standard deviation after the 40 steps of each seed, on the real model's plant with the
    defaults (and ``coef_max`` where not ``None``)."""
    fitted, gains, sds = plant("real_entropy_coef"), [], []
    for seed in SEEDS:
        made = EntropyController(config("real_entropy_coef", **({} if coef_max is None else dict(coef_max=coef_max))))
        simulate(fitted, made, seed=seed)
        _, _, g, _, var_g, *_ = made.controller.state.estimate
        gains.append(g)
        sds.append(math.sqrt(var_g))
    print(f"coef_max {coef_max}: median gain {sorted(gains)[len(gains) // 2]:.3f}, truth {fitted.gain:.3f}")
    return gains, sds


PRIOR_PER_UNIT = self_tuning.RATE_PRIOR / self_tuning.REFERENCE_REACH["entropy_coef"]
"""auto's gain prior on the coefficient: 1 log H per unit per step, whatever range the user sets."""


def test_with_the_defaults_the_learned_gain_moves_from_the_prior_toward_the_real_models():
    """The defaults (coefficient in [0, 0.1], ``auto_memory`` 20) on the real model's plant (gain 1.80 log H per unit
    coefficient per step, the prior 1.0): after 40 steps the median learned gain over 60 seeds is 1.185 - a quarter of
    the way from the prior to the truth (asserted: at least 0.12 up from the prior, not past the truth; without the
    gain learning it stays at 1.0). The data inform it little: the coefficient moves log H by at most 0.18 a step
    against a measurement noise of 0.5, and the memory keeps ~20 steps. The truth lies within two of the estimate's
    own standard deviations (~0.88) in every seed."""
    gains, sds = learned_gains(None)
    truth = plant("real_entropy_coef").gain
    median = sorted(gains)[len(gains) // 2]
    assert PRIOR_PER_UNIT + 0.12 <= median <= truth, (median, truth)
    assert sum(abs(g - truth) <= 2.0 * s for g, s in zip(gains, sds)) >= 0.9 * len(gains)


@pytest.mark.parametrize("coef_max", [0.005, 0.02])
def test_at_a_narrow_range_the_data_do_not_inform_the_gain_and_its_prior_does_not_follow_the_range(coef_max):
    """At Skywork-OR1's coef_max 0.005 and at 0.02 (one key set) the whole range moves log H by at most 0.009 and
    0.036 a step against a measurement noise of 0.5: the data do not inform the gain, and after 40 steps the median
    estimate is the prior's (0.994 and 1.010: asserted within 5 % of 1.0). That prior is the actuator's unit, not the
    range (with a prior scaled to the user's range, 10.2 and 3.5), so it stays within a factor 2 of the true 1.80, and
    its standard deviation (~1.0) covers the truth within two in every seed."""
    gains, sds = learned_gains(coef_max)
    truth = plant("real_entropy_coef").gain
    median = sorted(gains)[len(gains) // 2]
    assert median == pytest.approx(PRIOR_PER_UNIT, rel=0.05), median
    assert 0.5 < median / truth < 2.0, (median, truth)
    assert all(abs(g - truth) <= 2.0 * s for g, s in zip(gains, sds)), (coef_max, gains, sds)


def test_the_outlier_gate_rarely_skips_an_honest_measurement():
    """On the fitted real plant with the defaults (Gaussian noise, nothing a gate should skip), 60 seeds x 40 steps:
    5 of the 2400 steps (0.21 %) are skipped as outliers; asserted at most 1 %. Without the gate's warm-up (its
    standard deviation at least ``PRIOR_NOISE`` and widened ``WARMUP_WIDEN`` times over the first 10 measurements)
    41 (1.7 %) are: the prediction errors of a young noise estimate spread ~2x its predicted standard deviation."""
    fitted = plant("real_entropy_coef")
    runs = [simulate(fitted, EntropyController(config("real_entropy_coef")), seed=s) for s in SEEDS]
    flags = [m[self_tuning.OUTLIER] for run in runs for m in run.metrics]
    assert sum(flags) <= 0.01 * len(flags), sum(flags)
