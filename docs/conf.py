"""Sphinx configuration of verl_ext's documentation site.

Sphinx with MyST Markdown, as verl's own documentation: the pages stay Markdown files that read on GitHub, the API
reference comes from the docstrings (``sphinx.ext.autodoc``, which MkDocs lacks without a separate plugin stack), and
one strict build (``-W --keep-going -n``) checks every link, heading anchor, image, toctree entry and
cross-reference. Build it with::

    python -m sphinx -E -W --keep-going -n -b html docs docs/_build/html

``-E`` reads every page afresh: an incremental build resolves links only on the pages it rewrites, so a heading
renamed on one page would not fail the pages that link to it.

What the build checks beyond Sphinx's own warnings:

- Links out of ``docs/`` into the repository (``../benchmarks/results/x.json``, ``../recipe/x.sh``): MyST turns a
  link to an existing non-page file into a download link and warns (``myst.xref_missing``) when the file does not
  exist, so a broken one fails the build.
- ``page.md#anchor`` links: ``myst_heading_anchors`` gives every heading a GitHub-style slug (lower case,
  punctuation other than ``-`` and ``_`` dropped, spaces to hyphens), and a link to a slug that no heading has warns.
- The README: the site's home page is the README itself (:func:`readme_as_home`), its links rewritten from the
  repository root to ``docs/``, so its links and anchors are checked by the same build.

So no hand-written link checker is needed: ``tests/test_docs_site.py`` runs this build, and keeps only what a build
cannot see (the README's length). ``suppress_warnings`` is empty; the only silenced references are the nitpicky ones
below, each with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

project = "verl_ext"
author = "verl_ext contributors"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"

myst_heading_anchors = 6
myst_enable_extensions = ["dollarmath"]

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures name torch / omegaconf types that have no target in this site

nitpicky = True
nitpick_ignore_regex = [
    # Types from verl, torch, omegaconf and the standard library: this site has no inventory of theirs (the build
    # runs offline, so no intersphinx).
    (r"py:.*", r"(torch|verl|omegaconf|typing|collections|dataclasses)\..*"),
    # The driver and the analysis scripts are not part of the API reference (the losses, the configuration and the
    # entropy controller are); a docstring may still name them.
    (r"py:.*", r"verl_ext\.(driver|analysis|trainer|cpu)\..*"),
]

suppress_warnings: list[str] = []


def readme_as_home(app, docname: str, source: list[str]) -> None:
    """Put the README on the home page in place of its ``<!-- README -->`` marker, its relative links rewritten from
    the repository root to ``docs/`` (``docs/x.md`` -> ``x.md``, ``recipe/x.sh`` -> ``../recipe/x.sh``); in the
    other pages, a link to ``../README.md`` goes to the home page. The pages keep the links that work on GitHub."""

    def rebase(match: re.Match) -> str:
        target = match.group(1)
        if re.match(r"[a-z]+:|#", target):
            return match.group(0)
        return f"]({target.removeprefix('docs/') if target.startswith('docs/') else '../' + target})"

    if docname == root_doc:
        app.env.note_dependency(str(ROOT / "README.md"))  # an incremental build re-reads the home page when it changes
        readme = re.sub(r"\]\(([^)\s]+)\)", rebase, (ROOT / "README.md").read_text())
        source[0] = source[0].replace("<!-- README -->", readme)
    else:
        source[0] = re.sub(r"\]\(\.\./README\.md", f"]({root_doc}.md", source[0])


def setup(app):
    app.connect("source-read", readme_as_home)
