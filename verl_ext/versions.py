"""The verl versions verl_ext was tested with, and the start-up check of the installed one.

verl_ext overrides private methods of verl's trainers and replaces a few of verl's module attributes (the table in
docs/ARCHITECTURE.md, "verl's internals"). A verl version outside :data:`TESTED_VERL_VERSIONS` may have renamed or
changed any of them, so ``python -m verl_ext.main_ppo`` refuses it (exit 2) unless :data:`ALLOW_UNTESTED_VAR` is
``1``, which lets the run go on with a warning. ``pyproject.toml`` pins verl to the same versions
(``tests/test_upstream_contracts.py`` checks that both agree).

Level 0: imports nothing of verl_ext, and not verl itself (the version is read from the installed distribution).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping

TESTED_VERL_VERSIONS: tuple[str, ...] = ("0.9.1",)
"""The verl versions whose internals verl_ext's contract tests passed on (``pyproject.toml`` pins these)."""

ALLOW_UNTESTED_VAR = "VERL_EXT_ALLOW_UNTESTED_VERL"
"""``1``: run on a verl version outside :data:`TESTED_VERL_VERSIONS`, with a warning; unset or ``0``: refuse it."""

ALLOW_VALUES = ("0", "1")
"""The values :data:`ALLOW_UNTESTED_VAR` may hold (unset reads as ``0``)."""


class UntestedVerl(RuntimeError):
    """The installed verl is not one of :data:`TESTED_VERL_VERSIONS` and :data:`ALLOW_UNTESTED_VAR` is not ``1``,
    or that variable holds a value outside :data:`ALLOW_VALUES`; the message names the version or the variable."""


def installed_verl_version() -> str:
    """The version of the installed distribution ``verl`` (``"none"`` when none is installed)."""
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def tested_set() -> str:
    """:data:`TESTED_VERL_VERSIONS` as one phrase for messages."""
    return ", ".join(TESTED_VERL_VERSIONS)


def check_verl_version(version: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """``None`` when ``version`` (default: the installed verl's) is tested; the warning to print when it is not and
    :data:`ALLOW_UNTESTED_VAR` is ``1``.

    Raises:
        UntestedVerl: the version is untested and the variable is unset or ``0``, or the variable holds another
            value (checked whatever the version, so that a typo is caught on a tested verl too).
    """
    environ = os.environ if environ is None else environ
    version = installed_verl_version() if version is None else version
    allow = environ.get(ALLOW_UNTESTED_VAR, "").strip()
    if allow not in ("", *ALLOW_VALUES):
        raise UntestedVerl(f"{ALLOW_UNTESTED_VAR}={allow!r} is invalid: allowed 0 (refuse a verl version outside "
                           f"{tested_set()}) or 1 (run on it with a warning)")  # fmt: skip
    if version in TESTED_VERL_VERSIONS:
        return None
    what = (f"verl {version} is installed, but verl_ext was tested with verl {tested_set()} only: it overrides "
            "private methods and module attributes of verl that another version may have renamed or changed "
            "(docs/ARCHITECTURE.md, verl's internals)")  # fmt: skip
    if allow != "1":
        raise UntestedVerl(f"{what}. Install verl=={TESTED_VERL_VERSIONS[-1]}, or set {ALLOW_UNTESTED_VAR}=1 to run "
                           "anyway (python -m pytest tests/test_upstream_contracts.py says which internals changed)")
    return f"verl_ext: warning: {what}; running anyway because {ALLOW_UNTESTED_VAR}=1"


def upstream_changed(symbol: str, what: str) -> str:
    """The message for a verl internal that is not as verl_ext expects: names ``symbol``, the installed verl and the
    tested set."""
    return (f"verl_ext: {symbol} {what} in the installed verl {installed_verl_version()} (verl_ext was tested with "
            f"verl {tested_set()})")


__all__ = ["ALLOW_UNTESTED_VAR", "ALLOW_VALUES", "TESTED_VERL_VERSIONS", "UntestedVerl", "check_verl_version",
           "installed_verl_version", "tested_set", "upstream_changed"]  # fmt: skip
