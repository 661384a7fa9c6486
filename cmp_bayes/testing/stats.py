"""Synthetic memory-level statistics with known tau, for the model's tests and benchmarks.

``synthetic_stats`` draws arm counts directly from a stated truth (no steps),
with exactly the variable names of ``exposure_stats(log)``, so the model can be
tested and benchmarked at any size without the simulator.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr


def synthetic_stats(
    n_memories: int = 300,
    seed: int = 0,
    exposures: int = 6,
    in_store: int = 400,
    pool_share: float = 0.8,
    help_share: float = 0.1,
    hurt_share: float = 0.05,
    null_sd: float = 0.01,
    outcome_kind: str = "binary",
) -> tuple[xr.Dataset, pd.DataFrame]:
    """Memory-level statistics and the truth they were drawn from.

    Truth: tau_m = 0.3 + 0.1 z (helps, clipped >= 0.05), -0.15 + 0.05 z (hurts,
    clipped <= -0.02) or Normal(0, null_sd); helpful memories rank near the top
    (rank covariate informative, not decisive); a memory with rank < 5 is
    retrieved at 90% of its steps, else never; ``pool_share`` of memories are in
    the exposure pool with ``exposures`` exposures each; baseline b_m ~ Beta(8, 8).

    Returns
    -------
    (xarray.Dataset over memory, DataFrame with memory_id, tau_true, rho_true, required)
    """
    rng = np.random.default_rng(seed)
    m = n_memories
    memory = np.array([f"m{i:06d}" for i in range(m)], dtype=object)
    u = rng.random(m)
    kind = np.where(u < help_share, 1, np.where(u < help_share + hurt_share, -1, 0))
    z = rng.normal(size=m)
    tau = np.where(
        kind == 1,
        np.maximum(0.3 + 0.1 * z, 0.05),
        np.where(kind == -1, np.minimum(-0.15 + 0.05 * z, -0.02), rng.normal(0, null_sd, m)),
    )
    rank = np.floor(np.exp(np.where(kind == 1, rng.normal(2.0, 1.2, m), rng.normal(3.5, 1.2, m))))
    rank = np.minimum(rank, 300)
    ranked_steps = np.where(rng.random(m) < 0.9, in_store, 0)  # 10% never ranked
    retrieved_flag = (rank < 5) & (ranked_steps > 0)
    n_store = np.full(m, in_store, dtype=np.int64)
    retrieved = np.where(retrieved_flag, rng.binomial(in_store, 0.9, m), 0).astype(np.int64)
    in_pool = rng.random(m) < pool_share
    exposed = np.where(in_pool, exposures, 0).astype(np.int64)
    control = n_store - retrieved - exposed
    base = rng.beta(8, 8, m)
    p1 = np.clip(base + tau, 0.0, 1.0)
    if outcome_kind == "binary":
        y1 = rng.binomial(exposed, p1).astype(np.float64)
        y0 = rng.binomial(control, base).astype(np.float64)
        s1, s0 = y1.copy(), y0.copy()
    else:
        y1 = rng.normal(exposed * p1, np.sqrt(exposed * 0.04))
        y0 = rng.normal(control * base, np.sqrt(control * 0.04))
        s1 = y1**2 / np.maximum(exposed, 1) + exposed * 0.04
        s0 = y0**2 / np.maximum(control, 1) + control * 0.04
    yr = rng.binomial(retrieved, np.clip(base + 0.5 * tau, 0, 1)).astype(np.float64)
    stats = xr.Dataset(
        {
            "in_store": ("memory", n_store),
            "retrieved": ("memory", retrieved),
            "retrieved_outcome_sum": ("memory", yr),
            "retrieved_outcome_sumsq": ("memory", yr),
            "exposed": ("memory", exposed),
            "exposed_outcome_sum": ("memory", y1),
            "exposed_outcome_sumsq": ("memory", s1),
            "control": ("memory", control),
            "control_outcome_sum": ("memory", y0),
            "control_outcome_sumsq": ("memory", s0),
            "ranked": ("memory", ranked_steps.astype(np.int64)),
            "rank_median": ("memory", np.where(ranked_steps > 0, rank, np.nan)),
            "rank_best": ("memory", np.where(ranked_steps > 0, rank, np.nan)),
            "propensity": ("memory", np.where(in_pool, exposures / in_store, np.nan)),
            "in_pool": ("memory", in_pool),
        },
        coords={"memory": memory},
        attrs={
            "n_steps": in_store,
            "outcome_kind": outcome_kind,
            "log_checksum": f"synthetic-{seed}",
        },
    )
    truth = pd.DataFrame(
        {
            "memory_id": memory.astype(str),
            "tau_true": tau,
            "rho_true": retrieved / n_store,
            "required": kind == 1,
        }
    )
    return stats, truth
