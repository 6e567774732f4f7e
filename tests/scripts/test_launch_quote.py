"""A launch variable's text reaches the config exactly as given (``verl_ext.recipe.launch_env.quote``): the override
it becomes is read by Hydra's override parser (quoted strings: ``hydra/grammar/OverrideLexer.g4``) and the value then
resolved by OmegaConf (``${...}`` interpolations), and both must give back the original string - spaces, quotes,
backslashes (single, doubled, trailing), commas, ``$``, ``${x}``, ``=`` included. The oracle is the string given."""

from __future__ import annotations

import random

import pytest
from omegaconf import OmegaConf
from recipe_pins import case_env, compose, compose_script, environment, launch_command, split_command

from verl_ext.recipe import launch_env

EDGE_CASES = ["", " ", "plain", "two words", "it's", 'say "hi"', "'", '"', "''", "\\", "\\\\", "a\\b", "a\\\\b",
              "trailing\\", "trailing\\\\", "\\'", "\\\\'", "'\\", "${x}", "\\${x}", "\\\\${x}", "${", "$", "$$", "$x",
              "a=b", "a,b", "[a]", "{a}", "(a)", "a:b", "~/x", "  padded  ", "tab\there", "new\nline", "é ü 中",
              "/a b/it's ${oc.env:HOME} \\ \\\\ ,=$"]  # fmt: skip
"""Hand-picked strings: every character Hydra's or OmegaConf's grammar treats specially, alone and together."""

ALPHABET = ["\\", "'", '"', "$", "{", "}", "${", "${x}", " ", ",", "=", "a", "[", "]", "(", ")", ":", "\t", "#", "%"]


def generated(count: int, seed: int = 0) -> list[str]:
    """``count`` random strings over :data:`ALPHABET`, 0 to 12 pieces each (seeded: the same list every run)."""
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))) for _ in range(count)]


def read_back(override: str):
    """The value ``override`` (``key=VALUE``) gives the key ``k`` of a config that also has ``x``, resolved: Hydra's
    override parser, then OmegaConf's merge of the value and its resolution, as a composition does."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(override)
    config = OmegaConf.create({"k": None, "x": "interpolated"})
    OmegaConf.update(config, parsed.key_or_group, parsed.value(), merge=True)
    return OmegaConf.to_container(config, resolve=True)["k"]


@pytest.mark.parametrize("value", EDGE_CASES)
def test_a_quoted_value_reads_back_exactly(value):
    assert read_back(f"k={launch_env.quote(value)}") == value


def test_generated_strings_read_back_exactly():
    wrong = [(value, launch_env.quote(value)) for value in generated(3000)
             if read_back(f"k={launch_env.quote(value)}") != value]  # fmt: skip
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("name", ["EXP_NAME", "MODEL_PATH", "CKPTS_DIR", "PROJECT_NAME"])
def test_a_text_variable_reads_back_through_its_override(name):
    """A ``text`` variable's override (``launch_env.overrides``), every value of the edge cases and generated ones."""
    (key,) = launch_env.BY_NAME[name].keys
    for value in [v for v in EDGE_CASES + generated(300, seed=1) if v]:  # an empty variable is refused
        (override,) = launch_env.overrides("dapo_kl_cov", {name: value})
        assert override.startswith(f"{key}=")
        assert read_back("k=" + override.removeprefix(f"{key}=")) == value, (value, override)


@pytest.mark.parametrize("name", ["TRAIN_FILE", "VAL_FILE", "LOGGERS"])
def test_a_list_variable_reads_back_item_by_item(name):
    """A ``files`` / ``list`` variable is its comma-separated items, each stripped of surrounding blanks."""
    rng = random.Random(2)
    pieces = [v.replace(",", "") for v in EDGE_CASES + generated(300, seed=3)]
    items = [v for v in pieces if v.strip()]
    for _ in range(200):
        chosen = rng.sample(items, rng.randint(1, 4))
        (override,) = launch_env.overrides("dapo_kl_cov", {name: ",".join(chosen)})
        assert read_back("k=" + override.split("=", 1)[1]) == [v.strip() for v in chosen], (chosen, override)


def test_variables_reach_the_composed_config_exactly(tmp_path):
    """End to end: ``recipe/dapo_kl_cov.sh`` prints the overrides (``PRINT_CMD=1``) and Hydra composes them through
    the entry point's config; resolved, the config holds the values given, ``${x}`` as text."""
    name = "it's a \"run\" ${x} $HOME \\ \\\\ = , [a] end\\"
    files = ["/data/it's ${x}/a b.parquet", "/data/back\\slash\\\\.parquet"]
    variables = {"EXP_NAME": name, "PROJECT_NAME": "${oc.env:HOME}", "TRAIN_FILE": ",".join(files)}
    (tmp_path / "home").mkdir()
    env = case_env(tmp_path, variables)
    cmd = launch_command("dapo_kl_cov", env, cwd=tmp_path)
    env.pop("PRINT_CMD")
    with environment(env, tmp_path):
        config = compose(*split_command(cmd))
        trainer = OmegaConf.to_container(config.trainer, resolve=True)
        files_read = OmegaConf.to_container(config.data, resolve=True)["train_files"]
    assert trainer["experiment_name"] == name
    assert trainer["project_name"] == "${oc.env:HOME}"
    assert files_read == files


def test_the_entry_points_resolution_keeps_quotes_and_backslashes(tmp_path):
    """Through the entry point's resolution too (``verl_ext.startup.resolved``: paths made absolute). A literal ``${``
    is left out here: the entry point's resolution, like verl's in-place ``OmegaConf.resolve``, reads a resolved
    ``${`` again as an interpolation."""
    name = "it's a \"run\" $HOME \\ \\\\ = , [a] end\\"
    files = ["/data/it's/a b.parquet", "/data/back\\slash\\\\.parquet"]
    (tmp_path / "home").mkdir()
    config = compose_script("dapo_kl_cov", {"EXP_NAME": name, "TRAIN_FILE": ",".join(files)}, tmp_path)
    assert config.trainer.experiment_name == name
    assert list(config.data.train_files) == files
