"""CPU mode (level 1): the plugin that runs verl's trainer and engine on a machine without an accelerator. Everything
here is loaded into users' processes (driver, TaskRunner, Ray workers, vLLM engine processes) when they set
``VERL_PLATFORM=cpu``.

| module | contents |
| --- | --- |
| ``switch`` | the switch (``VERL_PLATFORM=cpu`` without CUDA); the lowest module here |
| ``mode`` | what each process needs in CPU mode (``enable_in_process``) |
| ``platform`` | verl platform ``cpu``: device ``cpu``, gloo, Ray ``GPU`` resource as logical slots |
| ``workarounds`` | the upstream spots (verl, vLLM) that need help on CPU, each naming its file:line |
| ``vllm_plugin`` | ``vllm.general_plugins`` entry point: CPU mode inside vLLM's engine processes |
| ``plugin`` | ``verl.plugins`` entry point ``verl_ext_cpu``: CPU mode in every process that imports verl |
| ``vllm_executor`` | vLLM's executor: the model inside the engine-core process at TP 1 (``uni``), ``mp`` otherwise |
| ``machine`` | what machine a measurement came from |
| ``openmp`` | Intel's OpenMP runtime preloaded into CPU mode's Ray workers (``VERL_EXT_CPU_IOMP``) |
| ``precision`` | fp32 (default) or bf16 compute (``verl_ext.cpu_precision``), and fp32 log-probs from bf16 logits (workaround 8) |
| ``precision_probe`` | bf16's matmul speed against fp32's on this CPU at the model's shapes, measured once and cached (the start-up line) |

The tiny model and the toy task live in :mod:`verl_ext.testbed`; the in-process engine harness is the repository's
``benchmarks.cpu_actor`` (not installed).
May import: torch, verl, vLLM and Ray (lazily); nothing else of verl_ext. Nothing here acts where CUDA is available.
"""
