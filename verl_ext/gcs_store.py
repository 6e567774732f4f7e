"""verl_ext's small JSON records in Ray's GCS key-value store, readable from any node of the run's cluster.

Level 0 (imports nothing of verl_ext): the writers (the TaskRunner's logged step, :mod:`verl_ext.driver.progress`;
each worker's failed samples, :mod:`verl_ext.failures`) and the entry point that reads them share the namespace and
the encoding here. Each call is one RPC to the GCS of the connected cluster (Ray's own timeouts bound it).
"""

from __future__ import annotations

import json
from typing import Any

NAMESPACE = "verl_ext"
"""The GCS key-value namespace of verl_ext's keys."""


def put(key: str, record: dict[str, Any]) -> None:
    """Write ``record`` (JSON) under ``key``, replacing what was there."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(key.encode(), json.dumps(record).encode(), overwrite=True, namespace=NAMESPACE)


def get(key: str) -> dict[str, Any] | None:
    """The record under ``key``, or ``None`` if there is none."""
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key.encode(), namespace=NAMESPACE)
    return json.loads(raw) if raw else None


def get_all(prefix: str) -> list[dict[str, Any]]:
    """The records under every key that starts with ``prefix``."""
    from ray.experimental import internal_kv

    keys = internal_kv._internal_kv_list(prefix.encode(), namespace=NAMESPACE) or []
    found = []
    for key in keys:
        raw = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
        if raw:
            found.append(json.loads(raw))
    return found


__all__ = ["NAMESPACE", "get", "get_all", "put"]
