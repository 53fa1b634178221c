"""hfvram/memo.py: the bounded caches that replaced the hand-rolled module-level memo dicts."""

from __future__ import annotations

import threading

import pytest

from hfvram import memo
from hfvram.memo import CACHES, IdentityCache, ValueCache


def test_a_value_cache_computes_once_per_key_and_drops_the_oldest():
    cache: ValueCache[str, int] = ValueCache("test.value_cache", 2)
    try:
        calls: list[str] = []

        def answer(key: str) -> int:
            calls.append(key)
            return len(key)

        assert cache.get_or_compute("a", lambda: answer("a")) == 1
        assert cache.get_or_compute("a", lambda: answer("a")) == 1
        cache.get_or_compute("bb", lambda: answer("bb"))
        cache.get_or_compute("ccc", lambda: answer("ccc"))
        assert len(cache) == 2 and cache.get("a") is None and cache.get("ccc") == 3
        assert calls == ["a", "bb", "ccc"]
        # a stored None is an answer, not a miss
        cache.put("none", None)  # type: ignore[arg-type]
        assert cache.get_or_compute("none", lambda: answer("none")) is None and "none" not in calls
    finally:
        del CACHES["test.value_cache"]


def test_an_identity_cache_answers_only_for_the_same_object():
    cache: IdentityCache[tuple[int, ...], int] = IdentityCache("test.identity_cache", 4)
    try:
        first = tuple(range(5))
        equal = tuple(range(5))
        assert cache.get_or_compute(first, lambda: 1) == 1
        assert cache.get_or_compute(first, lambda: 2) == 1
        # an equal but other object is another key: the answer is about the object held
        assert cache.get_or_compute(equal, lambda: 3) == 3
    finally:
        del CACHES["test.identity_cache"]


def test_two_caches_cannot_share_a_name_and_size_is_at_least_one():
    ValueCache("test.unique", 1)
    try:
        with pytest.raises(ValueError, match="two caches"):
            ValueCache("test.unique", 1)
    finally:
        del CACHES["test.unique"]
    with pytest.raises(ValueError, match="at least 1"):
        ValueCache("test.empty", 0)


def test_the_estimators_caches_are_registered_and_clear_all_empties_them():
    from hfvram.estimate import common, engine_rules
    from hfvram.spec import Layer, LayerKind

    layers = (Layer(kind=LayerKind.FULL, num_kv_heads=8, head_dim_k=128, head_dim_v=128),) * 4
    summary = common.layer_summary(layers)
    assert summary.counts[0][1] == 4 and common.layer_summary(layers) is summary
    assert engine_rules.quant_tp_refusal is not None
    assert {"estimate.layer_summary", "estimate.quant_tp_refusal"} <= set(CACHES)
    memo.clear_all()
    assert len(CACHES["estimate.layer_summary"]) == 0


def test_a_value_cache_is_safe_across_threads():
    cache: ValueCache[int, int] = ValueCache("test.threads", 64)
    try:

        def work(offset: int) -> None:
            for key in range(200):
                assert (
                    cache.get_or_compute((key + offset) % 100, lambda k=(key + offset) % 100: k * 2)
                    == ((key + offset) % 100) * 2
                )

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(cache) == 64
    finally:
        del CACHES["test.threads"]
