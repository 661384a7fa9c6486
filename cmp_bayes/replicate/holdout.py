"""Held-out questions: does a memory ranking from the asked questions find the next ones' evidence?

With ``ExperimentConfig.holdout > 0`` the log holds only the asked questions
(:mod:`cmp_bayes.replicate.layout`); each store's held-out questions stand for
the questions still to come. Every method's memory ranking, built from the log
alone, is scored by how well it finds the evidence of the held-out questions:
the memory AUC of "required by some held-out question" (memories of the stores
that have a held-out question; NaN scores ranked last, as in
``cmp_bayes.evaluation``), with the stratified bootstrap interval of
``evaluation.auc_interval`` and the paired bootstrap difference
(:func:`~cmp_bayes.replicate.experiment.paired_auc_difference`) against logged
counts and the best-rank heuristic.

Methods (memory scores, higher = keep): ``logged-success`` (logged counts: mean
outcome while retrieved), ``best rank`` (minus the best retriever rank the log
shows a memory at), ``hajek``, ``window SNIPW max over pairs`` (window designs:
a memory's best window-arm pair contrast), and from the fits, when run,
``posterior mean tau`` (memory-level fit), ``posterior mean tau_memory`` (the
per-query fit's memory-level tau) and, from a gated per-query fit,
``posterior mean tau_relevant``, ``posterior p_relevant_any`` and
``posterior p_relevant_max``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

#: Baselines every held-out AUC is compared with (paired bootstrap).
BASELINES: tuple[str, ...] = ("logged-success", "best rank")


def held_out_labels(blocks: list[Any]) -> pd.DataFrame:
    """Memories of the stores with held-out questions, and whether a held-out question needs them.

    Parameters
    ----------
    blocks : list of StoreBlock
        :func:`~cmp_bayes.replicate.layout.build_log`'s layout.

    Returns
    -------
    pandas.DataFrame
        ``memory_id`` (str), ``required`` (bool), one row per memory of a store
        with at least one held-out question.
    """
    rows = []
    for b in blocks:
        if len(b.held_out) == 0:
            continue
        need = b.evidence[b.held_out].any(axis=0)
        rows.append(pd.DataFrame({"memory_id": b.memory_ids.astype(str), "required": need}))
    if not rows:
        return pd.DataFrame({"memory_id": pd.Series(dtype=str), "required": pd.Series(dtype=bool)})
    return pd.concat(rows, ignore_index=True)


def memory_scores(
    stats: xr.Dataset,
    tables: dict[str, pd.DataFrame],
    per_query: pd.DataFrame,
    posteriors: dict[str, xr.DataTree],
) -> dict[str, pd.Series]:
    """Every method's score per memory id (module docstring), from the log's estimates and fits.

    Parameters
    ----------
    stats : xarray.Dataset
        ``exposure_stats(log)`` (``rank_best`` over ``memory``).
    tables : dict
        ``estimate(log, method=...)`` tables by method name (``logged-success``, ``hajek``).
    per_query : pandas.DataFrame
        ``estimate(log, by="query", method="hajek")`` (with ``arm`` under a window design).
    posteriors : dict
        ``"memory"``: the memory-level fit, ``"query"``: the per-query fit (either may be absent).
    """
    ids = stats["memory"].to_numpy().astype(str)
    out: dict[str, pd.Series] = {}
    for name in ("logged-success", "hajek"):
        if name in tables:
            t = tables[name].drop_duplicates("memory_id")
            out[name] = pd.Series(t["estimate"].to_numpy(np.float64), index=t["memory_id"].astype(str).to_numpy())
    out["best rank"] = pd.Series(-stats["rank_best"].to_numpy().astype(np.float64), index=ids)
    arms = per_query.get("arm")
    if arms is not None and bool((arms == "window").any()):
        window = per_query[arms == "window"]
        out["window SNIPW max over pairs"] = (
            window.assign(memory_id=window["memory_id"].astype(str)).groupby("memory_id")["estimate"].max()
        )
    if "memory" in posteriors:
        out["posterior mean tau"] = _posterior_mean(posteriors["memory"], "tau")
    if "query" in posteriors:
        post = posteriors["query"]["posterior"]
        for name, label in (
            ("tau_memory", "posterior mean tau_memory"),
            ("tau_relevant", "posterior mean tau_relevant"),
            ("p_relevant_any", "posterior p_relevant_any"),
            ("p_relevant_max", "posterior p_relevant_max"),
        ):
            if name in post or name in posteriors["query"]["identification"]:
                out[label] = _posterior_mean(posteriors["query"], name)
    return out


def _posterior_mean(dt: xr.DataTree, name: str) -> pd.Series:
    """A memory-level score: the posterior mean of a ``posterior`` variable, or an
    ``identification`` variable as stored (``p_relevant_max`` of a gated fit)."""
    if name in dt["posterior"]:
        da = dt["posterior"][name].mean(("chain", "draw"))
    else:
        da = dt["identification"][name]
    return pd.Series(da.to_numpy().astype(np.float64), index=da["memory"].to_numpy().astype(str))


def score_holdout(
    labels: pd.DataFrame,
    scores: dict[str, pd.Series],
    n_boot: int,
    seed: int,
    difference: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """AUC of each method on the held-out labels, and paired differences against the baselines.

    ``difference`` is :func:`~cmp_bayes.replicate.experiment.paired_auc_difference`
    (passed in: the experiment module imports this one).

    Returns
    -------
    dict
        ``memories``, ``required`` (counts), ``auc``: list of {method, auc,
        ci_low, ci_high, n, n_required, n_nan}; ``auc_difference``: list of
        {method, baseline, diff, ci_low, ci_high, p_le_0, n, n_required}
        (every method against each of :data:`BASELINES`). AUCs are None when a
        class is empty.
    """
    from cmp_bayes.evaluation import auc_interval

    y = labels["required"].to_numpy(bool)
    ids = labels["memory_id"].to_numpy(str)
    aligned = {m: s.reindex(ids).to_numpy(np.float64) for m, s in scores.items()}
    rows = []
    for method, x in aligned.items():
        point, low, high = auc_interval(np.where(np.isnan(x), -np.inf, x), y, n_boot=n_boot, seed=seed)
        rows.append({"method": method, "auc": _none(point), "ci_low": _none(low), "ci_high": _none(high),
                     "n": int(y.size), "n_required": int(y.sum()), "n_nan": int(np.isnan(x).sum())})
    diffs = []
    for base in BASELINES:
        if base not in aligned:
            continue
        for method, x in aligned.items():
            if method == base:
                continue
            d = difference(x, aligned[base], y, n_boot=max(n_boot, 1000), seed=seed)
            diffs.append({"method": method, "baseline": base} | d)
    return {"memories": int(y.size), "required": int(y.sum()), "auc": rows, "auc_difference": diffs}


def _none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)
