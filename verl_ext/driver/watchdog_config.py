"""The ``verl_ext.watchdog`` keys (``configs/verl_ext_base.yaml``): :class:`WatchdogConfig`, validated at config time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from verl_ext.config import PrefixedConfig
from verl_ext.driver.engine_health import HEALTH_TIMEOUT_S
from verl_ext.driver.stall import FIRST_STEP_S as STALL_FIRST_S
from verl_ext.driver.stall import StallCheck

POLL_S = 5.0
"""Seconds between two reads of Ray's actor table (default of ``verl_ext.watchdog.poll_s``)."""
HEALTH_FAILURES = 2
"""Failed checks in a row (``poll_s`` apart) that make an engine dead (default of ``verl_ext.watchdog``'s key)."""


@dataclass
class WatchdogConfig(PrefixedConfig):
    """The ``verl_ext.watchdog`` keys (``configs/verl_ext_base.yaml``)."""

    KEY_PREFIX: ClassVar[str] = "verl_ext.watchdog."

    enable: bool = True
    """Run the watchdog; false: no watchdog (a dead worker can leave the run waiting for ever)."""

    poll_s: float = POLL_S
    """Seconds between two reads of Ray's actor table and two rounds of ``/health`` checks (> 0)."""

    health_failures: int = HEALTH_FAILURES
    """Failed ``/health`` checks in a row (503, or the connection refused) that make an engine dead (>= 1)."""

    health_timeout_s: float = HEALTH_TIMEOUT_S
    """Seconds one ``/health`` check may take; a slower answer is no answer, not a failure (> 0)."""

    stall_s: Any = "auto"
    """A stall is a stop (:mod:`verl_ext.driver.stall`): ``auto`` (the bound derived from the run's own steps),
    seconds with no logged step after the first (> 0), or ``off``."""

    stall_first_s: float = STALL_FIRST_S
    """Seconds to the first logged step before the run counts as stalled (> 0)."""

    def __post_init__(self) -> None:
        if not isinstance(self.enable, bool):
            raise WatchdogConfig.error("enable", f"{self.enable!r} is invalid: allowed true or false")
        for key in ("poll_s", "health_timeout_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise WatchdogConfig.error(key, f"{value!r} is invalid: allowed a number of seconds > 0")
            setattr(self, key, float(value))
        value = self.health_failures
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WatchdogConfig.error("health_failures", f"{value!r} is invalid: allowed an integer >= 1")
        value = self.stall_s
        if value not in ("auto", "off") and (isinstance(value, bool) or not isinstance(value, (int, float))
                                             or not 0 < value < float("inf")):  # fmt: skip
            raise WatchdogConfig.error("stall_s", f"{value!r} is invalid: allowed auto, off or a number of seconds > 0")
        value = self.stall_first_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise WatchdogConfig.error("stall_first_s", f"{value!r} is invalid: allowed a number of seconds > 0")
        self.stall_first_s = float(value)

    def stall_check(self) -> StallCheck | None:
        """The run's :class:`~verl_ext.driver.stall.StallCheck` (``None`` with ``stall_s=off``)."""
        if self.stall_s == "off":
            return None
        return StallCheck(None if self.stall_s == "auto" else float(self.stall_s), first_s=self.stall_first_s)


def watchdog_config(config: Any) -> WatchdogConfig:
    """The run's :class:`WatchdogConfig` from its ``verl_ext.watchdog`` node (absent: the defaults); a bad value is a
    ``ConfigError`` naming the key and the allowed values."""
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.select(config, "verl_ext.watchdog") if isinstance(config, DictConfig) else None
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return WatchdogConfig.from_mapping(values or {})



__all__ = ["HEALTH_FAILURES", "POLL_S", "WatchdogConfig", "watchdog_config"]
