"""The documentation site builds with warnings as errors (``docs/conf.py``: Sphinx + MyST, nitpicky), so a broken
link, heading anchor, image, toctree entry, link to a repository file or docstring reference fails the fast tier;
and the checks bite: with the site's configuration, two pages that build fail once one anchor and one file link
break."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ["-E", "-W", "--keep-going", "-n", "-q", "-b", "html"]  # the README's command, quiet


def sphinx_build(src: Path, out: Path) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        pytest.fail('the docs build needs sphinx and myst-parser: pip install -e ".[test]"')
    return subprocess.run([sys.executable, "-m", "sphinx", *BUILD, str(src), str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def test_docs_site_builds_without_warnings(tmp_path):
    res = sphinx_build(ROOT / "docs", tmp_path / "html")
    assert res.returncode == 0 and "WARNING" not in res.stderr and "ERROR" not in res.stderr, res.stderr[-6000:]
    assert (tmp_path / "html" / "api.html").exists()


def test_a_broken_anchor_and_file_link_fail_the_build(tmp_path):
    """The same build, with the site's configuration, on two pages: it passes, then fails once one ``page.md#anchor``
    names no heading and one link out of ``docs/`` names no file (no API reference: a few seconds)."""
    for entry in ROOT.iterdir():  # the repository, docs/ made here, everything else linked
        if entry.name not in ("docs", ".git", ".venv"):
            (tmp_path / entry.name).symlink_to(entry)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "conf.py").write_text((ROOT / "docs" / "conf.py").read_text())
    (docs / "target.md").write_text("# Target\n\n## 1. Prepare the data\n\nText.\n")
    (docs / "index.md").write_text("# Two pages\n\n```{toctree}\npage\ntarget\n```\n")
    text = "# A page\n\nData: [the data](target.md#1-prepare-the-data), [a recipe](../recipe/dapo_clip_cov.sh).\n"
    (docs / "page.md").write_text(text)
    good = sphinx_build(docs, tmp_path / "good")
    assert good.returncode == 0, good.stderr[-3000:]
    (docs / "page.md").write_text(text.replace("#1-prepare-the-data", "#no-such-heading")
                                  .replace("dapo_clip_cov.sh", "no_such_recipe.sh"))  # fmt: skip
    res = sphinx_build(docs, tmp_path / "html")
    assert res.returncode != 0
    assert "'no-such-heading'" in res.stderr, res.stderr[-3000:]
    assert "no_such_recipe.sh" in res.stderr, res.stderr[-3000:]


def test_readme_is_read_in_minutes():
    """The README stays a short guide: at most 150 lines, none over 300 characters (tables included). The site's
    home page is the README, so the build checks its links and anchors."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 300]
    assert not long, f"README lines over 300 characters: {long}"


DIARY = ("as they came out", "the next day", "since then", "so far", "not run yet", "former value")
"""Run-diary phrases: a page says what is true now; git keeps the history."""


def test_every_page_is_short():
    """No page over 300 lines: a reader finds a section by scrolling, and a longer page is split (a page's length is
    what its reader meets; the site's total word count is not, and is not capped)."""
    pages = sorted((ROOT / "docs").glob("*.md"))
    long = {p.name: n for p in pages if (n := len(p.read_text().splitlines())) > 300}
    assert not long, f"pages over 300 lines: {long}"


def test_no_page_reads_as_a_diary():
    hits = [(p.name, phrase) for p in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
            for phrase in DIARY if phrase in p.read_text().lower()]  # fmt: skip
    assert not hits, hits
