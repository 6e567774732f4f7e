"""verl's length ratios on the V1 trainer: verl_ext reports the share cut at the configured limit (verl#7817) under
its own keys (``verl_ext/response_length/clip_ratio``, ...) and leaves verl's keys with verl's values.

verl's ``compute_data_metrics`` runs here on a batch laid out as V1 lays it out (responses padded to the batch's
longest, true lengths in ``response_length`` / ``prompt_length``), then the mixin's ``_compute_metrics`` adds the
corrected ratios; the expected shares are counted from the lengths in the test.
"""

from __future__ import annotations

import logging

import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_ext.analysis.length_limit import CLIP_RATIOS, corrected_clip_ratios, cut_share
from verl_ext.contract import CUT_RATIO_KEYS, PROMPT_CUT_RATIO, RESPONSE_CUT_RATIO, RESPONSE_NON_ABORTED_CUT_RATIO
from verl_ext.trainer import v1

MAX_PROMPT, MAX_RESPONSE = 32, 64


def _v1_batch(prompt_lengths: list[int], response_lengths: list[int]) -> DataProto:
    """A batch as V1's ``_compute_metrics`` hands it to verl: tensors as wide as their longest sample."""
    n, width, prompt_width = len(response_lengths), max(response_lengths), max(prompt_lengths)
    mask = torch.zeros(n, width)
    for i, length in enumerate(response_lengths):
        mask[i, :length] = 1
    data = TensorDict({
        "prompts": torch.ones(n, prompt_width, dtype=torch.long), "responses": torch.ones(n, width, dtype=torch.long),
        "response_mask": mask, "token_level_scores": mask * 0.5, "token_level_rewards": mask * 0.5,
        "advantages": mask.clone(), "returns": mask.clone(),
        "prompt_length": torch.tensor(prompt_lengths, dtype=torch.float),
        "response_length": torch.tensor(response_lengths, dtype=torch.float),
    }, batch_size=[n])  # fmt: skip
    return DataProto(batch=data)


def _metrics_through_the_mixin(prompt_lengths: list[int], response_lengths: list[int]) -> tuple[dict, dict]:
    """verl's metrics of the batch, and the same after the V1 mixin's ``_compute_metrics``."""
    verl = compute_data_metrics(batch=_v1_batch(prompt_lengths, response_lengths), use_critic=False)
    trainer = object.__new__(v1.make_v1_trainer(PPOTrainerSync))
    trainer.config = OmegaConf.create({"data": {"max_prompt_length": MAX_PROMPT, "max_response_length": MAX_RESPONSE}})
    metrics = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PPOTrainerSync, "_compute_metrics", lambda self, batch, m, *a: m.update(verl))
        trainer._compute_metrics(None, metrics, {}, 1, 0)
    return verl, metrics


def test_a_step_with_no_answer_at_the_limit_cut_none():
    # answers of 13-15 tokens, half at 15 = the batch's longest: verl says 0.5, none reached 64
    verl, metrics = _metrics_through_the_mixin([20, 20, 31, 20], [13, 15, 15, 14])
    assert verl["response_length/clip_ratio"] == pytest.approx(0.5)  # verl#7817: measured against the width
    assert verl["prompt_length/clip_ratio"] == pytest.approx(0.25)
    assert metrics[RESPONSE_CUT_RATIO] == 0.0
    assert metrics[RESPONSE_NON_ABORTED_CUT_RATIO] == 0.0
    assert metrics[PROMPT_CUT_RATIO] == 0.0
    assert {k: metrics[k] for k in verl} == verl  # verl's keys keep verl's values: one meaning per key


def test_verl_ext_logs_its_ratios_under_its_own_keys():
    assert RESPONSE_CUT_RATIO == "verl_ext/response_length/clip_ratio"
    assert RESPONSE_NON_ABORTED_CUT_RATIO == "verl_ext/response_length_non_aborted/clip_ratio"
    assert PROMPT_CUT_RATIO == "verl_ext/prompt_length/clip_ratio"
    assert set(CUT_RATIO_KEYS) == set(CLIP_RATIOS) and not set(CUT_RATIO_KEYS.values()) & set(CLIP_RATIOS)


def test_a_step_whose_longest_reached_the_limit_cut_those_at_it():
    lengths = [64, 20, 64, 30, 64, 7, 63, 64]  # four of eight at the limit
    verl, metrics = _metrics_through_the_mixin([32, 10, 10, 10, 10, 10, 10, 10], lengths)
    expected = sum(length == MAX_RESPONSE for length in lengths) / len(lengths)
    assert metrics[RESPONSE_CUT_RATIO] == pytest.approx(expected) == verl["response_length/clip_ratio"]
    assert metrics[PROMPT_CUT_RATIO] == pytest.approx(1 / 8)
    assert {k: metrics[k] for k in verl} == verl


def test_cut_share_is_the_share_at_the_limit_whatever_the_padding():
    # legacy padding (width = limit) and V1 padding (width = longest) give the same answer
    assert cut_share(0.0, 15, 64) == 0.0 and cut_share(0.5, 15, 64) == 0.0
    assert cut_share(0.375, 64, 64) == 0.375
    assert cut_share(float("nan"), float("nan"), 64) != cut_share(float("nan"), float("nan"), 64)  # NaN stays NaN
    with pytest.raises(ValueError, match="longer than the limit 64"):
        cut_share(0.5, 128, 64)


def test_a_ratio_that_cannot_be_corrected_is_not_logged_and_the_trainer_says_so(caplog):
    metrics = {"response_length/clip_ratio": 0.5, "response_length/max": 15.0,
               "prompt_length/clip_ratio": 0.25, "prompt_length/max": 40.0}  # a prompt above max_prompt_length 32
    assert corrected_clip_ratios(metrics, MAX_PROMPT, MAX_RESPONSE) == {RESPONSE_CUT_RATIO: 0.0}
    v1._WARNED.discard("uncorrected_clip_ratio")
    with caplog.at_level(logging.WARNING, logger=v1.__name__):
        verl, out = _metrics_through_the_mixin([40, 10], [15, 12])
    assert PROMPT_CUT_RATIO not in out and out[RESPONSE_CUT_RATIO] == 0.0
    assert out["prompt_length/clip_ratio"] == verl["prompt_length/clip_ratio"] == pytest.approx(0.5)
    assert out["response_length/clip_ratio"] == verl["response_length/clip_ratio"] == pytest.approx(0.5)
    assert "verl_ext/prompt_length/clip_ratio not logged" in caplog.text
