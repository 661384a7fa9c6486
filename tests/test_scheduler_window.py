"""ExposureScheduler window designs (spec, "Targeted exposure"), and random slot positions."""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter

import numpy as np
import pytest

from cmp_bayes.design.scheduler import ExposureScheduler, ExposureShortfallWarning
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.design import check_design, pool_at


def _ids(n: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def _window_of(ctx: list[dict], ranking: list[str], cut: int, W: int, store: set[str]) -> list[str]:
    """W_t recomputed from the spec's rule 3, independently of the scheduler's code."""
    before = {c["memory_id"] for c in ctx if c["source"] == "retriever" or c.get("arm") == "pool"}
    out: list[str] = []
    for m in ranking[cut : cut + W]:
        if m in store and m not in before and m not in out:
            out.append(m)
    return out


@pytest.mark.parametrize("rounds", [False, True])
@pytest.mark.parametrize("j", [0, 1, 2])
def test_window_slots_follow_the_four_rules(j: int, rounds: bool) -> None:
    B, k, W = 6, 3, 5
    cut = B - k
    memories = _ids(30)
    pool = memories[:12] if j else []
    kw = {"round_steps": 40} if rounds else {}
    s = ExposureScheduler(B, k, pool, None if rounds else 120, "window", seed=3, window=W, pool_slots=j, **kw)
    rng = np.random.default_rng(1)
    for t in range(120):
        store = set(memories) - set(rng.choice(memories, size=4, replace=False).tolist())
        ranking = [m for m in rng.permutation(memories).tolist() if m in store]
        ctx = s.context(t, ranking, store)
        assert [c["memory_id"] for c in ctx if c["source"] == "retriever"] == ranking[:cut]
        exp = [c for c in ctx if c["source"] == "exposure"]
        assert all(c["arm"] in ("pool", "window") for c in exp)
        pooled = [c for c in exp if c["arm"] == "pool"]
        win = [c for c in exp if c["arm"] == "window"]
        assert len(pooled) <= j
        for c in pooled:
            assert c["propensity"] == pool_at(s.design(), t)[c["memory_id"]]
        wt = _window_of(ctx, ranking, cut, W, store)
        assert len(win) == min(k - j, len(wt))
        assert {c["memory_id"] for c in win} <= set(wt)
        for c in win:
            assert c["propensity"] == min(1.0, (k - j) / len(wt))
        assert len({c["memory_id"] for c in ctx}) == len(ctx)
    d = json.loads(json.dumps(s.design()))
    assert d["assignment"] == "window" and d["window"] == W and d["pool_slots"] == j
    checked = check_design(d, "design.json")
    if rounds:
        assert all((r["pool"] == {}) == (j == 0) for r in checked["rounds"])
    else:
        assert (checked["pool"] == {}) == (j == 0)


def test_window_exposure_frequency_equals_its_propensity() -> None:
    # k - j = 2 window slots over W = 8 ranks, one pool slot: every member of W_t is exposed
    # with probability 2 / |W_t| given the step's history, so a member's exposure count minus
    # the sum of its propensities over the steps it was in W_t is a martingale with variance
    # sum p (1 - p): |count - sum p| < 4 sqrt(sum p (1 - p)) fails with probability < 1e-4 per member
    B, k, j, W = 5, 3, 1, 8
    memories = _ids(20)
    s = ExposureScheduler(B, k, memories[:10], 3000, "window", seed=9, window=W, pool_slots=j)
    rng = np.random.default_rng(5)
    count: Counter[str] = Counter()
    expected: Counter[str] = Counter()
    var: Counter[str] = Counter()
    for t in range(3000):
        ranking = memories if t % 2 else rng.permutation(memories).tolist()
        ctx = s.context(t, ranking)
        wt = _window_of(ctx, ranking, B - k, W, set(memories))
        p = min(1.0, (k - j) / len(wt))
        for m in wt:
            expected[m] += p
            var[m] += p * (1 - p)
        count.update(c["memory_id"] for c in ctx if c.get("arm") == "window")
    assert set(count) <= set(expected)
    for m in expected:
        assert abs(count[m] - expected[m]) < 4 * math.sqrt(var[m]), m


def test_small_window_exposes_every_member_with_propensity_one() -> None:
    s = ExposureScheduler(4, 3, [], 10, "window", seed=0, window=2, pool_slots=0)
    ctx = s.context(0, ["a", "b", "c", "d"])
    assert [c["memory_id"] for c in ctx] == ["a", "b", "c"]
    assert [(c["propensity"], c["arm"]) for c in ctx[1:]] == [(1.0, "window")] * 2


def test_window_leaves_out_memories_outside_the_store() -> None:
    s = ExposureScheduler(3, 1, [], None, "window", seed=0, window=3, round_steps=10)
    s.remove_memory("b", 0)
    ctx = s.context(0, ["top", "a", "b", "c", "d"])
    win = [c for c in ctx if c["source"] == "exposure"]
    # retriever: top, a; ranks 2..4 are b (removed), c, d
    assert len(win) == 1 and win[0]["memory_id"] in {"c", "d"} and win[0]["propensity"] == 0.5
    ctx = s.context(1, ["top", "a", "b", "c", "d"], store={"top", "a", "b", "d"})  # the store decides; b stays removed
    assert [c["memory_id"] for c in ctx if c["source"] == "exposure"] == ["d"]
    assert ctx[-1]["propensity"] == 1.0


def test_window_needs_the_full_ranking() -> None:
    s = ExposureScheduler(4, 2, [], 10, "window", seed=0, window=5)
    with pytest.raises(ConfigError, match="ranking"):
        s.context(0, ["a", "b", "c"], store={f"m{i}" for i in range(20)})
    with pytest.raises(ConfigError):
        ExposureScheduler(4, 2, ["a"], 10, "window", window=0)
    with pytest.raises(ConfigError):
        ExposureScheduler(4, 2, ["a"], 10, "window", window=3, pool_slots=3)
    with pytest.raises(ConfigError):
        ExposureScheduler(4, 2, ["a"], 10, window=3)  # window without assignment="window"
    with pytest.raises(ConfigError):
        ExposureScheduler(4, 2, [], 10, "window", window=3, pool_slots=1)  # pool slots need a pool
    with pytest.raises(ConfigError):
        ExposureScheduler(4, 2, ["a", "b"], 10, "window", window=3).deal()


def test_no_arm_outside_window_designs() -> None:
    s = ExposureScheduler(4, 2, _ids(6), 20, seed=0)
    for t in range(20):
        assert all("arm" not in c for c in s.context(t, ["x"]))


def test_random_positions_are_uniform() -> None:
    # every slot of a full context (B = 5) is a window / pool / retriever slot; under "random"
    # each exposure slot's position is uniform, so the number of steps at which position i holds
    # the pool slot is Binomial(N, 1/B) and the number at which it holds an exposure slot
    # Binomial(N, k/B): each within 4 binomial standard errors
    B, k, N = 5, 2, 4000
    memories = _ids(20)
    s = ExposureScheduler(B, k, memories[:8], N, "window", seed=2, window=6, pool_slots=1, positions="random")
    rng = np.random.default_rng(0)
    pool_at_pos = np.zeros(B, dtype=np.int64)
    exp_at_pos = np.zeros(B, dtype=np.int64)
    for t in range(N):
        ranking = rng.permutation(memories).tolist()
        ctx = s.context(t, ranking)
        assert len(ctx) == B
        ranks = [c["rank"] for c in ctx if c["source"] == "retriever"]
        assert ranks == sorted(ranks) == list(range(B - k))  # retriever slots keep their order
        for i, c in enumerate(ctx):
            if c["source"] == "exposure":
                exp_at_pos[i] += 1
                pool_at_pos[i] += c["arm"] == "pool"
    for counts, p in ((pool_at_pos, 1 / B), (exp_at_pos, k / B)):
        assert np.all(np.abs(counts - N * p) < 4 * math.sqrt(N * p * (1 - p))), counts


def test_end_positions_put_exposures_last() -> None:
    s = ExposureScheduler(5, 2, _ids(6), 10, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExposureShortfallWarning)
        for t in range(10):
            ctx = s.context(t, ["x", "y", "z"])
            assert [c["source"] for c in ctx] == ["retriever"] * 3 + ["exposure"] * 2
    with pytest.raises(ConfigError):
        ExposureScheduler(5, 2, _ids(6), 10, positions="middle")


def test_all_slots_exposure_slots_leave_no_retriever_slot() -> None:
    # k == B: the context holds k exposure slots and nothing from the ranking
    # (the scheduler before the window designs put the whole ranking in front of them)
    s = ExposureScheduler(2, 2, _ids(4), 10, seed=0)
    for t in range(10):
        ctx = s.context(t, ["x", "y", "z"])
        assert [c["source"] for c in ctx] == ["exposure", "exposure"]
    w = ExposureScheduler(3, 3, [], 5, "window", seed=0, window=2)
    assert [c["memory_id"] for c in w.context(0, ["a", "b", "c"])] == ["a", "b"]
