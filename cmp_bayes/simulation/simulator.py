"""A structural causal model of a memory-augmented LLM run under CMP.

query -> retriever ranking (:mod:`.retriever`) -> context (top ``B - k``
retrieved + ``k`` exposures dealt by :class:`ExposureScheduler`) -> outcome
(:mod:`.reader`). Under a window design (``assignment="window"``, the spec's
"Targeted exposure") ``j = pool_slots`` of the ``k`` are dealt balanced over the
pool and ``k - j`` drawn uniformly from the step's window ``W_t`` (ranks
``B - k .. B - k + W - 1`` of its ranking, less the pool slots), each window slot
with propensity ``min(1, (k - j) / |W_t|)``; the reader sees the context as
under any design. Per (query, memory) effects ``u(m, q)``: most memories do
almost nothing (``Normal(0, null_sd)``, continuous so interval coverage of true
values is meaningful), ``required_per_query`` required memories per query help
(``Normal(effect_size, effect_size / 4)``, at least ``effect_size / 4``), and a
``harmful_share`` of the others hurt (``-Normal(effect_size / 2, effect_size / 8)``).

Stores: ``shared`` (one store of ``memories`` memories for all queries, LoCoMo-
like; with ``churn`` a share of them is created and deleted over time) or
``per-query`` (each query has its own haystack of ``memories`` memories,
created when its block of ``repeats`` consecutive steps starts and deleted when
it ends, LongMemEval-like). The whole run is vectorised: no loop over steps.

``labels`` carries ``required`` and the true per-pair conditional utility
``utility`` (see :mod:`.truth` for its exact definition and how the
memory-level truth follows from it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.special import ndtri

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)
from cmp_bayes.simulation.config import GROUP_NAMES, SimulationConfig
from cmp_bayes.simulation.reader import SimulatedReader
from cmp_bayes.simulation.retriever import Retriever

SIMULATION_FILE = "simulation.json"


@dataclass
class World:
    """Everything fixed before the first step: queries, store, effects, retriever.

    Pair arrays are (query, candidate): candidate ``j`` of query ``q`` is memory
    ``cand[q, j]``; a memory sits at the same column for every query that has it
    (``col[m]``).
    """

    config: SimulationConfig
    seed: int
    memory_ids: np.ndarray  # (memory,) str
    query_ids: np.ndarray  # (query,) str
    query_group: np.ndarray  # (query,) str
    base: np.ndarray  # (query,) base success probability
    retriever: Retriever
    util: np.ndarray  # (query, candidate) true effect u(m, q)
    required: np.ndarray  # (query, candidate) bool
    col: np.ndarray  # (memory,) column of each memory in the pair arrays
    created: np.ndarray  # (memory,) int64
    deleted: np.ndarray  # (memory,) int64, = steps when never deleted
    step_query: np.ndarray  # (step,) query index
    reader: SimulatedReader

    @property
    def n_memories(self) -> int:
        return len(self.memory_ids)


def build_world(config: SimulationConfig, seed: int) -> World:
    """Draw the world of a simulation (deterministic in ``seed``)."""
    c = config
    rng = np.random.default_rng([seed, 1])
    nq, T = c.queries, c.steps
    query_ids = np.array([f"q{i:0{len(str(nq - 1))}d}" for i in range(nq)])
    group_idx = rng.integers(0, c.groups, size=nq)
    query_group = np.array(GROUP_NAMES)[group_idx]
    shift = np.linspace(-0.1, 0.1, c.groups)[group_idx] if c.groups > 1 else np.zeros(nq)
    base = np.clip(rng.normal(c.base_rate + shift, 0.08), 0.05, 0.8)
    if c.store == "shared":
        nm, hc = c.memories, c.memories
        width = len(str(nm - 1))
        memory_ids = np.array([f"m{i:0{width}d}" for i in range(nm)])
        cand = np.broadcast_to(np.arange(nm), (nq, nm)).copy()
        col = np.arange(nm)
    else:
        hc = c.memories
        nm = nq * hc
        qw, mw = len(str(nq - 1)), len(str(hc - 1))
        memory_ids = np.array([f"q{q:0{qw}d}-m{j:0{mw}d}" for q in range(nq) for j in range(hc)])
        cand = np.arange(nm).reshape(nq, hc)
        col = np.tile(np.arange(hc), nq)
    # required memories: distinct within a query, drawn among its candidates
    req_pos = np.argsort(rng.random((nq, hc)), axis=1)[:, : c.required_per_query]
    required = np.zeros((nq, hc), dtype=bool)
    np.put_along_axis(required, req_pos, True, axis=1)
    # harmful memories are a property of the memory (misleading content)
    harmful_mem = rng.random(nm) < c.harmful_share
    harmful = harmful_mem[cand] & ~required
    util = rng.normal(0.0, c.null_sd, size=(nq, hc))
    es = c.effect_size
    util[required] = np.maximum(rng.normal(es, es / 4, size=required.sum()), es / 4)
    util[harmful] = -np.abs(rng.normal(es / 2, es / 8, size=harmful.sum()))
    gap = required & (rng.random((nq, hc)) < c.lexical_gap)
    score = rng.normal(0.0, 1.0, size=(nq, hc))
    score[harmful] = rng.normal(0.5, 1.0, size=harmful.sum())
    score[required & ~gap] = rng.normal(3.0, 0.5, size=(required & ~gap).sum())
    score[gap] = rng.normal(0.1, 0.5, size=gap.sum())
    if c.near_miss > 0:
        near = _near_miss(c, gap, seed)
        score[near] = _near_miss_scores(c, int(near.sum()), hc, seed)
    # steps: shared store asks the queries in random order; per-query stores ask
    # each query in one block of consecutive steps
    rng_steps = np.random.default_rng([seed, 2])
    if c.store == "shared":
        step_query = rng_steps.permutation(np.repeat(np.arange(nq), c.repeats))
        created = np.zeros(nm, dtype=np.int64)
        deleted = np.full(nm, T, dtype=np.int64)
        churn = rng.random(nm) < c.churn
        n_ch = int(churn.sum())
        created[churn] = rng.integers(0, max(1, T // 2), size=n_ch)
        deleted[churn] = np.minimum(T, created[churn] + rng.integers(max(1, T // 4), T + 1, size=n_ch))
    else:
        order = rng_steps.permutation(nq)
        step_query = np.repeat(order, c.repeats)
        start = np.empty(nq, dtype=np.int64)
        start[order] = np.arange(nq) * c.repeats
        created = np.repeat(start, hc)
        deleted = created + c.repeats
    reader = SimulatedReader(noise=c.noise, outcomes=c.outcomes, concentration=c.concentration)
    return World(
        config=c, seed=seed, memory_ids=memory_ids, query_ids=query_ids, query_group=query_group,
        base=base, retriever=Retriever(cand=cand, score=score), util=util, required=required,
        col=col, created=created, deleted=deleted, step_query=step_query, reader=reader,
    )


def _near_miss(c: SimulationConfig, gap: np.ndarray, seed: int) -> np.ndarray:
    """Which lexical-gap pairs the retriever ranks just below its cut, shape (query, candidate)."""
    # a stream of its own: near_miss = 0 leaves every other draw of the world as it was
    rng = np.random.default_rng([seed, 3])
    return gap & (rng.random(gap.shape) < c.near_miss)


def _near_miss_scores(c: SimulationConfig, n: int, hc: int, seed: int) -> np.ndarray:
    """Scores whose expected rank among ``hc`` Normal(0, 1) scores is log-uniform on [cut, hc].

    The cut is ``slots - exposure_slots``, the first rank not retrieved. The rank
    is an expected one: the other memories' scores scatter it, so a near miss
    aimed just below the cut is now and then retrieved. The share within ranks
    ``cut .. cut + W - 1`` grows like ``log(1 + W / cut)``, as BM25's missed
    evidence on LoCoMo does (13/20/29/38% within W = 10/20/40/80); preset
    ``locomo-nearmiss`` (share 0.7) gives about 15/22/31/43%.
    """
    rng = np.random.default_rng([seed, 4])
    cut = max(c.slots - c.exposure_slots, 1)
    rank = np.exp(rng.uniform(np.log(cut), np.log(max(hc, cut + 1)), size=n))
    # the score an ordinary memory exceeds with probability rank / hc
    return ndtri(1.0 - np.clip(rank / hc, 0.5 / hc, 1.0 - 0.5 / hc))


def _rankings(world: World, steps: np.ndarray) -> np.ndarray:
    """Each step's ranking over the store as global memory indices, ``-1`` padded."""
    q = world.step_query[steps]
    cand = world.retriever.cand[q]
    alive = (world.created[cand] <= steps[:, None]) & (steps[:, None] < world.deleted[cand])
    pos = world.retriever.rank_in_store(q, alive)
    return np.where(pos >= 0, np.take_along_axis(cand, np.maximum(pos, 0), axis=1), -1)


def simulate(
    config: SimulationConfig | str = "tiny", out: str | Path | None = None, seed: int = 0,
    format: Literal["jsonl", "parquet"] = "jsonl",
) -> ExposureLog:
    """Simulate a memory system under CMP and return (and optionally write) its log.

    Parameters
    ----------
    config : SimulationConfig or str
        Settings, or a preset name (:data:`~cmp_bayes.simulation.presets.PRESETS`).
    out : path, optional
        Write the complete log directory there (``write_log``), plus
        ``simulation.json`` (config and seed, from which the world is re-derived).
    seed : int
        Seed of everything (world, design, outcomes).
    format : {"jsonl", "parquet"}
        On-disk form when ``out`` is given.

    Returns
    -------
    ExposureLog
        With ``labels`` (``required``, true per-pair ``utility``), ``memories``,
        ``design``, ``rankings``; ``attrs["simulation"]`` holds the config and seed
        and ``attrs["world"]`` the :class:`World` (retriever included).
    """
    cfg = SimulationConfig.preset(config) if isinstance(config, str) else config
    if not isinstance(cfg, SimulationConfig):
        raise ConfigError(f"config must be a SimulationConfig or a preset name, got {type(config).__name__}")
    w = build_world(cfg, int(seed))
    T, k, B = cfg.steps, cfg.exposure_slots, cfg.slots
    steps = np.arange(T)
    ranking = _rankings(w, steps)  # (T, candidates)
    nret = B - k
    retrieved = ranking[:, :nret]
    nm = w.n_memories
    # exposable: in the store at some step without being retrieved there
    in_store = np.maximum(w.deleted - w.created, 0)
    ret_count = np.bincount(retrieved[retrieved >= 0], minlength=nm)
    rng_pool = np.random.default_rng([seed, 3])
    exposable = np.flatnonzero((in_store - ret_count > 0) & (rng_pool.random(nm) < cfg.pool_share))
    pool_pos = np.full(nm + 1, -1, dtype=np.int64)  # last entry maps -1 padding
    pool_pos[exposable] = np.arange(exposable.size)
    lifetimes = None
    if not np.all((w.created == 0) & (w.deleted == T)):
        lifetimes = {
            str(w.memory_ids[m]): (int(w.created[m]), int(w.deleted[m])) for m in exposable
        }
    design_seed = int(np.random.default_rng([seed, 4]).integers(2**31))
    if cfg.assignment == "window":
        deal = _deal_window(cfg, w, ranking, exposable, pool_pos, in_store, lifetimes, design_seed, seed)
    else:
        deal = _deal_pool(cfg, w, retrieved, exposable, pool_pos, in_store, lifetimes, design_seed)
    exp_step, exp_mem, exp_prop, exp_arm, design, sched = deal

    # contexts: retriever slots then exposure slots
    r_step, r_rank = np.nonzero(retrieved >= 0)
    r_mem = retrieved[r_step, r_rank]
    n_ret_step = np.bincount(r_step, minlength=T)
    first = np.r_[0, np.flatnonzero(np.diff(exp_step)) + 1] if exp_step.size else np.zeros(0, np.int64)
    within = np.arange(exp_step.size) - np.repeat(first, np.diff(np.r_[first, exp_step.size]))
    ctx_step = np.r_[r_step, exp_step]
    ctx_slot = np.r_[r_rank, n_ret_step[exp_step] + within]
    ctx_mem = np.r_[r_mem, exp_mem]
    is_exp = np.r_[np.zeros(r_step.size, bool), np.ones(exp_step.size, bool)]
    ctx_prop = np.r_[np.full(r_step.size, np.nan), exp_prop]
    order = np.lexsort((ctx_slot, ctx_step))
    ctx_step, ctx_slot, ctx_mem, is_exp = ctx_step[order], ctx_slot[order], ctx_mem[order], is_exp[order]
    ctx_prop = ctx_prop[order]
    ctx_rank = np.where(is_exp, -1, ctx_slot)

    # outcomes
    q_of = w.step_query
    u_ctx = w.util[q_of[ctx_step], w.col[ctx_mem]]
    s = w.base[q_of] + np.bincount(ctx_step, weights=u_ctx, minlength=T)
    y = w.reader.sample(s, np.random.default_rng([seed, 5]))

    columns = {
        "step": ctx_step, "slot": ctx_slot, "memory_id": w.memory_ids[ctx_mem],
        "source": np.where(is_exp, EXPOSURE, RETRIEVER),
        "rank": pd.Series(np.where(is_exp, 0, ctx_rank), dtype="Int64").where(~is_exp, pd.NA),
        "propensity": pd.Series(np.nan_to_num(ctx_prop), dtype="Float64").where(is_exp, pd.NA),
    }
    if exp_arm is not None:  # window designs: the spec requires an arm on every exposure slot
        arm = np.concatenate([np.full(r_step.size, None, dtype=object), exp_arm])[order]
        columns["arm"] = pd.Series(arm, dtype="string")
    contexts = coerce(pd.DataFrame(columns), CONTEXT_COLUMNS)
    steps_df = coerce(pd.DataFrame({
        "step": steps, "query_id": w.query_ids[q_of], "outcome": y, "group": w.query_group[q_of],
    }), STEP_COLUMNS)
    depth = cfg.ranking_depth
    if cfg.assignment == "window" and depth:
        depth = max(depth, nret + int(cfg.window or 0))  # the spec: ranks 0 .. B - k + W - 1 at least
    depth = ranking.shape[1] if depth == 0 else min(depth, ranking.shape[1])
    rk_step, rk_rank = np.nonzero(ranking[:, :depth] >= 0)
    rankings = coerce(pd.DataFrame({
        "step": rk_step, "rank": rk_rank, "memory_id": w.memory_ids[ranking[rk_step, rk_rank]],
    }), RANKING_COLUMNS)
    memories = coerce(pd.DataFrame({
        "memory_id": w.memory_ids, "created_step": w.created,
        "deleted_step": pd.Series(w.deleted, dtype="Int64").where(w.deleted < T, pd.NA),
    }), MEMORY_COLUMNS)
    from cmp_bayes.simulation.truth import pair_utilities

    labels = pair_utilities(w, ranking, ctx_step, ctx_mem, is_exp, s)
    log = ExposureLog(
        steps=steps_df, contexts=contexts, rankings=rankings, memories=memories,
        design=design if k else None, labels=labels,
    )
    log.attrs["simulation"] = {"config": cfg.to_dict(), "seed": int(seed)}
    log.attrs["world"] = w
    log.attrs["scheduler_shortfall"] = dict(sched.shortfall)
    if out is not None:
        write_simulation(log, out, format=format)
    return log


#: what a deal returns: exposure steps, memories (global indices), propensities,
#: arms (None outside window designs), the design, the scheduler
Deal = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any], Any]


def _deal_pool(
    cfg: SimulationConfig, w: World, retrieved: np.ndarray, exposable: np.ndarray, pool_pos: np.ndarray,
    in_store: np.ndarray, lifetimes: dict[str, tuple[int, int]] | None, design_seed: int,
    slots_per_step: int | None = None,
) -> Deal:
    """Exposures dealt over the pool (balanced or Bernoulli), every step at once.

    ``slots_per_step``: how many slots per step the pool gets (default ``k``;
    a window design's ``j`` pool slots). Returns exposure steps, memories (global
    indices), propensities, arms (``None``), the design and the scheduler.
    """
    from cmp_bayes.design.scheduler import ExposureScheduler

    T, B = cfg.steps, cfg.slots
    k = cfg.exposure_slots if slots_per_step is None else slots_per_step
    assignment = "balanced" if slots_per_step is not None else cfg.assignment
    sched = ExposureScheduler(
        B, k, [str(x) for x in w.memory_ids[exposable]], T, assignment,
        seed=design_seed, lifetimes=lifetimes,
    )
    exp_step, exp_pool = sched.deal(pool_pos[retrieved] if k else None)
    exp_mem = exposable[exp_pool]
    design = sched.design()
    if assignment == "balanced" and k:
        # the design's propensity is what was delivered: n_m / T_m
        delivered = np.bincount(exp_pool, minlength=exposable.size)
        design["pool"] = {
            str(w.memory_ids[m]): float(delivered[i] / in_store[m])
            for i, m in enumerate(exposable) if delivered[i] > 0
        }
    prop_of = _prop_array(w.memory_ids, design["pool"])
    return exp_step, exp_mem, prop_of[exp_mem], None, design, sched


def _deal_window(
    cfg: SimulationConfig, w: World, ranking: np.ndarray, exposable: np.ndarray, pool_pos: np.ndarray,
    in_store: np.ndarray, lifetimes: dict[str, tuple[int, int]] | None, design_seed: int, seed: int,
) -> Deal:
    """A window design's exposures (spec, "Targeted exposure"), every step at once.

    The ``j`` pool slots are a balanced design of ``j`` slots per step over the
    pool (the batch deal, collisions with retrieved memories swapped away); the
    ``k - j`` window slots are drawn uniformly without replacement from each
    step's ``W_t`` (ranks ``B - k .. B - k + W - 1`` of its in-store ranking, not
    retrieved, not in a pool slot), each with propensity ``min(1, (k - j) / |W_t|)``.
    """
    from cmp_bayes.design.batch import deal_window, window_candidates

    T, B, k, j = cfg.steps, cfg.slots, cfg.exposure_slots, cfg.pool_slots
    nret = B - k
    retrieved = ranking[:, :nret]
    p_step, p_mem, p_prop, _, pool_design, sched = _deal_pool(
        cfg, w, retrieved, exposable, pool_pos, in_store, lifetimes, design_seed, slots_per_step=j
    )
    pooled = np.full((T, max(j, 1)), -1, dtype=np.int64)
    if p_step.size:
        first = np.r_[0, np.flatnonzero(np.diff(p_step)) + 1]
        within = np.arange(p_step.size) - np.repeat(first, np.diff(np.r_[first, p_step.size]))
        pooled[p_step, within] = p_mem
    cand = window_candidates(ranking, nret, int(cfg.window or 0), np.c_[retrieved, pooled])
    w_step, w_mem, w_prop = deal_window(cand, k - j, np.random.default_rng([seed, 6]))
    step = np.r_[p_step, w_step]
    # stable by step: each step's pool slots come before its window slots
    order = np.argsort(step, kind="stable")
    arm = np.r_[np.full(p_step.size, "pool", dtype=object), np.full(w_step.size, "window", dtype=object)]
    design: dict[str, Any] = {
        "slots": B, "exposure_slots": k, "assignment": "window", "window": int(cfg.window or 0),
        "pool_slots": j, "steps": T, "seed": design_seed, "pool": pool_design["pool"],
    }
    return step[order], np.r_[p_mem, w_mem][order], np.r_[p_prop, w_prop][order], arm[order], design, sched


def _prop_array(memory_ids: np.ndarray, pool: dict[str, float]) -> np.ndarray:
    out = np.zeros(len(memory_ids))
    if pool:
        ids = np.array(list(pool), dtype=memory_ids.dtype)
        out[np.searchsorted(memory_ids, ids)] = np.array(list(pool.values()))
    return out


def write_simulation(log: ExposureLog, out: str | Path, format: Literal["jsonl", "parquet"] = "jsonl") -> Path:
    """Write a simulated log directory (``write_log``) plus ``simulation.json``."""
    from cmp_bayes.atomic import write_text_atomic
    from cmp_bayes.log.export import write_log

    path = write_log(log, out, format=format)
    meta = {**log.attrs["simulation"], "note": "simulator settings; the world is re-derived from config + seed"}
    write_text_atomic(Path(path) / SIMULATION_FILE, json.dumps(meta, indent=1) + "\n")
    return Path(path)


def load_world(log: ExposureLog) -> World:
    """The :class:`World` behind a simulated log (from ``attrs`` or ``simulation.json``)."""
    if "world" in log.attrs:
        return log.attrs["world"]
    meta = log.attrs.get("simulation")
    if meta is None and log.source is not None:
        f = Path(log.source) / SIMULATION_FILE
        if f.is_file():
            meta = json.loads(f.read_text(encoding="utf-8"))
    if meta is None:
        raise ConfigError("not a simulated log: no simulation.json / attrs['simulation']")
    return build_world(SimulationConfig.from_dict(meta["config"]), int(meta["seed"]))
