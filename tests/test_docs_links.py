"""Every relative link in README.md and docs/*.md reaches a file of the repository, and every ``#section`` anchor a
section heading of its target (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens). A section that
is renamed or removed must take its links with it."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from test_docs_commands import DOCS, ROOT  # the same documents whose commands run

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def prose(path: Path) -> str:
    """The document without its fenced code blocks: a '#' line or a ``](...)`` in code is no heading or link."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)


def anchors(path: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", prose(path), flags=re.M)}


def links() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        found += [(str(path.relative_to(ROOT)), target) for target in LINK.findall(prose(path))
                  if not target.startswith(("http://", "https://", "mailto:"))]  # fmt: skip
    return found


LINKS = links()


def test_slug_follows_github():
    assert slug("40 steps of the autopilot on Clip-Cov's ratio, with gains for this regime") == (
        "40-steps-of-the-autopilot-on-clip-covs-ratio-with-gains-for-this-regime")
    assert slug("The CPU stack: OpenMP and allocator libraries") == "the-cpu-stack-openmp-and-allocator-libraries"
    assert len(LINKS) >= 20, LINKS


@pytest.mark.parametrize(("doc", "target"), LINKS)
def test_relative_link_resolves(doc, target):
    file, _, anchor = target.partition("#")
    path = (ROOT / doc).parent / file if file else ROOT / doc
    assert path.exists(), f"{doc}: link to {target}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    if anchor and path.suffix == ".md":
        assert anchor in anchors(path), f"{doc}: link to {target}: {file or doc} has no section '#{anchor}'"


def test_readme_is_read_in_minutes():
    """The README stays a short guide: about 150 lines, none over 300 characters (tables included)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160, len(lines)
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 300]
    assert not long, f"README lines over 300 characters: {long}"
