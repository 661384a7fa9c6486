"""Run one of the supported samplers on the hyperparameter model, retrying unhealthy NUTS fits.

Each sampler returns (posterior Dataset over (chain, draw, ...), sample_stats
Dataset over (chain, draw) with at least ``diverging``).
:func:`sample_until_healthy` runs :func:`sample_hyper` on the retry schedule of
:meth:`SamplerConfig.attempt` until the sampler-health verdict passes.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from typing import Any

import numpy as np
import pymc as pm
import xarray as xr

from cmp_bayes.constants import MAX_DIVERGENCE_SHARE, RHAT_MAX
from cmp_bayes.errors import ConfigError
from cmp_bayes.model.config import SamplerConfig

#: Samplers whose fits can be retried (ADVI has no divergences or R-hat to fail).
RETRIED_SAMPLERS: tuple[str, ...] = ("nutpie", "pymc", "numpyro")


def thin_step(chains: int, draws: int, keep: int) -> int:
    """Every how many draws per chain are kept so that at most ``keep`` draws remain in total."""
    return max(1, math.ceil(chains * draws / keep))


def sample_until_healthy(
    model: pm.Model, cfg: SamplerConfig, names: list[str]
) -> tuple[xr.Dataset, xr.Dataset, int, list[dict[str, Any]]]:
    """Sample on the retry schedule until the sampler-health verdict passes.

    Each attempt's health is judged on the thinned hyperparameter draws and its
    ``sample_stats``: exactly what ``decide`` and the report later judge, so an
    attempt fit calls healthy is one they call healthy (for every estimand). Only
    failures a new run can cure are retried: divergences or an R-hat above the
    thresholds, never a single chain or an unrecorded ``diverging``.

    Parameters
    ----------
    model : pymc.Model
        The hyperparameter model.
    cfg : SamplerConfig
        Settings of attempt 1 and ``max_attempts``.
    names : list of str
        The hyperparameters to keep.

    Returns
    -------
    (posterior, sample_stats, step, attempts)
        The kept attempt's thinned hyperparameter draws over (chain, draw, ...), its
        sample_stats (unthinned), the thinning step, and one dict per attempt with
        keys attempt, seed, target_accept, tune, divergences, max_rhat,
        worst_variable, ok, problems, seconds, kept (see :func:`attempts_json`).
    """
    from cmp_bayes.posterior.health import sampler_health

    n_attempts = cfg.max_attempts if cfg.sampler in RETRIED_SAMPLERS else 1
    attempts: list[dict[str, Any]] = []
    kept: tuple[xr.Dataset, xr.Dataset, int] | None = None
    for k in range(1, n_attempts + 1):
        acfg = cfg.attempt(k)
        start = time.perf_counter()
        post, stats = sample_hyper(model, acfg)
        seconds = time.perf_counter() - start
        step = thin_step(post.sizes["chain"], post.sizes["draw"], cfg.keep_draws)
        post = post[names].isel(draw=slice(None, None, step))
        health = sampler_health(
            xr.DataTree.from_dict({"posterior": post, "sample_stats": stats}), advisory=False
        )
        attempts.append(
            {
                "attempt": k,
                "seed": int(acfg.seed),
                "target_accept": float(acfg.target_accept),
                "tune": int(acfg.tune),
                "divergences": health.divergences,
                "max_rhat": health.max_rhat,
                "worst_variable": health.worst_variable,
                "ok": bool(health.ok),
                "problems": "; ".join(health.problems),
                "seconds": round(seconds, 3),
                "kept": False,
            }
        )
        kept = (post, stats, step)
        if health.ok or not _retriable(health):
            break
    assert kept is not None  # n_attempts >= 1
    attempts[-1]["kept"] = True
    return (*kept, attempts)


def _retriable(health: Any) -> bool:
    """Whether the failure is one another run can cure (too many divergences, high R-hat)."""
    share = health.divergence_share
    diverged = share is not None and share > MAX_DIVERGENCE_SHARE
    mixed_badly = health.max_rhat is not None and health.max_rhat > RHAT_MAX
    return diverged or mixed_badly


def attempts_json(attempts: list[dict[str, Any]]) -> str:
    """The ``fit_attempts`` root attribute: the attempts of :func:`sample_until_healthy` as JSON.

    A JSON list, one object per attempt in order: ``attempt`` (1-based), ``seed``,
    ``target_accept``, ``tune`` (steps per chain), ``divergences`` (count, null if
    not recorded), ``max_rhat`` and ``worst_variable`` (over every hyperparameter;
    null with one chain), ``ok`` (the verdict over every hyperparameter),
    ``problems`` (why not ok; "" when ok), ``seconds`` (sampling wall time) and
    ``kept`` (true for the one attempt whose draws the posterior holds).
    """
    return json.dumps(attempts, sort_keys=True)


def sample_hyper(model: pm.Model, cfg: SamplerConfig) -> tuple[xr.Dataset, xr.Dataset]:
    """Sample the model's free variables with ``cfg.sampler``.

    The sampler's own bar draws when ``cfg.progressbar`` asks for it and stderr
    is a terminal (or a notebook) and nothing is quiet
    (:func:`cmp_bayes.progress.sampler_progress`): off when stderr is a file.
    """
    from dataclasses import replace

    from cmp_bayes.progress import sampler_progress

    cfg = replace(cfg, progressbar=sampler_progress(cfg.progressbar))
    if cfg.sampler == "advi":
        return _advi(model, cfg)
    if cfg.sampler == "numpyro" and (
        importlib.util.find_spec("numpyro") is None or importlib.util.find_spec("jax") is None
    ):
        raise ConfigError(
            "sampler 'numpyro' needs jax and numpyro: pip install numpyro "
            "(or use --sampler nutpie)"
        )
    if cfg.sampler == "nutpie":
        return _nutpie(model, cfg)
    kwargs = {}
    if cfg.sampler == "pymc":
        kwargs["cores"] = min(cfg.chains, os.cpu_count() or 1)
    with model:
        tree = pm.sample(
            draws=cfg.draws, tune=cfg.tune, chains=cfg.chains, random_seed=cfg.seed,
            progressbar=cfg.progressbar, nuts_sampler=cfg.sampler,
            target_accept=cfg.target_accept, **kwargs,
        )
    return _groups(tree)


def _nutpie(model: pm.Model, cfg: SamplerConfig) -> tuple[xr.Dataset, xr.Dataset]:
    """nutpie called directly (numba backend, ``cfg.adaptation`` mass matrix).

    Measured at 10k memories: the same model, settings and leapfrog steps sampled
    in 44 s this way and in 89 s through ``pm.sample(nuts_sampler="nutpie")``
    (reports/benchmarks/fit.md).
    """
    import nutpie

    compiled = nutpie.compile_pymc_model(model)
    tree = nutpie.sample(
        compiled, draws=cfg.draws, tune=cfg.tune, chains=cfg.chains,
        cores=min(cfg.chains, os.cpu_count() or 1), seed=cfg.seed,
        progress_bar=cfg.progressbar, save_warmup=False,
        target_accept=cfg.target_accept, adaptation=cfg.adaptation,
    )
    return _groups(tree)


def _groups(tree: xr.DataTree) -> tuple[xr.Dataset, xr.Dataset]:
    """The posterior and sample_stats of a sampler's DataTree."""
    stats = tree["sample_stats"].to_dataset()
    # object-typed stats (nutpie's divergence messages) do not belong in NetCDF
    stats = stats[[v for v in stats.data_vars if stats[v].dtype != object]]
    return tree["posterior"].to_dataset(), stats


def _advi(model: pm.Model, cfg: SamplerConfig) -> tuple[xr.Dataset, xr.Dataset]:
    """Mean-field ADVI; ``chains * draws`` draws from the approximation as one chain."""
    with model:
        approx = pm.fit(
            n=cfg.advi_iterations, method="advi", random_seed=cfg.seed,
            progressbar=cfg.progressbar,
        )
        tree = approx.sample(draws=cfg.draws * cfg.chains, random_seed=cfg.seed)
    post = tree["posterior"].to_dataset()
    shape = (post.sizes["chain"], post.sizes["draw"])
    stats = xr.Dataset(
        {"diverging": (("chain", "draw"), np.zeros(shape, dtype=bool))},
        coords={"chain": post["chain"], "draw": post["draw"]},
        attrs={
            "method": "advi",
            "final_loss": float(np.mean(approx.hist[-100:])),
            "note": "variational approximation: no divergences or R-hat exist; diverging is all False",
        },
    )
    return post, stats
