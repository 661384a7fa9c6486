"""The Dask engine's sparse pair statistics (``by="pair"``): a map over ``steps/`` parts, an ordered fold.

The same Dataset as :func:`cmp_bayes.statistics.pairs.pandas_pair_stats`, bit
for bit, fractional outcomes included. :func:`cmp_bayes.scale.dask_stats.dask_exposure_stats`
builds the graph; this module holds its three kinds of task:

* **map** (:func:`pair_terms`, one task per ``steps/`` part file): the part's
  steps, their rankings, and the context rows of those steps read from every
  ``contexts/`` part whose step range (Parquet footer statistics) overlaps the
  part's, so a step whose slots straddle two contexts part files is seen whole
  (its window ``W_t`` depends on its whole context). Steps parts partition the
  steps (strictly increasing across part files, checked before this runs), so
  each step, each context row and each window membership belongs to exactly one
  map. On those steps it builds, with the pandas engine's own helpers
  (:func:`~cmp_bayes.statistics.pairs.pool_keys`,
  :func:`~cmp_bayes.log.window.window_table`,
  :func:`~cmp_bayes.statistics.pairs.window_exposed`,
  :func:`~cmp_bayes.statistics.pairs.window_terms`): the pairs that occur there
  (pool eligibility, window memberships, context rows), the counts per
  (memory, query, rank) of the rankings, per query the step count, first step
  and its group, and the terms of every floating-point sum, in step order;
* **fold** (:func:`fold_pairs`, one task per part, a chain in part order): the
  combine by pair key. Counts and rank counts add in any order. The outcome
  sums are *continued*: one ``numpy.bincount`` over the running sums followed
  by the part's terms adds each pair's terms, one at a time, onto its running
  sum in step order. That is the sequence of additions of the pandas engine's
  single ``bincount`` over all rows (its context rows are in step order, as the
  readers leave them, and a pair's rows lie in distinct steps: a memory is in
  a step's context at most once, in ``W_t`` at most once), so every sum rounds
  the same way. Partial sums added in a tree would not: floating-point
  addition is not associative, and for fractional outcomes or window weights
  ``1 / pi_t`` the results differ in the last bits. Hence a chain, not a tree;
* **end** (:func:`assemble_pair_stats`): the per-pair arrays in (memory_id,
  query_id) order, rank medians from the summed rank counts
  (:func:`~cmp_bayes.statistics.kernels.counted_median_min`: the same two middle
  ranks as the pandas engine's grouped median, so exact), and the in-store sums.

Gathered rather than reduced: the in-store sums. Per pair they are numpy's
pairwise sum of its query's outcomes (no memories file), or differences of that
query's prefix sums at its memory's created and deleted steps: both depend on
the whole sequence of the query's outcomes, so no per-part partial reproduces
them bit for bit. Each map hands on its steps' (step, query, outcome) columns
(24 bytes a step) and the end computes the sums with the pandas engine's
:func:`~cmp_bayes.statistics.pairs.pair_store_sums`.

Memory: a map holds one steps part and the context rows of its steps; a fold
the running sums (the output's size, O(pairs)) and one part's terms (a few
numbers per context row and window membership); the end the steps columns
and the output. Cost: the maps run in parallel; the folds run one after the
other, each merging its part's pair keys into the running ones (O(pairs) per
part). The log's rules are checked by the memory-level pass that runs first
(:mod:`cmp_bayes.scale.steps_map`, :mod:`cmp_bayes.scale.contexts_map`), so
the maps here assume a valid log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xarray as xr

from cmp_bayes.log.codes import encode
from cmp_bayes.log.columns import arrow_list_to_long, steps_frame
from cmp_bayes.log.design import is_window
from cmp_bayes.log.pools import RoundPools
from cmp_bayes.log.window import Store, filled_before_window, window_table
from cmp_bayes.scale.parts import EMPTY, Lifetimes, Part, read_part
from cmp_bayes.statistics.dataset import (
    WINDOW_COUNT_VARS,
    WINDOW_SUM_VARS,
    assemble_pairs,
    stats_arrays,
)
from cmp_bayes.statistics.kernels import (
    ARMS,
    NEVER,
    arrow_strings,
    counted_median_min,
    positions,
    row_outcomes,
    slot_arm,
    sorted_unique,
)
from cmp_bayes.statistics.pairs import pair_store_sums, pool_keys, window_exposed, window_terms

#: the context arms' counts per pair (int64) and their outcome sums (float64)
ARM_COUNTS: tuple[str, ...] = tuple(f"{a}_n" for a in ARMS)
ARM_SUMS: tuple[str, ...] = tuple(f"{a}_{s}" for a in ARMS for s in ("sum", "sumsq"))
_NO_INT = np.zeros(0, np.int64)


@dataclass(frozen=True)
class MemoryIndex:
    """The log's memories as every map sees them (one shared input of the graph).

    Attributes
    ----------
    memory : pyarrow.Array, shape (M,)
        The sorted memory ids: the memory-level statistics' index.
    created, deleted : numpy.ndarray, shape (M,), int64
        Lifetimes ``[created, deleted)``; without a memories file int64 min and
        int64 max (always in the store), as the pandas engine sets them.
    lifetimes : bool
        Whether the log has a memories file.
    """

    memory: pa.Array
    created: np.ndarray
    deleted: np.ndarray
    lifetimes: bool

    @classmethod
    def of(cls, memory: pa.Array, life: Lifetimes | None) -> MemoryIndex:
        """The index over ``memory`` (the Dataset's sorted ids) with ``life``'s lifetimes (None: none)."""
        if life is not None:
            # read_lifetimes sorts the memories file: its order is the memory index itself
            return cls(memory, life.created, life.deleted, True)
        m = len(memory)
        return cls(memory, np.full(m, np.iinfo(np.int64).min, np.int64), np.full(m, NEVER, np.int64), False)

    def store(self) -> Store:
        """Which memories are in the store when (every one, always, without a memories file)."""
        if self.lifetimes:
            return Store(self.memory, self.created, self.deleted)
        return Store(None, None, None)


@dataclass(frozen=True)
class PartSteps:
    """One steps part's (step, query, outcome) columns, for the in-store sums (shape (S_p,) each)."""

    step: np.ndarray  # int64, increasing
    queries: pa.Array  # (Q_p,) large_string: the part's distinct queries
    query: np.ndarray  # int64 positions into queries
    outcome: np.ndarray  # float64


@dataclass
class PairTerms:
    """One steps part's pairs and the terms of their sums, in step order (a map's output).

    Pairs are (memory position, position into ``queries``), distinct; ``ctx_*``
    are the part's context rows of known memories (shape (n,)), ``win_*`` its
    window memberships (shape (w,)), ``rank_*`` its rankings as counts per
    (memory, query, rank) (shape (r,)).
    """

    queries: pa.Array = field(default_factory=lambda: EMPTY)
    query_steps: np.ndarray = field(default_factory=lambda: _NO_INT)  # (Q_p,) int64
    query_first: np.ndarray = field(default_factory=lambda: _NO_INT)  # (Q_p,) int64: first step
    query_group: np.ndarray = field(default_factory=lambda: np.zeros(0, object))  # (Q_p,) str there
    pair_m: np.ndarray = field(default_factory=lambda: _NO_INT)  # (K,) int64
    pair_q: np.ndarray = field(default_factory=lambda: _NO_INT)  # (K,) int64
    ctx_pair: np.ndarray = field(default_factory=lambda: _NO_INT)  # (n,) int64 into the pairs
    ctx_arm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # (n,) slot_arm
    ctx_stored: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (n,) in the store then
    ctx_y: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (n,) the step's outcome
    win_pair: np.ndarray = field(default_factory=lambda: _NO_INT)  # (w,) int64 into the pairs
    win_pi: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (w,) pi_t
    win_y: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (w,)
    win_exposed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (w,)
    rank_m: np.ndarray = field(default_factory=lambda: _NO_INT)
    rank_q: np.ndarray = field(default_factory=lambda: _NO_INT)
    rank: np.ndarray = field(default_factory=lambda: _NO_INT)
    rank_count: np.ndarray = field(default_factory=lambda: _NO_INT)


@dataclass
class PairSums:
    """The fold's running result over the parts so far: per pair (shape (K,)), sorted by
    ``pair_m * max(Q, 1) + pair_q``; per query (shape (Q,)); rank counts (shape (r,))."""

    queries: pa.Array
    query_steps: np.ndarray
    query_first: np.ndarray
    query_group: np.ndarray
    pair_m: np.ndarray
    pair_q: np.ndarray
    counts: dict[str, np.ndarray]  # ARM_COUNTS + WINDOW_COUNT_VARS -> int64
    sums: dict[str, np.ndarray]  # ARM_SUMS + WINDOW_SUM_VARS -> float64
    rank_m: np.ndarray
    rank_q: np.ndarray
    rank: np.ndarray
    rank_count: np.ndarray


def _empty_sums() -> PairSums:
    t = PairTerms()
    return PairSums(
        t.queries, t.query_steps, t.query_first, t.query_group, t.pair_m, t.pair_q,
        {c: _NO_INT for c in ARM_COUNTS + WINDOW_COUNT_VARS}, {s: np.zeros(0) for s in ARM_SUMS + WINDOW_SUM_VARS},
        t.rank_m, t.rank_q, t.rank, t.rank_count,
    )


def _distinct(keys: np.ndarray) -> np.ndarray:
    """The sorted distinct values of int64 ``keys``, shape (<= len(keys),).

    A stable sort (timsort: the fold's keys are two sorted runs) and a comparison of
    neighbours; ``numpy.unique`` hashes int keys first, several times slower here.
    """
    k = np.sort(keys, kind="stable")
    return k[np.r_[True, k[1:] != k[:-1]]] if len(k) else k


# --------------------------------------------------------------------------- map


def _strings(col: pa.ChunkedArray | None, n: int) -> pa.Array:
    """A string column (plain or dictionary, or absent: all null) as one large_string array."""
    if col is None or pa.types.is_null(col.type):
        return pa.nulls(n, pa.large_string())
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr.cast(pa.large_string())


def contexts_of_steps(contexts: list[Part], lo: int, hi: int) -> tuple[np.ndarray, pa.Array, pa.Array, pa.Array]:
    """``step`` (int64), ``memory_id``, ``source`` and ``arm`` (large_string) of every context row
    with a step in [lo, hi], from every part whose step range overlaps, stably sorted by step
    (part-file order within a step, as the reader concatenates them)."""
    steps: list[np.ndarray] = []
    mem: list[pa.Array] = []
    src: list[pa.Array] = []
    arm: list[pa.Array] = []
    for p in contexts:
        if p.lo is not None and p.hi is not None and (p.hi < lo or p.lo > hi):  # set together
            continue
        names = pq.ParquetFile(p.file).schema_arrow.names
        cols = [c for c in ("step", "memory_id", "source", "arm") if c in names]
        t = read_part(p.file, cols, filters=[("step", ">=", lo), ("step", "<=", hi)])
        n = t.num_rows
        steps.append(t["step"].to_numpy().astype(np.int64))
        for out, name in ((mem, "memory_id"), (src, "source"), (arm, "arm")):
            out.append(_strings(t[name] if name in t.column_names else None, n))
    if not steps:
        return _NO_INT, EMPTY, EMPTY, EMPTY
    step = np.concatenate(steps)
    order = pa.array(np.argsort(step, kind="stable"))
    return (step[order.to_numpy()], *(pa.concat_arrays(a).take(order) for a in (mem, src, arm)))


def pair_terms(
    file: str, contexts: list[Part], index: MemoryIndex, design: dict[str, Any] | None, pool: RoundPools
) -> tuple[PairTerms, PartSteps]:
    """One steps part's pairs and terms (see the module docstring) and its steps' columns.

    Parameters
    ----------
    file : str
        The steps part file.
    contexts : list of Part
        Every contexts part file with its step range.
    index : MemoryIndex
        The memories (the memory-level statistics' index) and their lifetimes.
    design : dict or None
        The checked design; ``pool``: its rounds' pools.
    """
    names = pq.ParquetFile(file).schema_arrow.names
    table = read_part(file, [c for c in ("step", "query_id", "outcome", "group", "ranking") if c in names])
    steps = steps_frame(table)
    sv = steps["step"].to_numpy(np.int64)
    outcome = steps["outcome"].to_numpy(np.float64)
    if len(sv) == 0:
        return PairTerms(), PartSteps(sv, EMPTY, _NO_INT, outcome)
    q = encode(steps["query_id"])
    # the part's own queries, distinct and used (a dictionary may hold more), and the first step of each
    used, first_row, cell = np.unique(q.indices, return_index=True, return_inverse=True)
    queries = q.dictionary.take(pa.array(used)).cast(pa.large_string())
    cell = cell.astype(np.int64)
    nq = max(len(queries), 1)
    memory = index.memory

    ctx_step, ctx_mem, ctx_src, ctx_arm_col = contexts_of_steps(contexts, int(sv[0]), int(sv[-1]))
    mem = encode(ctx_mem)
    row_m = mem.lookup(positions(mem.dictionary, memory), -1)
    arm_codes = encode(ctx_arm_col)
    src = encode(ctx_src)
    y, cell_row = row_outcomes(ctx_step, sv, outcome, cell)
    known = row_m >= 0  # rows naming no memory of the index are counted apart (n_unknown_context_rows)
    rm = row_m[known]
    row_key = rm * nq + cell_row[known]
    stored = (index.created[rm] <= ctx_step[known]) & (ctx_step[known] < index.deleted[rm])

    rk = None  # the rankings in long form (step, rank, memory_id); None without any
    rk_type = table["ranking"].type if "ranking" in table.column_names else None
    if rk_type is not None and (pa.types.is_list(rk_type) or pa.types.is_large_list(rk_type)):
        rk = arrow_list_to_long(table["ranking"], sv)
        rk = rk if len(rk) else None

    # window memberships of these steps: W_t from each step's whole context and its ranking
    w_m = w_pos = w_key = _NO_INT
    w_pi = np.zeros(0)
    if is_window(design) and rk is not None:
        before = filled_before_window(pd.DataFrame(index=pd.RangeIndex(len(ctx_step))), src, arm_codes)
        w_step, w_ids, w_pi = window_table(
            design, ctx_step, ctx_mem, before, rk["step"].to_numpy(np.int64), rk["rank"].to_numpy(np.int64),
            arrow_strings(rk["memory_id"]), index.store(),
        )
        if len(w_step):
            w_m = positions(w_ids, memory)
            w_pos = np.searchsorted(sv, w_step)
            w_key = w_m * nq + cell[w_pos]
    w_exposed = window_exposed(arm_codes, ctx_step, sv, row_m, w_pos, w_m, len(memory))

    keys = _distinct(np.concatenate([
        row_key, w_key, pool_keys(pool, memory, sv, cell, nq, index.created, index.deleted),
    ]))
    out = PairTerms(
        queries=queries,
        query_steps=np.bincount(cell, minlength=len(queries)).astype(np.int64),
        query_first=sv[first_row],
        query_group=np.asarray(
            arrow_strings(steps["group"]).take(pa.array(first_row)).fill_null("").to_numpy(zero_copy_only=False),
            dtype=object,
        ),
        pair_m=keys // nq,
        pair_q=keys % nq,
        ctx_pair=np.searchsorted(keys, row_key),
        ctx_arm=slot_arm(src, arm_codes)[known],
        ctx_stored=stored,
        ctx_y=y[known],
        win_pair=np.searchsorted(keys, w_key),
        win_pi=w_pi,
        win_y=outcome[w_pos],
        win_exposed=w_exposed,
    )
    if rk is not None:
        _rank_counts(out, rk, memory, sv, cell, nq)
    return out, PartSteps(sv, queries, cell, outcome)


def _rank_counts(
    out: PairTerms, rk: pd.DataFrame, memory: pa.Array, sv: np.ndarray, cell: np.ndarray, nq: int
) -> None:
    """Fill ``out.rank_*``: the rankings (long form) as counts per (memory, query, rank).

    The reader has rejected a ranking that lists a memory twice; entries naming a memory
    outside the index (a null) are dropped, as in the pandas engine's ``ranking_entries``.
    """
    codes = encode(rk["memory_id"])
    rm = codes.lookup(positions(codes.dictionary, memory), -1)
    keep = rm >= 0
    if not keep.any():
        return
    rank = rk["rank"].to_numpy(np.int64)[keep]
    rq = cell[np.searchsorted(sv, rk["step"].to_numpy(np.int64)[keep])]
    width = int(rank.max()) + 1
    uniq, count = np.unique((rm[keep] * nq + rq) * width + rank, return_counts=True)
    out.rank_m, out.rank_q, out.rank = uniq // width // nq, uniq // width % nq, uniq % width
    out.rank_count = count.astype(np.int64)


# --------------------------------------------------------------------------- fold


def _continued(running: np.ndarray, at: np.ndarray, idx: np.ndarray, terms: np.ndarray, n: int) -> np.ndarray:
    """The running sums (moved to positions ``at`` among ``n``) with ``terms`` added at ``idx``, in order.

    One ``bincount`` whose first inputs are the running sums themselves (``0.0 + s`` is
    ``s``) and then the terms: each sum takes its new terms one at a time, in order.
    """
    out = np.bincount(np.concatenate([at, idx]), weights=np.concatenate([running, terms]), minlength=n)
    return out.astype(np.float64, copy=False)  # numpy gives int64 when there is no term at all


def _counted(running: np.ndarray, at: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    """The running counts (moved to positions ``at`` among ``n``) plus the rows at ``idx``, int64."""
    out = np.bincount(idx, minlength=n).astype(np.int64)
    out[at] += running
    return out


def fold_pairs(acc: PairSums | None, part: PairTerms) -> PairSums:
    """``acc`` (the parts before ``part``, in step order; None: none) with ``part`` added."""
    acc = acc if acc is not None else _empty_sums()
    queries = pc.unique(pa.concat_arrays([acc.queries, part.queries]))
    aq, pq_ = positions(acc.queries, queries), positions(part.queries, queries)
    nq = max(len(queries), 1)
    a_key = acc.pair_m * nq + aq[acc.pair_q] if len(acc.pair_q) else _NO_INT
    p_key = part.pair_m * nq + pq_[part.pair_q] if len(part.pair_q) else _NO_INT
    keys = _distinct(np.concatenate([a_key, p_key]))
    n = len(keys)
    at_a, at_p = np.searchsorted(keys, a_key), np.searchsorted(keys, p_key)
    row, win = at_p[part.ctx_pair], at_p[part.win_pair]

    # the context arms: retriever slots, exposure slots (window slots in neither), rows in the store
    arm_rows = {"retrieved": part.ctx_arm == 0, "exposed": part.ctx_arm == 1, "in_context": part.ctx_stored}
    counts: dict[str, np.ndarray] = {}
    sums: dict[str, np.ndarray] = {}
    for a, mask in arm_rows.items():
        counts[f"{a}_n"] = _counted(acc.counts[f"{a}_n"], at_a, row[mask], n)
        yi = part.ctx_y[mask]
        # y * y: the pandas engine's sum of squares term (for 0/1 outcomes it is y, bit for bit)
        for suffix, terms in (("sum", yi), ("sumsq", yi * yi)):
            sums[f"{a}_{suffix}"] = _continued(acc.sums[f"{a}_{suffix}"], at_a, row[mask], terms, n)
    w_counts, w_sums = window_terms(part.win_pi, part.win_y, part.win_exposed)
    for name, mask in w_counts.items():
        counts[name] = _counted(acc.counts[name], at_a, win[mask], n)
    for name, (mask, terms) in w_sums.items():
        sums[name] = _continued(acc.sums[name], at_a, win[mask], terms, n)

    query_steps = np.zeros(len(queries), np.int64)
    query_first = np.full(len(queries), NEVER, np.int64)
    query_group = np.full(len(queries), "", dtype=object)
    for p, at in ((acc, aq), (part, pq_)):
        query_steps[at] += p.query_steps
        earlier = p.query_first < query_first[at]  # a query's group is the one at its first step
        query_first[at[earlier]] = p.query_first[earlier]
        query_group[at[earlier]] = p.query_group[earlier]

    rank_m = np.concatenate([acc.rank_m, part.rank_m])
    rank_q = np.concatenate([aq[acc.rank_q], pq_[part.rank_q]]).astype(np.int64)
    rank = np.concatenate([acc.rank, part.rank])
    rank_count = np.concatenate([acc.rank_count, part.rank_count])
    if len(rank):
        width = int(rank.max()) + 1
        uniq, inv = np.unique((rank_m * nq + rank_q) * width + rank, return_inverse=True)
        rank_count = np.bincount(inv, weights=rank_count, minlength=len(uniq)).astype(np.int64)
        rank_m, rank_q, rank = uniq // width // nq, uniq // width % nq, uniq % width
    return PairSums(
        queries, query_steps, query_first, query_group, keys // nq, keys % nq, counts, sums,
        rank_m, rank_q, rank, rank_count,
    )


# --------------------------------------------------------------------------- end


def assemble_pair_stats(acc: PairSums | None, steps: list[PartSteps], base: xr.Dataset, index: MemoryIndex) -> xr.Dataset:
    """The pair Dataset from the fold's result, every part's steps (in part order) and the
    memory-level statistics ``base`` of the same log (its propensities and attributes).

    Returns
    -------
    xarray.Dataset
        :func:`cmp_bayes.statistics.exposure_stats` (``by="pair"``).
    """
    acc = acc if acc is not None else _empty_sums()
    cells = sorted_unique(acc.queries)
    nq = max(len(cells), 1)
    qpos = positions(acc.queries, cells)
    key = acc.pair_m * nq + qpos[acc.pair_q] if len(acc.pair_q) else _NO_INT
    order = np.argsort(key, kind="stable")
    keys = key[order]
    pair_m, pair_q = keys // nq, keys % nq
    n = len(keys)

    step_vals = np.concatenate([s.step for s in steps]) if steps else _NO_INT
    outcome = np.concatenate([s.outcome for s in steps]) if steps else np.zeros(0)
    cell_of_step = (np.concatenate([positions(s.queries, cells)[s.query] if len(s.query) else _NO_INT
                                    for s in steps]) if steps else _NO_INT)
    in_store, store_sum, store_sumsq = pair_store_sums(
        step_vals, outcome, cell_of_step, nq, pair_q,
        (index.created[pair_m], index.deleted[pair_m]) if index.lifetimes else None,
    )

    # rankings of other pairs are dropped, as in the pandas engine
    r_key = acc.rank_m * nq + qpos[acc.rank_q] if len(acc.rank_q) else _NO_INT
    at = np.minimum(np.searchsorted(keys, r_key), max(n - 1, 0))
    hit = keys[at] == r_key if n else np.zeros(len(r_key), dtype=bool)
    ranked, median, best = counted_median_min(at[hit], acc.rank[hit], acc.rank_count[hit], n)

    arms = {name: acc.counts[name][order] for name in ARM_COUNTS} | {name: acc.sums[name][order] for name in ARM_SUMS}
    data = stats_arrays(in_store, store_sum, store_sumsq, arms, ranked, median, best)
    data.update({name: acc.counts[name][order] for name in WINDOW_COUNT_VARS})
    data.update({name: acc.sums[name][order] for name in WINDOW_SUM_VARS})

    query_group = np.empty(len(cells), dtype=object)
    query_steps = np.zeros(len(cells), dtype=np.int64)
    query_group[qpos] = acc.query_group
    query_steps[qpos] = acc.query_steps
    cell_ids = np.asarray(cells.to_numpy(zero_copy_only=False), dtype=object)
    memory = np.asarray(base["memory"].to_numpy(), dtype=object)
    return assemble_pairs(
        data,
        memory_id=memory[pair_m],
        query_id=cell_ids[pair_q],
        query_group=query_group[pair_q],
        query_steps=query_steps[pair_q],
        propensity=base["propensity"].to_numpy()[pair_m],
        in_pool=base["in_pool"].to_numpy()[pair_m],
        attrs=dict(base.attrs),
    )
