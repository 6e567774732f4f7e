"""CPU mode and the CPU harness: verl's trainer and engine on a machine without an accelerator.

| module | contents |
| --- | --- |
| ``mode`` | the switch (``VERL_PLATFORM=cpu``) and what each process needs in CPU mode |
| ``platform`` | verl platform ``cpu``: device ``cpu``, gloo, Ray ``GPU`` resource as logical slots |
| ``workarounds`` | the upstream spots (verl, vLLM) that need help on CPU, each naming its file:line |
| ``vllm_plugin`` | ``vllm.general_plugins`` entry point: CPU mode inside vLLM's engine processes |
| ``task`` | the toy verifiable task of the CPU recipe and the demo (data, reward) |

May import: torch, verl, vLLM (lazily) and nothing else of verl_ext, so that every other package can use it.
Nothing here acts where CUDA is available.
"""
