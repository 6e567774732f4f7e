"""``benchmarks/auto_noise_floor.py``'s table on the results page (which ``test_results_page`` checks is what the script
prints, 60 seeds): the claims the page makes from it hold in its rows."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def rows() -> dict[tuple[str, str, str], list[str]]:
    text = RESULTS.read_text()
    body = text[text.index("<!-- table: python -m benchmarks.auto_noise_floor -->"):]
    body = body[: body.index("<!-- /table -->")]
    cells = [line.strip("|").split(" | ") for line in body.splitlines() if line.startswith("| defaults") or
             line.startswith("| two-sided")]  # fmt: skip
    return {(c[0].strip(), c[2], c[3]): c for c in cells}


def test_the_defaults_miss_the_bias_bound_at_the_cpu_batch_and_meet_every_bound_at_64_prompts():
    table = rows()
    assert table[("defaults", "4", "0.3")][-1].strip().startswith("no: bias")
    assert table[("defaults", "64", "0.3")][-1].strip() == "yes"
    assert float(table[("defaults", "64", "0.3")][4]) < float(table[("defaults", "4", "0.3")][4]) - 0.02


def test_the_opt_in_two_sided_coefficient_meets_every_bound_at_the_cpu_batch():
    (two_sided,) = [c for k, c in rows().items() if k[0].startswith("two-sided")]
    assert two_sided[2] == "4" and two_sided[-1].strip() == "yes"


def test_the_readmes_row_quotes_the_table():
    table = rows()
    readme = (RESULTS.parents[1] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| the defaults' bias at 4 / 16 / 64 prompts"))
    figures = " / ".join(table[("defaults", n, "0.3")][4] for n in ("4", "16", "64"))
    assert f"| {figures} (bound 0.15) |" in row, (figures, row)
