"""verl_ext's fields stored with verl's advantage put (``verl_ext.trainer.advantage_store``), against a fake store.
The real TransferQueue path (verl's own ``_compute_advantage``) is tested in ``test_main_ppo.py`` (e2e tier)."""

import threading
import types

import pytest
import torch
from tensordict import TensorDict

from verl_ext.trainer.advantage_store import with_advantage_store

KEYS = ["a_0_0", "b_0_0"]


class FakeStore:
    """Records every call; holds ``x``, ``responses`` and ``entropy`` for the two keys."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.data = TensorDict({"x": torch.ones(2, 3), "responses": torch.arange(6).view(2, 3),
                                "entropy": torch.full((2, 3), 0.5)}, batch_size=2)  # fmt: skip

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        self.calls.append(("get", list(keys), partition_id, list(select_fields or [])))
        present = [f for f in (select_fields or self.data.keys()) if f in self.data.keys()]
        return self.data.select(*present)

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        self.calls.append(("put", list(keys), partition_id, sorted(fields.keys()) if fields is not None else None))
        # TransferQueue returns a KVBatchMeta whose ``fields`` lists every field stored for the keys
        return types.SimpleNamespace(fields=sorted({*self.data.keys(), *(fields.keys() if fields is not None else ())}))

    other = "passed through"


def verl_like_advantage(module):
    """What verl's ``_compute_advantage`` does with ``module.tq``: one fetch, one put of the step's keys."""
    data = module.tq.kv_batch_get(keys=KEYS, partition_id="train", select_fields=["x", "values"])
    assert sorted(data.keys()) == ["x"]  # verl sees only what it asked for
    return module.tq.kv_batch_put(keys=KEYS, partition_id="train", fields=TensorDict({"advantages": data["x"] * 2},
                                                                                      batch_size=2))  # fmt: skip


def test_extra_fields_ride_on_verl_fetch_and_put():
    store = FakeStore()
    module = types.SimpleNamespace(tq=store)
    seen = {}

    def compute(fetched, stored):
        seen["fetched"], seen["stored"] = sorted(fetched.keys()), sorted(stored.keys())
        return TensorDict({"cov_selected": stored["advantages"] > 1}, batch_size=2)

    with with_advantage_store(module, KEYS, "train", ["responses", "entropy"], compute) as proxy:
        assert module.tq.other == "passed through"
        assert "cov_selected" in verl_like_advantage(module).fields  # the meta verl hands to the update
    assert module.tq is store and proxy.stored
    assert store.calls == [("get", KEYS, "train", ["x", "values", "responses", "entropy"]),
                           ("put", KEYS, "train", ["advantages", "cov_selected"])]  # fmt: skip
    assert seen == {"fetched": ["entropy", "responses", "x"], "stored": ["advantages"]}


def test_other_calls_pass_through_unchanged():
    store = FakeStore()
    module = types.SimpleNamespace(tq=store)

    def compute(fetched, stored):
        raise AssertionError("must not be called for another batch")

    with with_advantage_store(module, KEYS, "train", ["responses"], compute) as proxy:
        module.tq.kv_batch_get(keys=["other_0_0"], partition_id="train", select_fields=["x"])  # other keys
        module.tq.kv_batch_get(keys=KEYS, partition_id="val", select_fields=["x"])  # other partition
        module.tq.kv_batch_put(keys=KEYS, partition_id="train", fields=TensorDict({}, batch_size=2))  # no fetch yet
        thread = threading.Thread(target=lambda: module.tq.kv_batch_get(keys=KEYS, partition_id="train",
                                                                        select_fields=["x"]))  # fmt: skip
        thread.start()
        thread.join()  # another thread (an async trainer's rollout loop) is not the advantage step
    assert not proxy.stored and proxy.fetched is None
    assert [c[3] for c in store.calls] == [["x"], ["x"], [], ["x"]]


def test_store_restored_when_verl_raises():
    store = FakeStore()
    module = types.SimpleNamespace(tq=store)
    with pytest.raises(RuntimeError, match="boom"):
        with with_advantage_store(module, KEYS, "train", [], lambda f, s: s):
            raise RuntimeError("boom")
    assert module.tq is store


class ForgetfulStore(FakeStore):
    """A store whose put returns a meta without the fields it was given (the meta of the batch before the put)."""

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        super().kv_batch_put(keys, partition_id, fields, tags)
        return types.SimpleNamespace(fields=sorted(self.data.keys()))


def test_a_returned_meta_without_the_added_fields_is_an_error_naming_verls_method():
    """verl's advantage step hands the put's returned meta to the actor update, which reads the batch by it: a meta
    without verl_ext's fields would run the update without them, so the proxy fails naming verl's method and the
    lost field."""
    from verl_ext.trainer.advantage_store import VERL_METHOD

    module = types.SimpleNamespace(tq=ForgetfulStore())
    added = lambda fetched, stored: TensorDict({"entropy_coef": torch.zeros(2, 3)}, batch_size=2)  # noqa: E731
    with pytest.raises(RuntimeError) as info:
        with with_advantage_store(module, KEYS, "train", ["responses"], added) as proxy:
            verl_like_advantage(module)
    assert VERL_METHOD in str(info.value) and "['entropy_coef']" in str(info.value)
    assert VERL_METHOD.endswith("PPOTrainer._compute_advantage") and not proxy.stored
