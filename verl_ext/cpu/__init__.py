"""CPU mode and the CPU harness: verl's trainer and engine on a machine without an accelerator.

| module | contents |
| --- | --- |
| ``mode`` | the switch (``VERL_PLATFORM=cpu``) and what each process needs in CPU mode |
| ``platform`` | verl platform ``cpu``: device ``cpu``, gloo, Ray ``GPU`` resource as logical slots |
| ``workarounds`` | the upstream spots (verl, vLLM) that need help on CPU, each naming its file:line |
| ``vllm_plugin`` | ``vllm.general_plugins`` entry point: CPU mode inside vLLM's engine processes |
| ``plugin`` | ``verl.plugins`` entry point ``verl_ext_cpu``: CPU mode in every process that imports verl |
| ``task`` | the toy verifiable task of the CPU recipe and the demo (data, reward, assets) |
| ``tiny_model`` | a tiny random Qwen2 and its tokenizer, built locally |
| ``math_assets`` | ``SCALE=cpu``'s assets: synthetic problems in GSM8K / DAPO-Math-17k / AIME hub formats, a warmed-up tiny model |
| ``engine`` | ``CpuActor``: verl's FSDP2 ``TrainingWorker`` in this process (tests, demo, benchmarks) |
| ``machine`` | what machine a measurement came from |

Level 1. May import: torch, verl, vLLM and Ray (lazily); nothing else of verl_ext, so every higher package
can use it. Nothing here acts where CUDA is available.
"""
