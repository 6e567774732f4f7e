"""Reading and comparing training runs (level 1): ``python -m verl_ext.analyze``.

| module | contents |
| --- | --- |
| ``run_reader`` | verl's file-logger JSONL and TensorBoard logs -> per-run metric series |
| ``entropy_law`` | the entropy-performance law ``R = -a exp(H) + b`` of Cui et al.: fit and ceiling |
| ``control`` | the entropy control's tracking in a run (bias, 5-step-block gap, share on a bound, per-step gap and its noise floor); the token lens's file (name, summary) |
| ``plant`` | the entropy loop's plant fitted from the committed logs (drift, gain, lag, process and measurement noise) and a simulator of a controller on it |
| ``length_limit`` | the share of a step's samples cut at the length limit from verl's metrics (V1: verl#7817) |
| ``pass_at_k`` | the papers' evaluation metrics of one prompt: avg@n, unbiased pass@k, maj@k (exact) |
| ``generations`` | verl's validation dumps -> per data source and step metrics with bootstrap intervals |
| ``eval_report`` | the evaluation table, CSV and pass@k plots |
| ``cli`` | the command: tables, CSV, plots |

May import: numpy, matplotlib, tensorboard's reader, and ``verl_ext.contract`` (the metric keys it reads); nothing
else of verl_ext (it reads logs, not models).
"""
