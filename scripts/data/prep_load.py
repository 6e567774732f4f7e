"""Where a data-preparation script's rows come from: the hub, or a local file or directory.

:func:`load_source_splits` turns a script's :class:`~prep_common.DatasetSpec` and its command line into, for every
output split, the ``(origin, dataset)`` parts :mod:`prep_common` converts; every failure is a :class:`DataPrepError`
naming the flag, the path and what is accepted. Imports only ``datasets`` (lazily) and, for type hints, prep_common;
like it, this file is not part of a package (the scripts put ``scripts/data`` on ``sys.path``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prep_common import DatasetSpec

#: Files a local directory may hold that mark it as written by ``datasets.save_to_disk``.
_SAVE_TO_DISK_MARKERS = ("dataset_dict.json", "state.json")

#: File suffixes a local file may have, and the ``datasets`` builder that reads them.
_LOCAL_FILE_BUILDERS = {
    ".parquet": "parquet",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
}


class DataPrepError(RuntimeError):
    """A user-facing failure (bad flag, unreadable input, too many malformed rows)."""





def _load_local(path: str, config: str | None) -> Any:
    """Load a local file (one split) or directory (hub snapshot or ``save_to_disk`` output)."""
    import datasets

    if not os.path.exists(path):
        raise DataPrepError(f"--local-path {path!r} does not exist")
    if os.path.isdir(path):
        if any(os.path.exists(os.path.join(path, marker)) for marker in _SAVE_TO_DISK_MARKERS):
            return datasets.load_from_disk(path)
        try:
            return datasets.load_dataset(path, config) if config else datasets.load_dataset(path)
        except Exception as exc:  # noqa: BLE001 - re-raised with the path and the accepted layouts
            raise DataPrepError(
                f"could not read --local-path directory {path!r}"
                + (f" (config {config!r})" if config else "")
                + f": {type(exc).__name__}: {exc}. Accepted: a directory written by datasets' save_to_disk, "
                "or a hub snapshot (e.g. `huggingface-cli download --repo-type dataset NAME --local-dir DIR`)"
            ) from exc
    suffix = next((s for s in _LOCAL_FILE_BUILDERS if path.endswith(s)), None)
    if suffix is None:
        raise DataPrepError(
            f"--local-path file {path!r} has an unsupported suffix; allowed: {sorted(_LOCAL_FILE_BUILDERS)}"
        )
    try:
        return datasets.load_dataset(_LOCAL_FILE_BUILDERS[suffix], data_files=path, split="train")
    except Exception as exc:  # noqa: BLE001
        raise DataPrepError(f"could not read --local-path file {path!r}: {type(exc).__name__}: {exc}") from exc


def _local_configs(path: str, explicit: Sequence[str] | None, defaults: Sequence[str | None]) -> list[str | None]:
    """The configs to read from a local path.

    Only a hub snapshot whose ``README.md`` declares configs has them: there the explicit
    ``--hub-config`` values, else the dataset's defaults, are used. A file, a ``save_to_disk``
    directory or a plain folder of data files is read once, and ``--hub-config`` is an error there.
    """
    if not os.path.exists(path):
        raise DataPrepError(f"--local-path {path!r} does not exist")
    readme = os.path.join(path, "README.md")
    has_configs = False
    if os.path.isdir(path) and os.path.isfile(readme):
        with open(readme, encoding="utf-8") as handle:
            has_configs = "config_name:" in handle.read()
    if has_configs:
        return list(explicit or defaults)
    if explicit:
        raise DataPrepError(
            f"--hub-config {list(explicit)} does not apply to --local-path {path!r}: only a hub snapshot whose "
            "README.md declares configs has them"
        )
    return [None]


def _pick_split(loaded: Any, source_split: str, origin: str) -> Any:
    """Select ``source_split`` from a ``DatasetDict``; a plain ``Dataset`` is returned as is."""
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        if source_split not in loaded:
            raise DataPrepError(
                f"{origin} has no split {source_split!r}; available splits: {sorted(loaded)}"
            )
        return loaded[source_split]
    return loaded


def load_source_splits(spec: DatasetSpec, args: argparse.Namespace) -> dict[str, list[tuple[str, Any]]]:
    """For every requested output split, the list of ``(origin, dataset)`` parts to convert."""
    import datasets

    requested = args.splits
    hub_name = args.hub_name or spec.hub_name
    configs: Sequence[str | None]
    if args.hub_config:
        configs = args.hub_config
    else:
        configs = spec.hub_default_configs.get(hub_name, spec.hub_configs)
    # --hub-name also says which hub copy a --local-path snapshot is (its split names and configs)
    split_map = spec.hub_source_splits.get(hub_name, spec.splits)
    if args.source_split:
        if len(requested) != 1:
            raise DataPrepError(
                f"--source-split applies to one output split; pass --splits with exactly one of {sorted(spec.splits)}"
            )
        split_map = {requested[0]: args.source_split}

    parts: dict[str, list[tuple[str, Any]]] = {split: [] for split in requested}
    if args.local_path:
        if os.path.isfile(args.local_path) and len(requested) != 1:
            raise DataPrepError(
                f"--local-path {args.local_path!r} is a single file, i.e. one split; pass --splits with exactly "
                f"one of {sorted(spec.splits)} (or point --local-path at a directory holding all splits)"
            )
        for config in _local_configs(args.local_path, args.hub_config, configs):
            loaded = _load_local(args.local_path, config)
            origin = f"--local-path {args.local_path!r}" + (f" config {config!r}" if config else "")
            for split in requested:
                parts[split].append((origin, _pick_split(loaded, split_map[split], origin)))
        return parts

    for config in configs:
        for split in requested:
            origin = f"hub dataset {hub_name!r}" + (f" config {config!r}" if config else "")
            try:
                dataset = datasets.load_dataset(hub_name, config, split=split_map[split])
            except Exception as exc:  # noqa: BLE001 - re-raised with what to do about it
                raise DataPrepError(
                    f"could not load {origin} split {split_map[split]!r}: {type(exc).__name__}: {exc}. "
                    "On a machine without hub access, download the dataset elsewhere and pass --local-path "
                    "(a file, a hub snapshot directory or a save_to_disk directory)."
                ) from exc
            parts[split].append((origin, dataset))
    return parts
