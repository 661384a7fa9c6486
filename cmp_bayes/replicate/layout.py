"""The CMP exposure log over real stores (semi-synthetic or real-reader outcomes).

Real memories, queries, evidence and retrieval; answers from the stated
:class:`~cmp_bayes.replicate.reader.ReaderModel` (labelled **semi-synthetic**
everywhere), or, given a text reader (``build_log(..., reader=...)``), the
reader's scores of each step's question over its context texts in slot order
(:mod:`cmp_bayes.replicate.reading`; labelled **real-reader**). The layout
(steps, contexts, rankings) is the same either way for one seed: only the
outcomes differ.

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
* Window designs (``assignment="window"``, the spec's "Targeted exposure"):
  the same steps and ``k``, so the same number of exposure slots; the first
  ``j = pool_slots`` exposure slots of every step are the balanced design
  above with ``j`` slots per step, the other ``k - j`` are drawn uniformly
  from the step's window ``W_t`` (ranks ``B - k .. B - k + W - 1`` of the
  retriever's ranking of the store for that step's query, less what the pool
  slots took), propensity ``min(1, (k - j) / |W_t|)``; every exposure slot
  carries its ``arm``.
* ``ranking``: the full ranking of the store is logged at the first step each
  query is asked in its block (it is deterministic, so repeating it adds
  nothing); the model's rank covariate reads it. A window design logs it at
  every step, as the spec requires (a reader recomputes each ``W_t`` from it).
* ``labels.jsonl``: the benchmark's evidence (required pairs only; every
  other pair is not required).
* Held-out questions (``holdout > 0``): a seeded share of each store's
  questions is never asked; the steps draw their question from the others
  only, so the log (steps, rankings, labels) holds nothing of the held-out
  ones, and :attr:`StoreBlock.held_out` keeps them for the evaluation.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
from cmp_bayes.progress import Progress
from cmp_bayes.replicate.config import LABEL, REAL_LABEL, ExperimentConfig
from cmp_bayes.replicate.reader import Reader
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
    held_out: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # local query indices never asked


def build_log(
    dataset: Dataset,
    retriever: Retriever,
    config: ExperimentConfig,
    progress: Progress | None = None,
    reader: Reader | None = None,
    reader_outcome: str = "fractional",
) -> tuple[ExposureLog, list[StoreBlock]]:
    """Lay out the CMP exposure log over the dataset's real stores (module docstring).

    ``progress`` (default silent) gets a bar over the stores as the retriever
    ranks them, and one over the text reader's calls.

    Parameters
    ----------
    reader : Reader, optional
        A text reader: the outcomes are its scores (``reader_outcome``
        "fractional") or their binary form ("binary"), and the log is labelled
        ``real-reader``; ``attrs["reader_calls"]`` holds
        :class:`~cmp_bayes.replicate.reading.ReadingSummary`. None (default):
        the semi-synthetic :class:`~cmp_bayes.replicate.reader.ReaderModel` of ``config``.
    reader_outcome : {"fractional", "binary"}

    Returns
    -------
    log : ExposureLog
        In memory (not yet written); ``attrs`` hold the settings and the label
        (``semi-synthetic``, or ``real-reader`` with a text reader).
    blocks : list
        Per-store layout, used by :func:`block_store_randomization`.
    """
    from cmp_bayes.design.scheduler import ExposureScheduler

    if reader is not None:
        from cmp_bayes.replicate.reading import check_outcome_form

        check_outcome_form(reader_outcome)
    rng = np.random.default_rng([config.seed, 1])
    # the split has its own stream, so a log without held-out questions is today's bit for bit
    split_rng = np.random.default_rng([config.seed, 5]) if config.holdout > 0 else None
    model = config.reader
    nret = config.slots - config.exposure_slots
    blocks: list[StoreBlock] = []
    start = 0
    progress = progress or Progress.silent()
    for store in progress.track(dataset.stores, "ranking stores", unit="stores"):
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
        held = _held_out(n_q, config.holdout, split_rng)
        if n_q == 1:
            step_query = np.zeros(steps, dtype=np.int64)
        elif held.size == 0:
            step_query = rng.integers(n_q, size=steps)
        else:
            asked = np.setdiff1d(np.arange(n_q), held)
            step_query = asked[rng.integers(asked.size, size=steps)]
        always = set(top[step_query[0]].tolist())
        for q in np.unique(step_query):
            always &= set(top[q].tolist())
        pool = np.array(sorted(set(range(store.size)) - always), dtype=np.int64)
        groups = store.queries.set_index("query_id").loc[qids, "group"].to_numpy(dtype=object)
        blocks.append(
            StoreBlock(store.store_id, start, steps, mids, qids, groups, order, ranks, ev, step_query, pool,
                   model.base_rates(n_q, rng), held)
        )
        start += steps
    if not blocks:
        raise ConfigError(f"{dataset.name}: no store with memories and queries")
    total = start
    pool_ids = np.concatenate([b.memory_ids[b.pool] for b in blocks])
    lifetimes = {m: (b.start, b.start + b.steps) for b in blocks for m in b.memory_ids[b.pool]}
    window = config.assignment == "window"
    # a window design's pool slots are a balanced design of j slots per step
    k_pool = config.pool_slots if window else config.exposure_slots
    sched = ExposureScheduler(config.slots, k_pool, list(pool_ids), total, "balanced",
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
    exposures = [_pool_exposures(b, exp_steps, exp_mem, pool_ids, propensity) for b in blocks]
    if window:
        design = {
            "slots": config.slots, "exposure_slots": config.exposure_slots, "assignment": "window",
            "window": config.window, "pool_slots": config.pool_slots,
            "steps": total, "seed": config.seed, "pool": design["pool"],
        }
        # the window draws from their own stream, so a balanced log stays as it was
        w_rng = np.random.default_rng([config.seed, 3])
        exposures = [_add_window(b, e, config, w_rng) for b, e in zip(blocks, exposures, strict=True)]
    log = _assemble(blocks, exposures, design, config, rng, dataset, semi_synthetic=reader is None)
    reading: dict[str, Any] = {}
    if reader is not None:
        from cmp_bayes.replicate.reading import read_outcomes

        outcomes, summary = read_outcomes(log.steps, log.contexts, dataset, reader, reader_outcome, progress)
        log.steps["outcome"] = outcomes
        reading = {"reader_calls": summary.to_dict()}
    log.attrs.update(
        {
            "label": LABEL if reader is None else REAL_LABEL,
            "dataset": dataset.name,
            "granularity": dataset.granularity,
            "retriever": retriever.name,
            "reader": model.to_dict() if reader is None else {"name": reader.name, "outcome": reader_outcome},
            "experiment": config.to_dict(),
            "exposure_shortfall_warnings": shortfall,
            **reading,
        }
    )
    return log, blocks


def _first_of_context(q: np.ndarray, top: np.ndarray, e_rel: np.ndarray, e_loc: np.ndarray) -> np.ndarray:
    """Per step, the first step of its block with the same question and the same memories in the same slots.

    ``top``: (steps, r) retrieved local indices in slot order; ``e_rel``, ``e_loc``:
    each exposure's step (block-relative) and memory, already in slot order
    within a step.
    """
    extra: list[list[int]] = [[] for _ in range(len(q))]
    for t, m in zip(e_rel.tolist(), e_loc.tolist(), strict=True):
        extra[t].append(m)
    first: dict[tuple[int, ...], int] = {}
    out = np.empty(len(q), dtype=np.int64)
    for t in range(len(q)):
        key = (int(q[t]), *top[t].tolist(), -1, *extra[t])
        out[t] = first.setdefault(key, t)
    return out


def _held_out(n_q: int, share: float, rng: np.random.Generator | None) -> np.ndarray:
    """Local indices (sorted) of the store's held-out questions: ``round(share * n_q)``, at most ``n_q - 1``."""
    if rng is None or n_q < 2:
        return np.zeros(0, dtype=np.int64)
    n = min(n_q - 1, round(share * n_q))
    return np.sort(rng.choice(n_q, size=n, replace=False)).astype(np.int64)


@dataclass
class BlockExposures:
    """One store block's exposure slots: step, local memory index, propensity, arm (``None`` outside window designs)."""

    step: np.ndarray  # (n,) int64, global steps
    local: np.ndarray  # (n,) int64, indices into the block's memory_ids
    propensity: np.ndarray  # (n,) float64
    arm: np.ndarray | None  # (n,) object, "pool" / "window"


def _pool_exposures(
    b: StoreBlock, exp_steps: np.ndarray, exp_mem: np.ndarray, pool_ids: np.ndarray, propensity: np.ndarray | None
) -> BlockExposures:
    """The pool exposures (balanced deal, pool indices) that fall in block ``b``, in its local indices."""
    sel = (exp_steps >= b.start) & (exp_steps < b.start + b.steps)
    local = {m: i for i, m in enumerate(b.memory_ids)}
    e_loc = np.array([local[m] for m in pool_ids[exp_mem[sel]]], dtype=np.int64)
    e_prop = propensity[exp_mem[sel]] if propensity is not None else np.zeros(0)
    return BlockExposures(exp_steps[sel].astype(np.int64), e_loc, np.asarray(e_prop, dtype=np.float64), None)


def _add_window(b: StoreBlock, pooled: BlockExposures, config: ExperimentConfig,
                rng: np.random.Generator) -> BlockExposures:
    """Block ``b``'s window slots beside its pool slots (spec, "Targeted exposure").

    ``W_t``: ranks ``B - k .. B - k + W - 1`` of the step's ranking of the store
    (every memory of a block is in the store throughout it) that are neither
    retrieved nor in a pool slot; ``k - j`` of them drawn uniformly, propensity
    ``min(1, (k - j) / |W_t|)``.
    """
    from cmp_bayes.design.batch import deal_window, window_candidates

    nret = config.slots - config.exposure_slots
    j = config.pool_slots
    ranking = b.order[b.step_query]  # (steps, M) local indices, best first
    pool_ctx = np.full((b.steps, max(j, 1)), -1, dtype=np.int64)
    t = pooled.step - b.start
    if len(t):
        order = np.argsort(t, kind="stable")
        ts = t[order]
        first = np.r_[0, np.flatnonzero(np.diff(ts)) + 1]
        within = np.arange(len(ts)) - np.repeat(first, np.diff(np.r_[first, len(ts)]))
        pool_ctx[ts, within] = pooled.local[order]
    cand = window_candidates(ranking, nret, int(config.window or 0), np.c_[ranking[:, :nret], pool_ctx])
    w_step, w_loc, w_prop = deal_window(cand, config.exposure_slots - j, rng)
    return BlockExposures(
        np.r_[pooled.step, w_step + b.start].astype(np.int64),
        np.r_[pooled.local, w_loc].astype(np.int64),
        np.r_[pooled.propensity, w_prop],
        np.r_[np.full(len(t), "pool", dtype=object), np.full(len(w_step), "window", dtype=object)],
    )


def _assemble(
    blocks: list[StoreBlock],
    exposures: list[BlockExposures],
    design: dict[str, Any],
    config: ExperimentConfig,
    rng: np.random.Generator,
    dataset: Dataset,
    semi_synthetic: bool = True,
) -> ExposureLog:
    """The log's tables; outcomes from the semi-synthetic model, else NaN for a text reader to fill."""
    nret = config.slots - config.exposure_slots
    reader = config.reader
    window = config.assignment == "window"
    step_tab, ctx_tab, rank_tab, mem_tab, lab_tab = [], [], [], [], []
    for b, ex in zip(blocks, exposures, strict=True):
        t = np.arange(b.start, b.start + b.steps)
        q = b.step_query
        r = min(nret, len(b.memory_ids))
        top = b.order[q, :r]  # (steps, r) local indices
        e_step, e_loc, e_prop = ex.step, ex.local, ex.propensity
        # evidence share seen at each step (retrieved + exposed)
        n_ev = b.evidence.sum(axis=1)
        seen = b.evidence[q[:, None], top].sum(axis=1).astype(np.float64)
        np.add.at(seen, e_step - b.start, b.evidence[q[e_step - b.start], e_loc])
        share = np.where(n_ev[q] > 0, seen / np.maximum(n_ev[q], 1), 0.0)
        # where the seen evidence sits: sum of its slots (retrieved slots are 0 .. r-1 in rank order)
        slot_sum = (b.evidence[q[:, None], top] * np.arange(r)[None, :]).sum(axis=1).astype(np.float64)
        width = np.full(b.steps, float(r))
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
            # pool slots before window slots within a step (arm "pool" < "window")
            keys = (e_loc, e_step) if ex.arm is None else (e_loc, ex.arm == "window", e_step)
            order = np.lexsort(keys)
            e_step, e_loc, e_prop = e_step[order], e_loc[order], e_prop[order]
            first = np.r_[0, np.flatnonzero(np.diff(e_step)) + 1]
            slot = np.arange(len(e_step)) - np.repeat(first, np.diff(np.r_[first, len(e_step)])) + r
            frame = {"step": e_step, "slot": slot, "memory_id": b.memory_ids[e_loc], "source": "exposure",
                     "rank": pd.NA, "propensity": e_prop}
            if ex.arm is not None:
                frame["arm"] = ex.arm[order]
            ctx_tab.append(pd.DataFrame(frame))
            np.add.at(slot_sum, e_step - b.start, slot * b.evidence[q[e_step - b.start], e_loc])
            np.add.at(width, e_step - b.start, 1.0)
        # the evidence's mean slot scaled to [0, 1] (0 first); NaN without evidence in the context
        with np.errstate(invalid="ignore", divide="ignore"):
            position = np.where(seen > 0, slot_sum / np.maximum(seen, 1) / np.maximum(width - 1, 1), np.nan)
        # drawn after the slots are laid out (no random numbers are used in between, so the
        # stream is as before); a text reader's outcomes come later, the model's stream untouched
        outcome = reader.outcomes(b.base[q], share, rng, position=position) if semi_synthetic else np.full(b.steps, np.nan)
        if semi_synthetic and config.deterministic_reader:
            # a step that repeats an earlier (question, context) gets that step's outcome, as from
            # an LLM at temperature 0; the draws above are unchanged, only copied
            outcome = outcome[_first_of_context(q, top, e_step - b.start, e_loc)]
        step_tab.append(pd.DataFrame({"step": t, "query_id": b.query_ids[q], "outcome": outcome, "group": b.groups[q]}))
        m = len(b.memory_ids)
        if window:
            # a window design logs every step's ranking (the spec; the reader recomputes W_t from it)
            rank_tab.append(pd.DataFrame({"step": np.repeat(t, m), "rank": np.tile(np.arange(m), b.steps),
                                          "memory_id": b.memory_ids[b.order[q].ravel()]}))
        else:
            # full ranking at the first step each query is asked
            for qi in np.unique(q):
                s0 = b.start + int(np.flatnonzero(q == qi)[0])
                rank_tab.append(pd.DataFrame({"step": s0, "rank": np.arange(m), "memory_id": b.memory_ids[b.order[qi]]}))
        mem_tab.append(pd.DataFrame({"memory_id": b.memory_ids, "created_step": b.start, "deleted_step": b.start + b.steps}))
        asked = np.ones(len(b.query_ids), dtype=bool)
        asked[b.held_out] = False  # a held-out question's evidence stays out of the log
        qi, mi = np.nonzero(b.evidence & asked[:, None])
        lab_tab.append(pd.DataFrame({"query_id": b.query_ids[qi], "memory_id": b.memory_ids[mi], "required": True}))
    steps = coerce(pd.concat(step_tab, ignore_index=True), STEP_COLUMNS)
    contexts = pd.concat(ctx_tab, ignore_index=True)
    contexts["rank"] = contexts["rank"].astype("Int64")
    if "arm" in contexts:
        contexts["arm"] = contexts["arm"].astype("string")
    contexts = coerce(contexts.sort_values(["step", "slot"], kind="stable"), CONTEXT_COLUMNS)
    rankings = coerce(pd.concat(rank_tab, ignore_index=True).sort_values(["step", "rank"], kind="stable"), RANKING_COLUMNS)
    memories = coerce(pd.concat(mem_tab, ignore_index=True), MEMORY_COLUMNS)
    labels = coerce(pd.concat(lab_tab, ignore_index=True), LABEL_COLUMNS)
    return ExposureLog(steps, contexts, rankings, memories, design, labels)


def write_and_check(
    log: ExposureLog, path: str | Path, format: Literal["jsonl", "parquet"] = "jsonl"
) -> ExposureLog:
    """Write the log with ``write_log`` and read it back with ``read_log`` (validates it)."""
    from cmp_bayes.log.export import write_log
    from cmp_bayes.log.read import read_log

    out = write_log(log, path, format=format)
    back = read_log(out)
    back.attrs.update(log.attrs)
    return back


