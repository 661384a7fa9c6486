"""A small synthetic posterior that follows the posterior contract (common.md section 4).

A stand-in for report tests where sampling is not the point: hyperparameters,
per-memory rho / tau / utility, prior, predictive groups, observed arm counts,
sample stats and the identification group, with a known mix of statuses.
Unidentified memories get posterior draws from their prior (nothing learned),
as the real model produces.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED


def synthetic_posterior(
    n_memories: int = 24, chains: int = 2, draws: int = 200, seed: int = 0, diverging: int = 0
) -> xr.DataTree:
    """Contract-following DataTree; memories m00.. with statuses cycling id/id/ro/un."""
    rng = np.random.default_rng(seed)
    memory = np.array([f"m{i:02d}" for i in range(n_memories)], dtype=object)
    cycle = [IDENTIFIED, IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED]
    status = np.array([cycle[i % 4] for i in range(n_memories)], dtype=object)
    true_tau = rng.normal(0, 0.02, n_memories)
    true_tau[::5] = 0.3
    true_tau[3::7] = -0.2
    exposed = np.where(status == IDENTIFIED, 6, 0)
    retrieved = np.where(status == UNIDENTIFIED, 0, rng.integers(1, 30, n_memories))
    retrieved[status == IDENTIFIED] = rng.integers(0, 30, (status == IDENTIFIED).sum())
    in_store = np.full(n_memories, 200)
    control = in_store - exposed - retrieved
    base = 0.4
    y1 = rng.binomial(exposed, np.clip(base + true_tau, 0.02, 0.98))
    y0 = rng.binomial(control, base)

    def tau_draws(n_chain: int, n_draw: int, learned: bool) -> np.ndarray:
        spike = rng.normal(0, 0.02, (n_chain, n_draw, n_memories))
        slab = rng.normal(0, 0.25, (n_chain, n_draw, n_memories))
        prior = np.where(rng.random((n_chain, n_draw, n_memories)) < 0.8, spike, slab)
        if not learned:
            return prior
        post = true_tau + rng.normal(0, 0.08, (n_chain, n_draw, n_memories))
        return np.where(status == IDENTIFIED, post, prior)

    def group(n_chain: int, n_draw: int, learned: bool) -> xr.Dataset:
        tau = tau_draws(n_chain, n_draw, learned)
        rho = rng.beta(1 + retrieved, 1 + in_store - retrieved, (n_chain, n_draw, n_memories))
        dims = ("chain", "draw", "memory")
        return xr.Dataset(
            {
                "tau_null_sd": (
                    ("chain", "draw"),
                    np.abs(rng.normal(0.02, 0.003, (n_chain, n_draw))),
                ),
                "tau_helps_mean": (("chain", "draw"), rng.normal(0.3, 0.03, (n_chain, n_draw))),
                "weight_intercept": (
                    ("chain", "draw", "effect_kind"),
                    rng.normal(-2, 0.2, (n_chain, n_draw, 2)),
                ),
                "tau": (dims, tau),
                "rho": (dims, rho),
                "utility": (dims, rho * tau),
            },
            coords={
                "chain": np.arange(n_chain),
                "draw": np.arange(n_draw),
                "memory": memory,
                "effect_kind": ["helps", "hurts"],
            },
        )

    post = group(chains, draws, True)
    prior = group(1, 300, False)
    pt = post["tau"].to_numpy()
    p_rep = np.clip(base + pt, 0.0, 1.0)
    pp = xr.Dataset(
        {
            "exposed_outcome_sum": (
                ("chain", "draw", "memory"),
                rng.binomial(exposed, p_rep).astype(np.float32),
            )
        },
        coords={"chain": np.arange(chains), "draw": np.arange(draws), "memory": memory},
    )
    prp = xr.Dataset(
        {
            "exposed_outcome_sum": (
                ("chain", "draw", "memory"),
                rng.binomial(exposed, np.clip(base + prior["tau"].to_numpy(), 0, 1)).astype(
                    np.float32
                ),
            )
        },
        coords={"chain": [0], "draw": np.arange(300), "memory": memory},
    )
    observed = xr.Dataset(
        {
            "exposed": ("memory", exposed.astype(np.int64)),
            "exposed_outcome_sum": ("memory", y1.astype(float)),
            "control": ("memory", control.astype(np.int64)),
            "control_outcome_sum": ("memory", y0.astype(float)),
            "retrieved": ("memory", retrieved.astype(np.int64)),
            "in_store": ("memory", in_store.astype(np.int64)),
        },
        coords={"memory": memory},
    )
    div = np.zeros((chains, draws), dtype=bool)
    div.flat[:diverging] = True
    sample_stats = xr.Dataset(
        {
            "diverging": (("chain", "draw"), div),
            "energy": (("chain", "draw"), rng.normal(size=(chains, draws))),
            "depth": (("chain", "draw"), np.full((chains, draws), 3)),
            "maxdepth_reached": (("chain", "draw"), np.zeros((chains, draws), dtype=bool)),
        },
        coords={"chain": np.arange(chains), "draw": np.arange(draws)},
    )
    prior_sd = prior["tau"].std(("chain", "draw")).to_numpy()
    post_sd = post["tau"].std(("chain", "draw")).to_numpy()
    shift = np.abs(
        post["tau"].mean(("chain", "draw")) - prior["tau"].mean(("chain", "draw"))
    ).to_numpy()
    ident = xr.Dataset(
        {
            "status": ("memory", status),
            "exposed": ("memory", exposed.astype(np.int64)),
            "retrieved": ("memory", retrieved.astype(np.int64)),
            "in_store": ("memory", in_store.astype(np.int64)),
            "contraction": ("memory", np.where(status == IDENTIFIED, post_sd / prior_sd, 1.0)),
            "mean_shift": ("memory", np.where(status == IDENTIFIED, shift / prior_sd, 0.0)),
            "propensity": ("memory", np.where(status == IDENTIFIED, 0.03, np.nan)),
        },
        coords={"memory": memory},
    )
    tree = xr.DataTree.from_dict(
        {
            "posterior": post,
            "prior": prior,
            "posterior_predictive": pp,
            "prior_predictive": prp,
            "observed_data": observed,
            "sample_stats": sample_stats,
            "identification": ident,
        }
    )
    tree.attrs.update(
        {
            "cmp_bayes_version": "0.1.0",
            "model_config": "{}",
            "sampler_config": '{"sampler": "synthetic"}',
            "log_checksum": "0" * 64,
            "log_path": "synthetic",
            "outcome_kind": "binary",
            "created_at": "2026-11-30T00:00:00+00:00",
        }
    )
    return tree
