"""EntroPIC's actuator term (Yang et al., arXiv 2511.15248; yk7333/EntroPIC ``compute_policy_loss_entropic``): the
loss that the ``pos_weight`` actuator of the entropy control adds to any policy loss.

With ``alpha`` the controller's value for the step and ``HP`` the valid tokens whose *current* probability exceeds
``tau = 0.95`` (EntroPIC's ``high_prob_thresh``, which their scripts never change)::

    L_EntroPIC = alpha * agg_{i in HP}( -r_i |A_i| )          r_i = exp(lp_i - old_i), no clip

Against the policy-gradient term ``-A_i r_i``, a positive high-probability token weighs ``1 + alpha`` and a negative
one ``1 - alpha``: ``alpha > 0`` sharpens the policy (entropy down), ``alpha < 0`` softens its confident positive
tokens (entropy up). Aggregated with verl's ``agg_loss`` over all valid tokens (the global normalisation), so
``alpha`` is exactly that relative weight; EntroPIC's code divides by the number of high-probability tokens of each
micro-batch instead, a denominator that changes with the micro-batching.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verl_ext.losses.common import LOG_RATIO_BOUND, aggregate, metric_frac

HIGH_PROB_THRESHOLD = 0.95
"""EntroPIC's ``high_prob_thresh``: a token is high-probability when ``pi(a_i) > 0.95`` under the current policy."""


ENTROPIC_METRICS = frozenset({"actor/entropic/high_prob_frac"})
"""The term's metrics that are means over the call's valid tokens."""


def entropic_term(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    alpha: torch.Tensor,
    loss_agg_mode: str,
    config: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The aggregated EntroPIC term; ``alpha`` is the per-token batch field ``pos_weight`` (one value per step)."""
    mask = mask.bool()
    high = mask & (log_prob.detach() > math.log(HIGH_PROB_THRESHOLD))
    ratio = torch.exp((log_prob - old_log_prob).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    loss_mat = torch.where(high, -ratio * advantages.abs(), 0.0) * alpha.to(log_prob.dtype)
    term = aggregate(loss_mat, mask, loss_agg_mode, config)
    return term, {"actor/entropic/high_prob_frac": metric_frac(high, mask)}


__all__ = ["HIGH_PROB_THRESHOLD", "entropic_term"]
