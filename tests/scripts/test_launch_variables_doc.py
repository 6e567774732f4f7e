"""docs/recipes.md's table of the launcher's variables is the list the launcher reads (``verl_ext.recipe.launch_env``),
printed between its markers: a variable added, renamed or removed in one place and not the other fails here."""

from __future__ import annotations

import re
from pathlib import Path

from verl_ext.recipe import launch_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
BLOCK = re.compile(r"<!-- launch-variables: python -m verl_ext.recipe.launch_env table -->\n(.*?)\n<!-- /launch-variables -->",
                   re.S)  # fmt: skip


def test_the_docs_table_is_the_launchers_list():
    found = BLOCK.search(DOC.read_text())
    assert found, f"{DOC}: no launch-variables block"
    assert found.group(1).strip() == launch_env.table().strip()


def test_the_launch_script_names_every_variable_it_documents():
    """recipe/launch.sh's header names each variable of the list (what a reader of the script sees first)."""
    header = (DOC.parents[1] / "recipe" / "launch.sh").read_text().split("\nrecipe_die()")[0]
    missing = [name for name in launch_env.names() if not re.search(rf"\b{name}\b", header)]
    assert not missing, f"recipe/launch.sh's header does not name {missing}"
