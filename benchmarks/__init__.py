"""The benchmarks, importable as ``benchmarks.<module>`` from the repository root: tests import them so (pyproject's
pytest ``pythonpath``), scripts that use a sibling run as ``python -m benchmarks.<module>``. Not part of the
installed ``verl_ext`` package."""
