"""ExposureScheduler: exact balanced counts, deferral without loss, propensities."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmp_bayes.design.scheduler import ExposureScheduler, ExposureShortfallWarning


def _ids(n: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(
    pool=st.integers(1, 60),
    slots=st.integers(1, 10),
    k_frac=st.floats(0, 1),
    steps=st.integers(1, 80),
    seed=st.integers(0, 2**31 - 1),
)
def test_balanced_counts_exact_floor_ceil(
    pool: int, slots: int, k_frac: float, steps: int, seed: int
) -> None:
    k = round(k_frac * slots)
    s = ExposureScheduler(slots, k, _ids(pool), steps, seed=seed)
    cap = min(k, pool)  # a step cannot expose more distinct memories than the pool holds
    total = steps * cap
    assert s.counts.sum() == total
    assert set(s.counts.tolist()) <= {total // pool, -(-total // pool)}
    # the batch deal delivers exactly those counts, at most k per step, no repeats in a step
    st_, mem = s.deal(None)
    assert np.array_equal(np.bincount(mem, minlength=pool), s.counts)
    assert np.bincount(st_, minlength=steps).max(initial=0) <= k
    assert len(set(zip(st_.tolist(), mem.tolist(), strict=True))) == len(st_)


def test_live_collisions_are_deferred_never_dropped() -> None:
    pool = _ids(10)
    s = ExposureScheduler(4, 2, pool, 50, seed=3)
    got: Counter[str] = Counter()
    for t in range(50):
        # m000 and m001 are retrieved during steps 10-29: their exposures must wait
        ranking = pool[:2] if 10 <= t < 30 else ["x", "y"]
        ctx = s.context(t, ranking)
        exp = [c["memory_id"] for c in ctx if c["source"] == "exposure"]
        ret = [c["memory_id"] for c in ctx if c["source"] == "retriever"]
        assert len(exp) == 2 and not set(exp) & set(ret) and len(set(exp)) == 2
        got.update(exp)
    assert s.shortfall == {}
    assert [got[m] for m in pool] == s.counts.tolist()  # 100 slots over 10: exactly 10 each
    assert set(s.counts.tolist()) == {10}


def test_batch_collisions_swapped_not_dropped() -> None:
    rng = np.random.default_rng(0)
    s = ExposureScheduler(10, 2, _ids(30), 300, seed=5)
    blocked = rng.integers(0, 30, size=(300, 8))
    st_, mem = s.deal(blocked)
    assert np.array_equal(np.bincount(mem, minlength=30), s.counts)
    assert not (blocked[st_] == mem[:, None]).any()


def test_propensities_equal_design() -> None:
    pool = _ids(7)
    s = ExposureScheduler(5, 2, pool, 40, seed=1)
    d = s.design()
    assert d["steps"] == 40 and d["exposure_slots"] == 2 and d["assignment"] == "balanced"
    for i, m in enumerate(pool):
        assert d["pool"][m] == s.counts[i] / 40
    for t in range(40):
        for c in s.context(t, ["x", "y", "z"]):
            if c["source"] == "exposure":
                assert c["propensity"] == d["pool"][c["memory_id"]]
            else:
                assert c["rank"] == ["x", "y", "z"].index(c["memory_id"])


def test_lifetimes_blocks_get_their_capacity() -> None:
    # 3 per-query haystacks of 5 pool memories, 10 steps each, k = 2: 20 slots per block
    pool = _ids(15)
    life = {m: (10 * (i // 5), 10 * (i // 5) + 10) for i, m in enumerate(pool)}
    s = ExposureScheduler(6, 2, pool, 30, seed=2, lifetimes=life)
    assert s.counts.tolist() == [4] * 15
    assert np.allclose(s.propensity, 4 / 10)
    st_, mem = s.deal(None)
    created = np.array([life[m][0] for m in pool])
    assert ((st_ >= created[mem]) & (st_ < created[mem] + 10)).all()
    got: Counter[str] = Counter()
    for t in range(30):
        got.update(c["memory_id"] for c in s.context(t, []) if c["source"] == "exposure")
    assert [got[m] for m in pool] == [4] * 15


def test_unservable_exposure_is_reported_loudly() -> None:
    s = ExposureScheduler(3, 1, ["a", "b"], 4, seed=0)
    with pytest.warns(ExposureShortfallWarning):
        for t in range(4):
            s.context(t, ["a", "b"])  # both always retrieved: nothing can be exposed
    assert sum(s.shortfall.values()) == 4


def test_bernoulli_respects_cap() -> None:
    s = ExposureScheduler(4, 2, _ids(6), 200, assignment="bernoulli", seed=0, bernoulli_rate=0.5)
    assert s.design()["pool"] == {m: 0.5 for m in _ids(6)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExposureShortfallWarning)
        n = [sum(c["source"] == "exposure" for c in s.context(t, [])) for t in range(200)]
    assert max(n) <= 2 and s.capped_steps > 0


def test_steps_must_increase_and_stay_in_design() -> None:
    from cmp_bayes.errors import ConfigError

    s = ExposureScheduler(3, 1, ["a", "b"], 3)
    s.context(1, [])
    with pytest.raises(ConfigError):
        s.context(0, [])
    with pytest.raises(ConfigError):
        s.context(3, [])
