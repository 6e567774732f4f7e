"""``python -m verl_ext.analyze``: compare runs and fit the entropy-performance law (see
:mod:`verl_ext.analysis.cli`)."""

from __future__ import annotations

import sys

from verl_ext.analysis.cli import main

if __name__ == "__main__":
    sys.exit(main())
