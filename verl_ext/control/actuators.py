"""The three entropy actuators: what a controller's value changes in the training step.

| actuator | value | direction | off | where it acts |
| --- | --- | --- | --- | --- |
| ``cov_ratio`` | Clip-Cov's / KL-Cov's selection ratio (``ratio_min`` .. ``ratio_max``) | + (more tokens detached / anchored: entropy up) | none | the driver's batch-scope selection (``clip_cov`` / ``kl_cov``, ``cov_scope=batch``) |
| ``entropy_coef`` | the coefficient ``c`` of verl's entropy term ``- c * agg(H)`` (``coef_min`` .. ``coef_max``) | + | 0 | the actor loss (batch field ``entropy_coef``), with the entropy's graph |
| ``pos_weight`` | EntroPIC's ``alpha`` (``weight_min`` .. ``weight_max``, [-1, 1]): the loss gains ``alpha * agg(-r |A|)`` on the tokens whose current probability exceeds 0.95, so positive high-probability tokens weigh ``1 + alpha`` and negative ones ``1 - alpha`` | - (alpha > 0 sharpens: entropy down) | 0 | the actor loss (batch field ``pos_weight``) |

Which controller may drive which actuator (:data:`PAIRS`) and why the others are refused (:data:`REFUSED`).
"""

from __future__ import annotations

from dataclasses import dataclass

ACTUATORS = ("cov_ratio", "entropy_coef", "pos_weight")

PAIRS = frozenset({("pi", "cov_ratio"), ("pi", "entropy_coef"), ("skywork", "entropy_coef"),
                   ("entropic", "pos_weight"), ("entropic", "entropy_coef"),
                   ("auto", "cov_ratio"), ("auto", "entropy_coef"), ("auto", "pos_weight")})  # fmt: skip
"""The (controller, actuator) pairs that make sense; :data:`REFUSED` says why each other pair does not."""

REFUSED = {
    ("pi", "pos_weight"): "pi works in log space, and EntroPIC's alpha changes sign (it is 0 at rest): use "
                          "controller=entropic",
    ("skywork", "cov_ratio"): "Skywork's gate turns the actuator off above the target, and the selection ratio has "
                              "no off value (Clip-Cov / KL-Cov always act on max(1, floor(ratio N)) tokens): use "
                              "controller=pi",
    ("skywork", "pos_weight"): "Skywork's rule is defined on the entropy-loss coefficient, and its gate would leave "
                               "EntroPIC's weight at 0 whenever entropy is above target (it could never lower it): "
                               "use controller=entropic",
    ("entropic", "cov_ratio"): "EntroPIC's law is linear in the actuator with gains for alpha in [-1, 1]; the "
                               "selection ratio spans orders of magnitude (1e-4 .. 0.2) and is driven in log space "
                               "by controller=pi",
}
"""Why each (controller, actuator) pair outside :data:`PAIRS` is refused: the error message names the pair to use."""


@dataclass(frozen=True)
class Actuator:
    """One actuator's range and sense, as the controllers see it."""

    name: str
    lo: float
    hi: float
    init: float
    """The value at zero error (``pi``, ``entropic``), or the starting value (``skywork``)."""
    direction: int
    """+1: a larger value raises entropy; -1: a larger value lowers it."""
    off: float | None
    """The value that turns the actuator off (Skywork's gate), or ``None`` when it has none."""


def actuator_from_config(config, loss_ratio: float | None = None) -> Actuator:
    """The actuator named by ``config.actuator`` (an :class:`~verl_ext.control.autopilot.EntropyControlConfig`);
    ``loss_ratio`` is the loss's configured selection ratio, ``cov_ratio``'s start when ``ratio_init`` is null."""
    name = config.actuator
    if name == "cov_ratio":
        init = config.ratio_init if config.ratio_init is not None else loss_ratio
        if init is None:
            raise ValueError("cov_ratio needs ratio_init or the loss's configured ratio")
        return Actuator(name, config.ratio_min, config.ratio_max, float(init), +1, None)
    if name == "entropy_coef":
        return Actuator(name, config.coef_min, config.coef_max, config.coef_init, +1, 0.0)
    if name == "pos_weight":
        return Actuator(name, config.weight_min, config.weight_max, config.weight_init, -1, 0.0)
    raise ValueError(f"unknown actuator {name!r}; allowed {list(ACTUATORS)}")


__all__ = ["ACTUATORS", "Actuator", "PAIRS", "REFUSED", "actuator_from_config"]
