"""Deprecated: the former name of :mod:`verl_ext.control.entropy_control` (the controller) and
:mod:`verl_ext.control.config` (its keys). Importing it warns (``DeprecationWarning``) and re-exports both; it goes
in the next release."""

from __future__ import annotations

import warnings

from verl_ext.control.config import *  # noqa: F401,F403
from verl_ext.control.config import ENTROPY_CONTROL_CONFIG_PREFIX
from verl_ext.control.entropy_control import *  # noqa: F401,F403

warnings.warn("verl_ext.control.autopilot is deprecated and goes in the next release: import "
              "verl_ext.control.entropy_control (EntropyController, EntropyControlConfig) or verl_ext.control.config",
              DeprecationWarning, stacklevel=2)  # fmt: skip

AUTOPILOT_CONFIG_PREFIX = ENTROPY_CONTROL_CONFIG_PREFIX
"""Deprecated: :data:`~verl_ext.control.config.ENTROPY_CONTROL_CONFIG_PREFIX`."""
