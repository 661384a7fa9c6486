r"""The workload value: a memory's expected contribution over a query mix.

What a retention decision needs is a memory's value for the questions still to
come. With a mix of queries ``w_q`` (weights summing to 1) that value is

    V(m) = E_q[rho(m, q) * tau(m, q)] = sum_q w_q * rho(m, q) * tau(m, q),

per posterior draw, so ``P(V(m) > threshold)`` is a posterior probability like
any other estimand's and the rule of :mod:`cmp_bayes.decision.rule` applies
unchanged (``Costs(estimand="workload")``).

The mix (:func:`read_mix`): the log's queries weighted by their steps by
default (:func:`log_mix`), or the user's (a mapping query_id -> weight, or a
CSV with columns ``query_id``, ``weight``). Weights must be finite and >= 0,
with a positive sum; they are normalized to sum 1 over the *whole* mix.

What each posterior form gives (documented choices):

* gated (``pair_model = "gated"``): ``tau`` over the sparse ``pair`` dim. A
  pair of the mix outside the posterior's pair set contributes 0: the pair set
  holds every pair that was ever eligible or exposed, and the gate's prior for
  a pair the design never reached is not written to the posterior, so it
  cannot be predicted from it. ``rho(m, q)`` is the posterior's ``rho`` over
  pair when it has one, else its memory-level ``rho_memory`` for every query of
  the memory (the model's own retrieval probability; the share of a query's
  steps where the memory was retrieved is a log count, not a posterior
  quantity, and mixing it in would make the draws no longer a posterior).
* per-query (``tau`` over memory x query): every memory has a (pooled) ``tau``
  and ``rho`` for every query of the log; a query of the mix the log never
  asked contributes 0.
* memory-level: no query dependence, so the workload value would be ``utility``
  whatever the mix; refused with a message that says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.errors import ConfigError, PosteriorError

#: Columns of a workload CSV.
MIX_COLUMNS: tuple[str, str] = ("query_id", "weight")
#: Name of the estimand's draws in :class:`~cmp_bayes.decision.draws.MemoryDraws`.
WORKLOAD_VARIABLE = "workload"


def is_gated(dt: xr.DataTree) -> bool:
    """Whether ``dt`` is a relevance-gated pair posterior (``tau`` over ``pair``)."""
    post = dt["posterior"]
    return dt.attrs.get("pair_model") == "gated" or ("tau" in post and "pair" in post["tau"].dims)


def read_mix(workload: Mapping[str, float] | pd.Series | str | Path) -> pd.Series:
    """A query mix as weights summing to 1, indexed by query id (str).

    Parameters
    ----------
    workload : mapping, pandas.Series or path
        query_id -> weight (any positive scale: steps, shares, counts), or a
        CSV file with columns ``query_id`` and ``weight``.

    Raises
    ------
    ConfigError
        Unreadable or malformed CSV, a repeated query id, a weight that is not
        a finite number >= 0, or weights summing to 0.
    """
    where = "workload"
    from_csv = isinstance(workload, str | Path)
    if from_csv:
        where = str(workload)
        try:
            frame = pd.read_csv(workload, dtype={"query_id": "string"})
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ConfigError(f"{where}: cannot read the workload CSV: {exc}") from None
        missing = [c for c in MIX_COLUMNS if c not in frame]
        if missing:
            raise ConfigError(f"{where}: workload CSV lacks column(s) {missing} (needs query_id, weight)")
        if frame["query_id"].isna().any():
            raise ConfigError(f"{where}: line {int(frame['query_id'].isna().to_numpy().argmax()) + 2}: empty query_id")
        ids = frame["query_id"].astype(str).to_numpy()
        weights = pd.to_numeric(frame["weight"], errors="coerce").to_numpy(np.float64)
    else:
        series = pd.Series(workload)
        ids = series.index.astype(str).to_numpy()
        weights = pd.to_numeric(series, errors="coerce").to_numpy(np.float64)
    if len(ids) == 0:
        raise ConfigError(f"{where}: the workload has no queries")

    def at(i: int) -> str:
        # a CSV's row i is on line i + 2 (the header is line 1)
        return f"{where}, line {i + 2}" if from_csv else where

    dup = pd.Index(ids).duplicated()
    if dup.any():
        raise ConfigError(f"{at(int(dup.argmax()))}: query_id {ids[dup.argmax()]!r} appears more than once")
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        i = int(bad.argmax())
        raise ConfigError(f"{at(i)}: weight of query {ids[i]!r} must be a finite number >= 0")
    if weights.sum() <= 0:
        raise ConfigError(f"{where}: the weights sum to 0")
    return pd.Series(weights / weights.sum(), index=pd.Index(ids, name="query_id"), name="weight")


def log_mix(dt: xr.DataTree) -> pd.Series:
    """The fitted log's query mix: each query weighted by its steps (sums to 1).

    Read from ``observed_data.query_steps`` (over ``query``) when the posterior
    has it; else, for the per-query form, the largest ``in_store`` of any memory
    under each query (a memory in the store throughout sees every step of it).

    Raises
    ------
    PosteriorError
        The posterior records neither; pass a mix to ``decide(workload=...)``.
    """
    obs = dt["observed_data"].to_dataset() if "observed_data" in dt else xr.Dataset()
    if "query_steps" in obs:
        steps = obs["query_steps"]
        return read_mix(pd.Series(steps.to_numpy(), index=steps["query"].to_numpy().astype(str)))
    if "in_store" in obs and {"memory", "query"} <= set(obs["in_store"].dims):
        steps = obs["in_store"].max("memory")
        return read_mix(pd.Series(steps.to_numpy(), index=steps["query"].to_numpy().astype(str)))
    raise PosteriorError(
        "the posterior does not record its log's steps per query (observed_data.query_steps); "
        "pass the query mix: decide(..., workload={query_id: weight}) or --workload FILE.csv"
    )


def workload_draws(dt: xr.DataTree, mix: pd.Series | None = None) -> xr.DataArray:
    """Draws of the workload value over (chain, draw, memory), the posterior's memory order.

    Parameters
    ----------
    dt : xarray.DataTree
        A gated or per-query posterior.
    mix : pandas.Series, optional
        As :func:`read_mix` returns; default :func:`log_mix`.

    Returns
    -------
    xarray.DataArray
        ``sum_q w_q rho(m, q) tau(m, q)`` per draw (outcome units x retrieval
        probability, like ``utility``).

    Raises
    ------
    PosteriorError
        A memory-level posterior, or one lacking the variables read.
    """
    post = dt["posterior"].to_dataset()
    per_query = "tau" in post and "query" in post["tau"].dims
    if not (per_query or is_gated(dt)):
        raise PosteriorError(
            "the workload value needs a per-query or gated posterior (fit(log, by='query')); a "
            "memory-level posterior has no query dependence, so its workload value is its utility "
            "(use estimand='utility')"
        )
    mix = log_mix(dt) if mix is None else mix
    if is_gated(dt):
        return _gated(post, mix)
    if "rho" not in post:
        raise PosteriorError("a per-query posterior needs 'rho' for the workload value")
    queries = post["tau"]["query"].to_numpy().astype(str)
    w = xr.DataArray(mix.reindex(queries).fillna(0.0).to_numpy(np.float64), dims=("query",),
                     coords={"query": post["tau"]["query"].to_numpy()})
    value = (post["rho"] * post["tau"] * w).sum("query")
    return value.transpose("chain", "draw", "memory").rename(WORKLOAD_VARIABLE)


def _gated(post: xr.Dataset, mix: pd.Series) -> xr.DataArray:
    """Sum over each memory's pairs of w_q rho tau; pairs outside the pair set add 0."""
    tau = post["tau"].transpose("chain", "draw", "pair")
    for coord in ("memory_id", "query_id"):
        if coord not in tau.coords:
            raise PosteriorError(f"gated posterior: 'tau' lacks the '{coord}' coordinate along pair")
    memories = post["memory"].to_numpy()
    col = {str(m): i for i, m in enumerate(memories)}
    pair_mem = tau["memory_id"].to_numpy().astype(str)
    unknown = sorted(set(pair_mem) - set(col))
    if unknown:
        raise PosteriorError(f"gated posterior: pair memory {unknown[0]!r} is not a posterior memory")
    idx = np.array([col[m] for m in pair_mem], dtype=np.int64)
    w = mix.reindex(tau["query_id"].to_numpy().astype(str)).fillna(0.0).to_numpy(np.float64)
    if "rho" in post and "pair" in post["rho"].dims:
        rho = post["rho"].transpose("chain", "draw", "pair").to_numpy()
    elif "rho_memory" in post:
        rho = post["rho_memory"].transpose("chain", "draw", "memory").to_numpy()[..., idx]
    else:
        raise PosteriorError("gated posterior has neither 'rho' over pair nor 'rho_memory'")
    chains, draws, _ = tau.shape
    value = np.zeros((chains, draws, len(memories)))
    # numpy's stub types ufunc.at's index as integer arrays only; a tuple index works at run time
    np.add.at(value, (slice(None), slice(None), idx), rho * tau.to_numpy() * w)  # type: ignore[arg-type]
    return xr.DataArray(
        value, dims=("chain", "draw", "memory"), name=WORKLOAD_VARIABLE,
        coords={"chain": tau["chain"].to_numpy(), "draw": tau["draw"].to_numpy(), "memory": memories},
    )
