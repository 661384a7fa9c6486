"""Small log generators for the statistics / diagnostics / estimator tests.

``random_log`` builds arbitrary (not necessarily CMP-shaped) logs for the
property tests; ``cmp_log`` is a tiny structural simulator of a memory system
under the CMP exposure design with known per-memory truth, used until (and
beside) the package's own simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)


def random_log(
    seed: int,
    n_steps: int,
    n_memories: int,
    n_queries: int,
    lifetimes: bool,
    rankings: bool,
    groups: bool,
    binary: bool,
) -> ExposureLog:
    """An arbitrary valid log: random contexts, sources, lifetimes, rankings, groups."""
    rng = np.random.default_rng(seed)
    mem = [f"m{i}" for i in range(n_memories)]
    step_vals = np.sort(rng.choice(np.arange(3 * n_steps + 1), n_steps, replace=False))
    queries = rng.integers(0, n_queries, n_steps)
    qgroup = {q: (f"g{q % 2}" if (groups and q % 3 != 2) else None) for q in range(n_queries)}
    outcome = rng.integers(0, 2, n_steps).astype(float) if binary else rng.random(n_steps)
    steps = pd.DataFrame(
        {
            "step": step_vals,
            "query_id": [f"q{q}" for q in queries],
            "outcome": outcome,
            "group": [qgroup[q] for q in queries],
        }
    )
    ctx_rows, rank_rows = [], []
    pool = {m: 0.25 for m in mem if rng.random() < 0.6}
    for s in step_vals:
        k = rng.integers(0, n_memories + 1)
        for slot, j in enumerate(rng.permutation(n_memories)[:k]):
            m = mem[j]
            exp = m in pool and rng.random() < 0.4
            ctx_rows.append(
                {
                    "step": s,
                    "slot": slot,
                    "memory_id": m,
                    "source": "exposure" if exp else "retriever",
                    "rank": None if exp else slot,
                    "propensity": pool[m] if exp else None,
                }
            )
        if rankings and rng.random() < 0.8:
            r = rng.permutation(n_memories)[: rng.integers(0, n_memories + 1)]
            rank_rows += [{"step": s, "rank": i, "memory_id": mem[j]} for i, j in enumerate(r)]
    memories = None
    if lifetimes:
        created = rng.integers(-1, 3 * n_steps + 1, n_memories)
        dele = created + rng.integers(0, 3 * n_steps + 2, n_memories)
        never = rng.random(n_memories) < 0.3
        memories = coerce(
            pd.DataFrame(
                {
                    "memory_id": mem,
                    "created_step": created,
                    "deleted_step": pd.array(np.where(never, -1, dele)).astype("Int64"),
                }
            ).assign(deleted_step=lambda d: d["deleted_step"].mask(never)),
            MEMORY_COLUMNS,
        )
    ctx = pd.DataFrame(ctx_rows, columns=list(CONTEXT_COLUMNS)[:6])  # slots without an arm
    rk = pd.DataFrame(rank_rows, columns=list(RANKING_COLUMNS))
    design = {"slots": n_memories, "exposure_slots": n_memories, "pool": pool} if pool else None
    return ExposureLog(
        steps=coerce(steps, STEP_COLUMNS),
        contexts=coerce(ctx, CONTEXT_COLUMNS),
        rankings=coerce(rk, RANKING_COLUMNS) if rankings else None,
        memories=memories,
        design=design,
    )


@dataclass
class CmpTruth:
    """Truth of one ``cmp_log`` draw, one row per memory.

    Columns: memory_id, tau (the structural effect on its own query's steps),
    tau_true (exactly the memory-level estimand of the Hajek estimator, see
    ``cmp_log``), required, visible (the retriever can surface it), in_pool,
    exposures (n_m, fixed by the design).
    """

    memories: pd.DataFrame


def cmp_log(
    seed: int,
    truth_seed: int = 0,
    n_memories: int = 60,
    n_queries: int = 4,
    n_steps: int = 800,
    retrieved_slots: int = 2,
    base: float = 0.2,
    effect: float = 0.25,
    required_share: float = 0.35,
    hidden_share: float = 0.5,
    pool_share: float = 1.0,
    rankings: bool = False,
) -> tuple[ExposureLog, CmpTruth]:
    """A small CMP log (one exposure slot) whose Hajek estimand is known exactly.

    Structure (``truth_seed`` fixes it; ``seed`` draws the exposure order and
    the outcomes, so draws with one ``truth_seed`` replicate one design):
    memory m belongs to query ``o_m``; required memories have effect
    ``tau_m = effect`` on steps of their own query, others 0. A share
    ``hidden_share`` of required memories is invisible to the retriever
    (the lexical gap). For query q the retriever ranks q's visible memories
    first (random order), then every other memory; the top
    ``retrieved_slots`` fill the retriever slots. Success probability at step
    t is ``base + sum over context memories j of tau_j * [o_j == q_t]``
    (parameters keep it inside [0, 1]). Steps cycle through the queries, so
    each query has ``T_q = T / Q`` steps.

    Exposure design: the pool is a share ``pool_share`` of the memories no
    query retrieves (so no exposure ever collides with retrieval), one
    exposure slot per step, balanced: ``T`` slots dealt as floor/ceil of
    ``T / |pool|`` per pool memory (counts fixed by ``truth_seed``), in a
    uniformly random order (``seed``).

    Hajek estimand, derived: m's exposed steps are a uniformly random subset
    S of size n_m of the T steps and its control steps the complement
    (n0 = T - n_m). The retriever term depends on the query only, and a
    random subset and its complement have the same expected mean of any fixed
    per-step quantity, so it cancels. The own-effect term has expected mean
    ``tau_m T_q / T``. On control steps the exposure slot holds the other
    pool memories' exposures, each landing on a uniform control step, so the
    expected control mean of the occupant's effect is
    ``sum_{j != m} n_j tau_j E[c_{o_j}(S)] / n0^2 = sum_{j != m} n_j tau_j T_{o_j} / (T n0)``
    (``E[c_q(S)] = T_q n0 / T`` control steps of query q). Hence
    ``tau_true_m = (tau_m - sum_{j != m} n_j tau_j / n0) / Q``, exact in
    expectation over the randomization and the outcome noise.
    """
    if n_steps % n_queries:
        raise ValueError("n_steps must be a multiple of n_queries")
    trng = np.random.default_rng(truth_seed)
    rng = np.random.default_rng([truth_seed, seed])
    m_ids = np.array([f"m{i:03d}" for i in range(n_memories)], dtype=object)
    owner = trng.integers(0, n_queries, n_memories)
    required = trng.random(n_memories) < required_share
    tau = np.where(required, effect, 0.0)
    visible = ~(required & (trng.random(n_memories) < hidden_share))
    rank_of = np.empty((n_queries, n_memories), dtype=np.int64)  # memory index by rank
    for q in range(n_queries):
        own = np.flatnonzero((owner == q) & visible)
        rest = np.setdiff1d(np.arange(n_memories), own)
        rank_of[q] = np.concatenate([trng.permutation(own), trng.permutation(rest)])
    top = rank_of[:, :retrieved_slots]  # (Q, R)
    retrievable = np.zeros(n_memories, dtype=bool)
    retrievable[top.ravel()] = True
    candidates = np.flatnonzero(~retrievable)
    pool = np.sort(trng.permutation(candidates)[: int(round(pool_share * len(candidates)))])
    counts = np.full(len(pool), n_steps // len(pool))
    counts[trng.permutation(len(pool))[: n_steps - counts.sum()]] += 1
    n = np.zeros(n_memories, dtype=np.int64)
    n[pool] = counts
    prop = n / n_steps

    queries = np.arange(n_steps) % n_queries
    occupant = rng.permutation(np.repeat(pool, counts))  # exposure slot of each step
    retr = top[queries]  # (T, R)
    own_effect = tau * (owner[None, :] == np.arange(n_queries)[:, None])  # (Q, M)
    p = base + own_effect[queries[:, None], retr].sum(1) + own_effect[queries, occupant]
    if p.max() > 1.0:  # clipping would break additivity, and with it the exact estimand
        raise ValueError("base + effects exceed 1: lower base or effect")
    outcome = (rng.random(n_steps) < p).astype(np.float64)

    t_idx = np.arange(n_steps)
    r_slots = retrieved_slots
    ctx = pd.DataFrame(
        {
            "step": np.concatenate([np.repeat(t_idx, r_slots), t_idx]),
            "slot": np.concatenate(
                [np.tile(np.arange(r_slots), n_steps), np.full(n_steps, r_slots)]
            ),
            "memory_id": np.concatenate([m_ids[retr.ravel()], m_ids[occupant]]),
            "source": ["retriever"] * (n_steps * r_slots) + ["exposure"] * n_steps,
            "rank": pd.array(
                np.concatenate([np.tile(np.arange(r_slots), n_steps), np.full(n_steps, -1)]),
                dtype="Int64",
            ),
            "propensity": pd.array(
                np.concatenate([np.full(n_steps * r_slots, np.nan), prop[occupant]]),
                dtype="Float64",
            ),
        }
    ).sort_values(["step", "slot"], kind="stable")
    ctx["rank"] = ctx["rank"].mask(ctx["source"] == "exposure")
    ctx["propensity"] = ctx["propensity"].mask(ctx["source"] == "retriever")
    rk = None
    if rankings:
        rk = pd.DataFrame(
            {
                "step": np.repeat(t_idx, n_memories),
                "rank": np.tile(np.arange(n_memories), n_steps),
                "memory_id": m_ids[rank_of[queries].ravel()],
            }
        )
    labels = pd.DataFrame(
        {
            "query_id": [f"q{o}" for o in owner],
            "memory_id": m_ids,
            "required": required,
            "utility": tau,
        }
    )
    log = ExposureLog(
        steps=coerce(
            pd.DataFrame(
                {"step": t_idx, "query_id": [f"q{q}" for q in queries], "outcome": outcome}
            ),
            STEP_COLUMNS,
        ),
        contexts=coerce(ctx, CONTEXT_COLUMNS),
        rankings=None if rk is None else coerce(rk, RANKING_COLUMNS),
        design={
            "slots": retrieved_slots + 1,
            "exposure_slots": 1,
            "assignment": "balanced",
            "steps": n_steps,
            "seed": seed,
            "pool": {str(m_ids[j]): float(prop[j]) for j in pool},
        },
        labels=coerce(labels, LABEL_COLUMNS),
    )
    n0 = n_steps - n
    contamination = np.where(n0 > 0, ((n * tau).sum() - n * tau) / np.maximum(n0, 1), np.nan)
    tau_true = np.where(n > 0, (tau - contamination) / n_queries, np.nan)
    truth = pd.DataFrame(
        {
            "memory_id": m_ids,
            "tau": tau,
            "tau_true": tau_true,
            "required": required,
            "visible": visible,
            "in_pool": n > 0,
            "exposures": n,
        }
    )
    return log, CmpTruth(truth)
