"""``python -m verl_ext.demo`` (see :mod:`verl_ext.demo.cli`)."""

import sys

from verl_ext.demo.cli import main

sys.exit(main())
