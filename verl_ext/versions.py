"""The verl and Ray versions verl_ext was tested with, and the start-up check of the installed ones.

verl_ext overrides private methods of verl's trainers and replaces a few of verl's module attributes, and its
watchdog reads Ray's private actor table (the table in docs/ARCHITECTURE.md, "verl's internals"). A verl outside
:data:`TESTED_VERL_VERSIONS` or a Ray outside :data:`TESTED_RAY_VERSIONS` may have renamed or changed any of them, so
``python -m verl_ext.main_ppo`` refuses it (exit 2) unless :data:`ALLOW_UNTESTED_VAR` is ``1``, which lets the run go
on with a warning. ``pyproject.toml`` pins verl and Ray to the same versions (``tests/test_upstream_contracts.py``
checks that they agree).

Level 0: imports nothing of verl_ext, and neither verl nor Ray (the versions are read from the installed
distributions).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping

TESTED_VERL_VERSIONS: tuple[str, ...] = ("0.9.1",)
"""The verl versions whose internals verl_ext's contract tests passed on (``pyproject.toml`` pins these)."""

TESTED_RAY_VERSIONS: tuple[str, ...] = ("2.60.0",)
"""The Ray versions whose internals verl_ext's contract tests passed on (``pyproject.toml`` pins these): the
watchdog reads ``ray._private.state.actors`` and ends actors through Ray's core worker."""

ALLOW_UNTESTED_VAR = "VERL_EXT_ALLOW_UNTESTED_VERL"
"""``1``: run on a verl or Ray version outside :data:`TESTED_VERL_VERSIONS` / :data:`TESTED_RAY_VERSIONS`, with a
warning; unset or ``0``: refuse it."""

ALLOW_VALUES = ("0", "1")
"""The values :data:`ALLOW_UNTESTED_VAR` may hold (unset reads as ``0``)."""


class UntestedVerl(RuntimeError):
    """The installed verl or Ray is not a tested version and :data:`ALLOW_UNTESTED_VAR` is not ``1``, or that
    variable holds a value outside :data:`ALLOW_VALUES`; the message names the package, its version or the
    variable."""


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def installed_verl_version() -> str:
    """The version of the installed distribution ``verl`` (``"none"`` when none is installed)."""
    return _installed("verl")


def installed_ray_version() -> str:
    """The version of the installed distribution ``ray`` (``"none"`` when none is installed)."""
    return _installed("ray")


def tested_set() -> str:
    """:data:`TESTED_VERL_VERSIONS` as one phrase for messages."""
    return ", ".join(TESTED_VERL_VERSIONS)


def _allowed(environ: Mapping[str, str]) -> bool:
    """Whether :data:`ALLOW_UNTESTED_VAR` is ``1`` in ``environ``; raises :class:`UntestedVerl` for another value."""
    allow = environ.get(ALLOW_UNTESTED_VAR, "").strip()
    if allow not in ("", *ALLOW_VALUES):
        raise UntestedVerl(f"{ALLOW_UNTESTED_VAR}={allow!r} is invalid: allowed 0 (refuse a verl or Ray version "
                           f"outside the tested ones: verl {tested_set()}, Ray {', '.join(TESTED_RAY_VERSIONS)}) or 1 "
                           "(run on it with a warning)")  # fmt: skip
    return allow == "1"


def _untested(package: str, version: str, tested: tuple[str, ...], relies_on: str, allow: bool) -> str | None:
    """``None`` for a tested ``version``; the warning when ``allow``; raises :class:`UntestedVerl` otherwise."""
    if version in tested:
        return None
    what = (f"{package} {version} is installed, but verl_ext was tested with {package} {', '.join(tested)} only: "
            f"{relies_on} that another version may have renamed or changed (docs/ARCHITECTURE.md, verl's internals)")
    if not allow:
        raise UntestedVerl(f"{what}. Install {package.lower()}=={tested[-1]}, or set {ALLOW_UNTESTED_VAR}=1 to run "
                           "anyway (python -m pytest tests/test_upstream_contracts.py says which internals changed)")
    return f"verl_ext: warning: {what}; running anyway because {ALLOW_UNTESTED_VAR}=1"


def check_verl_version(version: str | None = None, environ: Mapping[str, str] | None = None,
                       ray_version: str | None = None) -> str | None:
    """``None`` when ``version`` (default: the installed verl's) and ``ray_version`` (default: the installed Ray's)
    are tested; the warning to print (one line per untested package) when one is not and :data:`ALLOW_UNTESTED_VAR`
    is ``1``.

    Raises:
        UntestedVerl: a version is untested and the variable is unset or ``0`` (the message names the package, its
            version and the tested ones), or the variable holds another value (checked whatever the versions, so
            that a typo is caught on a tested verl too).
    """
    environ = os.environ if environ is None else environ
    version = installed_verl_version() if version is None else version
    ray_version = installed_ray_version() if ray_version is None else ray_version
    allow = _allowed(environ)
    warnings = [
        _untested("verl", version, TESTED_VERL_VERSIONS,
                  "verl_ext overrides private methods and module attributes of verl", allow),
        _untested("Ray", ray_version, TESTED_RAY_VERSIONS,
                  "verl_ext's watchdog reads Ray's private actor table (ray._private.state) and ends actors through "
                  "Ray's core worker", allow),
    ]  # fmt: skip
    found = [w for w in warnings if w]
    return "\n".join(found) if found else None


def upstream_changed(symbol: str, what: str) -> str:
    """The message for a verl internal that is not as verl_ext expects: names ``symbol``, the installed verl and the
    tested set."""
    return (f"verl_ext: {symbol} {what} in the installed verl {installed_verl_version()} (verl_ext was tested with "
            f"verl {tested_set()})")


__all__ = ["ALLOW_UNTESTED_VAR", "ALLOW_VALUES", "TESTED_RAY_VERSIONS", "TESTED_VERL_VERSIONS", "UntestedVerl",
           "check_verl_version", "installed_ray_version", "installed_verl_version", "tested_set",
           "upstream_changed"]  # fmt: skip
