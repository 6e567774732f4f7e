"""A stall is a stop: no training step logged for longer than a bound derived from the run itself.

A rollout engine whose weight sync fails inside it (verl's LoRA loading on vLLM's CPU build, a receiver that never
acknowledges) leaves every actor alive and every ``/health`` answering, and verl's trainer waiting for ever: no death
for the watchdog to find. :class:`StallCheck` watches the run's progress instead - the steps the trainer logs
(:mod:`verl_ext.driver.progress`) - and when none comes for longer than its bound, the watchdog stops the run as for
a death: exit 1, a report naming what runs (the job's actor methods and for how long), the last completed step and the
latest checkpoint.

The bound (``verl_ext.watchdog.stall_s``, ``auto`` by default):

* before the first step is logged: :data:`FIRST_STEP_S` (4 h; ``verl_ext.watchdog.stall_first_s``): start-up, the
  model's loading, validation before training and the first step of a large model on a slow file system;
* after it: ``max(`` :data:`FLOOR_S` ``,`` :data:`FACTOR` ``x the slowest interval between logged steps so far)``,
  the first interval (start-up included) among them: a step that validates or saves a checkpoint takes longer than
  the others, and 5x the slowest one seen, at least an hour, leaves room for it;
* a number of seconds instead of ``auto`` is the bound after the first step; ``off`` turns the check off.

On a 7B cluster whose steps take 30 minutes the bound is at least 2.5 hours, and never below an hour.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

FIRST_STEP_S = 4 * 3600.0
"""Seconds to the first logged step before the run counts as stalled (default ``stall_first_s``)."""
FLOOR_S = 3600.0
"""The derived bound's floor, in seconds."""
FACTOR = 5.0
"""The derived bound's multiple of the slowest interval between logged steps."""


@dataclass(frozen=True)
class Stall:
    """A run found stalled, as the report names it."""

    since_s: float
    """Seconds since the last logged step (or the start)."""
    bound_s: float
    """The bound it passed."""
    how: str
    """The key and value that set the bound (``verl_ext.watchdog.stall_s=auto``, ...)."""
    last_step: int | None
    """The last step the trainer logged, if any."""
    running: tuple[tuple[str, float], ...]
    """The job's actor methods running, longest first: (name, seconds)."""

    def describe(self) -> str:
        """One line: how long nothing came, the bound, what runs."""
        step = f"since step {self.last_step} was logged" if self.last_step is not None else "since the run started"
        doing = ", ".join(f"{name} for {seconds:.0f} s" for name, seconds in self.running[:4]) or "none seen"
        return (f"no training step for {self.since_s:.0f} s {step}, over the stall bound of {self.bound_s:.0f} s "
                f"({self.how}); running: {doing}")  # fmt: skip


class StallCheck:
    """Decides, at each of the watchdog's polls, whether the run has stalled (module docstring)."""

    def __init__(self, stall_s: float | None, first_s: float = FIRST_STEP_S,
                 progress: Callable[[str], tuple[int, float] | None] | None = None,
                 running: Callable[[str], list[tuple[str, float]]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        """``stall_s``: the bound after the first step in seconds, ``None`` for ``auto``."""
        from verl_ext.driver.progress import read_progress, running_methods

        self.stall_s, self.first_s = stall_s, first_s
        self._progress, self._running, self._clock = progress or read_progress, running or running_methods, clock
        self._since = clock()
        self._last_step: int | None = None
        self._slowest = 0.0

    def bound_s(self) -> float:
        """The bound now: before the first logged step :attr:`first_s`, after it ``stall_s`` or the derived one."""
        if self._last_step is None:
            return self.first_s
        if self.stall_s is not None:
            return self.stall_s
        return max(FLOOR_S, FACTOR * self._slowest)

    def check(self, job: str) -> Stall | None:
        """The stall, if the run is one now; records a newly logged step (raises if progress cannot be read)."""
        now = self._clock()
        progress = self._progress(job)
        step = progress[0] if progress is not None else None
        if step is not None and step != self._last_step:
            self._slowest = max(self._slowest, now - self._since)
            self._since, self._last_step = now, step
        since, bound = now - self._since, self.bound_s()
        if since <= bound:
            return None
        try:
            running = tuple(self._running(job))
        except Exception:  # the report names what it can
            running = ()
        if self._last_step is None:
            how = f"verl_ext.watchdog.stall_first_s={self.first_s:g}"
        else:
            how = f"verl_ext.watchdog.stall_s={'auto' if self.stall_s is None else f'{self.stall_s:g}'}"
        return Stall(since_s=since, bound_s=bound, how=how, last_step=self._last_step, running=running)


__all__ = ["FACTOR", "FIRST_STEP_S", "FLOOR_S", "Stall", "StallCheck"]
