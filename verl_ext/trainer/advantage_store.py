"""verl_ext's batch fields stored with the V1 trainer's own advantage put: no TransferQueue round trip of their own.

verl's V1 trainer keeps the training batch in the TransferQueue store; its driver holds keys. Its advantage step
(``PPOTrainer._compute_advantage``) makes one ``tq.kv_batch_get`` of the batch (``response_mask``, ``old_log_probs``,
...) and one ``tq.kv_batch_put`` (``advantages``, ``returns``). The fields verl_ext adds before the update
(``cov_selected``, ``old_entropy``, ``high_entropy_weight``, entropy control's actuator values) need exactly those
inputs plus the response token ids and the old pass's entropy, and the update is the next step that reads the store
(after an optional critic update). Fetching and storing them separately cost the driver two round trips, ~25-35 ms a
step on the CPU recipe whatever the fields' size (``docs/benchmarks.md``) - over the 1.02x budget of a small update.

:func:`with_advantage_store` joins verl's two calls instead. verl's method calls the module attribute
``verl.trainer.ppo.v1.trainer_base.tq``, and has no hook for extra fields, so for the duration of that one call the
attribute is a :class:`AdvantageStoreProxy`: the first ``kv_batch_get`` of exactly the step's keys (same thread, same
partition) also fetches the extra fields (verl's code receives only the fields it asked for), and the first
``kv_batch_put`` of those keys also stores what ``compute(fetched, stored)`` returns. Every other call, and every
attribute, goes to TransferQueue unchanged. Wrapping rather than re-writing verl's ~60-line method keeps its KL
penalty, rollout correction and estimator dispatch verl's own; if a verl version makes the calls differently, the
proxy sees no matching fetch/put, :attr:`AdvantageStoreProxy.stored` stays false and the caller falls back to its
own round trip. The put's returned batch meta (``KVBatchMeta.fields``), which verl's method hands to the actor update,
must list the fields verl_ext added; when it does not, the proxy raises naming verl's method (the update would
otherwise read the batch without them).

Imports ``tensordict`` only; the store module it wraps is passed in (``verl_ext.trainer.v1`` passes verl's
``trainer_base``), so the fast tests use a fake one without TransferQueue.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tensordict import TensorDict

VERL_METHOD = "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage"
"""The verl method whose TransferQueue fetch and put the proxy joins, named in its errors."""

FieldsFn = Callable[[TensorDict, TensorDict], TensorDict]
"""``compute(fetched, stored)``: the fields to store alongside verl's advantage put. ``fetched`` is verl's fetch plus
the extra fields; ``stored`` is what verl stores (jagged ``advantages``, ``returns``, ...)."""


class AdvantageStoreProxy:
    """Stands in for the ``transfer_queue`` module inside verl's advantage step (see the module docstring)."""

    def __init__(self, tq: Any, keys: Sequence[str], partition_id: str, extra_fields: Sequence[str],
                 compute: FieldsFn) -> None:  # fmt: skip
        self._tq = tq
        self._keys = list(keys)
        self._partition_id = partition_id
        self._extra = list(extra_fields)
        self._compute = compute
        self._thread = threading.get_ident()
        self.fetched: TensorDict | None = None
        """verl's fetch of the step's batch with the extra fields (``None`` until it happened)."""
        self.stored = False
        """Whether verl's put of the step's batch carried the computed fields."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tq, name)

    def _is_step(self, keys: Any, partition_id: str) -> bool:
        return (threading.get_ident() == self._thread and partition_id == self._partition_id
                and not isinstance(keys, str) and list(keys) == self._keys)  # fmt: skip

    def kv_batch_get(self, keys: Any, partition_id: str, select_fields: Any = None, **kwargs: Any) -> TensorDict:
        if self.fetched is not None or select_fields is None or not self._is_step(keys, partition_id):
            return self._tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=select_fields, **kwargs)
        asked = [select_fields] if isinstance(select_fields, str) else list(select_fields)
        extra = [f for f in self._extra if f not in asked]
        data = self._tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=[*asked, *extra], **kwargs)
        self.fetched = data
        present = [f for f in extra if f in data.keys()]
        return data.exclude(*present) if present else data

    def kv_batch_put(self, keys: Any, partition_id: str, fields: TensorDict | None = None, **kwargs: Any) -> Any:
        if self.fetched is None or self.stored or fields is None or not self._is_step(keys, partition_id):
            return self._tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields, **kwargs)
        added = self._compute(self.fetched, fields)
        merged = fields.clone(recurse=False)
        merged.update(added)
        result = self._tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=merged, **kwargs)
        returned = getattr(result, "fields", None)
        lost = [f for f in added.keys() if returned is None or f not in returned]
        if lost:
            raise RuntimeError(
                f"verl_ext: TransferQueue's kv_batch_put inside verl's {VERL_METHOD} returned a batch meta whose fields "
                f"({returned!r}) lack {lost}, which verl_ext stored with verl's advantage put: the actor update reads "
                f"the batch by that meta and would run without them (an actuator's term or a selection silently "
                "dropped). This verl / TransferQueue version returns another meta than the one it put"
            )
        self.stored = True
        return result


@contextlib.contextmanager
def with_advantage_store(module: Any, keys: Sequence[str], partition_id: str, extra_fields: Sequence[str],
                         compute: FieldsFn) -> Iterator[AdvantageStoreProxy]:  # fmt: skip
    """While active, ``module.tq`` (verl's ``trainer_base``) is an :class:`AdvantageStoreProxy` for the step's
    ``keys``; restored on exit, also when verl's method raises."""
    original = module.tq
    proxy = AdvantageStoreProxy(original, keys, partition_id, extra_fields, compute)
    module.tq = proxy
    try:
        yield proxy
    finally:
        module.tq = original


__all__ = ["AdvantageStoreProxy", "FieldsFn", "VERL_METHOD", "with_advantage_store"]
