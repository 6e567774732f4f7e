"""The demo's view of CPU mode's toy task (:mod:`verl_ext.cpu.task`): repeat the digit named in the prompt.

Prompt ``repeat <d> :``; the response is scored by the fraction of its first ``length`` tokens (up to EOS)
that equal ``<d>`` - the same reward as :func:`verl_ext.cpu.task.compute_score`, on token ids (the demo samples
and scores in-process, without verl's reward loop). The reward is dense enough for GRPO to learn from a
randomly initialised model in a few dozen steps, and the optimum is a deterministic policy - exactly the
regime in which the entropy mechanism paper observes entropy collapse under plain policy-gradient training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verl_ext.cpu.task import prompt_text


@dataclass(frozen=True)
class RepeatDigitTask:
    """Prompt construction and reward of the demo task."""

    response_length: int = 8
    """Tokens sampled per response (and scored)."""

    def prompts(self, n_prompts: int, generator: torch.Generator) -> list[tuple[str, str]]:
        """``n_prompts`` ``(prompt_text, digit)`` pairs drawn with ``generator``."""
        digits = torch.randint(0, 10, (n_prompts,), generator=generator).tolist()
        return [(prompt_text(str(d)), str(d)) for d in digits]

    def rewards(self, response_ids: torch.Tensor, response_mask: torch.Tensor, digit_ids: torch.Tensor) -> torch.Tensor:
        """Per-sequence reward in [0, 1]: share of the response slots holding the target digit.

        Args:
            response_ids: ``(batch, width)`` sampled token ids, ``width <= response_length`` (right padded).
            response_mask: ``(batch, width)`` 1 for tokens before (and including) EOS.
            digit_ids: ``(batch,)`` token id of each sequence's target digit.
        """
        hits = (response_ids == digit_ids.unsqueeze(1)) & response_mask.bool()
        return hits.sum(dim=1).to(torch.float32) / self.response_length
