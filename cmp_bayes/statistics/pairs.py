"""Sparse pair statistics: ``exposure_stats(log, by="pair")`` with the pandas engine.

The dense ``by="query"`` statistics hold every (memory, query) cell: memory x
query arrays, too large for a LongMemEval-sized store or a real user's store.
Here a pair exists only where the design or the context touched it: the
memory was eligible for the query (in some round's pool while in the store at
a step of that query, or in the window ``W_t`` of such a step) or was in a
context at a step of it. Per pair the Dataset holds the dense statistics'
variables (the same numbers, bit for bit, as the dense cell) and the window
arm (:data:`cmp_bayes.statistics.dataset.WINDOW_COUNT_VARS`,
:data:`~cmp_bayes.statistics.dataset.WINDOW_SUM_VARS`).

Cost: every table is touched once, in whole columns; pairs are int64 keys
``memory position * Q + query position``, sorted and searched, so no array of
size memory x query is ever built. The one place that could grow like that is
the pool arm's eligibility (a pool memory in the store for a span of steps is
eligible for every query asked in that span); it costs ``min(span length, Q)``
per (round, pool memory) and its output is part of the answer.

Exactness against the dense statistics: context-row sums are ``bincount``\\ s in
row order (as there), in-store sums are the same per-query prefix sums (or
whole sums without lifetimes), ranks go through the same grouped median.

The Dask engine (:mod:`cmp_bayes.scale.pairs_map`) builds its pairs with the
helpers here (:func:`pool_keys`, :func:`window_exposed`, :func:`window_terms`,
:func:`pair_store_sums`), so both engines make the same keys and the same terms.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xarray as xr

from cmp_bayes.log.codes import Codes, encode
from cmp_bayes.log.design import pool_lookup, union_pool, varying_propensity
from cmp_bayes.log.pools import RoundPools
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.log.validate import WINDOW_ARM
from cmp_bayes.log.window import window_sets
from cmp_bayes.statistics.dataset import assemble_pairs, stats_arrays
from cmp_bayes.statistics.kernels import (
    arm_sums,
    arrow_strings,
    grouped_median_min,
    is_binary,
    positions,
    row_outcomes,
    slot_arm,
)
from cmp_bayes.statistics.pandas_engine import _cells, lifetimes, ranking_entries

#: at most this many (span, query) checks at once in the pool arm's eligibility
_CHUNK: int = 1 << 20


def pandas_pair_stats(log: ExposureLog) -> xr.Dataset:
    """The sparse pair statistics of ``log`` (read into memory).

    Returns
    -------
    xarray.Dataset
        See :func:`cmp_bayes.statistics.exposure_stats` (``by="pair"``).
    """
    steps = log.steps
    step_vals = steps["step"].to_numpy(np.int64)
    outcome = steps["outcome"].to_numpy(np.float64)
    binary = is_binary(outcome)
    cells, cell_of_step = _cells(log, "query")
    nq = max(len(cells), 1)
    memory = log.memory_ids()
    memory_arr = arrow_strings(memory)
    has_lifetimes = log.memories is not None
    created, deleted = lifetimes(log, memory)

    # context rows: their memory's position (-1: outside the memories file, or a null id)
    ctx = log.contexts
    mem = encode(ctx["memory_id"])
    ctx_step = ctx["step"].to_numpy(np.int64)
    y, cell_row = row_outcomes(ctx_step, step_vals, outcome, cell_of_step)
    ctx_arm = encode(ctx["arm"]) if "arm" in ctx.columns else None
    arm = slot_arm(encode(ctx["source"]), ctx_arm)
    row_m = mem.lookup(positions(mem.dictionary, memory_arr), -1)
    known = row_m >= 0
    n_unknown = int((~known).sum())
    row_key = row_m[known] * nq + cell_row[known]

    # window memberships: (step, memory, pi_t) and whether the memory filled a window slot
    win = window_sets(log)
    w_m = positions(arrow_strings(win["memory_id"]), memory_arr) if len(win) else np.zeros(0, np.int64)
    w_pos = np.searchsorted(step_vals, win["step"].to_numpy(np.int64))
    w_key = w_m * nq + cell_of_step[w_pos] if len(win) else np.zeros(0, np.int64)
    w_exposed = window_exposed(ctx_arm, ctx_step, step_vals, row_m, w_pos, w_m, len(memory))

    rp = RoundPools.of(log.design) if log.design is not None else None
    keys = np.unique(np.concatenate([
        row_key, w_key, pool_keys(rp, memory_arr, step_vals, cell_of_step, nq, created, deleted),
    ]))
    pair_m, pair_q = keys // nq, keys % nq
    n_pairs = len(keys)

    stored = None
    if has_lifetimes:
        rm = row_m[known]
        stored = (created[rm] <= ctx_step[known]) & (ctx_step[known] < deleted[rm])
    arms = arm_sums(np.searchsorted(keys, row_key), n_pairs, y[known], arm[known], stored, binary)
    in_store, store_sum, store_sumsq = pair_store_sums(
        step_vals, outcome, cell_of_step, nq, pair_q,
        (created[pair_m], deleted[pair_m]) if has_lifetimes else None,
    )
    data = stats_arrays(in_store, store_sum, store_sumsq, arms, *_pair_ranks(log, memory_arr, step_vals,
                                                                             cell_of_step, nq, keys))
    data.update(_window_arm(np.searchsorted(keys, w_key), n_pairs, win["propensity"].to_numpy(np.float64),
                            outcome[w_pos], w_exposed))

    first = steps.drop_duplicates("query_id", keep="first")
    group_of = dict(zip(first["query_id"].astype(str), first["group"].astype("string").fillna("").astype(str),
                        strict=True))
    query_group = np.array([group_of[q] for q in cells], dtype=object)
    query_steps = np.bincount(cell_of_step, minlength=len(cells)).astype(np.int64)
    pool = union_pool(log.design)
    prop = pool_lookup(pool, memory_arr) if len(memory) else np.zeros(0)
    in_pool = ~np.isnan(prop)
    varying = varying_propensity(log.design)
    if varying:
        prop = np.where(np.isin(np.asarray(memory, dtype=object), sorted(varying)), np.nan, prop)
    cell_ids = np.asarray(cells, dtype=object)
    return assemble_pairs(
        data,
        memory_id=np.asarray(memory, dtype=object)[pair_m],
        query_id=cell_ids[pair_q] if len(cells) else np.zeros(0, dtype=object),
        query_group=query_group[pair_q] if len(cells) else np.zeros(0, dtype=object),
        query_steps=query_steps[pair_q] if len(cells) else np.zeros(0, dtype=np.int64),
        propensity=prop[pair_m],
        in_pool=in_pool[pair_m],
        attrs={
            "n_steps": int(len(steps)),
            "outcome_kind": "binary" if binary else "fractional",
            "log_checksum": log.checksum or "",
            "n_unknown_context_rows": n_unknown,
        },
    )


def window_exposed(
    arm: Codes | None, ctx_step: np.ndarray, step_vals: np.ndarray, row_m: np.ndarray,
    w_pos: np.ndarray, w_m: np.ndarray, n_memory: int,
) -> np.ndarray:
    """Whether each window membership ``(w_pos, w_m)`` was exposed: its memory is in a window
    slot at that step (a member of ``W_t`` is in no retriever or pool slot), shape (len(w_m),).

    ``arm``: the codes of the context rows' ``arm`` column (None without one); ``ctx_step``
    and ``row_m`` (memory position, -1 unknown): shape (n,); ``w_pos``: positions into
    ``step_vals`` (the sorted steps these rows and memberships belong to).
    """
    if len(w_m) == 0 or arm is None:
        return np.zeros(len(w_m), dtype=bool)
    rows = np.flatnonzero((arm.indices == arm.code_of(WINDOW_ARM)) & (row_m >= 0))
    width = np.int64(max(n_memory, 1))
    slot_key = np.searchsorted(step_vals, ctx_step[rows]) * width + row_m[rows]
    return np.isin(w_pos * width + w_m, slot_key)


def window_terms(
    pi: np.ndarray, y: np.ndarray, exposed: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The window arm's terms per membership, before they are summed per pair.

    Parameters
    ----------
    pi, y, exposed : numpy.ndarray, shape (n,)
        Each window membership's propensity ``pi_t``, its step's outcome and
        whether the memory filled a window slot.

    Returns
    -------
    tuple of dict
        ``counts``: variable of :data:`~cmp_bayes.statistics.dataset.WINDOW_COUNT_VARS`
        -> the memberships it counts, bool (n,); ``sums``: variable of
        :data:`~cmp_bayes.statistics.dataset.WINDOW_SUM_VARS` -> (the memberships
        it adds, bool (n,); their terms, float64 (mask.sum(),)), units in
        statistics/dataset.py. Elementwise arithmetic only, so a membership's
        terms do not depend on which others are computed with it (both engines
        sum the same terms).
    """
    certain = pi >= 1.0
    counts = {
        "window_eligible": np.ones(len(pi), dtype=bool),
        "window_exposed": exposed,
        "window_control": ~exposed,
        "window_certain": certain,
    }
    sums: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, mask, w in (
        ("exposed", exposed & ~certain, 1.0 / pi),
        ("control", ~exposed, 1.0 / (1.0 - np.where(certain, 0.0, pi))),
    ):
        wi, yi = w[mask], y[mask]
        ww = wi * wi
        for suffix, weights in (("w", wi), ("wy", wi * yi), ("ww", ww), ("www", ww * wi), ("wwy", ww * yi),
                                ("wwyy", ww * yi * yi)):
            sums[f"window_{name}_{suffix}"] = (mask, weights)
    return counts, sums


def _window_arm(
    idx: np.ndarray, n_pairs: int, pi: np.ndarray, y: np.ndarray, exposed: np.ndarray
) -> dict[str, np.ndarray]:
    """The window arm's counts and weighted sums per pair (units: statistics/dataset.py)."""
    counts, sums = window_terms(pi, y, exposed)
    out = {name: np.bincount(idx[mask], minlength=n_pairs).astype(np.int64) for name, mask in counts.items()}
    for name, (mask, weights) in sums.items():
        out[name] = np.bincount(idx[mask], weights=weights, minlength=n_pairs).astype(np.float64)
    return out


def pair_store_sums(
    step_vals: np.ndarray,
    outcome: np.ndarray,
    cell_of_step: np.ndarray,
    n_cells: int,
    pair_cell: np.ndarray,
    life: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps in store and the outcome sum / sum of squares over them, per pair, shape (pair,).

    The same arithmetic as :func:`cmp_bayes.statistics.kernels.in_store_sums`
    for the (memory, query) cells listed (``life``: each pair's memory's
    ``created`` and ``deleted`` steps; None without a memories file), so the
    numbers equal the dense cell's bit for bit.
    """
    order = np.argsort(cell_of_step, kind="stable")
    yo = outcome[order]
    bounds = np.searchsorted(cell_of_step[order], np.arange(n_cells + 1))
    cuts = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    if life is None:
        n = np.diff(bounds).astype(np.int64)
        s = np.array([yo[a:b].sum() for a, b in cuts])
        s2 = np.array([np.square(yo[a:b]).sum() for a, b in cuts])
        return n[pair_cell], s[pair_cell], s2[pair_cell]
    created, deleted = life
    lo = np.searchsorted(step_vals, created, side="left")
    hi = np.maximum(np.searchsorted(step_vals, deleted, side="left"), lo)
    s_len = len(step_vals)
    key = cell_of_step[order].astype(np.int64) * (s_len + 1) + order
    cs = np.concatenate([np.concatenate(([0.0], np.cumsum(yo[a:b]))) for a, b in cuts])
    cs2 = np.concatenate([np.concatenate(([0.0], np.cumsum(np.square(yo[a:b])))) for a, b in cuts])
    c = pair_cell.astype(np.int64)
    first = np.searchsorted(key, c * (s_len + 1) + lo, side="left")
    last = np.searchsorted(key, c * (s_len + 1) + hi, side="left")
    return (last - first).astype(np.int64), cs[last + c] - cs[first + c], cs2[last + c] - cs2[first + c]


def _pair_ranks(
    log: ExposureLog, memory: pa.Array, step_vals: np.ndarray, cell_of_step: np.ndarray, nq: int,
    keys: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ranked``, ``rank_median``, ``rank_best`` per pair (rankings of other pairs are dropped);
    the dense statistics' rules (a memory listed twice in one ranking counts once, at its best)."""
    n = len(keys)
    if log.rankings is None or len(log.rankings) == 0 or n == 0:
        return np.zeros(n, dtype=np.int64), np.full(n, np.nan), np.full(n, np.nan)
    key, rank = ranking_entries(log, memory, step_vals, cell_of_step, nq)
    at = np.minimum(np.searchsorted(keys, key), n - 1)
    hit = keys[at] == key
    idx, rank = at[hit], rank[hit]
    median, best = grouped_median_min(idx, rank, n)
    return np.bincount(idx, minlength=n).astype(np.int64), median, best


def pool_keys(
    rp: RoundPools | None, memory: pa.Array, step_vals: np.ndarray, cell_of_step: np.ndarray, nq: int,
    created: np.ndarray, deleted: np.ndarray,
) -> np.ndarray:
    """Pair keys eligible under the pool arm: a query with a step inside some span
    [round start, round stop) ∩ [created, deleted) of a memory in that round's pool.

    ``rp``: every round's pool (None: no design); ``memory``: the sorted memory index
    (M,) and ``created`` / ``deleted`` its lifetimes (M,); ``step_vals`` and
    ``cell_of_step``: the steps looked at (sorted, any subset of the log's: the keys of
    disjoint subsets add up to the log's) and their query positions, shape (S,). Returns
    ``memory position * nq + query position`` per eligibility, int64, with repeats.
    """
    if rp is None or len(rp.keys) == 0 or len(step_vals) == 0:
        return np.zeros(0, np.int64)
    n = max(len(rp.ids), 1)
    e_round, e_mem = rp.keys // n, rp.keys % n
    mpos = positions(rp.ids, memory)[e_mem]
    ok = mpos >= 0
    m = np.maximum(mpos, 0)
    lo = np.maximum(rp.starts[e_round], created[m])
    hi = np.minimum(rp.stops[e_round], deleted[m])
    # spans as positions into the (sorted) steps: [a, b)
    a = np.searchsorted(step_vals, lo, side="left")
    b = np.searchsorted(step_vals, hi, side="left")
    live = ok & (b > a)
    mpos, a, b = mpos[live], a[live], b[live]
    length = b - a
    short = length < nq
    out = []
    # short spans: the cells of their own steps
    if short.any():
        ms, as_, ls = mpos[short], a[short], length[short]
        total = int(ls.sum())
        span = np.repeat(np.arange(len(ms)), ls)
        step_pos = np.repeat(as_, ls) + np.arange(total) - np.repeat(np.cumsum(ls) - ls, ls)
        out.append(ms[span] * nq + cell_of_step[step_pos])
    # long spans: for each query, whether it has a step inside (its steps' positions, searched)
    if (~short).any():
        s_len = len(step_vals)
        combined = np.sort(cell_of_step.astype(np.int64) * (s_len + 1) + np.arange(s_len))
        ml, al, bl = mpos[~short], a[~short], b[~short]
        q = np.arange(nq, dtype=np.int64)
        per = max(1, _CHUNK // nq)
        for i in range(0, len(ml), per):
            base = q[None, :] * (s_len + 1)
            inside = (np.searchsorted(combined, base + bl[i:i + per, None])
                      > np.searchsorted(combined, base + al[i:i + per, None]))
            si, qi = np.nonzero(inside)
            out.append(ml[i:i + per][si] * nq + qi)
    return np.concatenate(out) if out else np.zeros(0, np.int64)
