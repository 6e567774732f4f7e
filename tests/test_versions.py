"""The tested verl and Ray versions: ``python -m verl_ext.main_ppo`` refuses another installed verl or Ray before
anything else (exit 2, naming the package, its version and the tested ones) unless ``VERL_EXT_ALLOW_UNTESTED_VERL=1``,
which runs with a warning."""

from __future__ import annotations

import pytest

from verl_ext import versions
from verl_ext.versions import (
    ALLOW_UNTESTED_VAR,
    TESTED_RAY_VERSIONS,
    TESTED_VERL_VERSIONS,
    UntestedVerl,
    check_verl_version,
)

UNTESTED = "0.9.2"
UNTESTED_RAY = "2.61.0"


class _Started(Exception):
    """Raised by the step of ``run`` after the version check: the run went on."""


@pytest.fixture
def main_ppo(monkeypatch):
    from verl_ext import main_ppo

    monkeypatch.delenv(ALLOW_UNTESTED_VAR, raising=False)

    def started():
        raise _Started

    monkeypatch.setattr(main_ppo, "ensure_registered", started)
    return main_ppo


def test_a_tested_version_passes_silently():
    assert UNTESTED not in TESTED_VERL_VERSIONS
    for version in TESTED_VERL_VERSIONS:
        assert check_verl_version(version, {}) is None
        assert check_verl_version(version, {ALLOW_UNTESTED_VAR: "0"}) is None


def test_an_untested_version_is_an_error_naming_it_and_the_tested_set():
    with pytest.raises(UntestedVerl) as info:
        check_verl_version(UNTESTED, {})
    message = str(info.value)
    assert f"verl {UNTESTED}" in message and all(v in message for v in TESTED_VERL_VERSIONS)
    assert f"{ALLOW_UNTESTED_VAR}=1" in message
    with pytest.raises(UntestedVerl):
        check_verl_version(UNTESTED, {ALLOW_UNTESTED_VAR: "0"})


def test_the_variable_lets_an_untested_version_run_with_a_warning():
    warning = check_verl_version(UNTESTED, {ALLOW_UNTESTED_VAR: "1"})
    assert warning and "warning" in warning and UNTESTED in warning and ALLOW_UNTESTED_VAR in warning


@pytest.mark.parametrize("value", ["yes", "true", "2"])
def test_another_value_of_the_variable_is_an_error_naming_it_and_the_allowed_values(value):
    for version in (UNTESTED, TESTED_VERL_VERSIONS[0]):
        with pytest.raises(UntestedVerl) as info:
            check_verl_version(version, {ALLOW_UNTESTED_VAR: value})
        assert f"{ALLOW_UNTESTED_VAR}={value!r} is invalid" in str(info.value) and "allowed 0" in str(info.value)


def test_main_ppo_stops_an_untested_verl_before_anything_else(main_ppo, monkeypatch, capsys):
    monkeypatch.setattr(versions, "installed_verl_version", lambda: UNTESTED)
    assert main_ppo.run(None) == 2  # returns before it reads the config or registers anything
    err = capsys.readouterr().err
    assert f"verl {UNTESTED}" in err and TESTED_VERL_VERSIONS[0] in err and ALLOW_UNTESTED_VAR in err


def test_main_ppo_runs_an_untested_verl_with_the_variable_and_warns(main_ppo, monkeypatch, capsys):
    monkeypatch.setattr(versions, "installed_verl_version", lambda: UNTESTED)
    monkeypatch.setenv(ALLOW_UNTESTED_VAR, "1")
    with pytest.raises(_Started):
        main_ppo.run(None)
    assert f"warning: verl {UNTESTED}" in capsys.readouterr().err


def test_main_ppo_rejects_a_bad_value_of_the_variable(main_ppo, monkeypatch, capsys):
    monkeypatch.setenv(ALLOW_UNTESTED_VAR, "yes")
    assert main_ppo.run(None) == 2
    assert f"{ALLOW_UNTESTED_VAR}='yes' is invalid" in capsys.readouterr().err


def test_main_ppo_goes_on_with_the_tested_verl(main_ppo, monkeypatch):
    monkeypatch.setattr(versions, "installed_verl_version", lambda: TESTED_VERL_VERSIONS[0])
    with pytest.raises(_Started):
        main_ppo.run(None)


# ----------------------------------------------------------------------------------------------------------
# Ray: the watchdog reads Ray's private actor table; the same check, the same variable
# ----------------------------------------------------------------------------------------------------------


def test_an_untested_ray_is_an_error_naming_it_and_the_tested_ones():
    assert UNTESTED_RAY not in TESTED_RAY_VERSIONS
    for environ in ({}, {ALLOW_UNTESTED_VAR: "0"}):
        with pytest.raises(UntestedVerl) as info:
            check_verl_version(TESTED_VERL_VERSIONS[0], environ, ray_version=UNTESTED_RAY)
        message = str(info.value)
        assert f"Ray {UNTESTED_RAY} is installed" in message, message
        assert all(f"Ray {v}" in message for v in TESTED_RAY_VERSIONS), message
        assert f"ray=={TESTED_RAY_VERSIONS[-1]}" in message and f"{ALLOW_UNTESTED_VAR}=1" in message, message


def test_a_tested_ray_passes_silently():
    for version in TESTED_RAY_VERSIONS:
        assert check_verl_version(TESTED_VERL_VERSIONS[0], {}, ray_version=version) is None


def test_the_variable_lets_an_untested_ray_run_with_a_warning_naming_it():
    warning = check_verl_version(TESTED_VERL_VERSIONS[0], {ALLOW_UNTESTED_VAR: "1"}, ray_version=UNTESTED_RAY)
    assert warning and warning.startswith("verl_ext: warning: ") and f"Ray {UNTESTED_RAY}" in warning, warning
    assert TESTED_RAY_VERSIONS[0] in warning and ALLOW_UNTESTED_VAR in warning and "verl 0" not in warning, warning


def test_an_untested_verl_and_ray_warn_once_each():
    warning = check_verl_version(UNTESTED, {ALLOW_UNTESTED_VAR: "1"}, ray_version=UNTESTED_RAY)
    lines = warning.splitlines()
    assert len(lines) == 2 and f"verl {UNTESTED}" in lines[0] and f"Ray {UNTESTED_RAY}" in lines[1], lines


def test_main_ppo_stops_an_untested_ray_before_anything_else(main_ppo, monkeypatch, capsys):
    monkeypatch.setattr(versions, "installed_verl_version", lambda: TESTED_VERL_VERSIONS[0])
    monkeypatch.setattr(versions, "installed_ray_version", lambda: UNTESTED_RAY)
    assert main_ppo.run(None) == 2
    err = capsys.readouterr().err
    assert f"Ray {UNTESTED_RAY}" in err and TESTED_RAY_VERSIONS[0] in err and ALLOW_UNTESTED_VAR in err, err


def test_main_ppo_runs_an_untested_ray_with_the_variable_and_warns(main_ppo, monkeypatch, capsys):
    monkeypatch.setattr(versions, "installed_verl_version", lambda: TESTED_VERL_VERSIONS[0])
    monkeypatch.setattr(versions, "installed_ray_version", lambda: UNTESTED_RAY)
    monkeypatch.setenv(ALLOW_UNTESTED_VAR, "1")
    with pytest.raises(_Started):
        main_ppo.run(None)
    assert f"warning: Ray {UNTESTED_RAY}" in capsys.readouterr().err


def test_the_installed_ray_is_read_from_its_distribution():
    import importlib.metadata

    assert versions.installed_ray_version() == importlib.metadata.version("ray")
