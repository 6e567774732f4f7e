"""The training and validation files, checked before Ray starts: :func:`check_training_data`.

verl reads its data files in its TaskRunner and scores each sample in its reward workers, minutes after the start:
a file that is missing, a column it lacks, a data source no scorer knows or a custom reward function that is not there
surface there, once per sample, and the run ends on an unrelated line. For every file of ``data.train_files`` and
``data.val_files`` the driver can read, this module checks what verl will need of it:

* the columns verl reads: the prompt (``data.prompt_key``), the data source (``data.reward_fn_key``) and, unless a
  custom reward function is set, ``reward_model.ground_truth``; the first row that lacks one is named;
* each distinct data source has a scorer: verl's ``default_compute_score`` knows it (:func:`known_data_sources`, read
  from verl's own code), or a custom reward function is configured;
* a custom reward function's file (or ``pkg://`` module) exists and defines the named function (read, not run).

Only the columns needed are read, :data:`BATCH_ROWS` rows at a time (a file of DAPO-Math-17k's size: seconds). A file
the driver cannot see is an error in CPU mode, where the driver and every worker share one machine; on a cluster it
may exist on the nodes only, and is said once, not refused. Raises :class:`~verl_ext.config.ConfigError` naming the
key and the file.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl_ext.checks.recipe_checks import DATA_FILE_KEYS, data_files
from verl_ext.config import ConfigError

REWARD_FN_KEY = "reward.custom_reward_function"
"""verl's custom reward function: ``.path`` (a file, ``file://`` or ``pkg://`` module) and ``.name``."""
BATCH_ROWS = 65536
"""Rows read at a time: the check's memory stays that of one batch of the needed columns, whatever the file's size."""
GROUND_TRUTH = ("reward_model", "ground_truth")
"""The column and field verl's reward managers pass as the ground truth to ``default_compute_score``."""


def _select(config: DictConfig, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(config, key, default=default)
    return default if value is None else value


@cache
def known_data_sources() -> tuple[frozenset[str], tuple[str, ...]]:
    """The data sources verl's ``default_compute_score`` scores (``verl.utils.reward_score``): (the names it compares
    ``data_source`` with, the prefixes it tests with ``startswith``), read from its code; anything else raises
    ``NotImplementedError`` there (contract: tests/test_upstream_contracts.py)."""
    from verl.utils.reward_score import default_compute_score

    tree = ast.parse(textwrap.dedent(inspect.getsource(default_compute_score)))
    names: set[str] = set()
    prefixes: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "data_source":
            for comparator in node.comparators:
                for leaf in ast.walk(comparator):
                    if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                        names.add(leaf.value)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "data_source"):  # fmt: skip
            prefixes += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return frozenset(names), tuple(prefixes)


def scored_by_verl(source: str) -> bool:
    """Whether verl's ``default_compute_score`` has a scorer for ``source``."""
    names, prefixes = known_data_sources()
    return source in names or source.startswith(prefixes)


def custom_reward_function(config: DictConfig) -> tuple[str, str] | None:
    """The custom reward function's (path, name) when one is set, after checking that its file exists and defines
    the function; ``None`` without one."""
    path = _select(config, f"{REWARD_FN_KEY}.path")
    if not path:
        return None
    name = str(_select(config, f"{REWARD_FN_KEY}.name", "compute_score"))
    path = str(path)
    if path.startswith("pkg://"):
        module = path.removeprefix("pkg://").replace("/", ".")
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or not Path(spec.origin).is_file():
            raise ConfigError(f"{REWARD_FN_KEY}.path", f"{path!r}: no module {module!r} is installed")
        source = Path(spec.origin)
    else:
        source = Path(path.removeprefix("file://")).expanduser()
        if not source.is_file():
            raise ConfigError(f"{REWARD_FN_KEY}.path", f"{path!r}: the file does not exist")
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{REWARD_FN_KEY}.path", f"{path!r} is not readable Python: {exc}") from None
    if name not in _top_level_names(tree):
        raise ConfigError(f"{REWARD_FN_KEY}.name", f"{name!r}: {source} defines no function of that name (defined: "
                          f"{', '.join(sorted(_top_level_names(tree))) or 'none'})")  # fmt: skip
    return path, name


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level: functions, classes, assignments, imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def check_file(path: Path, key: str, prompt_key: str, source_key: str, custom: bool) -> set[str]:
    """One parquet file: the columns verl reads are there and no row lacks one; returns its data sources."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow's errors for a file that is not parquet
        raise ConfigError(key, f"{path} is not a readable parquet file ({type(exc).__name__}: {exc})") from None
    needed = [prompt_key, source_key, *([] if custom else [GROUND_TRUTH[0]])]
    missing = [name for name in needed if name not in schema.names]
    if missing:
        raise ConfigError(key, f"{path} has no column {missing[0]!r}, which verl reads (columns: "
                          f"{', '.join(schema.names)})")  # fmt: skip
    if not custom:
        field = schema.field(GROUND_TRUTH[0]).type
        if not pa.types.is_struct(field) or field.get_field_index(GROUND_TRUTH[1]) < 0:
            raise ConfigError(key, f"{path}: column {GROUND_TRUTH[0]!r} has no field {GROUND_TRUTH[1]!r}, the ground "
                              "truth verl's scorers read (or set a custom reward function: "
                              f"{REWARD_FN_KEY}.path)")  # fmt: skip
    sources: set[Any] = set()
    start = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=needed):
        columns = {prompt_key: batch.column(prompt_key), source_key: batch.column(source_key)}
        if not custom:
            columns[".".join(GROUND_TRUTH)] = pc.struct_field(batch.column(GROUND_TRUTH[0]), GROUND_TRUTH[1])
        for name, column in columns.items():
            nulls = pc.is_null(column)
            if pc.any(nulls).as_py():
                raise ConfigError(key, f"{path}: row {start + pc.index(nulls, True).as_py()} has no {name!r}, which "
                                  "verl reads")  # fmt: skip
        sources |= set(pc.unique(batch.column(source_key)).to_pylist())
        start += batch.num_rows
    return sources


def check_training_data(config: DictConfig) -> list[str]:
    """Every file of ``data.train_files`` and ``data.val_files`` the driver can read (module docstring); returns the
    notes for the dry-run summary. A missing file is an error in CPU mode and a warning on a cluster."""
    from verl_ext.cpu import mode as cpu_mode

    custom = custom_reward_function(config)
    prompt_key = str(_select(config, "data.prompt_key", "prompt"))
    source_key = str(_select(config, "data.reward_fn_key", "data_source"))
    notes: list[str] = []
    for key in DATA_FILE_KEYS:
        for name in map(str, data_files(config, key) or []):
            path = Path(name).expanduser()
            if not path.is_file():
                if cpu_mode.requested():
                    raise ConfigError(key, f"{name} does not exist (CPU mode: the driver and every worker share this "
                                      "machine); prepare it with scripts/data/ or correct the path")  # fmt: skip
                print(f"warning: {name} ({key}) does not exist on this node: verl's workers read it where they run "
                      "(prepare it with scripts/data/)", file=sys.stderr)  # fmt: skip
                continue
            sources = check_file(path, key, prompt_key, source_key, custom is not None)
            unscored = sorted(s for s in sources if not isinstance(s, str) or not scored_by_verl(s))
            if unscored and custom is None:
                raise ConfigError(f"{REWARD_FN_KEY}.path", f"{path} ({key}) has data_source {unscored[0]!r}, which "
                                  "verl's default_compute_score does not score: set a custom reward function "
                                  f"({REWARD_FN_KEY}.path and .name) or give the rows a data source verl scores")  # fmt: skip
            notes.append(f"{path}: {', '.join(sorted(map(str, sources)))}")
    return notes


__all__ = ["BATCH_ROWS", "GROUND_TRUTH", "REWARD_FN_KEY", "check_file", "check_training_data", "custom_reward_function",
           "known_data_sources", "scored_by_verl"]
