"""The four entropy actuators: what a controller's value changes in the training step.

| actuator | value | direction | off | where it acts |
| --- | --- | --- | --- | --- |
| ``cov_ratio`` | Clip-Cov's / KL-Cov's selection ratio (``ratio_min`` .. ``ratio_max``) | + (more tokens detached / anchored: entropy up) | none | the driver's batch-scope selection (``clip_cov`` / ``kl_cov``, ``cov_scope=batch``) |
| ``entropy_coef`` | the coefficient ``c`` of verl's entropy term ``- c * agg(H)`` (``coef_min`` .. ``coef_max``) | + | 0 | the actor loss (batch field ``entropy_coef``), with the entropy's graph |
| ``pos_weight`` | EntroPIC's ``alpha`` (``weight_min`` .. ``weight_max``, [-1, 1]): the loss gains ``alpha * agg(-r |A|)`` on the tokens whose current probability exceeds 0.95, so positive high-probability tokens weigh ``1 + alpha`` and negative ones ``1 - alpha`` | - (alpha > 0 sharpens: entropy down) | 0 | the actor loss (batch field ``pos_weight``) |
| ``clip_high`` | the PPO upper clip bound ``eps_high`` (DAPO's clip-higher; verl's ``actor.clip_ratio_high``; ``clip_high_min`` .. ``clip_high_max``): a token with ``A > 0`` keeps its gradient up to ``r = 1 + eps_high`` | + (a wider bound lets unlikely tokens with positive advantage gain more probability: entropy up, DAPO's clip-higher) | none | the actor loss (batch field ``clip_ratio_high``, handed to the policy loss as the actor's ``clip_ratio_high``) |

Which controller may drive which actuator (:data:`PAIRS`) and why the others are refused (:data:`REFUSED`); which
policy losses ``clip_high`` can act on and why the others are refused is each loss's declaration
(:func:`verl_ext.losses.spec.clip_high_refusal`).

``clip_high``'s numbers (the keys ``clip_high_min`` / ``clip_high_max``; its rest value is the actor's configured
``clip_ratio_high`` unless ``clip_high_init`` is set):

* :data:`CLIP_HIGH_MIN` 0.2: PPO's symmetric bound, which DAPO keeps as its lower ``eps_low`` (DAPO, arXiv 2503.14476:
  ``eps_low = 0.2``, ``eps_high = 0.28``) - the actuator never clips tighter than standard PPO;
* :data:`CLIP_HIGH_MAX` 1.0: BAPO's largest upper bound (arXiv 2510.18927; WooooDyy/BAPO ``recipe/bapo/run_bapo_example.sh``:
  the ratio bound ``c_high`` starts at ``high_start=1.2`` and widens up to ``high_max=2.0``, that is ``eps_high`` from
  0.2 to 1.0; the same maximum in their ``bapo_trainer.yaml``), used there on 7B and 32B policies;
* the rest value of DAPO's recipes is their ``eps_high = 0.28`` (``configs/family/dapo.yaml``); GRPO's is verl's 0.2.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTUATORS = ("cov_ratio", "entropy_coef", "pos_weight", "clip_high")

CLIP_HIGH_MIN = 0.2
"""``clip_high``'s default lower bound: PPO's symmetric ``eps`` and DAPO's ``eps_low`` (module docstring)."""
CLIP_HIGH_MAX = 1.0
"""``clip_high``'s default upper bound: BAPO's widest upper bound, ratio 2.0 (module docstring)."""

PAIRS = frozenset({("pi", "cov_ratio"), ("pi", "entropy_coef"), ("skywork", "entropy_coef"),
                   ("entropic", "pos_weight"), ("entropic", "entropy_coef"),
                   ("auto", "cov_ratio"), ("auto", "entropy_coef"), ("auto", "pos_weight"),
                   ("pi", "clip_high")})  # fmt: skip
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
    ("skywork", "clip_high"): "Skywork's rule is written for an entropy-loss coefficient: its gate switches the term off "
                              "above the target, and the clip bound has no off value (PPO always clips somewhere): use "
                              "controller=pi",
    ("auto", "clip_high"): "the clip bound showed no authority over entropy on either fitted plant (SmolLM2-135M: on "
                           "a bound of its range at every step and no closer to the target than no control; the toy: "
                           "no better than no control), so auto has no gain to learn there: use actuator=entropy_coef, "
                           "or controller=pi with gains you size (kp, ki)",
    ("entropic", "clip_high"): "EntroPIC's law and its gains (kp 1, ki 0.01 on H* - H in nats) are written for its "
                               "weight alpha in [-1, 1] around 0, not for a clip bound around 0.2-0.28: use "
                               "controller=pi",
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


def actuator_from_config(config, loss_ratio: float | None = None, clip_high: float | None = None) -> Actuator:
    """The actuator named by ``config.actuator`` (an :class:`~verl_ext.control.config.EntropyControlConfig`);
    ``loss_ratio`` is the loss's configured selection ratio, ``cov_ratio``'s start when ``ratio_init`` is null;
    ``clip_high`` the actor's configured ``clip_ratio_high``, ``clip_high``'s rest value when ``clip_high_init`` is
    null."""
    name = config.actuator
    if name == "clip_high":
        init = config.clip_high_init if config.clip_high_init is not None else clip_high
        if init is None:
            raise ValueError("clip_high needs clip_high_init or the actor's configured clip_ratio_high")
        return Actuator(name, config.clip_high_min, config.clip_high_max, float(init), +1, None)
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


__all__ = ["ACTUATORS", "Actuator", "CLIP_HIGH_MAX", "CLIP_HIGH_MIN", "PAIRS", "REFUSED", "actuator_from_config"]
