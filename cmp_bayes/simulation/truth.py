"""Simulator truth: per-pair and per-memory conditional utility, retrievability, utility.

Definitions (the reader's expected outcome is ``g(s)``, see :mod:`.reader`).

Per (query ``q``, memory ``m``) conditional utility, ``labels.utility``:
    the average, over ``m``'s *control steps* for ``q`` (steps answering ``q``
    at which ``m`` is in the store but not in the context), of the effect on the
    expected outcome of putting ``m`` into the context in place of one of that
    step's exposures, chosen uniformly:

        tau(m, q) = mean over t of [ mean over exposure slots j of
                    g(s_t - u(x_tj, q) + u(m, q)) - g(s_t) ].

    This is the Hajek contrast for ``q``'s steps: under random assignment an
    exposed step's context is distributed as a control step's context with one
    exposure (uniformly chosen) replaced by ``m``: same retrieved slots, the
    displaced slot, the context size held fixed, clipping included through
    ``g``. When ``m`` has no control step for ``q`` because the retriever puts it
    in every context (so Hajek has nothing to compare), ``tau(m, q)`` is instead
    the average effect of removing ``m``, its slot going to the next memory of
    the ranking: ``g(s_t) - g(s_t - u(m, q) + u(next_t, q))`` over those steps.
    (A step without exposure slots displaces its lowest retriever slot.)

Per memory (:func:`memory_truth`, from the log and its labels only):
    ``tau_true``: the Hajek estimator compares ``m``'s exposed steps with its
        control steps pooled over queries, and exposure timing is random, so
        its target is ``sum_q c_mq tau(m, q) / sum_q c_mq`` with ``c_mq`` the
        number of ``m``'s control steps answering ``q``. (Memories with no
        control step at all: the same average weighted by retrieved steps.)
    ``rho_true``: retrieved steps / in-store steps (share of the steps at which
        ``m`` is in the store that the retriever puts it in the context).
    ``utility_true``: ``E_q[rho(m, q) tau(m, q)]`` over ``m``'s in-store steps,
        i.e. ``sum_q r_mq tau(m, q) / n_m`` (``r_mq`` retrieved steps answering
        ``q``, ``n_m`` in-store steps), as in DESIGN.md.
    ``required``: required by at least one query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from cmp_bayes.errors import LogError
from cmp_bayes.log.schema import LABEL_COLUMNS, ExposureLog, coerce

if TYPE_CHECKING:
    from cmp_bayes.simulation.config import SimulationConfig
    from cmp_bayes.simulation.reader import SimulatedReader
    from cmp_bayes.simulation.retriever import Retriever


class WorldView(Protocol):
    """What :func:`pair_utilities` reads of the simulator's ``World`` (a Protocol: the
    simulator imports this module, so this one cannot import it back)."""

    config: SimulationConfig
    memory_ids: np.ndarray
    query_ids: np.ndarray
    required: np.ndarray
    reader: SimulatedReader
    retriever: Retriever
    util: np.ndarray
    col: np.ndarray
    created: np.ndarray
    deleted: np.ndarray
    step_query: np.ndarray

_CHUNK = 4096


def pair_utilities(
    world: WorldView, ranking: np.ndarray, ctx_step: np.ndarray, ctx_mem: np.ndarray,
    is_exp: np.ndarray, s: np.ndarray,
) -> pd.DataFrame:
    """The labels table of a simulation: ``required`` and ``tau(m, q)`` per pair.

    Parameters
    ----------
    world : World
        The simulation's world.
    ranking : numpy.ndarray of int, shape (step, candidate)
        Each step's ranking (global memory indices, ``-1`` padded).
    ctx_step, ctx_mem, is_exp : numpy.ndarray, shape (slot,)
        The contexts in long form.
    s : numpy.ndarray, shape (step,)
        Pre-clipping score of every step.
    """
    w = world
    T = len(s)
    nq, hc = w.util.shape
    g = w.reader.mean
    q_of = w.step_query
    k = w.config.exposure_slots
    in_ctx = np.zeros((T, hc), dtype=bool)
    in_ctx[ctx_step, w.col[ctx_mem]] = True
    # exposure effects per step, (T, k) NaN padded; steps without exposures
    # displace their lowest retriever slot
    kk = max(k, 1)
    disp = np.full((T, kk), np.nan)
    e_step, e_mem = ctx_step[is_exp], ctx_mem[is_exp]
    if e_step.size:
        first = np.r_[0, np.flatnonzero(np.diff(e_step)) + 1]
        within = np.arange(e_step.size) - np.repeat(first, np.diff(np.r_[first, e_step.size]))
        disp[e_step, within] = w.util[q_of[e_step], w.col[e_mem]]
    n_ret = np.bincount(ctx_step[~is_exp], minlength=T)
    no_exp = np.isnan(disp).all(axis=1) & (n_ret > 0)
    if no_exp.any():
        t = np.flatnonzero(no_exp)
        last = ranking[t, n_ret[t] - 1]
        disp[t, 0] = w.util[q_of[t], w.col[last]]
    ctrl_sum = np.zeros((nq, hc))
    ctrl_n = np.zeros((nq, hc), dtype=np.int64)
    ret_sum = np.zeros((nq, hc))
    ret_n = np.zeros((nq, hc), dtype=np.int64)
    for lo in range(0, T, _CHUNK):
        t = np.arange(lo, min(T, lo + _CHUNK))
        q = q_of[t]
        cand = w.retriever.cand[q]
        u = w.util[q]
        alive = (cand >= 0) & (w.created[cand] <= t[:, None]) & (t[:, None] < w.deleted[cand])
        g_s = g(s[t])
        ctrl = alive & ~in_ctx[t]
        d = np.zeros_like(u)
        n_d = np.zeros(len(t))
        empty = np.isnan(disp[t]).all(axis=1)
        for j in range(kk):
            a = disp[t, j]
            ok = ~np.isnan(a)
            d += np.where(ok[:, None], g(s[t, None] - np.nan_to_num(a)[:, None] + u), 0.0)
            n_d += ok
        d = np.where(empty[:, None], g(s[t, None] + u), d / np.maximum(n_d, 1)[:, None]) - g_s[:, None]
        np.add.at(ctrl_sum, q, np.where(ctrl, d, 0.0))
        np.add.at(ctrl_n, q, ctrl)
        # retrieved memories: removal, the slot going to the next memory in the ranking
        rk = ranking[t]
        rk_in = np.take_along_axis(in_ctx[t], w.col[np.maximum(rk, 0)], axis=1) | (rk < 0)
        has_next = ~rk_in.all(axis=1)
        nxt = rk[np.arange(len(t)), np.argmax(~rk_in, axis=1)]
        u_next = np.where(has_next, w.util[q, w.col[np.maximum(nxt, 0)]], 0.0)
        ret_pos = np.zeros_like(ctrl)
        sel = (ctx_step >= lo) & (ctx_step < lo + len(t)) & ~is_exp
        ret_pos[ctx_step[sel] - lo, w.col[ctx_mem[sel]]] = True
        d_ret = g_s[:, None] - g(s[t, None] - u + u_next[:, None])
        np.add.at(ret_sum, q, np.where(ret_pos, d_ret, 0.0))
        np.add.at(ret_n, q, ret_pos)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(ctrl_n > 0, ctrl_sum / np.maximum(ctrl_n, 1),
                       np.where(ret_n > 0, ret_sum / np.maximum(ret_n, 1), np.nan))
    qi, ji = np.nonzero(w.retriever.cand >= 0)
    mem = w.retriever.cand[qi, ji]
    labels = pd.DataFrame({
        "query_id": w.query_ids[qi], "memory_id": w.memory_ids[mem],
        "required": w.required[qi, ji],
        "utility": pd.array(tau[qi, ji], dtype="Float64"),
    })
    labels["utility"] = labels["utility"].where(~np.isnan(tau[qi, ji]), pd.NA)
    return coerce(labels, LABEL_COLUMNS)


def pair_counts(log: ExposureLog, labels: pd.DataFrame) -> pd.DataFrame:
    """Per label pair: in-store steps ``n``, retrieved ``r``, exposed ``e``, control ``c``."""
    steps = log.steps
    st_q = steps["query_id"].astype(str).to_numpy()
    st_t = steps["step"].to_numpy()
    qids, q_code = np.unique(st_q, return_inverse=True)
    big = int(st_t.max()) + 2 if len(st_t) else 1
    keys = np.sort(q_code.astype(np.int64) * big + st_t)
    lab_q = labels["query_id"].astype(str).to_numpy()
    lab_m = labels["memory_id"].astype(str).to_numpy()
    qpos = np.searchsorted(qids, lab_q)
    known = (qpos < len(qids)) & (qids[np.minimum(qpos, len(qids) - 1)] == lab_q)
    if log.memories is not None:
        mem = log.memories.set_index(log.memories["memory_id"].astype(str))
        created = mem["created_step"].reindex(lab_m).to_numpy(dtype=float)
        deleted = mem["deleted_step"].astype("Float64").reindex(lab_m).to_numpy(dtype=float, na_value=np.inf)
        created = np.nan_to_num(created, nan=0.0)
    else:
        created = np.zeros(len(lab_m))
        deleted = np.full(len(lab_m), np.inf)
    lo = qpos * big + np.clip(created, 0, big - 1).astype(np.int64)
    hi = qpos * big + np.clip(deleted, 0, big - 1).astype(np.int64)
    n = np.where(known, np.searchsorted(keys, hi) - np.searchsorted(keys, lo), 0)
    ctx = log.contexts.merge(steps[["step", "query_id"]], on="step")
    cnt = (
        ctx.assign(memory_id=ctx["memory_id"].astype(str), query_id=ctx["query_id"].astype(str),
                   source=ctx["source"].astype(str))
        .groupby(["memory_id", "query_id", "source"]).size().unstack("source", fill_value=0)
    )
    idx = pd.MultiIndex.from_arrays([lab_m, lab_q])
    r = cnt.get("retriever", pd.Series(dtype=int)).reindex(idx, fill_value=0).to_numpy()
    e = cnt.get("exposure", pd.Series(dtype=int)).reindex(idx, fill_value=0).to_numpy()
    return pd.DataFrame({"memory_id": lab_m, "query_id": lab_q, "n": n, "r": r, "e": e, "c": n - r - e})


def memory_truth(log: ExposureLog) -> pd.DataFrame:
    """Per-memory truth of a simulated log (definitions in the module docstring).

    Returns
    -------
    pandas.DataFrame
        Columns ``memory_id``, ``tau_true``, ``rho_true``, ``utility_true``,
        ``required``; one row per memory of the log (sorted ids).
    """
    if log.labels is None or "utility" not in log.labels or log.labels["utility"].isna().all():
        raise LogError(log.source or "<log>", "memory_truth needs labels with the true `utility` (a simulated log)")
    lab = log.labels
    pc = pair_counts(log, lab)
    tau = lab["utility"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    ok = ~np.isnan(tau)
    t0 = np.where(ok, tau, 0.0)
    df = pd.DataFrame({
        "memory_id": pc["memory_id"], "c": np.where(ok, pc["c"], 0), "r": np.where(ok, pc["r"], 0),
        "ct": np.where(ok, pc["c"], 0) * t0, "rt": np.where(ok, pc["r"], 0) * t0,
        "required": lab["required"].to_numpy(dtype=bool),
    })
    agg = df.groupby("memory_id").agg(c=("c", "sum"), r=("r", "sum"), ct=("ct", "sum"),
                                      rt=("rt", "sum"), required=("required", "any"))
    ids = log.memory_ids()
    agg = agg.reindex(ids)
    # rho and n_m from the log itself (every in-store step, not only labelled pairs)
    n_m = _in_store_steps(log).reindex(ids).to_numpy(dtype=float)
    r_all = (
        log.contexts.loc[log.contexts["source"] == "retriever", "memory_id"].astype(str)
        .value_counts().reindex(ids, fill_value=0).to_numpy(dtype=float)
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        tau_true = np.where(agg["c"] > 0, agg["ct"] / agg["c"],
                            np.where(agg["r"] > 0, agg["rt"] / agg["r"], np.nan))
        rho = np.where(n_m > 0, r_all / n_m, np.nan)
        util = np.where(n_m > 0, agg["rt"].fillna(0).to_numpy() / n_m, np.nan)
    return pd.DataFrame({
        "memory_id": ids.to_numpy(dtype=object), "tau_true": tau_true.astype(float),
        "rho_true": rho, "utility_true": util,
        "required": agg["required"].fillna(False).to_numpy(dtype=bool),
    })


def _in_store_steps(log: ExposureLog) -> pd.Series:
    st = np.sort(log.steps["step"].to_numpy())
    ids = log.memory_ids()
    if log.memories is None:
        return pd.Series(len(st), index=ids)
    mem = log.memories
    c = mem["created_step"].to_numpy()
    d = mem["deleted_step"].astype("Float64").to_numpy(dtype=float, na_value=np.inf)
    n = np.searchsorted(st, d, side="left") - np.searchsorted(st, c, side="left")
    return pd.Series(n, index=mem["memory_id"].astype(str).to_numpy())
