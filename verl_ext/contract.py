"""Names shared by a writer and a reader in different packages: batch fields, metric keys, file names.

Level 0 (imports nothing of verl_ext), so that the package that writes a name and the one that reads it both take
it from here and cannot drift apart:

* batch fields the driver's hooks add to verl's training batch and the actor loss reads
  (:data:`OLD_ENTROPY`, :data:`COV_SELECTED`);
* the entropy control's metrics (:data:`CONTROL_METRIC_PREFIX` and the keys below), written by
  :mod:`verl_ext.control` and read by :mod:`verl_ext.analysis`;
* the token lens's file beside verl's file log (:func:`lens_file_for`), written by :mod:`verl_ext.driver` and read
  by ``python -m verl_ext.analyze``;
* the length ratios measured against the configured limits (:data:`CUT_RATIO_KEYS`), written by
  :mod:`verl_ext.trainer` and read by ``benchmarks/real_model_runs.py``;
* config keys read by one package and checked by another (:data:`REPLAY_POLL_INTERVAL`).
"""

from __future__ import annotations

from pathlib import Path

REPLAY_POLL_INTERVAL = "verl_ext.replay_poll_interval"
"""Config key: seconds between the V1 trainer's checks for finished rollouts (read by :mod:`verl_ext.trainer.v1`,
checked by :mod:`verl_ext.checks.validation`)."""

OLD_ENTROPY = "old_entropy"
"""Batch field: the old-log-prob pass's per-token entropy (ERC's ``H_old``)."""

COV_SELECTED = "cov_selected"
"""Batch field: the batch-scope Clip-Cov / KL-Cov selection mask (1 = selected token)."""

HIGH_ENTROPY_WEIGHT = "high_entropy_weight"
"""Batch field: the batch-scope ``high_entropy`` selection as per-token weights (``N / |S|`` on the selected
tokens, 0 elsewhere), so that verl's token-mean over all tokens becomes the mean over the selected ones."""

ENTROPY_COEF = "entropy_coef"
"""Batch field: the entropy controller's coefficient of the step (actuator ``entropy_coef``), on every token."""

POS_WEIGHT = "pos_weight"
"""Batch field: EntroPIC's weight alpha of the step (actuator ``pos_weight``), on every token."""

CLIP_RATIO_HIGH = "clip_ratio_high"
"""Batch field: the entropy controller's PPO upper clip bound ``eps_high`` of the step (actuator ``clip_high``), on every
token; the actor loss hands it to the policy loss as the actor's ``clip_ratio_high``."""

POS_WEIGHT_NORM = "pos_weight_norm"
"""Batch field beside ``pos_weight``, on every token: 1 where EntroPIC's term is normalised by the high-probability
tokens of each micro-batch (``entropic_norm=high_prob``, EntroPIC's), 0 where by all valid tokens (``all_tokens``)."""

CONTROL_METRIC_PREFIX = "entropy_control/"
"""Prefix of the entropy control's per-step metrics."""

CONTROL_TARGET = CONTROL_METRIC_PREFIX + "target"
CONTROL_ENTROPY = CONTROL_METRIC_PREFIX + "entropy"
CONTROL_RATIO = CONTROL_METRIC_PREFIX + "ratio"
CONTROL_ERROR = CONTROL_METRIC_PREFIX + "error"
CONTROL_INTEGRAL = CONTROL_METRIC_PREFIX + "integral"
CONTROL_SATURATED = CONTROL_METRIC_PREFIX + "saturated"
CONTROL_LIMITED = CONTROL_METRIC_PREFIX + "limited"
"""``cov_ratio``: 1 when the selection took fewer tokens than the ratio asked (Clip-Cov's bounds admitted fewer)."""
CONTROL_VALUE = CONTROL_METRIC_PREFIX + "value"
"""The actuator's value applied at the step, whatever the actuator (also logged under its own name below)."""
CONTROL_GATE = CONTROL_METRIC_PREFIX + "gate"
"""Skywork's gate: 1 while the entropy term is applied (entropy below target), else 0."""
CONTROL_INTEGRATIONS = CONTROL_METRIC_PREFIX + "integrations"
"""EntroPIC's law: how many times the step's error entered the integral (``entropic_integral_per``)."""
CONTROL_BAD_STEPS = CONTROL_METRIC_PREFIX + "bad_steps"
"""How many of the run's measured entropies so far were not finite or <= 0 (not learned from; the actuator held its
last value at each); logged every step."""
CONTROL_ANCHOR = CONTROL_METRIC_PREFIX + "anchor"
"""``target_unit=initial``: the entropy (nats per token) of the first step the controller measured, which the relative
target and ``target_end`` multiply; logged every step from that step on."""
CONTROL_ACTUATOR_KEYS = {"cov_ratio": CONTROL_RATIO, "entropy_coef": CONTROL_METRIC_PREFIX + "entropy_coef",
                         "pos_weight": CONTROL_METRIC_PREFIX + "pos_weight",
                         "clip_high": CONTROL_METRIC_PREFIX + "clip_high"}  # fmt: skip
"""Each actuator's value under its own name (``entropy_control/ratio`` kept for the selection ratio)."""

CUT_RATIO_PREFIX = "verl_ext/"
"""Prefix of verl_ext's length ratios: ``verl_ext/<verl's key>`` is the share of the step's samples cut at the
configured limit, where verl's own key on the V1 trainer is the share as long as the batch's longest (verl#7817)."""
RESPONSE_CUT_RATIO = CUT_RATIO_PREFIX + "response_length/clip_ratio"
"""The share of the step's responses cut at ``data.max_response_length``."""
RESPONSE_NON_ABORTED_CUT_RATIO = CUT_RATIO_PREFIX + "response_length_non_aborted/clip_ratio"
"""As :data:`RESPONSE_CUT_RATIO`, over the responses that were not aborted (NaN when every one was)."""
PROMPT_CUT_RATIO = CUT_RATIO_PREFIX + "prompt_length/clip_ratio"
"""The share of the step's prompts at ``data.max_prompt_length`` tokens."""
CUT_RATIO_KEYS = {
    "response_length/clip_ratio": RESPONSE_CUT_RATIO,
    "response_length_non_aborted/clip_ratio": RESPONSE_NON_ABORTED_CUT_RATIO,
    "prompt_length/clip_ratio": PROMPT_CUT_RATIO,
}
"""verl's length ratio -> verl_ext's key for the same share measured against the configured limit."""

LENS_SUFFIX = ".lens.jsonl"
"""The token lens writes next to verl's file log: ``<run>.jsonl`` -> ``<run>.lens.jsonl``."""


def lens_file_for(log: str | Path) -> Path:
    """The token-lens file of the run logged to ``log``: ``RUN.jsonl`` -> ``RUN.lens.jsonl`` (a name without
    ``.jsonl`` gets the suffix appended)."""
    log = Path(log)
    stem = log.name[: -len(".jsonl")] if log.name.endswith(".jsonl") else log.name
    return log.with_name(stem + LENS_SUFFIX)


__all__ = [
    "CONTROL_BAD_STEPS", "CONTROL_ANCHOR", "CLIP_RATIO_HIGH",
    "CONTROL_ACTUATOR_KEYS", "CONTROL_GATE", "CONTROL_VALUE", "ENTROPY_COEF", "HIGH_ENTROPY_WEIGHT", "POS_WEIGHT",
    "CONTROL_ENTROPY", "CONTROL_ERROR", "CONTROL_INTEGRAL", "CONTROL_INTEGRATIONS", "CONTROL_LIMITED", "POS_WEIGHT_NORM", "CONTROL_METRIC_PREFIX", "CONTROL_RATIO",
    "CONTROL_SATURATED", "CONTROL_TARGET", "COV_SELECTED", "LENS_SUFFIX", "OLD_ENTROPY", "lens_file_for",
    "CUT_RATIO_KEYS", "CUT_RATIO_PREFIX", "PROMPT_CUT_RATIO", "RESPONSE_CUT_RATIO", "RESPONSE_NON_ABORTED_CUT_RATIO",
]  # fmt: skip
