"""Entropy control as pure arithmetic (level 1): no torch, so that the driver, the checks and the analysis can all use
it. Its keys' shared pieces (``ConfigError``, ``PrefixedConfig``) come from ``verl_ext.config``, which imports verl's
config dataclasses.

| module | contents |
| --- | --- |
| ``config`` | the entropy control's keys (``verl_ext.entropy_control``) and their validation |
| ``entropy_control`` | the entropy controller: controller + actuator + target composed, its checkpointed state |
| ``targets`` | the target's schedule (constant, linear, cosine) and unit (nats, or a ratio to the first step's entropy) |
| ``controllers`` | the laws: ``pi`` (log-space PI), ``skywork`` (Skywork-OR1's +-delta rule and gate), ``entropic`` (EntroPIC's PI) |
| ``self_tuning`` | ``auto``: learns its measurement noise, the drift and the actuator's gain online and steers the filtered entropy |
| ``actuators`` | what a law moves: ``cov_ratio``, ``entropy_coef``, ``pos_weight``, ``clip_high``; the pairs that make sense, and why the others do not; the losses ``clip_high`` can act on |

May import: ``verl_ext.config`` and ``verl_ext.contract`` only.
"""
