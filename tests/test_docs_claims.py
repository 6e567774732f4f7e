"""Sentences of the docs that a script can check: each test reads the source of the claim (the code, the results
file, the command's own output) and the page that states it."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NUMBERS = {7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def test_cpu_mode_counts_its_upstream_workarounds():
    """One workaround per numbered entry of ``verl_ext/cpu/workarounds.py``'s docstring, plus the one in
    ``verl_ext/cpu/precision.py``; cpu_mode.md numbers one table row each, and it and the README say how many."""
    import verl_ext.cpu.precision as precision
    import verl_ext.cpu.workarounds as workarounds

    listed = re.findall(r"^(\d+)\. :(?:func|class):`(\w+)`", workarounds.__doc__, flags=re.M)
    assert [int(n) for n, _ in listed] == list(range(1, len(listed) + 1)), listed
    assert all(hasattr(workarounds, name) for _, name in listed), listed
    assert hasattr(precision, "fp32_log_probs_for_verl_engine")
    count = len(listed) + 1
    page = (DOCS / "cpu_mode.md").read_text()
    rows = [int(n) for n in re.findall(r"^\| (\d+) \| `", page, flags=re.M)]
    assert rows == list(range(1, count + 1)), rows
    word = NUMBERS[count]
    assert f"{word} small workarounds" in page
    assert f"{word} small upstream workarounds" in " ".join((ROOT / "README.md").read_text().split())
    assert not any(f"{w} small" in page for n, w in NUMBERS.items() if n != count)


def test_the_cpu_recipes_entropy_falls_as_cpu_mode_says():
    """cpu_mode.md: on the CPU recipe, vanilla's entropy "falls within a few dozen steps" (its results file)."""
    assert "results_pi_cov_recipe_cpu.json" in (DOCS / "cpu_mode.md").read_text()
    runs = json.loads((ROOT / "benchmarks/results/results_pi_cov_recipe_cpu.json").read_text())["runs"]
    entropy = next(r["entropy"] for r in runs if r["variant"] == "vanilla" and r["seed"] == 0)
    assert len(entropy) == 40 and entropy[19] < entropy[0] - 1 and entropy[39] < entropy[0] - 1, entropy


def test_train_md_shows_its_dry_runs_own_output(tmp_path, launch_record):
    """The dry-run summary printed in train.md is what its command prints now (the ``python -m verl_ext.main_ppo``
    command run in this process, tests/scripts/launch_record.py)."""
    page = (DOCS / "train.md").read_text()
    section = page[page.index("## Dry run"):]
    command = re.search(r"```bash\n(python -m verl_ext.main_ppo verl_ext.dry_run=true.*?)```", section, flags=re.S)
    shown = re.search(r"```text\n(verl_ext dry run.*?)```", section, flags=re.S)
    assert command and shown
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    env.update(HOME=str(tmp_path), PYTHON=sys.executable,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")  # fmt: skip
    argv = shlex.split(command.group(1).replace("\\\n", " "))
    assert argv[:3] == ["python", "-m", "verl_ext.main_ppo"], argv
    res = launch_record.run_main_ppo(argv[3:], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    printed = res.stdout[res.stdout.index("verl_ext dry run"):]
    assert printed.strip() == shown.group(1).strip(), printed


def test_the_controller_acts_through_the_selection_only_on_cov_ratio():
    """entropy_control.md's actuator table: ``cov_ratio`` needs batch-scope ``clip_cov`` / ``kl_cov``;
    ``entropy_coef`` and ``pos_weight`` act in the actor loss, with any policy loss."""
    from verl_ext.checks.validation import check_actuator
    from verl_ext.config import ConfigError

    page = " ".join((DOCS / "entropy_control.md").read_text().split())
    assert "the driver's batch-scope selection | `clip_cov` / `kl_cov` with `cov_scope=batch` |" in page
    assert "(the actuator replaces it); any policy loss |" in page  # entropy_coef
    assert "the probability is the current policy's | any policy loss |" in page  # pos_weight

    def config(loss: str, scope: str = "batch"):
        return OmegaConf.create({"actor_rollout_ref": {"actor": {"entropy_coeff": 0, "policy_loss": {
            "loss_mode": loss, "cov_scope": scope}}}})  # fmt: skip

    check_actuator(config("clip_cov"), SimpleNamespace(actuator="cov_ratio"))
    for loss, scope in (("vanilla", "batch"), ("clip_cov", "micro")):
        with pytest.raises(ConfigError, match="actuator=cov_ratio"):
            check_actuator(config(loss, scope), SimpleNamespace(actuator="cov_ratio"))
    for actuator in ("entropy_coef", "pos_weight"):
        for loss in ("vanilla", "grpo_erc", "high_entropy"):
            check_actuator(config(loss), SimpleNamespace(actuator=actuator))


GPU_SENTENCE = (
    "Only verl_ext's policy losses ran on a GPU: their forward and backward passes and their once-per-step passes (the "
    "batch-scope selection and BAPO's bound search) were timed on one NVIDIA H200; verl's trainer, FSDP, vLLM rollout, "
    "a 7B model and multi-node training never ran on a GPU."
)
"""What ran on a GPU and what never did: said once, in gpu_quickstart.md under its own heading, linked elsewhere."""

GPU_ANCHOR = "gpu_quickstart.md#what-ran-on-a-gpu"

CONTRADICTIONS = re.compile(
    r"nothing\b[^.]{0,40}?\b(?:ran|run|measured|benchmarked|timed)\b[^.]{0,20}?\bon (?:a|the|any) GPU"
    r"|\bno GPU (?:run|measurement|benchmark)s?\b|\buntested on (?:a )?GPU\b",
    flags=re.I,
)
"""Sentences that say nothing ran on a GPU, which the losses' H200 timings contradict."""


def site_pages() -> dict[str, str]:
    """README.md and every docs/*.md page, whitespace collapsed."""
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    return {p.name: " ".join(p.read_text().split()) for p in pages}


def test_what_ran_on_a_gpu_is_said_once_under_its_heading():
    """The sentence stands once in the site, in gpu_quickstart.md under "What ran on a GPU", whose anchor the README
    and the results page link to; the H200 results file it rests on holds the losses and BAPO's step pass."""
    pages = site_pages()
    holders = {name: text.count(GPU_SENTENCE) for name, text in pages.items() if GPU_SENTENCE in text}
    assert holders == {"gpu_quickstart.md": 1}, holders
    page = (DOCS / "gpu_quickstart.md").read_text()
    section = " ".join(page[page.index("\n## What ran on a GPU\n"):].split("\n## ")[1].split())
    assert GPU_SENTENCE in section, section[:400]
    readme = (ROOT / "README.md").read_text()
    assert readme.count(f"](docs/{GPU_ANCHOR})") >= 2, "README: link the sentence from its method table and GPU section"
    gpu = readme[readme.index("## Train on a GPU cluster"):readme.index("## CPU mode")]
    assert f"](docs/{GPU_ANCHOR})" in gpu
    assert f"]({GPU_ANCHOR})" in (DOCS / "results_performance.md").read_text()
    h200 = json.loads((ROOT / "benchmarks/results/results_losses_h200_64x4096.json").read_text())
    assert h200["machine"]["gpu"] == "NVIDIA H200" and h200["device"] == "cuda"
    assert {"clip_cov", "kl_cov", "bapo statistics + search"} <= set(h200["batch_selection_ms"])


def test_no_page_says_nothing_ran_on_a_gpu():
    hits = {name: m[0] for name, text in site_pages().items() if (m := CONTRADICTIONS.search(text))}
    assert not hits, f"pages that contradict what ran on a GPU ({GPU_ANCHOR}): {hits}"


@pytest.mark.parametrize("text", ["Nothing ran on a GPU or a 7B model.", "**Nothing here was measured on a GPU.**",
                                  "**Untested on GPU:** verl_ext never trained", "Nothing in this table ran on the GPU",
                                  "Nothing was benchmarked on any GPU."])  # fmt: skip
def test_the_contradiction_patterns_catch_the_old_sentences(text):
    assert CONTRADICTIONS.search(text), text
    assert not CONTRADICTIONS.search(GPU_SENTENCE)


def test_the_readmes_loss_and_trainer_figures_are_their_files():
    """The README's Results rows for the losses' time / memory and the trainer's step time are the results files'."""
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| loss time / memory vs verl's vanilla"))
    losses = json.loads((ROOT / "benchmarks/results/results_cpu.json").read_text())["losses"]
    by_name = {r["loss"]: r for r in losses}
    for name, shown in (("clip_cov batch scope", "`clip_cov`"), ("kl_cov batch scope", "`kl_cov`"),
                        ("grpo_erc", "`grpo_erc`")):  # fmt: skip
        r = by_name[name]
        assert f"{shown} {r['time_ratio']:.2f}x / {r['mem_ratio']:.2f}x" in row, (name, row)
    selection = json.loads((ROOT / "benchmarks/results/results_cpu.json").read_text())["batch_selection_ms"]
    vanilla = by_name["vanilla (verl)"]["time_ms"]
    with_pass = [(by_name[f"{loss} batch scope"]["time_ms"] + selection[loss]) / vanilla
                 for loss in ("clip_cov", "kl_cov")]  # fmt: skip
    assert f"time with the selection {with_pass[0]:.2f}x, {with_pass[1]:.2f}x" in row, (with_pass, row)
    row = next(line for line in readme.splitlines() if line.startswith("| verl_ext's trainer vs verl's, step time"))
    summary = json.loads((ROOT / "benchmarks/results/results_trainer_cpu.json").read_text())["summary"]
    shown = f"{summary['verl_ext vanilla']['step_ratio']:.3f}x / {summary['verl_ext clip_cov']['step_ratio']:.3f}x"
    assert shown in row, (shown, row)


def test_the_readmes_update_memory_figures_are_their_file():
    """README: ERC / high_entropy / entropy_adv peak at 1.000x vanilla's with the recipes' settings, and verl's
    entropy_checkpointing at 1.73x / 1.76x (SmolLM2's / Qwen2.5's vocabulary)."""
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| update peak memory, ERC"))
    rows = json.loads((ROOT / "benchmarks/results/results_memory_cpu.json").read_text())["rows"]
    plain = [r["peak_ratio"] for r in rows if r["loss"] in ("grpo_erc", "high_entropy", "entropy_adv")
             and r["mode"] == "plain"]  # fmt: skip
    assert len(plain) == 6 and all(f"{x:.3f}" == "1.000" for x in plain) and "1.000x" in row, plain
    ckpt = {r["model"]: r["peak_ratio"] for r in rows if r["loss"] == "grpo_erc" and r["mode"] == "checkpointing"}
    assert f"{ckpt['smollm2']:.2f}x / {ckpt['qwen2.5']:.2f}x" in row, (ckpt, row)


def test_the_readmes_controller_figures_are_the_results_pages():
    """README: the default controller's rows quote the tables results.md prints from the scripts (and
    tests/benchmarks/test_results_page.py checks those against the scripts)."""
    readme = (ROOT / "README.md").read_text()
    results = (DOCS / "results.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `auto`, 3-seed median"))
    labels = (("entropy_coef", "fec87b6", "0.4", "coefficient at 0.4 nats (fp32)"),  # the current defaults' runs
              ("cov_ratio", "before 0d7534d", "0.3", "Clip-Cov's ratio at 0.3 (bf16, earlier)"))
    for actuator, build, target, label in labels:
        median = re.search(rf"^\| {actuator} \| {build} \| \w+ \| {target} \| 3 \| ([\d.]+) \| ([\d.]+) \| "
                           r"(\d+)%( \(\d+% at rest\))? \|", results, flags=re.M)  # fmt: skip
        assert median, actuator
        rest = median[4].replace("%", " %") if median[4] else ""
        assert f"{label} {median[1]} / {median[2]} / {median[3]} %{rest}" in row, (median.groups(), row)
    row = next(line for line in readme.splitlines() if line.startswith("| `auto` on the toy"))
    section = results[results.index("### The default controller on the toy"):]
    toy = re.search(r"^\| auto_cov \| [^|]+ \| [^|]+ \| ([\d.]+)% \(", section, flags=re.M)
    assert toy and f"| {toy[1]} % (" in row, (toy, row)


def test_the_readmes_evaluation_figures_are_the_results_page():
    """README: 14 configurations x 3 seeds, the base model's avg@32, the range of the configurations' means, and every
    configuration's range overlapping vanilla's - as results.md's checked table of real_model_runs.py prints them."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    results = (DOCS / "results.md").read_text()
    ranges = {}
    start = results.index("<!-- table: python -m benchmarks.real_model_runs")
    table = results[start:results.index("<!-- /table -->", start)]
    for name, cells in re.findall(r"^\| (.+?) \| (?:seeds|seed 0 twice)[^|]* \|(.*)$", table, flags=re.M):
        mean, lo, hi = re.findall(r"([\d.]+) \(([\d.]+)-([\d.]+)\)", cells)[6]  # avg@32, the 7th figure
        ranges[name] = (float(mean), float(lo), float(hi))
    assert len(ranges) == 14, ranges
    base = re.search(r"^base \(warmed up, step 0\): avg@32 ([\d.]+)", results, flags=re.M)[1]
    means = sorted(mean for mean, _, _ in ranges.values())
    _, vlo, vhi = ranges["vanilla GRPO"]
    assert "14 configurations x 3 seeds" in readme
    shown = f"base {base}; means {means[0]:.3f}-{means[-1]:.3f}, each range overlapping vanilla's {vlo:.3f}-{vhi:.3f}"
    assert shown in readme, shown
    assert all(lo <= vhi and hi >= vlo for _, lo, hi in ranges.values()), ranges


def test_the_readmes_method_table_is_the_results_files():
    """README's "Choosing a method": the loss-time column is the H200 run's time ratio (bench_losses, fp32), the
    entropy column the mean (range) over steps 21-40 that results.md's checked table of real_model_runs.py prints."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Choosing a method"):readme.index("## The losses")]
    rows = {line.split(" | ")[1].split("`")[1]: line for line in section.splitlines()
            if line.startswith("| ") and line.count("`") >= 2 and " | `recipe/" in line}  # fmt: skip
    results = (DOCS / "results.md").read_text()
    start = results.index("<!-- table: python -m benchmarks.real_model_runs")
    table = results[start:results.index("<!-- /table -->", start)]
    entropy = {}
    for name, cells in re.findall(r"^\| (.+?) \| seeds 0, 1, 2 \|(.*)$", table, flags=re.M):
        entropy[name] = re.findall(r"[\d.]+ \([\d.]+-[\d.]+\)", cells)[2]  # entropy, steps 21-40: the 3rd figure
    expected_entropy = {"vanilla": "vanilla GRPO", "clip_cov": "fixed Clip-Cov (ratio 0.1)",
                        "kl_cov": "fixed KL-Cov (ratio 0.1)", "grpo_erc": "ERC (band 0.95-1.05)",
                        "high_entropy": "`high_entropy` (top 20 %)", "entropy_adv": "`entropy_adv` (alpha 0.4, kappa 2)"}
    assert set(expected_entropy) <= set(rows), sorted(rows)
    for loss, config in expected_entropy.items():
        assert f"| {entropy[config]}" in rows[loss], (loss, entropy[config], rows[loss])
    assert f"Skywork {entropy['Skywork-OR1 x entropy coefficient (their values)']}" in section
    assert f"EntroPIC {entropy['EntroPIC x pos_weight (their gains, Kp 1, Ki 0.01)']}" in section
    h200 = json.loads((ROOT / "benchmarks/results/results_losses_h200_64x4096.json").read_text())
    losses = {r["loss"]: r["time_ratio"] for r in h200["losses"]}
    for loss, key in (("vanilla", "vanilla (verl)"), ("clip_cov", "clip_cov batch scope"),
                      ("kl_cov", "kl_cov batch scope"), ("grpo_erc", "grpo_erc")):  # fmt: skip
        assert f"| {losses[key]:.2f}x" in rows[loss], (loss, losses[key], rows[loss])
    assert f"`gppo_erc` {losses['gppo_erc']:.2f}x" in rows["grpo_erc"]
    # in parentheses: the call plus the loss's once-per-step pass over the same tokens, against vanilla's call
    ms = {r["loss"]: r["time_ms"] for r in h200["losses"]}
    passes = h200["batch_selection_ms"]
    for loss, key, step in (("clip_cov", "clip_cov batch scope", "clip_cov"),
                            ("kl_cov", "kl_cov batch scope", "kl_cov"),
                            ("bapo", "bapo step scope (bounds given)", "bapo statistics + search")):  # fmt: skip
        with_pass = (ms[key] + passes[step]) / ms["vanilla (verl)"]
        what = "search" if loss == "bapo" else "selection"
        assert f"| {losses[key]:.2f}x ({with_pass:.2f}x with the {what}" in rows[loss], (loss, with_pass, rows[loss])
    assert "+ one no-grad forward per optimiser step" in rows["bapo"], rows["bapo"]
    clip = re.search(r"^\| auto x clip_high [^|]+ \| seed 0 \|(.*)$", table, flags=re.M)
    target_row = next(line for line in section.splitlines() if line.startswith("| an entropy target |"))
    assert clip and "`clip_high`: no authority, refused |" in target_row, (clip, target_row)  # a verdict, no figure
    relative = re.search(r"^\| auto x entropy coefficient \(1\.0x to 0\.5x [^|]+ \| seeds 0, 1, 2 \|(.*)$", table,
                         flags=re.M)  # fmt: skip
    row = next(line for line in section.splitlines() if line.startswith("| a target that follows the policy |"))
    assert relative, table
    kept = re.findall(r"[\d.]+ \([\d.]+-[\d.]+\)", relative[1])[2]  # entropy, steps 21-40: the 3rd figure
    assert f"| {kept}, three seeds;" in row, (kept, row)
    bapo = re.search(r"^\| BAPO [^|]+ \| seed 0 \|(.*)$", table, flags=re.M)  # one seed: figures without ranges
    assert bapo and f"| {bapo[1].split(' | ')[2].strip()}, seed 0 only |" in rows["bapo"], (bapo, rows["bapo"])
    for loss in ("high_entropy", "entropy_adv"):  # not in bench_losses: no figure invented
        assert " | - | " in rows[loss], rows[loss]


def test_the_readmes_entropy_control_row_is_the_default_controllers_runs():
    """README's entropy-target row and its Results row are the fp32 default-controller runs as auto_control_runs reads
    them: the mean entropy over steps 21-40 (mean and range over seeds) and the medians of bias / block gap / bound."""
    import statistics

    from benchmarks import auto_control_runs as acr

    runs = [acr.figures(r) for r in acr.RUNS
            if (r.actuator, r.precision, r.target, r.build) == ("entropy_coef", "fp32", "0.3", acr.CURRENT)]
    assert len(runs) == 3
    means = [r["entropy_mean"] for r in runs]
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| an entropy target |"))
    assert f"| {statistics.fmean(means):.3f} ({min(means):.3f}-{max(means):.3f}), target 0.3" in row, row
