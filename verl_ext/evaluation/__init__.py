"""Evaluating the way the papers report it (level 1): what ``recipe/eval.sh`` adds to verl's own validation.

| module | contents |
| --- | --- |
| ``scoring`` | the reward function of an evaluation: verl's scorer per ``data_source``, plus the extracted answer (for maj@k) and the data source in every dumped sample |

The metrics (avg@n, pass@k, maj@k) are computed from the dumps by :mod:`verl_ext.analysis` (``python -m
verl_ext.analyze --generations``). May import: verl only.
"""
