"""Sampler health gate: may a posterior back an irreversible forget?

Two checks, both with ``arviz_stats``:

* posterior-wide (:func:`sampler_health`): the share of divergent draws in
  ``sample_stats.diverging`` and the largest rank-normalized split R-hat over
  the hyperparameters (every ``posterior`` variable without a ``memory`` or
  ``query`` dim). If either fails, no memory is forgotten.
* per memory (:func:`memory_rhat`): the R-hat of a memory's own draws,
  computed only for the memories the rule is about to forget (R-hat over
  10,000 memories costs about 15 s on one core; the candidates are few).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from cmp_bayes.decision.costs import Costs

#: dims that mark a per-memory (not hyper-) parameter.
_ENTITY_DIMS: frozenset[str] = frozenset({"memory", "query"})
_SAMPLE_DIMS: tuple[str, str] = ("chain", "draw")


@dataclass(frozen=True)
class Health:
    """Result of the posterior-wide sampler checks.

    Attributes
    ----------
    ok : bool
        True when forgets may proceed.
    chains, draws : int
        Posterior chains and draws per chain.
    divergences : int or None
        Divergent post-warmup draws (``None`` when ``sample_stats.diverging``
        is absent).
    divergence_share : float or None
        ``divergences / (chains * draws)``.
    max_rhat : float or None
        Largest R-hat over the hyperparameters (``None`` when there are none).
    worst_variable : str or None
        The hyperparameter with that R-hat.
    problems : list of str
        One phrase per failed check, for reasons and the CLI.
    """

    ok: bool
    chains: int
    draws: int
    divergences: int | None
    divergence_share: float | None
    max_rhat: float | None
    worst_variable: str | None
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for DataFrame attrs and JSON)."""
        return asdict(self)

    def summary(self) -> str:
        """One line: chains, draws, R-hat, divergences, verdict."""
        rhat = "n/a" if self.max_rhat is None else f"{self.max_rhat:.3f}"
        div = "n/a" if self.divergences is None else str(self.divergences)
        verdict = "ok" if self.ok else "FAILED: " + "; ".join(self.problems)
        return (
            f"sampler health: {self.chains} chains x {self.draws} draws, "
            f"max hyperparameter R-hat {rhat}, divergences {div}: {verdict}"
        )


def sampler_health(posterior: xr.DataTree, costs: Costs) -> Health:
    """Check divergences and hyperparameter R-hat against ``costs``.

    Parameters
    ----------
    posterior : xarray.DataTree
        A posterior following the contract (``posterior`` and ``sample_stats``
        groups).
    costs : Costs
        Supplies ``max_rhat`` and ``max_divergence_share``.

    Returns
    -------
    Health
        ``ok`` is False when a check fails or cannot be made (one chain:
        R-hat needs at least two; no ``diverging`` variable).
    """
    post = posterior["posterior"].to_dataset()
    chains = int(post.sizes.get("chain", 0))
    draws = int(post.sizes.get("draw", 0))
    problems: list[str] = []

    divergences: int | None = None
    share: float | None = None
    stats = posterior["sample_stats"].to_dataset() if "sample_stats" in posterior else None
    if stats is None or "diverging" not in stats:
        problems.append("divergences not recorded (sample_stats.diverging missing)")
    else:
        div = np.asarray(stats["diverging"].to_numpy(), dtype=bool)
        divergences = int(div.sum())
        share = divergences / max(div.size, 1)
        if share > costs.max_divergence_share:
            problems.append(
                f"{divergences} divergent draws ({share:.2%} > {costs.max_divergence_share:.2%})"
            )

    hyper = [
        name
        for name, da in post.data_vars.items()
        if set(_SAMPLE_DIMS) <= set(da.dims)
        and not (_ENTITY_DIMS & set(da.dims))
        and np.issubdtype(da.dtype, np.number)
    ]
    max_rhat: float | None = None
    worst: str | None = None
    if chains < 2:
        problems.append(f"R-hat needs at least 2 chains, the posterior has {chains}")
    elif hyper:
        rhats = _rhat(post[hyper])
        per_var = {name: _nanmax(rhats[name].to_numpy()) for name in hyper}
        worst = max(per_var, key=lambda k: -np.inf if np.isnan(per_var[k]) else per_var[k])
        max_rhat = per_var[worst]
        if np.isnan(max_rhat):
            max_rhat, worst = None, None
        elif not max_rhat <= costs.max_rhat:
            problems.append(f"R-hat of {worst} is {max_rhat:.3f} > {costs.max_rhat}")
    return Health(
        ok=not problems,
        chains=chains,
        draws=draws,
        divergences=divergences,
        divergence_share=share,
        max_rhat=max_rhat,
        worst_variable=worst,
        problems=problems,
    )


def memory_rhat(draws: xr.DataArray, memories: np.ndarray) -> np.ndarray:
    """Rank-normalized split R-hat of each listed memory's draws.

    Parameters
    ----------
    draws : xarray.DataArray
        Over (chain, draw, memory).
    memories : numpy.ndarray
        Memory ids (a subset of ``draws.memory``).

    Returns
    -------
    numpy.ndarray
        float64, shape ``(len(memories),)``. NaN where the draws are constant
        (every chain at the same value: nothing to disagree about) or where
        there are fewer than 2 chains.
    """
    if len(memories) == 0 or int(draws.sizes.get("chain", 0)) < 2:
        return np.full(len(memories), np.nan)
    sub = draws.sel(memory=list(memories)).astype("float64")
    return _rhat(xr.Dataset({"x": sub}))["x"].to_numpy().astype("float64")


def _rhat(ds: xr.Dataset) -> xr.Dataset:
    import arviz_stats

    with warnings.catch_warnings():
        # constant draws give 0/0 inside arviz_stats; the NaN is handled by the caller
        warnings.simplefilter("ignore", RuntimeWarning)
        return arviz_stats.rhat(ds, sample_dims=list(_SAMPLE_DIMS))


def _nanmax(values: np.ndarray) -> float:
    values = np.asarray(values, dtype="float64")
    if values.size == 0 or np.all(np.isnan(values)):
        return float("nan")
    return float(np.nanmax(values))
