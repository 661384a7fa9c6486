"""``fit``: exposure log (or its statistics) -> posterior DataTree (the contract).

Steps: sufficient statistics -> precomputed grid likelihood -> NUTS (or ADVI)
over the hyperparameters -> exact per-draw recovery of each memory's tau and
rho -> prior, predictive and identification groups -> one DataTree with the
root attributes of the posterior contract (docs/model.md; checked by
:mod:`cmp_bayes.posterior.contract`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.model.config import ModelConfig, SamplerConfig

if TYPE_CHECKING:  # PyMC/PyTensor load only when a fit runs
    from cmp_bayes.model.build import ModelData

#: Per-memory posterior variables of the contract.
MEMORY_VARS: tuple[str, ...] = ("rho", "tau", "utility")


def fit(
    log: ExposureLog | xr.Dataset,
    model: ModelConfig | None = None,
    sampler: SamplerConfig | str | None = None,
    *,
    by: str | None = None,
    **overrides: Any,
) -> xr.DataTree:
    """Fit the hierarchical rho x tau model and return the posterior DataTree.

    Parameters
    ----------
    log : ExposureLog or xarray.Dataset
        An exposure log, or a memory-level statistics Dataset as returned by
        ``exposure_stats(log)`` (for scale work; an optional ``memory_group``
        variable over ``memory`` turns on group effects).
    model : ModelConfig, optional
        The model (default ``ModelConfig()``).
    sampler : SamplerConfig or str, optional
        How to fit it (default ``SamplerConfig()``). A sampler name, one of
        :data:`~cmp_bayes.model.config.SAMPLERS`, is shorthand:
        ``sampler="advi"`` is ``SamplerConfig(sampler="advi")``.
    by : {None, "query"}
        ``"query"`` fits the per-query variant (tau per memory-query pair pooled
        toward the memory's tau; needs an ExposureLog; see
        :mod:`cmp_bayes.model.per_query`). With
        ``model=ModelConfig(pair_model="gated")`` the relevance-gated pair model
        instead (sparse ``pair`` posterior; :mod:`cmp_bayes.model.gated`).
    **overrides
        Any :class:`~cmp_bayes.model.config.SamplerConfig` field (``draws``,
        ``tune``, ``chains``, ``seed``, ``progressbar``, ``keep_draws``, ...) for
        a quick call such as ``fit(log, draws=500, seed=1)``. They are taken
        by name, not as explicit parameters, so that ``SamplerConfig`` stays the
        one place where the sampler's settings and defaults are written.

    Returns
    -------
    xarray.DataTree
        Groups posterior, prior, posterior_predictive, prior_predictive,
        observed_data, sample_stats, identification, log_likelihood
        (memory-level fits: each exposed memory's tau_obs per draw; see
        docs/model.md) and memory_diagnostics (each memory's rank R-hat of
        tau and utility over the kept draws, with 2 chains or more;
        :mod:`cmp_bayes.posterior.memory_diagnostics`). A NUTS fit whose divergences or hyperparameter R-hat
        fail the sampler-health verdict is rerun on the schedule of
        ``SamplerConfig.max_attempts``; the root attributes ``fit_attempts``
        (JSON, every attempt) and ``fit_attempt_kept`` (the attempt whose draws
        these are: the first healthy one, else the last) record it. From an
        ExposureLog whose memories have text the posterior group carries the
        ``memory_text`` coordinate, and design.json's ``log_id`` and ``store``
        become root attributes (:mod:`cmp_bayes.posterior.provenance`).

    Raises
    ------
    ConfigError
        An override that contradicts a ``SamplerConfig`` passed as ``sampler``
        (same field, another value: neither silently wins), an invalid value,
        or a ``by`` other than None and ``"query"``.
    TypeError
        A keyword that is not a ``SamplerConfig`` field.
    """
    if model is None:
        model = ModelConfig()
    elif not isinstance(model, ModelConfig):
        raise TypeError(f"model must be a ModelConfig, got {type(model).__name__}")
    scfg = sampler_config(sampler, **overrides)
    if by not in (None, "query"):
        raise ConfigError(f"by must be None or 'query', got {by!r}")
    if model.pair_model == "gated" and by != "query":
        raise ConfigError("model.pair_model = 'gated' is a pair model: fit it with by='query'")
    stats, memory_group, meta = memory_inputs(log)
    pair_stats = None
    if by == "query":
        if not isinstance(log, ExposureLog):
            raise ConfigError("the per-query model (by='query') needs an ExposureLog, not a statistics Dataset")
        from cmp_bayes.statistics import exposure_stats

        if model.pair_model == "gated":
            from cmp_bayes.model.gated_fit import fit_gated

            tree = fit_gated(stats, exposure_stats(log, by="pair"), model, scfg, meta)
            tree.attrs.update(root_attrs(model, scfg, meta, tree.attrs["outcome_kind"], by="query"))
            return tree
        pair_stats = exposure_stats(log, by="query")
    return fit_stats(stats, memory_group, model, scfg, meta, pair_stats=pair_stats)


def sampler_config(sampler: SamplerConfig | str | None = None, **overrides: Any) -> SamplerConfig:
    """The :class:`SamplerConfig` that ``fit(log, sampler=sampler, **overrides)`` uses.

    Parameters
    ----------
    sampler : SamplerConfig or str, optional
        A config, a sampler name (``"nutpie"`` is ``SamplerConfig(sampler="nutpie")``)
        or None (``SamplerConfig()``).
    **overrides
        SamplerConfig fields. With a config given, each must equal the config's
        value; otherwise they build the config.

    Raises
    ------
    ConfigError
        An override that differs from the given config's value (the message
        names the field), or an invalid value.
    TypeError
        An unknown field, or a ``sampler`` of another type.
    """
    known = {f.name for f in dataclasses.fields(SamplerConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        hint = " (the model is fit(log, model=ModelConfig(...)))" if "config" in unknown else ""
        raise TypeError(
            f"fit() got unexpected keyword(s) {', '.join(unknown)}{hint}; "
            f"sampler settings are {', '.join(sorted(known))}"
        )
    if isinstance(sampler, SamplerConfig):
        clash = [k for k, v in overrides.items() if getattr(sampler, k) != v]
        if clash:
            k = clash[0]
            raise ConfigError(
                f"fit: {k}={overrides[k]!r} contradicts sampler={type(sampler).__name__}"
                f"({k}={getattr(sampler, k)!r}); set it in one place"
            )
        return sampler
    if isinstance(sampler, str):
        overrides = {**overrides, "sampler": sampler}
    elif sampler is not None:
        raise TypeError(f"sampler must be a SamplerConfig or a sampler name, got {type(sampler).__name__}")
    return SamplerConfig(**overrides)


def memory_inputs(log: ExposureLog | xr.Dataset) -> tuple[xr.Dataset, np.ndarray | None, dict]:
    """Memory-level statistics, each memory's main group (or None) and log metadata."""
    if isinstance(log, xr.Dataset):
        stats = log
        group = stats["memory_group"].values if "memory_group" in stats else None
        meta = {
            "log_checksum": str(stats.attrs.get("log_checksum", "") or ""),
            "log_path": str(stats.attrs.get("log_path", "") or ""),
        }
        return stats, group, meta
    if not isinstance(log, ExposureLog):
        raise ConfigError(f"fit needs an ExposureLog or a statistics Dataset, got {type(log).__name__}")
    from cmp_bayes.posterior.provenance import log_provenance
    from cmp_bayes.statistics import exposure_stats
    from cmp_bayes.statistics.groups import is_grouped, main_group

    stats = exposure_stats(log)
    # the second pass over the log only when there are groups to find
    group = main_group(exposure_stats(log, by="group")) if is_grouped(log.group_ids()) else None
    meta = {
        "log_checksum": str(log.checksum or stats.attrs.get("log_checksum", "") or ""),
        "log_path": str(log.source or ""),
        **log_provenance(log),  # memory texts, design.json's log_id and store
    }
    return stats, group, meta


def fit_stats(
    stats: xr.Dataset,
    memory_group: np.ndarray | None,
    config: ModelConfig,
    scfg: SamplerConfig,
    meta: dict,
    pair_stats: xr.Dataset | None = None,
) -> xr.DataTree:
    """Fit on a memory-level statistics Dataset (see :func:`fit`).

    ``pair_stats`` (``exposure_stats(log, by="query")``) selects the per-query
    variant (:mod:`cmp_bayes.model.per_query`).
    """
    import pymc as pm

    from cmp_bayes.model.build import build_model, hyper_shapes, model_data
    from cmp_bayes.model.recover import recover
    from cmp_bayes.model.sampling import attempts_json, sample_until_healthy
    from cmp_bayes.posterior.identification import identification_group
    from cmp_bayes.posterior.memory_diagnostics import GROUP, memory_diagnostics
    from cmp_bayes.posterior.provenance import with_memory_text

    if stats.sizes.get("memory", 0) == 0:
        raise ConfigError("the log has no memories to fit")
    data = model_data(stats, config, memory_group)
    pair_ll = kernel = None
    if pair_stats is not None:
        from cmp_bayes.model import per_query as pq

        kernel = pq.query_kernel(data.grid, config.query_sd)
        pair_ll = pq.pair_loglik(pair_stats, data.grid, data.outcome_kind, config.baseline_nodes)
        data = pq.with_pair_likelihood(data, pq.memory_loglik(pair_ll, kernel))
    model = build_model(data, config)
    names = list(hyper_shapes(data))
    post, sample_stats, step, attempts = sample_until_healthy(model, scfg, names)
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    rng = np.random.default_rng(scfg.seed)
    flat = {n: post[n].values.reshape(n_chain * n_draw, *post[n].shape[2:]) for n in names}
    # the per-query variant's rows are pair convolutions without offsets: no pointwise group there
    rec = recover(
        data, flat, rng, use_data=True, jitter=config.jitter, pointwise=pair_stats is None,
        progress=scfg.progressbar,
    )

    with model, warnings.catch_warnings():
        # the prior of the hyperparameters is exactly what we want here
        warnings.filterwarnings("ignore", message="The effect of Potentials")
        prior_tree = pm.sample_prior_predictive(
            draws=config.prior_draws, var_names=names, random_seed=scfg.seed + 1
        )
    prior = prior_tree["prior"].to_dataset()[names]
    pflat = {n: prior[n].values.reshape(-1, *prior[n].shape[2:]) for n in names}
    prec = recover(data, pflat, rng, use_data=False, jitter=config.jitter, progress=scfg.progressbar)

    memory = xr.DataArray(data.memory.astype(object), dims="memory")
    if pair_stats is None:
        post = _add_memory_vars(post, rec.tau, rec.rho, memory)
        prior = _add_memory_vars(prior, prec.tau, prec.rho, memory)
        observed = observed_data(data, memory)
        arms, tau_post, tau_prior = data.arms, post["tau"], prior["tau"]
    else:
        from cmp_bayes.model.grid import arm_arrays
        from cmp_bayes.model.per_query import recover_pairs

        assert kernel is not None  # set above whenever pair_stats is given
        ps = pair_stats.transpose("memory", "query")
        query = xr.DataArray(np.asarray(ps["query"].values).astype(object), dims="query")
        ptau, prho = recover_pairs(data, flat, rec.tau, pair_ll, ps, kernel, rng)
        qtau, qrho = recover_pairs(data, pflat, prec.tau, None, ps, kernel, rng)
        post = _add_memory_vars(post, rec.tau, rec.rho, memory, suffix="_memory")
        prior = _add_memory_vars(prior, prec.tau, prec.rho, memory, suffix="_memory")
        post = _add_pair_vars(post, ptau, prho, query)
        prior = _add_pair_vars(prior, qtau, qrho, query)
        arms = arm_arrays(ps)
        observed = observed_data(data, memory, pair_stats=ps, query=query)
        tau_post, tau_prior = post["tau"], prior["tau"]
    groups = {
        "posterior": post,
        "prior": prior,
        "posterior_predictive": predictive(data, tau_post, rng, memory, arms=arms),
        "prior_predictive": predictive(data, tau_prior, rng, memory, arms=arms),
        "observed_data": observed,
        "sample_stats": sample_stats,
        "identification": identification_group(
            stats, post_mean=rec.post_mean, post_sd=rec.post_sd,
            prior_mean=rec.prior_mean, prior_sd=rec.prior_sd, p_positive=rec.p_positive,
            p_helps=rec.p_helps,
        ),
    }
    if rec.log_lik is not None:
        groups["log_likelihood"] = log_likelihood_group(rec.log_lik, post, data)
    # each memory's R-hat of tau and utility over the kept draws, once, so decide need not
    diagnostics = memory_diagnostics(post)
    if diagnostics is not None:
        groups[GROUP] = diagnostics
    if pair_stats is None:
        from cmp_bayes.model import sensitivity

        # decide asks of every forget whether it survives the stated alternative priors
        pmfs, log_ratio = sensitivity.grid_pmfs(data, flat, with_ratio=True)
        groups[sensitivity.GROUP] = sensitivity.sensitivity_group(
            data, pmfs, sensitivity.applicable(flat), log_ratio
        )
    if meta.get("memory_text") is not None:
        groups["posterior"] = with_memory_text(groups["posterior"], meta["memory_text"])
    tree = xr.DataTree.from_dict(groups)
    by = "memory" if pair_stats is None else "query"
    tree.attrs.update(root_attrs(config, scfg, meta, data.outcome_kind, by=by))
    tree.attrs["thin_step"] = int(step)
    tree.attrs["fit_attempts"] = attempts_json(attempts)
    tree.attrs["fit_attempt_kept"] = int(next(a["attempt"] for a in attempts if a["kept"]))
    return tree


def log_likelihood_group(log_lik: np.ndarray, post: xr.Dataset, data: ModelData) -> xr.Dataset:
    """The ``log_likelihood`` group: ``tau_obs`` over (chain, draw, memory), exposed memories only.

    ``log_lik`` (S, Mi) is :attr:`cmp_bayes.model.recover.Recovered.log_lik`, in
    the order of ``data.informative``. Memories without exposures have no
    exposed-arm data to predict and are left out (their ``memory`` coordinate is a
    subset of the posterior's), so PSIS-LOO counts only observations.
    """
    shape = (post.sizes["chain"], post.sizes["draw"], log_lik.shape[1])
    ds = xr.Dataset(
        {"tau_obs": (("chain", "draw", "memory"), log_lik.reshape(shape))},
        coords={
            "chain": post["chain"], "draw": post["draw"],
            "memory": data.memory[data.informative].astype(object),
        },
    )
    ds["tau_obs"].attrs["description"] = (
        "log p(exposed-arm outcomes | hyperparameters of the draw), tau integrated out on the grid "
        "(truncated likelihood normalised); see docs/model.md"
    )
    return ds


def _add_memory_vars(
    ds: xr.Dataset, tau: np.ndarray, rho: np.ndarray, memory: xr.DataArray, suffix: str = ""
) -> xr.Dataset:
    shape = (ds.sizes["chain"], ds.sizes["draw"], memory.size)
    dims = ("chain", "draw", "memory")
    out = ds.assign_coords(memory=memory)
    out["rho" + suffix] = (dims, rho.reshape(shape))
    out["tau" + suffix] = (dims, tau.reshape(shape))
    out["utility" + suffix] = (dims, (rho * tau).reshape(shape).astype(np.float32))
    out["rho" + suffix].attrs["description"] = "retrievability: P(retrieved | in store)"
    out["tau" + suffix].attrs["description"] = "conditional utility: change in expected outcome when in context"
    out["utility" + suffix].attrs["description"] = "rho * tau"
    return out


def _add_pair_vars(ds: xr.Dataset, tau: np.ndarray, rho: np.ndarray, query: xr.DataArray) -> xr.Dataset:
    """Per (memory, query) draws, shape (S, M, Q) -> (chain, draw, memory, query); NaN off-store."""
    shape = (ds.sizes["chain"], ds.sizes["draw"], ds.sizes["memory"], query.size)
    dims = ("chain", "draw", "memory", "query")
    out = ds.assign_coords(query=query)
    out["rho"] = (dims, rho.reshape(shape))
    out["tau"] = (dims, tau.reshape(shape))
    out["utility"] = (dims, (rho * tau).reshape(shape).astype(np.float32))
    out["rho"].attrs["description"] = "retrievability for the query: P(retrieved | in store, query)"
    out["tau"].attrs["description"] = (
        "conditional utility for the query, pooled toward tau_memory; NaN where never in store"
    )
    out["utility"].attrs["description"] = "rho * tau"
    return out


def observed_data(
    data: ModelData, memory: xr.DataArray, pair_stats: xr.Dataset | None = None, query: xr.DataArray | None = None
) -> xr.Dataset:
    """Arm counts and sums per memory (per memory and query with ``pair_stats``): what the likelihood saw."""
    if pair_stats is not None:
        names = ("exposed", "exposed_outcome_sum", "control", "control_outcome_sum", "retrieved", "in_store")
        ds = xr.Dataset({n: (("memory", "query"), np.asarray(pair_stats[n].values)) for n in names})
        return ds.assign_coords(memory=memory, query=query)
    a = data.arms
    return xr.Dataset(
        {
            "exposed": ("memory", a["exposed"].astype(np.int64)),
            "exposed_outcome_sum": ("memory", a["exposed_outcome_sum"]),
            "control": ("memory", a["control"].astype(np.int64)),
            "control_outcome_sum": ("memory", a["control_outcome_sum"]),
            "retrieved": ("memory", data.retrieved.astype(np.int64)),
            "in_store": ("memory", data.in_store.astype(np.int64)),
        },
        coords={"memory": memory},
    )


def predictive(
    data: ModelData, tau: xr.DataArray, rng: np.random.Generator, memory: xr.DataArray,
    arms: dict[str, np.ndarray] | None = None,
) -> xr.Dataset:
    """Replicated exposed-arm outcome sums given tau draws (chain, draw, memory[, query]).

    ``arms`` (default ``data.arms``) are over the trailing dims of ``tau``; NaN tau
    (a pair never in the store) replicates as NaN.

    The baseline is drawn from its control-arm posterior Beta(y0 + 1/2, n0 - y0 + 1/2);
    binary: Binomial(n1, p) with p = clip(b + tau); fractional: Normal(n1 p, n1 p (1 - p))
    clipped to [0, n1] (p (1 - p) is the largest variance of an outcome in [0, 1] with mean p).
    """
    a = data.arms if arms is None else arms
    n1, y0, n0 = a["exposed"], a["control_outcome_sum"], a["control"]
    t = tau.values.astype(np.float64)
    missing = np.isnan(t)
    t = np.where(missing, 0.0, t)
    base = rng.beta(y0 + 0.5, np.maximum(n0 - y0, 0) + 0.5, size=t.shape)
    p = np.clip(base + t, 0.0, 1.0)
    if data.outcome_kind == "binary":
        rep = rng.binomial(n1.astype(np.int64), p).astype(np.float64)
    else:
        rep = np.clip(rng.normal(n1 * p, np.sqrt(n1 * p * (1 - p) + 1e-12)), 0, n1)
    rep = np.where(missing, np.nan, rep)
    coords = {"chain": tau["chain"], "draw": tau["draw"], "memory": memory}
    if "query" in tau.dims:
        coords["query"] = tau["query"]
    ds = xr.Dataset(
        {"exposed_outcome_sum": (tau.dims, rep.astype(np.float32))},
        coords=coords,
    )
    return ds


def root_attrs(config: ModelConfig, scfg: SamplerConfig, meta: dict, outcome_kind: str, by: str) -> dict:
    """Root attributes of the posterior contract."""
    from cmp_bayes.posterior.provenance import provenance_attrs
    from cmp_bayes.version import __version__

    return {
        "cmp_bayes_version": str(__version__),
        "model_config": config.to_json(),
        "sampler_config": scfg.to_json(),
        "log_checksum": str(meta.get("log_checksum", "")),
        "log_path": str(meta.get("log_path", "")),
        "outcome_kind": outcome_kind,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "by": by,
        **provenance_attrs(meta),  # log_id, store: only when the design has them
    }


def default_output(log_path: str | Path) -> Path:
    """``models/<log dir name>.nc`` for a log directory (or a bare steps.jsonl's folder)."""
    from cmp_bayes.constants import MODELS_DIR

    p = Path(log_path)
    name = p.parent.name if p.is_file() else p.name
    return Path(MODELS_DIR) / f"{name or 'posterior'}.nc"
