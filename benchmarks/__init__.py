"""The benchmarks, importable as ``benchmarks.<module>`` from the repository root: tests import them so (pyproject's
pytest ``pythonpath``), scripts that use a sibling run as ``python -m benchmarks.<module>``. ``cpu_actor`` is the
in-process FSDP2 engine harness the tests and benchmarks share. Not part of the installed ``verl_ext`` package."""
