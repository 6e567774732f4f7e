"""Token lens: which tokens do Clip-Cov / KL-Cov act on? The batch-scope selection's tokens, written down.

With ``verl_ext.token_lens.enable=true`` the driver writes, every ``every_n_steps`` steps, one JSON line per
selected token to a JSONL file next to verl's file log (``<experiment>.lens.jsonl``):

    {"step": 12, "sample": 3, "position": 5, "token_id": 17, "token": "7", "context": "repeat 7 :",
     "covariance": 2.31, "advantage": 1.12, "old_log_prob": -0.41, "prob": 0.66}

``context`` is the ``context_tokens`` response tokens before the selected one (decoded). When wandb is one of
``trainer.logger`` and a wandb run is active in the driver, the same rows go to wandb as a table
(``verl_ext/token_lens``). ``python -m verl_ext.analyze`` summarises a run's lens file (the most frequent token
strings with their mean advantage and probability). A resumed run first drops the file's rows of the steps after
its checkpoint (they are trained and written again), as verl_ext's continued file log does; a fresh run starts an
empty file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from verl_ext.config import PrefixedConfig
from verl_ext.contract import lens_file_for
from verl_ext.driver.run_log import file_log_path, kept_rows

LENS_CONFIG_PREFIX = "verl_ext.token_lens."
COLUMNS = ("step", "sample", "position", "token_id", "token", "context", "covariance", "advantage", "old_log_prob", "prob")


@dataclass
class TokenLensConfig(PrefixedConfig):
    """The ``verl_ext.token_lens`` keys (``configs/verl_ext_trainer.yaml``)."""

    KEY_PREFIX: ClassVar[str] = LENS_CONFIG_PREFIX

    enable: bool = False
    """Write the selected tokens (``clip_cov`` / ``kl_cov`` with ``cov_scope=batch`` only)."""

    every_n_steps: int = 1
    """Write at steps divisible by this (>= 1)."""

    context_tokens: int = 4
    """Response tokens of left context written with each selected token (>= 0)."""

    path: str | None = None
    """The JSONL file; null: next to verl's file log (``$VERL_FILE_LOGGER_PATH`` with ``.lens.jsonl``, else
    ``${VERL_FILE_LOGGER_ROOT:-.}/<project>/<experiment>.lens.jsonl``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.enable, bool):
            raise TokenLensConfig.error("enable", f"{self.enable!r} is invalid: allowed true or false")
        for key, low in (("every_n_steps", 1), ("context_tokens", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise TokenLensConfig.error(key, f"{value!r} is invalid: allowed an integer >= {low}")
        if self.path is not None and (not isinstance(self.path, str) or not self.path.strip()):
            raise TokenLensConfig.error("path", f"{self.path!r} is invalid: allowed null or a file path")


def lens_path(config: TokenLensConfig, project: str, experiment: str) -> Path:
    """Where the lens file goes (see :attr:`TokenLensConfig.path`)."""
    if config.path:
        return Path(config.path).expanduser()
    return lens_file_for(file_log_path(project, experiment))  # beside verl's file log


def lens_rows(
    step: int,
    responses: torch.Tensor,
    selected: torch.Tensor,
    covariance: torch.Tensor,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    tokenizer: Any,
    context_tokens: int = 4,
) -> list[dict[str, Any]]:
    """One row per ``True`` in ``selected`` (padded ``(batch, response_len)`` tensors), in row-major order."""
    rows = []
    ids = responses.tolist()
    for sample, position in selected.nonzero().tolist():
        token_id = int(ids[sample][position])
        start = max(0, position - context_tokens)
        old = float(old_log_probs[sample, position])
        rows.append(
            {
                "step": int(step),
                "sample": sample,
                "position": position,
                "token_id": token_id,
                "token": tokenizer.decode([token_id]),
                "context": tokenizer.decode(ids[sample][start:position]),
                "covariance": float(covariance[sample, position]),
                "advantage": float(advantages[sample, position]),
                "old_log_prob": old,
                "prob": math.exp(old),
            }
        )
    return rows


class TokenLens:
    """Appends the rows of the steps it is due at to its JSONL file (and a wandb table when one is active).

    With ``resume_step`` (the run's start: :func:`~verl_ext.driver.checkpoints.resumed_step`, 0 for a fresh run) the
    file is first cut as verl_ext's continued file log is (:mod:`verl_ext.driver.run_log`): the rows of the steps up
    to the checkpoint stay, those of later steps (a killed run's, trained again now) go, and a fresh run starts an
    empty file; so no step's rows appear twice."""

    def __init__(self, config: TokenLensConfig, path: Path, tokenizer: Any, use_wandb: bool = False,
                 resume_step: int | None = None):  # fmt: skip
        self.config = config
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.use_wandb = use_wandb
        if resume_step is not None:
            self.keep_through(resume_step)

    def keep_through(self, step: int) -> int:
        """Keep the file's rows of steps ``<= step`` (none for ``step <= 0``), drop the others; returns how many were
        dropped. A missing file stays missing."""
        if not self.path.exists():
            return 0
        before = sum(1 for line in self.path.read_bytes().splitlines() if line.strip())
        kept = kept_rows(self.path, step)
        self.path.write_bytes(b"".join(line + b"\n" for line in kept))
        return before - len(kept)

    def due(self, step: int) -> bool:
        return self.config.enable and step % self.config.every_n_steps == 0

    def write(self, step: int, **tensors: torch.Tensor) -> int:
        """Write the step's selected tokens (keyword tensors of :func:`lens_rows`); returns how many."""
        rows = lens_rows(step, tokenizer=self.tokenizer, context_tokens=self.config.context_tokens, **tensors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
        if self.use_wandb:
            log_wandb_table(rows, step)
        return len(rows)


def log_wandb_table(rows: list[dict[str, Any]], step: int) -> bool:
    """Log ``rows`` as a wandb table if a wandb run is active in this process; ``False`` otherwise."""
    try:
        import wandb
    except ImportError:
        return False
    if wandb.run is None:
        return False
    table = wandb.Table(columns=list(COLUMNS), data=[[row[c] for c in COLUMNS] for row in rows])
    wandb.run.log({"verl_ext/token_lens": table}, step=step, commit=False)
    return True


__all__ = ["COLUMNS", "TokenLens", "TokenLensConfig", "lens_path", "lens_rows"]
