"""What every recipe launches, pinned: each case of ``recipe_pins.py`` (every GPU recipe at both scales and with both
CPU models, the evaluation recipe per family and protocol, the CPU recipe per loss) is composed through the entry
point's own Hydra composition, resolved as the entry point resolves it, and compared - as what it sets against verl's
``ppo_trainer`` defaults - with its committed file under ``pinned/``. A change to a recipe, a config group or a
default of verl_ext's that changes what a recipe launches fails here until the pinned files are rewritten
(``python tests/scripts/recipe_pins.py --write``) in the same commit. A change of verl's own defaults fails
``test_verl_defaults_are_the_recorded_ones`` alone, as one diff."""

from __future__ import annotations

import difflib

import pytest
from recipe_pins import VERL_DEFAULTS, cases, compose_case, dump, pin_path, verl_defaults

MAX_PIN_LINES = 300
"""A pinned file is read by people: what one recipe sets, not verl's whole config."""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pins") / "run"
    (path / "home").mkdir(parents=True)
    return path


@pytest.fixture(scope="module")
def defaults():
    return verl_defaults()


def _diff(want: str, got: str) -> str:
    return "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "pinned", "composed", n=2))


def test_every_pinned_file_is_a_case():
    on_disk = {p.name.removesuffix(".yaml") for p in pin_path("x").parent.glob("*.yaml")}
    assert on_disk == set(cases()), f"stale: {sorted(on_disk - set(cases()))}, missing: {sorted(set(cases()) - on_disk)}"


def test_verl_defaults_are_the_recorded_ones(defaults, run_dir):
    got, want = dump(defaults, run_dir), VERL_DEFAULTS.read_text()
    if got != want:
        pytest.fail(f"verl's ppo_trainer defaults changed since the pins were made:\n{_diff(want, got)[:6000]}")


@pytest.mark.parametrize("case", sorted(cases()))
def test_recipe_composes_to_its_pinned_config(case, run_dir, defaults):
    got = compose_case(case, run_dir, defaults)
    want = pin_path(case).read_text()
    if got != want:
        pytest.fail(f"{case} launches something else than its pinned config:\n{_diff(want, got)[:6000]}")
    assert len(want.splitlines()) <= MAX_PIN_LINES, f"{case}: {len(want.splitlines())} lines"
