"""The CMP exposure log over real stores (semi-synthetic outcomes).

Real memories, queries, evidence and retrieval; answers from the stated
:class:`~cmp_bayes.replicate.reader.ReaderModel`. Results are labelled
**semi-synthetic** everywhere.

Design of the log (:func:`build_log`):

* Stores are laid out one after another: store ``s`` occupies a block of
  ``T_s`` consecutive steps; its memories are created at the block's first
  step and deleted after its last (``memories.jsonl``), so a LongMemEval
  haystack is in the store only while its question is asked.
* Each step asks one of the store's queries (the only one for LongMemEval /
  HotpotQA / MuSiQue; uniformly at random for a LoCoMo conversation). The
  context has ``B`` slots: the retriever's top ``B - k`` for that query and
  ``k`` exposure slots dealt by :class:`cmp_bayes.design.scheduler.ExposureScheduler`
  (balanced assignment over the whole log, per-memory lifetimes).
* The exposure pool of a store is every memory except those the retriever puts
  in the context at every step of the block (they could never be exposed or
  have a control arm). ``T_s = ceil(exposures * |pool_s| / k)`` so each pool
  memory gets about ``exposures`` exposures.
* ``ranking``: the full ranking of the store is logged at the first step each
  query is asked in its block (it is deterministic, so repeating it adds
  nothing); the model's rank covariate reads it.
* ``labels.jsonl``: the benchmark's evidence (required pairs only; every
  other pair is not required).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.datasets.base import Dataset
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)
from cmp_bayes.replicate.config import LABEL, ExperimentConfig
from cmp_bayes.retrieval.base import Retriever, rank_store


@dataclass
class StoreBlock:
    """One store's part of the log (local memory indices are store order)."""

    store_id: str
    start: int
    steps: int
    memory_ids: np.ndarray  # (M,) object
    query_ids: np.ndarray  # (Q,) object
    groups: np.ndarray  # (Q,) object
    order: np.ndarray  # (Q, M) local memory indices, best first
    ranks: np.ndarray  # (Q, M) rank of each memory
    evidence: np.ndarray  # (Q, M) bool
    step_query: np.ndarray  # (steps,) local query index
    pool: np.ndarray  # local indices of pool memories
    base: np.ndarray  # (Q,) reader base rates


def build_log(dataset: Dataset, retriever: Retriever, config: ExperimentConfig) -> tuple[ExposureLog, list[StoreBlock]]:
    """Lay out the CMP exposure log over the dataset's real stores (module docstring).

    Returns
    -------
    log : ExposureLog
        In memory (not yet written); ``attrs`` hold the settings and the label
        ``semi-synthetic``.
    blocks : list
        Per-store layout, used by :func:`block_store_randomization`.
    """
    from cmp_bayes.design.scheduler import ExposureScheduler

    rng = np.random.default_rng([config.seed, 1])
    reader = config.reader
    nret = config.slots - config.exposure_slots
    blocks: list[StoreBlock] = []
    start = 0
    for store in dataset.stores:
        if store.size == 0 or store.queries.empty:
            continue
        ranks_da = rank_store(store, retriever)
        ranks = ranks_da.to_numpy()
        order = np.argsort(ranks, axis=1, kind="stable")
        mids = ranks_da["memory"].to_numpy()
        qids = ranks_da["query"].to_numpy()
        col = {m: i for i, m in enumerate(mids)}
        row = {q: i for i, q in enumerate(qids)}
        ev = np.zeros(ranks.shape, dtype=bool)
        for q, m in store.evidence[["query_id", "memory_id"]].itertuples(index=False):
            ev[row[q], col[m]] = True
        top = order[:, :nret]
        n_q = len(qids)
        # pool size first from the first draft of queries: memories retrieved for every query asked
        pool_guess = store.size - (top.shape[1] if n_q == 1 else 0)
        steps = max(1, math.ceil(config.exposures_per_memory * max(pool_guess, 1) / config.exposure_slots))
        step_query = np.zeros(steps, dtype=np.int64) if n_q == 1 else rng.integers(n_q, size=steps)
        always = set(top[step_query[0]].tolist())
        for q in np.unique(step_query):
            always &= set(top[q].tolist())
        pool = np.array(sorted(set(range(store.size)) - always), dtype=np.int64)
        groups = store.queries.set_index("query_id").loc[qids, "group"].to_numpy(dtype=object)
        blocks.append(
            StoreBlock(store.store_id, start, steps, mids, qids, groups, order, ranks, ev, step_query, pool,
                   reader.base_rates(n_q, rng))
        )
        start += steps
    if not blocks:
        raise ConfigError(f"{dataset.name}: no store with memories and queries")
    total = start
    pool_ids = np.concatenate([b.memory_ids[b.pool] for b in blocks])
    lifetimes = {m: (b.start, b.start + b.steps) for b in blocks for m in b.memory_ids[b.pool]}
    sched = ExposureScheduler(config.slots, config.exposure_slots, list(pool_ids), total, "balanced",
                              seed=config.seed, lifetimes=lifetimes)
    pool_index = {m: i for i, m in enumerate(pool_ids)}
    retrieved = np.full((total, nret), -1, dtype=np.int64)
    for b in blocks:
        local_to_pool = np.array([pool_index.get(m, -1) for m in b.memory_ids], dtype=np.int64)
        top = b.order[b.step_query, :nret]
        retrieved[b.start : b.start + b.steps, : top.shape[1]] = local_to_pool[top]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exp_steps, exp_mem = sched.deal(retrieved)
    shortfall = len(caught)
    propensity = sched.propensity
    design = sched.design()
    log = _assemble(blocks, exp_steps, exp_mem, pool_ids, propensity, design, config, rng, dataset)
    log.attrs.update(
        {
            "label": LABEL,
            "dataset": dataset.name,
            "granularity": dataset.granularity,
            "retriever": retriever.name,
            "reader": reader.to_dict(),
            "experiment": config.to_dict(),
            "exposure_shortfall_warnings": shortfall,
        }
    )
    return log, blocks


def _assemble(
    blocks: list[StoreBlock],
    exp_steps: np.ndarray,
    exp_mem: np.ndarray,
    pool_ids: np.ndarray,
    propensity: np.ndarray,
    design: dict[str, Any],
    config: ExperimentConfig,
    rng: np.random.Generator,
    dataset: Dataset,
) -> ExposureLog:
    nret = config.slots - config.exposure_slots
    reader = config.reader
    step_tab, ctx_tab, rank_tab, mem_tab, lab_tab = [], [], [], [], []
    for b in blocks:
        t = np.arange(b.start, b.start + b.steps)
        q = b.step_query
        r = min(nret, len(b.memory_ids))
        top = b.order[q, :r]  # (steps, r) local indices
        # exposures of this block, local indices
        sel = (exp_steps >= b.start) & (exp_steps < b.start + b.steps)
        local = {m: i for i, m in enumerate(b.memory_ids)}
        e_step = exp_steps[sel]
        e_loc = np.array([local[m] for m in pool_ids[exp_mem[sel]]], dtype=np.int64)
        e_prop = propensity[exp_mem[sel]]
        # evidence share seen at each step (retrieved + exposed)
        n_ev = b.evidence.sum(axis=1)
        seen = b.evidence[q[:, None], top].sum(axis=1).astype(np.float64)
        np.add.at(seen, e_step - b.start, b.evidence[q[e_step - b.start], e_loc])
        share = np.where(n_ev[q] > 0, seen / np.maximum(n_ev[q], 1), 0.0)
        outcome = reader.outcomes(b.base[q], share, rng)
        step_tab.append(pd.DataFrame({"step": t, "query_id": b.query_ids[q], "outcome": outcome, "group": b.groups[q]}))
        ctx_tab.append(
            pd.DataFrame(
                {
                    "step": np.repeat(t, r),
                    "slot": np.tile(np.arange(r), b.steps),
                    "memory_id": b.memory_ids[top.ravel()],
                    "source": "retriever",
                    "rank": np.tile(np.arange(r), b.steps),
                    "propensity": np.nan,
                }
            )
        )
        if len(e_step):
            order = np.lexsort((e_loc, e_step))
            e_step, e_loc, e_prop = e_step[order], e_loc[order], e_prop[order]
            first = np.r_[0, np.flatnonzero(np.diff(e_step)) + 1]
            slot = np.arange(len(e_step)) - np.repeat(first, np.diff(np.r_[first, len(e_step)])) + r
            ctx_tab.append(
                pd.DataFrame(
                    {"step": e_step, "slot": slot, "memory_id": b.memory_ids[e_loc], "source": "exposure",
                     "rank": pd.NA, "propensity": e_prop}
                )
            )
        # full ranking at the first step each query is asked
        for qi in np.unique(q):
            s0 = b.start + int(np.flatnonzero(q == qi)[0])
            rank_tab.append(pd.DataFrame({"step": s0, "rank": np.arange(len(b.memory_ids)), "memory_id": b.memory_ids[b.order[qi]]}))
        mem_tab.append(pd.DataFrame({"memory_id": b.memory_ids, "created_step": b.start, "deleted_step": b.start + b.steps}))
        qi, mi = np.nonzero(b.evidence)
        lab_tab.append(pd.DataFrame({"query_id": b.query_ids[qi], "memory_id": b.memory_ids[mi], "required": True}))
    steps = coerce(pd.concat(step_tab, ignore_index=True), STEP_COLUMNS)
    contexts = pd.concat(ctx_tab, ignore_index=True)
    contexts["rank"] = contexts["rank"].astype("Int64")
    contexts = coerce(contexts.sort_values(["step", "slot"], kind="stable"), CONTEXT_COLUMNS)
    rankings = coerce(pd.concat(rank_tab, ignore_index=True).sort_values(["step", "rank"], kind="stable"), RANKING_COLUMNS)
    memories = coerce(pd.concat(mem_tab, ignore_index=True), MEMORY_COLUMNS)
    labels = coerce(pd.concat(lab_tab, ignore_index=True), LABEL_COLUMNS)
    return ExposureLog(steps, contexts, rankings, memories, design, labels)


def write_and_check(log: ExposureLog, path: str | Path, format: str = "jsonl") -> ExposureLog:
    """Write the log with ``write_log`` and read it back with ``read_log`` (validates it)."""
    from cmp_bayes.log.export import write_log
    from cmp_bayes.log.read import read_log

    out = write_log(log, path, format=format)  # type: ignore[arg-type]
    back = read_log(out)
    back.attrs.update(log.attrs)
    return back


