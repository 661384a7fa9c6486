"""A synthetic posterior that follows the posterior contract exactly.

:func:`synthetic_posterior` builds the DataTree of
:mod:`cmp_bayes.posterior.contract` (docs/model.md), memory-level or per-query,
for everything that reads a posterior (decide, recommend, report) without
fitting a model. Its memories come from :func:`memory_table` (or a table of
your own): a design status and a target P(tau > threshold) each. The draws are
independent across chains and draws, so R-hat is near 1 unless a test breaks
it on purpose (``stuck_chain``). Like ``fit``'s, it carries the
``memory_diagnostics`` group (each memory's stored R-hat) unless asked not to.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.model.config import ModelConfig, SamplerConfig
from cmp_bayes.posterior.contract import BY_MEMORY, BY_QUERY, MEMORY_SUFFIX, MEMORY_VARS

#: The prior a synthetic memory's tau draws come from when it has no data: a null
#: component (weight 1 - W_USEFUL, Normal(0, NULL_SD)) and a useful one
#: (Normal(USEFUL_MEAN, USEFUL_SD)). P(tau > 0.05) under it is about 0.03 (< 1/21:
#: the prior alone would forget).
W_USEFUL = 0.03
NULL_SD = 0.01
USEFUL_MEAN = 0.25
USEFUL_SD = 0.1
#: Control-arm success rate of every synthetic memory (binary outcomes).
BASELINE = 0.4
#: Beta concentration of each memory's rho draws around its ``rho_mean``.
RHO_CONCENTRATION = 200.0
#: The hyperparameter ``stuck_chain`` moves (one the model samples; docs/model.md).
STUCK_HYPERPARAMETER = "tau_helps_mean"


def memory_table(n: int = 30, seed: int = 0) -> pd.DataFrame:
    """A varied table of memories to feed :func:`synthetic_posterior`.

    Returns
    -------
    pandas.DataFrame
        ``n`` rows, columns memory_id (``m000``...), status, exposed, retrieved,
        in_store (steps), p_useful (target P(tau > 0.05)), rho_mean. Statuses are
        drawn identified (60%), retrieved-only (20%) and unidentified (20%);
        identified memories get 1-8 exposures and a target p drawn from
        {0.01, 0.03, 0.2, 0.6, 0.95}; the others keep the prior (p_useful NaN).
    """
    rng = np.random.default_rng(seed)
    status = rng.choice(
        [IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED], size=n, p=[0.6, 0.2, 0.2]
    ).astype(object)
    exposed = np.where(status == IDENTIFIED, rng.integers(1, 9, size=n), 0)
    retrieved = np.where(status == UNIDENTIFIED, 0, rng.integers(0, 30, size=n))
    retrieved = np.where(status == RETRIEVED_ONLY, np.maximum(retrieved, 1), retrieved)
    p = np.where(status == IDENTIFIED, rng.choice([0.01, 0.03, 0.2, 0.6, 0.95], size=n), np.nan)
    return pd.DataFrame(
        {
            "memory_id": [f"m{i:03d}" for i in range(n)],
            "status": status,
            "exposed": exposed.astype("int64"),
            "retrieved": retrieved.astype("int64"),
            "in_store": rng.integers(200, 500, size=n).astype("int64"),
            "p_useful": p,
            "rho_mean": np.where(retrieved > 0, rng.uniform(0.01, 0.2, size=n), 0.001),
        }
    )


def tau_draws(
    p_useful: float, size: tuple[int, ...], rng: np.random.Generator, threshold: float = 0.05
) -> np.ndarray:
    """Draws of tau with P(tau > threshold) close to ``p_useful``; NaN = the prior.

    A two-component mixture: with probability ``p_useful`` a useful draw
    (``threshold`` + |Normal(0.2, 0.08)|: always above the threshold), else a
    null draw Normal(0, NULL_SD) clipped below the threshold. For NaN, draws
    from the prior mixture above.
    """
    if np.isnan(p_useful):
        useful = rng.random(size) < W_USEFUL
        return np.where(
            useful, rng.normal(USEFUL_MEAN, USEFUL_SD, size), rng.normal(0.0, NULL_SD, size)
        )
    useful = rng.random(size) < p_useful
    up = threshold + np.abs(rng.normal(0.2, 0.08, size))
    down = np.minimum(rng.normal(0.0, NULL_SD, size), threshold - 1e-6)
    return np.where(useful, up, down)


def synthetic_posterior(
    memories: pd.DataFrame | None = None,
    *,
    n_memories: int = 30,
    chains: int = 2,
    draws: int = 200,
    prior_draws: int | None = None,
    seed: int = 0,
    divergences: int = 0,
    stuck_chain: bool = False,
    per_query: bool = False,
    n_queries: int = 3,
    threshold: float = 0.05,
    log_likelihood: bool = False,
    pair_model: str | None = None,
    pairs: pd.DataFrame | None = None,
    query_steps: dict[str, int] | pd.Series | None = None,
    memory_diagnostics: bool = True,
    hyper_diagnostics: bool = False,
) -> xr.DataTree:
    """A DataTree that follows the posterior contract (passes ``check_posterior``).

    Parameters
    ----------
    memories : pandas.DataFrame, optional
        As :func:`memory_table` returns (``mean_shift`` optional: it then
        replaces the computed one). Default ``memory_table(n_memories, seed)``.
    n_memories : int
        Memories of the default table.
    chains, draws : int
        Posterior shape (``draws`` even: draws are balanced over half-chains).
    prior_draws : int, optional
        Draws of the prior groups (one chain); default ``draws``.
    seed : int
        Seed of every random draw.
    divergences : int
        Number of ``sample_stats.diverging`` entries set True.
    stuck_chain : bool
        Shift chain 0 of :data:`STUCK_HYPERPARAMETER` far away (R-hat >> 1.01).
    per_query : bool
        Per-query form (root attribute ``by = "query"``): tau/rho/utility over
        (chain, draw, memory, query) plus the ``_memory`` variables, observed
        data and predictive groups per (memory, query).
    n_queries : int
        Queries of the per-query form.
    threshold : float
        The threshold the ``p_useful`` targets refer to (outcome units).
    log_likelihood : bool
        Add the ``log_likelihood`` group: ``tau_obs`` of each exposed memory per
        draw, the Binomial log-probability of its observed exposed-arm successes
        at p = BASELINE + tau (per-query form: the memory-level tau against the
        arms summed over queries; ``fit`` writes the group for memory-level fits
        only). No random draws, so the rest of the tree is the same as without it.
    pair_model : {None, "gated"}
        ``"gated"``: the relevance-gated pair form of
        :mod:`cmp_bayes.testing.gated` (``tau`` over a sparse ``pair`` dim,
        ``tau_relevant`` = the memories' draws built as usual); ``per_query``
        and ``log_likelihood`` must then be False.
    pairs : pandas.DataFrame, optional
        Gated form: memory_id, query_id, relevance (target P(relevant)),
        optional rho_mean. Default :func:`cmp_bayes.testing.gated.default_pairs`
        over ``n_queries`` queries.
    query_steps : mapping or pandas.Series, optional
        Gated form: steps per query of the log (the log's query mix written to
        ``observed_data.query_steps``). Default 10 steps for each of
        ``q0 .. q{n_queries - 1}`` and every query of ``pairs``.
    memory_diagnostics : bool
        Add the group ``fit`` adds (each memory's stored R-hat; 2 chains or more).
    hyper_diagnostics : bool
        Add the ``hyper_diagnostics`` group, recorded on the posterior's own draws
        (a gated fit adds it where it stores fewer draws than it judged; memory-level
        and per-query forms only).

    Returns
    -------
    xarray.DataTree
    """
    from cmp_bayes.posterior.memory_diagnostics import with_memory_diagnostics
    from cmp_bayes.version import __version__

    if pair_model is not None:
        from cmp_bayes.testing.gated import gated_posterior

        if per_query or log_likelihood:
            raise ValueError("the gated form has no per_query or log_likelihood option")
        mem = memory_table(n_memories, seed) if memories is None else memories.reset_index(drop=True)
        base = synthetic_posterior(mem, chains=chains, draws=draws, prior_draws=prior_draws, seed=seed,
                                   divergences=divergences, stuck_chain=stuck_chain, threshold=threshold,
                                   memory_diagnostics=False)
        gated = gated_posterior(base, mem, pair_model, n_queries, pairs, query_steps, seed)
        return with_memory_diagnostics(gated) if memory_diagnostics else gated
    mem = memory_table(n_memories, seed) if memories is None else memories.reset_index(drop=True)
    if draws % 2:
        raise ValueError("draws must be even (the draws are balanced over half-chains)")
    rng = np.random.default_rng(seed)
    m, half = len(mem), draws // 2
    n_prior = draws if prior_draws is None else int(prior_draws)
    ids = np.asarray(mem["memory_id"], dtype=str).astype(object)
    half_tau = np.empty((half, m))
    for j, p in enumerate(mem["p_useful"].to_numpy(dtype="float64")):
        half_tau[:, j] = tau_draws(p, (half,), rng, threshold)
    tau = _balanced(half_tau, chains, rng)
    rho_mean = np.clip(mem["rho_mean"].to_numpy(dtype="float64"), 1e-4, 0.99)
    conc = RHO_CONCENTRATION
    rho = _balanced(rng.beta(rho_mean * conc, (1 - rho_mean) * conc, size=(half, m)), chains, rng)
    hyper = {k: _balanced(v, chains, rng) for k, v in _hyper_draws(rng, half, 1.0).items()}
    if stuck_chain:
        hyper[STUCK_HYPERPARAMETER][0] += 0.5
    prior_tau = tau_draws(np.nan, (1, n_prior, m), rng)
    prior_rho = rng.beta(1, 20, size=(1, n_prior, m))
    prior_hyper = {k: v[None] for k, v in _hyper_draws(rng, n_prior, 5.0).items()}

    qs = np.array([f"q{i}" for i in range(n_queries)], dtype=object) if per_query else None
    posterior = _draws_group(hyper, tau, rho, ids, qs, rng)
    prior = _draws_group(prior_hyper, prior_tau, prior_rho, ids, qs, rng)
    exposed = mem["exposed"].to_numpy(dtype="int64")
    retrieved = mem["retrieved"].to_numpy(dtype="int64")
    in_store = mem["in_store"].to_numpy(dtype="int64")
    arms = _arms(exposed, retrieved, in_store, tau.reshape(-1, m).mean(axis=0), n_queries if per_query else 0, rng)
    observed = _keyed(arms, ids, qs)
    post_tau, prior_tau_q = posterior["tau"].to_numpy(), prior["tau"].to_numpy()
    predictive = {g: _predictive(t, arms["exposed"], rng, ids, qs) for g, t in
                  (("posterior_predictive", post_tau), ("prior_predictive", prior_tau_q))}
    diverging = np.zeros((chains, draws), dtype=bool)
    diverging.reshape(-1)[:divergences] = True
    sample_stats = xr.Dataset(
        {
            "diverging": (("chain", "draw"), diverging),
            "lp": (("chain", "draw"), rng.normal(size=(chains, draws))),
            "energy": (("chain", "draw"), rng.normal(size=(chains, draws))),
            "depth": (("chain", "draw"), np.full((chains, draws), 3)),
            "maxdepth_reached": (("chain", "draw"), np.zeros((chains, draws), dtype=bool)),
        },
        coords={"chain": np.arange(chains), "draw": np.arange(draws)},
    )
    identification = _identification(mem, tau.reshape(-1, m), prior_tau.reshape(-1, m), threshold)
    groups = {
        "posterior": posterior,
        "prior": prior,
        **predictive,
        "observed_data": observed,
        "sample_stats": sample_stats,
        "identification": identification,
    }
    if log_likelihood:
        if per_query:
            # memory-level: the memory's tau against its arms summed over queries
            summed = {k: arms[k].sum(axis=1) for k in ("exposed", "exposed_outcome_sum")}
            groups["log_likelihood"] = _log_likelihood(posterior["tau_memory"].to_numpy(), summed, ids)
        else:
            groups["log_likelihood"] = _log_likelihood(post_tau, arms, ids)
    dt = xr.DataTree.from_dict(groups)
    dt.attrs.update(
        cmp_bayes_version=str(__version__),
        model_config=ModelConfig().to_json(),
        sampler_config=SamplerConfig(
            chains=chains, draws=draws, keep_draws=chains * draws, progressbar=False
        ).to_json(),
        log_checksum="0" * 64,
        log_path="synthetic",
        outcome_kind="binary",
        created_at="2026-11-30T00:00:00+00:00",
        by=BY_QUERY if per_query else BY_MEMORY,
        thin_step=1,
    )
    dt = with_memory_diagnostics(dt) if memory_diagnostics else dt
    return _with_hyper_diagnostics(dt) if hyper_diagnostics else dt


def _with_hyper_diagnostics(dt: xr.DataTree) -> xr.DataTree:
    """``dt`` with a ``hyper_diagnostics`` group recorded on its own draws (what a fit that
    stored every draw it judged would record)."""
    from cmp_bayes.posterior.hyper_diagnostics import GROUP, hyper_diagnostics
    from cmp_bayes.posterior.sampling_checks import hyperparameter_names

    post = dt["posterior"].to_dataset()[hyperparameter_names(dt)]
    group = hyper_diagnostics(post, post)
    if group is not None:
        dt[GROUP] = xr.DataTree(group)
    return dt


def _hyper_draws(rng: np.random.Generator, n: int, spread: float) -> dict[str, np.ndarray]:
    """``n`` draws of each hyperparameter the model samples (names of docs/model.md),
    ``spread`` times wider for the prior."""

    def pos(mean: float, sd: float, size: tuple[int, ...] = ()) -> np.ndarray:
        return np.abs(rng.normal(mean, sd * spread, size=(n, *size)))

    logit_w = np.log(W_USEFUL / (1 - W_USEFUL))
    return {
        "tau_null_sd": pos(NULL_SD, 0.001),
        "tau_helps_mean": rng.normal(USEFUL_MEAN, 0.02 * spread, size=n),
        "tau_helps_sd": pos(USEFUL_SD, 0.01),
        "tau_hurts_mean": pos(0.1, 0.01),
        "tau_hurts_sd": pos(0.05, 0.005),
        "weight_intercept": rng.normal(logit_w, 0.1 * spread, size=(n, 2)),
        "rho_intercept": rng.normal(-2.0, 0.1 * spread, size=n),
        "rho_kappa": pos(RHO_CONCENTRATION, 10.0),
    }


def _draws_group(
    hyper: dict[str, np.ndarray],
    tau: np.ndarray,
    rho: np.ndarray,
    ids: np.ndarray,
    queries: np.ndarray | None,
    rng: np.random.Generator,
) -> xr.Dataset:
    """``posterior`` or ``prior``: hyperparameters over (chain, draw[, effect_kind]) and the
    memory variables (per query, pooled around the memory's tau, when ``queries``)."""
    chains, draws, _ = tau.shape
    data: dict[str, tuple] = {
        k: (("chain", "draw", "effect_kind")[: v.ndim], v) for k, v in hyper.items()
    }
    dims = ("chain", "draw", "memory")
    coords: dict[str, np.ndarray] = {
        "chain": np.arange(chains), "draw": np.arange(draws), "memory": ids,
        "effect_kind": np.array(["helps", "hurts"], dtype=object),
    }
    memory_level = dict(zip(MEMORY_VARS, (rho, tau, rho * tau), strict=True))
    if queries is None:
        data.update({v: (dims, x) for v, x in memory_level.items()})
    else:
        qtau = tau[..., None] + rng.normal(0.0, 0.005, size=(*tau.shape, queries.size))
        qrho = np.repeat(rho[..., None], queries.size, axis=-1)
        qdims = (*dims, "query")
        data.update(rho=(qdims, qrho), tau=(qdims, qtau), utility=(qdims, qrho * qtau))
        data.update({v + MEMORY_SUFFIX: (dims, x) for v, x in memory_level.items()})
        coords["query"] = queries
    return xr.Dataset(data, coords=coords)


def _arms(
    exposed: np.ndarray, retrieved: np.ndarray, in_store: np.ndarray, tau_mean: np.ndarray,
    n_queries: int, rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Observed arm counts and binary outcome sums per memory (per (memory, query) when
    ``n_queries``: the counts split evenly, remainders to the first queries)."""
    counts = {"exposed": exposed, "retrieved": retrieved, "in_store": in_store}
    if n_queries:
        counts = {k: _split(v, n_queries) for k, v in counts.items()}
        tau_mean = tau_mean[:, None]
    control = np.maximum(counts["in_store"] - counts["exposed"] - counts["retrieved"], 0)
    p1 = np.clip(BASELINE + tau_mean, 0.0, 1.0)
    return {
        "exposed": counts["exposed"],
        "exposed_outcome_sum": rng.binomial(counts["exposed"], p1).astype(np.float64),
        "control": control,
        "control_outcome_sum": rng.binomial(control, BASELINE).astype(np.float64),
        "retrieved": counts["retrieved"],
        "in_store": counts["in_store"],
    }


def _log_likelihood(tau: np.ndarray, arms: dict[str, np.ndarray], ids: np.ndarray) -> xr.Dataset:
    """``tau_obs`` (chain, draw, exposed memory): Binomial log pmf of the exposed successes."""
    from scipy import stats

    keep = arms["exposed"] > 0
    p = np.clip(BASELINE + tau[..., keep], 1e-6, 1 - 1e-6)
    ll = stats.binom.logpmf(arms["exposed_outcome_sum"][keep], arms["exposed"][keep], p)
    c, d = tau.shape[:2]
    return xr.Dataset(
        {"tau_obs": (("chain", "draw", "memory"), ll.astype(np.float64))},
        coords={"chain": np.arange(c), "draw": np.arange(d), "memory": ids[keep]},
    )


def _split(counts: np.ndarray, n: int) -> np.ndarray:
    """(M,) integer counts -> (M, n) that sum back to them."""
    q, r = np.divmod(counts, n)
    return (q[:, None] + (np.arange(n)[None, :] < r[:, None])).astype(np.int64)


def _keyed(arms: dict[str, np.ndarray], ids: np.ndarray, queries: np.ndarray | None) -> xr.Dataset:
    dims = ("memory",) if queries is None else ("memory", "query")
    coords = {"memory": ids} if queries is None else {"memory": ids, "query": queries}
    return xr.Dataset({k: (dims, v) for k, v in arms.items()}, coords=coords)


def _predictive(
    tau: np.ndarray, exposed: np.ndarray, rng: np.random.Generator, ids: np.ndarray,
    queries: np.ndarray | None,
) -> xr.Dataset:
    """Replicated exposed-arm outcome sums given tau draws, as the model's predictive groups."""
    p = np.clip(BASELINE + tau, 0.0, 1.0)
    rep = rng.binomial(np.broadcast_to(exposed, tau.shape), p).astype(np.float32)
    dims = ("chain", "draw", "memory") + (() if queries is None else ("query",))
    coords = {"chain": np.arange(tau.shape[0]), "draw": np.arange(tau.shape[1]), "memory": ids}
    if queries is not None:
        coords["query"] = queries
    return xr.Dataset({"exposed_outcome_sum": (dims, rep)}, coords=coords)


def _identification(
    mem: pd.DataFrame, tau: np.ndarray, prior_tau: np.ndarray, threshold: float
) -> xr.Dataset:
    """The identification group from flat (sample, memory) draws; a memory never exposed
    learned nothing (contraction 1, shift 0), as in the model."""
    status = np.asarray(mem["status"], dtype=str).astype(object)
    exposed = mem["exposed"].to_numpy(dtype="int64")
    post_mean, post_sd = tau.mean(axis=0), tau.std(axis=0)
    prior_mean, prior_sd = prior_tau.mean(axis=0), prior_tau.std(axis=0)
    learned = exposed > 0
    contraction = np.where(learned, post_sd / prior_sd, 1.0)
    shift = np.where(learned, np.abs(post_mean - prior_mean) / prior_sd, 0.0)
    if "mean_shift" in mem:
        shift = mem["mean_shift"].to_numpy(dtype="float64")
    values = {
        "status": status,
        "exposed": exposed,
        "retrieved": mem["retrieved"].to_numpy(dtype="int64"),
        "in_store": mem["in_store"].to_numpy(dtype="int64"),
        "contraction": contraction,
        "mean_shift": shift,
        "propensity": np.where(status == IDENTIFIED, 0.0125, np.nan),
        "tau_mean": post_mean,
        "tau_sd": post_sd,
        "prior_tau_mean": prior_mean,
        "prior_tau_sd": prior_sd,
        "p_tau_positive": (tau > 0).mean(axis=0),
        "p_helps": (tau > threshold).mean(axis=0),
    }
    ids = np.asarray(mem["memory_id"], dtype=str).astype(object)
    return xr.Dataset({k: ("memory", v) for k, v in values.items()}, coords={"memory": ids})


def _balanced(values: np.ndarray, chains: int, rng: np.random.Generator) -> np.ndarray:
    """Stack ``2 * chains`` random permutations (along axis 0) of ``values`` into
    (chain, draw, ...) with ``draw = 2 * len(values)``."""
    halves = [values[rng.permutation(len(values))] for _ in range(2 * chains)]
    return np.stack(halves).reshape(chains, 2 * len(values), *values.shape[1:])
