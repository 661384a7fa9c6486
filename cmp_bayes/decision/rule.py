r"""The asymmetric Bayes rule: retain, forget or defer each memory.

Derivation. Let ``p = P(useful | data)``, useful meaning the estimand (``tau``
or ``utility = rho * tau``) exceeds ``costs.threshold``. Forgetting a useful
memory costs ``f = costs.forget_cost`` (irreversible); retaining a useless one
costs ``r = costs.retain_cost``; the two other outcomes cost nothing. So

    E[loss | forget] = f * p,        E[loss | retain] = r * (1 - p),

and the Bayes action (least posterior expected loss) is to forget exactly when
``f * p < r * (1 - p)``, i.e. ``p < r / (f + r)``. At 20:1 costs a memory is
forgotten only when ``P(useful) < 1/21 ~ 0.048``. Ties retain.

Irreversibility guard. The posterior of a memory that was never exposed is
(design-wise) its prior, and a sparse prior says "probably useless" about
every memory; forgetting on the prior alone is the failure CMP exists to
prevent. So the rule may forget only a memory that is *eligible*:
``status == "identified"`` (exposed under a known propensity; the status comes
from the design, never the posterior), ``exposed >= costs.min_exposures``, and
``mean_shift >= costs.min_mean_shift``; and only from a *healthy* posterior
(no divergences beyond ``costs.max_divergence_share``, hyperparameter R-hat and
the memory's own R-hat at most ``costs.max_rhat``). A memory the Bayes rule
would forget but that is not allowed is ``defer``: it stays, with the number
of exposures that would let the rule decide (``exposures_needed``, see
:func:`cmp_bayes.decision.preposterior.exposures_to_resolve`).

Capacity. With ``costs.capacity = K`` and more than K memories kept, allowed
memories are forgotten in increasing order of the expected value of keeping
them, ``E[loss | forget] - E[loss | retain] = (f + r) p - r`` (the loss-optimal
order: increasing ``p``; ties by increasing posterior mean of the estimand,
then memory id) until K are kept. Memories that are not allowed are never
forgotten for capacity; when the capacity cannot be met the shortfall is
reported (row reasons, :attr:`Decisions.capacity_shortfall` and a
:class:`DecisionWarning`).

Monotonicity (tested): the forgotten set is always a prefix of the allowed
memories in that fixed order, of length ``max(#{p < r/(f+r)}, n - K)``, so
raising ``f`` never turns a retain or defer into a forget and raising ``r``
never turns a forget into a retain.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import ACTIONS, DEFER, FORGET, RETAIN, DecisionRule, Decisions
from cmp_bayes.decision.preposterior import MAX_EXPOSURES, exposures_to_resolve
from cmp_bayes.errors import PosteriorError
from cmp_bayes.posterior.health import SamplerHealth, memory_rhat, sampler_health
from cmp_bayes.posterior.io import as_posterior

__all__ = [
    "ACTIONS",
    "COLUMNS",
    "DEFER",
    "FORGET",
    "RETAIN",
    "DecisionWarning",
    "Decisions",
    "MemoryDraws",
    "decide",
]

#: Columns of the decision table, in order.
COLUMNS: Final[tuple[str, ...]] = (
    "memory_id",
    "action",
    "p_useful",
    "expected_value",
    "expected_loss_retain",
    "expected_loss_forget",
    "status",
    "exposed",
    "retrieved",
    "in_store",
    "mean_shift",
    "rhat",
    "forgettable",
    "exposures_needed",
    "reason",
)
#: Draws per memory used for ``exposures_needed`` (evenly thinned): the
#: preposterior probabilities are means over draws, so 500 draws give them a
#: Monte Carlo sd of at most sqrt(.25 / 500) ~ 0.02 before reweighting.
_PREPOSTERIOR_DRAWS: Final[int] = 500
_IDENT_REQUIRED: Final[tuple[str, ...]] = ("status", "exposed", "retrieved", "in_store")


class DecisionWarning(UserWarning):
    """A decision the user should look at: unmet capacity, a failed sampler check."""


def decide(posterior: xr.DataTree | str | Path, costs: Costs | None = None) -> Decisions:
    """Retain / forget / defer every memory of a fitted posterior.

    Parameters
    ----------
    posterior : xarray.DataTree or path
        A posterior following the contract (groups ``posterior`` with
        ``tau``/``rho``/``utility`` over (chain, draw, memory), or the
        per-query form with ``tau_memory`` etc.; ``identification``;
        ``sample_stats`` with ``diverging``), or a NetCDF file holding one.
    costs : Costs, optional
        Costs and guards; ``Costs()`` by default (20:1, threshold 0.05 on tau).

    Returns
    -------
    Decisions
        ``table``: one row per memory, in the posterior's memory order, columns
        :data:`COLUMNS`: ``p_useful`` = P(estimand > threshold); ``expected_value``
        = posterior mean of the estimand (outcome units); the two expected
        losses (cost units); ``status``, ``exposed``, ``retrieved``,
        ``in_store`` (steps) from the identification group; ``mean_shift``
        (prior sds, the evidence measure); ``rhat`` of the estimand (computed
        only for memories about to be forgotten, else NaN); ``forgettable``
        (bool: the guards allow a forget, whatever the costs say);
        ``exposures_needed`` (Int64, defer rows only: extra exposures after
        which the rule can decide; <NA> elsewhere, and where more than
        ``MAX_EXPOSURES`` would be needed); ``reason``, a sentence. Beside
        it: ``rule`` (estimand variable, threshold, ``forget_below``, costs),
        ``health`` (:func:`cmp_bayes.posterior.health.sampler_health` with the
        thresholds of ``costs``), ``costs``, ``capacity_shortfall`` (memories
        capacity would still need gone), ``counts()`` and ``summary()``.

    Raises
    ------
    PosteriorError
        The posterior lacks a group or variable the rule reads.
    """
    costs = Costs() if costs is None else costs
    dt = as_posterior(posterior)
    draws = MemoryDraws.from_posterior(dt, costs.estimand)
    health = sampler_health(
        dt,
        max_rhat=costs.max_rhat,
        max_divergence_share=costs.max_divergence_share,
        advisory=False,  # they never change the verdict; the report runs them
    )

    est = draws.estimand
    p = (est > costs.threshold).mean(("chain", "draw")).to_numpy().astype("float64")
    value = est.mean(("chain", "draw")).to_numpy().astype("float64")
    loss_forget = costs.forget_cost * p
    loss_retain = costs.retain_cost * (1.0 - p)
    bayes_forget = loss_forget < loss_retain

    ident = draws.identification
    status = ident["status"].to_numpy()
    exposed = ident["exposed"].to_numpy()
    mean_shift = ident["mean_shift"].to_numpy()
    design_ok = (status == IDENTIFIED) & (exposed >= costs.min_exposures)
    floor_ok = (
        mean_shift >= costs.min_mean_shift if costs.min_mean_shift > 0 else np.ones_like(design_ok)
    )
    eligible = design_ok & floor_ok
    allowed = eligible & health.ok

    ids = draws.memory_ids
    n = len(ids)
    id_rank = np.empty(n, dtype="int64")
    id_rank[np.argsort(ids, kind="stable")] = np.arange(n)
    rank_key = np.lexsort((id_rank, value, p))  # increasing p, then value, then id
    rhat = np.full(n, np.nan)
    rhat_bad = np.zeros(n, dtype=bool)
    checked = np.zeros(n, dtype=bool)
    # Forget set = prefix of the allowed memories in rank order. R-hat is
    # checked only on that prefix; a failing memory leaves the allowed set and
    # the prefix is recomputed (R-hat does not depend on the costs, so the
    # result is the same as checking every memory first).
    while True:
        forget_idx, shortfall = _forget_set(
            rank_key, allowed & ~rhat_bad, bayes_forget, costs.capacity
        )
        unchecked = forget_idx[~checked[forget_idx]]
        if unchecked.size == 0:
            break
        rhat[unchecked] = memory_rhat(est, ids[unchecked])
        checked[unchecked] = True
        bad = unchecked[~(rhat[unchecked] <= costs.max_rhat) & ~np.isnan(rhat[unchecked])]
        if bad.size == 0:
            break
        rhat_bad[bad] = True

    action = np.where(bayes_forget, DEFER, RETAIN).astype(object)
    action[forget_idx] = FORGET

    needed = np.full(n, np.nan)
    defer_design = np.flatnonzero((action == DEFER) & ~eligible)
    if defer_design.size:
        start = np.maximum(costs.min_exposures - exposed[defer_design], 1)
        e_np, t_np = draws.numpy(defer_design, _PREPOSTERIOR_DRAWS)
        needed[defer_design] = exposures_to_resolve(
            e_np, t_np, costs.threshold, costs.forget_below, start
        )
    defer_sampler = (action == DEFER) & eligible  # blocked by sampler health: exposures do not help
    needed[defer_sampler] = 0

    frame = pd.DataFrame(
        {
            "memory_id": pd.Series(ids, dtype="string"),
            "action": pd.Series(action, dtype="string"),
            "p_useful": p,
            "expected_value": value,
            "expected_loss_retain": loss_retain,
            "expected_loss_forget": loss_forget,
            "status": pd.Series(status, dtype="string"),
            "exposed": exposed.astype("int64"),
            "retrieved": ident["retrieved"].to_numpy().astype("int64"),
            "in_store": ident["in_store"].to_numpy().astype("int64"),
            "mean_shift": mean_shift.astype("float64"),
            "rhat": rhat,
            "forgettable": allowed & ~rhat_bad,
            "exposures_needed": pd.array(np.where(np.isnan(needed), pd.NA, needed), dtype="Int64"),
        }
    )
    frame["reason"] = pd.Series(
        _reasons(frame, costs, health, bayes_forget, eligible, rhat_bad, draws.variable),
        dtype="string",
    )
    if shortfall:
        why = _why_not_allowed(frame, costs, eligible, health, rhat_bad)
        _note_shortfall(frame, rank_key, costs, shortfall, why)
        warnings.warn(
            f"capacity {costs.capacity} not met: {shortfall} more memories would have to go, "
            "but none of the rest may be forgotten (not identified, too few exposures, "
            "or a failed sampler check)",
            DecisionWarning,
            stacklevel=2,
        )
    if not health.ok:
        warnings.warn(
            "no memory forgotten: " + "; ".join(health.problems), DecisionWarning, stacklevel=2
        )
    rule = DecisionRule(
        variable=draws.variable,
        threshold=costs.threshold,
        forget_below=costs.forget_below,
        forget_cost=costs.forget_cost,
        retain_cost=costs.retain_cost,
    )
    return Decisions(
        table=frame, rule=rule, health=health, costs=costs, capacity_shortfall=int(shortfall)
    )


class MemoryDraws:
    """The memory-level draws and identification facts the rule reads.

    Attributes
    ----------
    variable : str
        Posterior variable of the estimand (``tau``, ``utility``, or their
        ``_memory`` form in a per-query posterior).
    estimand, tau : xarray.DataArray
        Draws over (chain, draw, memory).
    identification : pandas.DataFrame
        Indexed like ``memory_ids``: status (str), exposed, retrieved,
        in_store (int64), mean_shift (float64, NaN if absent).
    memory_ids : numpy.ndarray
        Memory ids (object array of str), the posterior's order.
    """

    def __init__(
        self,
        variable: str,
        estimand: xr.DataArray,
        tau: xr.DataArray,
        identification: pd.DataFrame,
    ) -> None:
        self.variable = variable
        self.estimand = estimand
        self.tau = tau
        self.identification = identification
        self.memory_ids = np.asarray(estimand["memory"].to_numpy()).astype(str).astype(object)

    @classmethod
    def from_posterior(cls, dt: xr.DataTree, estimand: str) -> MemoryDraws:
        """Pick the memory-level variables of ``estimand`` and align identification."""
        for group in ("posterior", "identification"):
            if group not in dt:
                raise PosteriorError(f"posterior has no '{group}' group (groups: {_groups(dt)})")
        post = dt["posterior"].to_dataset()
        if "tau" not in post:
            raise PosteriorError("posterior group has no 'tau' variable")
        per_query = "query" in post["tau"].dims
        suffix = "_memory" if per_query else ""
        variable, tau_name = f"{estimand}{suffix}", f"tau{suffix}"
        for name in (variable, tau_name):
            if name not in post:
                kind = (
                    "a per-query posterior (tau has a query dim)" if per_query else "the posterior"
                )
                raise PosteriorError(f"{kind} has no '{name}' variable in its posterior group")
            dims = set(post[name].dims)
            if dims != {"chain", "draw", "memory"}:
                raise PosteriorError(
                    f"posterior variable '{name}' must be over (chain, draw, memory), "
                    f"has {tuple(post[name].dims)}"
                )
        est = post[variable].transpose("chain", "draw", "memory")
        tau = post[tau_name].transpose("chain", "draw", "memory")
        ident = _identification(dt["identification"].to_dataset(), est["memory"].to_numpy())
        return cls(variable, est, tau, ident)

    def numpy(self, index: np.ndarray, max_draws: int) -> tuple[np.ndarray, np.ndarray]:
        """Estimand and tau draws of memories ``index`` as float64 ``(len(index), D)``,
        D <= ``max_draws`` (evenly thinned over chain x draw)."""
        est = self.estimand.isel(memory=index).stack(sample=("chain", "draw"))
        tau = self.tau.isel(memory=index).stack(sample=("chain", "draw"))
        total = est.sizes["sample"]
        keep = np.unique(np.linspace(0, total - 1, min(total, max_draws)).round().astype(int))
        e = est.transpose("memory", "sample").to_numpy()[:, keep].astype("float64")
        t = tau.transpose("memory", "sample").to_numpy()[:, keep].astype("float64")
        return e, t


def _identification(ds: xr.Dataset, memories: np.ndarray) -> pd.DataFrame:
    missing = [v for v in _IDENT_REQUIRED if v not in ds]
    if missing:
        raise PosteriorError(
            f"identification group lacks {', '.join(missing)} (has: {', '.join(map(str, ds.data_vars))})"
        )
    if "memory" not in ds.dims:
        raise PosteriorError("identification group has no 'memory' dim")
    if "query" in ds.dims:
        # per-query identification: memory-level counts are sums over queries,
        # and the status follows from them by the same rule as the design's
        ds = ds.copy()
        for name in ("exposed", "retrieved", "in_store"):
            ds[name] = ds[name].sum("query")
        exposed, retrieved = ds["exposed"] >= 1, ds["retrieved"] >= 1
        ds["status"] = xr.where(
            exposed, IDENTIFIED, xr.where(retrieved, RETRIEVED_ONLY, UNIDENTIFIED)
        )
        if "mean_shift" in ds and "query" in ds["mean_shift"].dims:
            ds["mean_shift"] = ds["mean_shift"].max("query")
    ident_ids = np.asarray(ds["memory"].to_numpy()).astype(str)
    want = np.asarray(memories).astype(str)
    if set(ident_ids) != set(want):
        extra = sorted(set(want) - set(ident_ids))[:3]
        raise PosteriorError(
            "identification and posterior disagree on the memories"
            + (f" (e.g. {', '.join(extra)} missing from identification)" if extra else "")
        )
    frame = pd.DataFrame(
        {name: np.asarray(ds[name].to_numpy()) for name in _IDENT_REQUIRED}, index=ident_ids
    )
    frame["mean_shift"] = (
        np.asarray(ds["mean_shift"].to_numpy(), dtype="float64") if "mean_shift" in ds else np.nan
    )
    frame = frame.reindex(want)
    frame["status"] = frame["status"].astype(str)
    bad = sorted(set(frame["status"]) - {IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED})
    if bad:
        raise PosteriorError(f"identification status has unknown value {bad[0]!r}")
    for name in ("exposed", "retrieved", "in_store"):
        frame[name] = frame[name].astype("int64")
    return frame


def _forget_set(
    rank_key: np.ndarray, allowed: np.ndarray, bayes_forget: np.ndarray, capacity: int | None
) -> tuple[np.ndarray, int]:
    """Indices to forget (a prefix of the allowed memories in rank order) and the shortfall."""
    order = rank_key[allowed[rank_key]]
    length = int(bayes_forget[order].sum())  # a prefix: f*p < r*(1-p) is monotone in p
    shortfall = 0
    if capacity is not None:
        need = len(allowed) - capacity
        length = max(length, min(need, len(order)))
        shortfall = max(0, need - len(order))
    return order[:length], shortfall


def _reasons(
    frame: pd.DataFrame,
    costs: Costs,
    health: SamplerHealth,
    bayes_forget: np.ndarray,
    eligible: np.ndarray,
    rhat_bad: np.ndarray,
    variable: str,
) -> list[str]:
    c = costs.forget_below
    out = []
    for i, row in enumerate(frame.itertuples(index=False)):
        p, n_exp, n_ret, steps = row.p_useful, row.exposed, row.retrieved, row.in_store
        need = row.exposures_needed
        expose = (
            f"more than {MAX_EXPOSURES} exposures would not settle it"
            if pd.isna(need)
            else f"expose it {int(need)} more {'time' if need == 1 else 'times'}"
        )
        if row.action == FORGET:
            if bayes_forget[i]:
                text = (
                    f"useless with P={1 - p:.3f} after {n_exp} exposures "
                    f"(P(useful)={p:.3f} < {c:.3f}): forget"
                )
            else:
                text = (
                    f"forgotten to meet capacity {costs.capacity}: keeping it is worth least "
                    f"among memories that may be forgotten (P(useful)={p:.3f})"
                )
        elif row.action == DEFER:
            if row.status == UNIDENTIFIED:
                text = (
                    f"never in any context in {steps} steps in the store: utility unidentified "
                    f"(the prior alone gives P(useful)={p:.3f}), so never forgotten; {expose}"
                )
            elif row.status == RETRIEVED_ONLY:
                text = (
                    f"retrieved {_times(n_ret)} but never exposed: utility identified only if "
                    f"retrieval is ignorable, so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif n_exp < costs.min_exposures:
                text = (
                    f"exposed {_times(n_exp)}, fewer than min_exposures={costs.min_exposures}, "
                    f"so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif not eligible[i]:
                text = (
                    f"data moved tau by only {row.mean_shift:.2f} prior sds "
                    f"(floor {costs.min_mean_shift}), so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif not health.ok:
                text = (
                    f"the rule would forget (P(useful)={p:.3f}) but the sampler failed its checks "
                    f"({'; '.join(health.problems)}): refit before forgetting"
                )
            elif rhat_bad[i]:
                text = (
                    f"the rule would forget (P(useful)={p:.3f}) but R-hat of {variable} for this "
                    f"memory is {row.rhat:.3f} > {costs.max_rhat}: refit before forgetting"
                )
            else:  # pragma: no cover - every defer has one of the causes above
                text = f"not forgotten (P(useful)={p:.3f})"
        elif row.status == UNIDENTIFIED:
            text = (
                f"never in any context in {steps} steps: the posterior is the prior "
                f"(P(useful)={p:.3f} >= {c:.3f}): retain; expose it to learn its utility"
            )
        elif row.status == RETRIEVED_ONLY:
            text = (
                f"retrieved {n_ret} of {steps} times, never exposed: P(useful)={p:.3f} rests on "
                f"ignorable retrieval: retain"
            )
        elif n_ret == 0 and p >= 0.5:
            text = f"useful when read (P={p:.2f}) but retrieved 0 of {steps} times: fix retrieval"
        elif p >= 0.5:
            text = f"useful (P={p:.2f}; retrieved {n_ret} of {steps} times): retain"
        else:
            text = f"uncertain (P(useful)={p:.3f}, forget only below {c:.3f}): retain" + (
                f"; retrieved 0 of {steps} times" if n_ret == 0 else ""
            )
        out.append(text)
    return out


def _why_not_allowed(
    frame: pd.DataFrame, costs: Costs, eligible: np.ndarray, health: SamplerHealth, rhat_bad: np.ndarray
) -> np.ndarray:
    """Per memory, a short phrase saying why it may not be forgotten ("" if it may)."""
    why = np.full(len(frame), "", dtype=object)
    status = frame["status"].to_numpy()
    exposed = frame["exposed"].to_numpy()
    why[rhat_bad] = f"R-hat above {costs.max_rhat}"
    if not health.ok:
        why[:] = "the sampler failed its checks"
    why[~eligible] = "evidence below min_mean_shift"
    few = (status == IDENTIFIED) & (exposed < costs.min_exposures)
    why[few] = f"fewer than {costs.min_exposures} exposures"
    why[status == RETRIEVED_ONLY] = RETRIEVED_ONLY
    why[status == UNIDENTIFIED] = UNIDENTIFIED
    return why


def _note_shortfall(
    frame: pd.DataFrame, rank_key: np.ndarray, costs: Costs, shortfall: int, why: np.ndarray
) -> None:
    """Add the unmet-capacity sentence to the kept memories capacity would have taken next."""
    kept = frame["action"].to_numpy() != FORGET
    order = rank_key[kept[rank_key]][:shortfall]
    n_kept = int(kept.sum())
    col = frame.columns.get_loc("reason")
    for i in order:
        frame.iat[i, col] = (
            f"{frame.iat[i, col]}; capacity {costs.capacity} not met ({n_kept} kept): "
            f"not forgettable ({why[i]})"
        )


def _times(k: int) -> str:
    return f"{k} time" if k == 1 else f"{k} times"


def _groups(dt: xr.DataTree) -> str:
    return ", ".join(sorted(dt.children)) or "none"
