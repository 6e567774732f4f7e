"""What every recipe launches, pinned: each case of ``recipe_pins.py`` (every GPU recipe at both scales and with both
CPU models, the evaluation recipe per family and protocol, the CPU recipe per loss) is composed through the entry
point's own Hydra composition, fully resolved, and compared with its committed file under ``pinned/``. A change to a
recipe, a config group, a default of verl_ext's or of verl's config that changes what a recipe launches fails here
until the pinned file is rewritten (``python tests/scripts/recipe_pins.py --write``) in the same commit."""

from __future__ import annotations

import difflib

import pytest
from recipe_pins import cases, compose_case, pin_path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pins") / "run"
    (path / "home").mkdir(parents=True)
    return path


def test_every_pinned_file_is_a_case():
    on_disk = {p.name.removesuffix(".yaml") for p in pin_path("x").parent.glob("*.yaml")}
    assert on_disk == set(cases()), f"stale: {sorted(on_disk - set(cases()))}, missing: {sorted(set(cases()) - on_disk)}"


@pytest.mark.parametrize("case", sorted(cases()))
def test_recipe_composes_to_its_pinned_config(case, run_dir):
    got = compose_case(case, run_dir)
    want = pin_path(case).read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "pinned", "composed", n=2))
        pytest.fail(f"{case} launches something else than its pinned config:\n{diff[:6000]}")
