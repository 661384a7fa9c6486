"""Which memories (and memory-query pairs) a design ever made eligible, arm by arm.

A memory's utility is identified only where it had a known nonzero chance of
being exposed: under the pool arm, while it was in a round's pool and in the
store; under a window design's window arm, at the steps whose window ``W_t``
held it (:func:`cmp_bayes.log.window.window_sets`). :func:`diagnose
<cmp_bayes.diagnostics.positivity.diagnose>` reports both per memory and per
pair, and counts the live writer's cancelled steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cmp_bayes.log.pools import RoundPools
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.log.window import window_sets
from cmp_bayes.statistics.pandas_engine import lifetimes


def eligible_pool(log: ExposureLog, memory: np.ndarray, pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Whether each memory (and each pair of ``pairs``) was ever eligible under the pool arm.

    A memory is when it was in some round's pool while in the store during that
    round; a (memory, query) pair when that holds at some step of the query.
    Shapes (len(memory),) and (len(pairs),), bool.
    """
    rp = RoundPools.of(log.design) if log.design is not None else None
    if rp is None or len(rp.keys) == 0:
        return np.zeros(len(memory), dtype=bool), np.zeros(len(pairs), dtype=bool)
    n = max(len(rp.ids), 1)
    entry_round, entry_mem = rp.keys // n, rp.keys % n
    ids = rp.ids.to_numpy(zero_copy_only=False).astype(object)
    mpos = pd.Index(memory).get_indexer(ids[entry_mem])
    ok = mpos >= 0
    created, deleted = lifetimes(log, pd.Index(memory))
    m = np.maximum(mpos, 0)
    lo = np.maximum(rp.starts[entry_round], created[m])
    hi = np.minimum(rp.stops[entry_round], deleted[m])
    live = ok & (lo < hi)
    per_memory = np.zeros(len(memory), dtype=bool)
    per_memory[mpos[live]] = True
    if pairs.empty:
        return per_memory, np.zeros(0, dtype=bool)
    # per pair: some step of its query inside one of the memory's [lo, hi) spans
    steps = log.steps
    qcat = pd.Index(np.sort(pd.unique(steps["query_id"].astype(str).to_numpy())))
    qcode = qcat.get_indexer(steps["query_id"].astype(str).to_numpy())
    st = steps["step"].to_numpy(np.int64)
    width = int(st.max()) + 2 if len(st) else 1
    combined = np.sort(qcode.astype(np.int64) * width + st)
    pm = pd.Index(memory).get_indexer(pairs["memory_id"].to_numpy())
    pq_ = qcat.get_indexer(pairs["query_id"].astype(str).to_numpy())
    e_mem, e_lo, e_hi = mpos[live], np.clip(lo[live], 0, width - 1), np.clip(hi[live], 0, width - 1)
    # every (pair, span of its memory): spans sorted by memory, pairs look theirs up
    order = np.argsort(e_mem, kind="stable")
    e_mem, e_lo, e_hi = e_mem[order], e_lo[order], e_hi[order]
    first = np.searchsorted(e_mem, pm, side="left")
    count = np.searchsorted(e_mem, pm, side="right") - first
    pair_of = np.repeat(np.arange(len(pairs)), count)
    offsets = np.cumsum(count) - count
    span = np.repeat(first, count) + np.arange(int(count.sum())) - np.repeat(offsets, count)
    base = pq_[pair_of].astype(np.int64) * width
    inside = np.searchsorted(combined, base + e_hi[span]) > np.searchsorted(combined, base + e_lo[span])
    per_pair = np.zeros(len(pairs), dtype=bool)
    per_pair[pair_of[inside]] = True
    return per_memory, per_pair


def eligible_window(log: ExposureLog, memory: np.ndarray, pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Whether each memory (and each pair of ``pairs``) was ever in a step's window ``W_t``
    (:func:`cmp_bayes.log.window.window_sets`); all False outside window designs."""
    w = window_sets(log)
    if w.empty:
        return np.zeros(len(memory), dtype=bool), np.zeros(len(pairs), dtype=bool)
    ids = w["memory_id"].astype(str).to_numpy()
    per_memory = pd.Index(memory).isin(ids)
    q = log.steps.set_index("step")["query_id"].astype(str)
    wq = q.reindex(w["step"].to_numpy()).to_numpy()
    seen = pd.MultiIndex.from_arrays([ids, wq])
    key = pd.MultiIndex.from_arrays([pairs["memory_id"].astype(str).to_numpy(), pairs["query_id"].astype(str).to_numpy()])
    return np.asarray(per_memory, dtype=bool), np.asarray(key.isin(seen), dtype=bool)


def cancelled_steps(log: ExposureLog) -> int | None:
    """Lines of ``cancelled.jsonl`` beside the log (the live writer's cancelled and expired
    steps); None without one. Not a spec file: its lines are counted, never parsed."""
    src = log.source
    if src is None or not src.is_dir():
        return None
    file = src / "cancelled.jsonl"
    try:
        data = file.read_bytes()
    except OSError:
        return None
    return sum(1 for line in data.split(b"\n") if line.strip())
