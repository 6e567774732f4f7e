"""docs/results.md, docs/results_performance.md and docs/testing.md (the pages with results) quote the benchmark scripts' own tables: every block between ``<!-- table: COMMAND -->`` and
``<!-- /table -->`` is what ``COMMAND`` (``python -m benchmarks.<module> ARGS``) prints, run here in-process through
the module's ``main(ARGS)`` (the summarisers read a kept results file and run nothing), and every raw results file
the page links to exists."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "results.md", ROOT / "docs" / "results_performance.md", ROOT / "docs" / "testing.md"]
PAGE_TEXT = "\n".join(page.read_text() for page in PAGES)
DOCS = ROOT / "docs"
TABLE = re.compile(r"<!-- table: (?P<command>.+?) -->\n(?P<body>.*?)\n<!-- /table -->", flags=re.S)


def tables(text: str) -> list[tuple[str, str]]:
    """``(command, quoted output)`` of every marked table of the page."""
    return [(m["command"], m["body"]) for m in TABLE.finditer(text)]


def printed(command: str) -> str:
    """What ``python -m benchmarks.<module> ARGS`` prints, from the module's ``main(ARGS)`` in this process."""
    words = shlex.split(command)
    if words[:2] != ["python", "-m"] or not words[2].startswith("benchmarks."):
        raise ValueError(f"{command!r}: a marked table's command is `python -m benchmarks.<module> ARGS`")
    module = importlib.import_module(words[2])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = module.main(words[3:])
    assert status in (0, None), f"{command!r} returned {status}"
    return out.getvalue().strip("\n")


PAGE_TABLES = tables(PAGE_TEXT)


def test_the_page_has_its_tables_each_once():
    commands = [command for command, _ in PAGE_TABLES]
    assert len(commands) >= 8, commands
    assert len(set(commands)) == len(commands), commands
    text = PAGE_TEXT
    assert all("<!-- table: " in page.read_text() for page in PAGES), "a results page without a marked table"
    assert text.count("<!-- table: ") == text.count("<!-- /table -->") == len(commands), "unmatched table markers"


@pytest.mark.parametrize(("command", "quoted"), PAGE_TABLES, ids=[c.split(" ", 2)[2][:90] for c, _ in PAGE_TABLES])
def test_the_quoted_table_is_what_its_command_prints(command, quoted):
    assert quoted == printed(command), (
        f"the results pages: the table under `{command}` differs from what the command prints; paste its output "
        "between the markers"
    )


def test_a_changed_figure_or_a_missing_key_fails(tmp_path):
    """The comparison is verbatim (one digit changed is a difference), and a summariser reading a file without a
    figure stops on a KeyError naming it instead of printing a default."""
    command, quoted = next((c, q) for c, q in PAGE_TABLES if "bench_memory" in c)
    assert re.sub(r"\d", lambda m: str((int(m[0]) + 1) % 10), quoted, count=1) != printed(command)
    kept = ROOT / "benchmarks" / "results" / "results_memory_cpu.json"
    broken = tmp_path / "results.json"
    broken.write_text(kept.read_text().replace('"peak_mb"', '"peak_MB"', 1))
    with pytest.raises(KeyError, match="peak_mb"):
        printed(f"python -m benchmarks.bench_memory --summarise {broken}")


def raw_links(text: str) -> list[str]:
    return sorted(set(re.findall(r"\]\((\.\./benchmarks/results/[^)#\s]+)\)", text)))


def test_every_raw_results_link_exists():
    links = raw_links(PAGE_TEXT)
    assert len(links) >= 8, links
    missing = [link for link in links if not (DOCS / link).resolve().exists()]
    assert not missing, f"the results pages link results files that do not exist: {missing}"


def test_every_summarised_results_file_is_linked():
    """Each file a table is printed from is also linked as its raw results."""
    linked = {Path(link).name for link in raw_links(PAGE_TEXT)}
    for command, _ in PAGE_TABLES:
        for word in shlex.split(command):
            if word.startswith("benchmarks/results/"):
                assert Path(word).name in linked, f"{command!r}: link {word} as the table's raw results"
