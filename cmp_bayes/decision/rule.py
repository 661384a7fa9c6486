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
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import IDENTIFIED
from cmp_bayes.decision import sensitivity
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import (
    ACTIONS,
    COLUMNS,
    DEFER,
    FORGET,
    RETAIN,
    DecisionRule,
    Decisions,
    out_of_reach_text,
    store_average_text,
)
from cmp_bayes.decision.draws import MemoryDraws
from cmp_bayes.decision.preposterior import MAX_EXPOSURES, exposures_to_resolve
from cmp_bayes.decision.reasons import note_shortfall, reason_texts, why_not_allowed
from cmp_bayes.decision.workload import WORKLOAD_VARIABLE, read_mix
from cmp_bayes.errors import ConfigError
from cmp_bayes.posterior.contract import is_gated
from cmp_bayes.posterior.health import SamplerHealth, memory_rhat, sampler_health
from cmp_bayes.posterior.io import as_posterior
from cmp_bayes.posterior.memory_diagnostics import StoredRhat
from cmp_bayes.posterior.provenance import memory_texts, provenance
from cmp_bayes.text import add_text

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

#: Draws per memory used for ``exposures_needed`` (evenly thinned): the
#: preposterior probabilities are means over draws, so 500 draws give them a
#: Monte Carlo sd of at most sqrt(.25 / 500) ~ 0.02 before reweighting.
_PREPOSTERIOR_DRAWS: Final[int] = 500
#: Memories per call of ``exposures_to_resolve`` (x 500 draws: 16 MB per array).
_PREPOSTERIOR_CHUNK: Final[int] = 4096


class DecisionWarning(UserWarning):
    """A decision the user should look at: unmet capacity, a failed sampler check."""


def decide(
    posterior: xr.DataTree | str | Path,
    costs: Costs | None = None,
    *,
    workload: Mapping[str, float] | pd.Series | str | Path | None = None,
) -> Decisions:
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
    workload : mapping, pandas.Series or path, optional
        ``costs.estimand == "workload"`` only: the query mix (query_id ->
        weight, or a CSV with columns query_id, weight; see
        :mod:`cmp_bayes.decision.workload`). Default: the log's queries
        weighted by their steps.

    Returns
    -------
    Decisions
        ``table``: one row per memory, in the posterior's memory order, columns
        :data:`COLUMNS`: ``p_useful`` = P(estimand > threshold); ``expected_value``
        = posterior mean of the estimand (outcome units); the two expected
        losses (cost units); ``status``, ``exposed``, ``retrieved``,
        ``in_store`` (steps) from the identification group; ``mean_shift``
        (prior sds, the evidence measure); ``rhat`` of the estimand (only for
        memories about to be forgotten, else NaN: the value the fit stored in
        ``memory_diagnostics`` where it still describes the draws, else
        computed here); ``forgettable``
        (bool: the guards allow a forget, whatever the costs say);
        ``exposures_needed`` (Int64, defer rows only: extra exposures after
        which the rule can decide; <NA> elsewhere, and where more than
        ``MAX_EXPOSURES`` would be needed); ``reason``, a sentence;
        ``log_checksum`` and ``log_id`` (the posterior's log, the same on
        every row; <NA> log id without one); and, when the posterior carries
        memory texts, ``text`` after ``memory_id`` (the first 60 characters;
        ``to_csv`` writes the whole text). Beside it: ``rule`` (estimand
        variable, threshold, ``forget_below``, costs), ``health``
        (:func:`cmp_bayes.posterior.health.sampler_health` with the thresholds
        of ``costs``), ``costs``, ``capacity_shortfall`` (memories capacity
        would still need gone), ``log_checksum``, ``log_id``, ``store``
        (:func:`cmp_bayes.posterior.provenance.provenance`), ``texts``,
        ``counts()`` and ``summary()``.

    Raises
    ------
    PosteriorError
        The posterior lacks a group or variable the rule reads (e.g.
        ``tau_relevant`` for ``estimand="relevant"``: gated posteriors only).
    ConfigError
        A ``workload`` with another estimand, or a malformed mix.
    """
    costs = Costs() if costs is None else costs
    if workload is not None and costs.estimand != WORKLOAD_VARIABLE:
        raise ConfigError(
            f"a workload mix is for estimand 'workload' only (costs.estimand is {costs.estimand!r})"
        )
    dt = as_posterior(posterior)
    mix = read_mix(workload) if workload is not None else None
    draws = MemoryDraws.from_posterior(dt, costs.estimand, mix)
    health = sampler_health(
        dt,
        estimand=costs.estimand,  # R-hat gates only what this estimand depends on
        max_rhat=costs.max_rhat,
        max_divergence_share=costs.max_divergence_share,
        advisory=False,  # they never change the verdict; the report runs them
    )

    est = draws.estimand
    p, value = draws.summaries(costs.threshold)
    out_of_reach = _out_of_reach(est, draws.variable, costs) if p.size and not (p > 0).any() else None
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
    chainwise = _chainwise(dt, health, costs)
    allowed = eligible & (health.ok or chainwise)
    # a gated posterior's tau / utility averages over the store's questions: its forgets wait
    # unless the user allows them (Costs.store_average)
    store_avg = costs.estimand in ("tau", "utility") and is_gated(dt.attrs)
    averaged = allowed & bayes_forget if store_avg and costs.store_average == "defer" else None
    if averaged is not None:
        allowed = np.zeros_like(allowed)

    ids = draws.memory_ids
    n = len(ids)
    id_rank = np.empty(n, dtype="int64")
    id_rank[np.argsort(ids, kind="stable")] = np.arange(n)
    rank_key = np.lexsort((id_rank, value, p))  # increasing p, then value, then id
    # fit's stored R-hats where they describe these draws; the rest computed as needed
    stored = StoredRhat.read(dt, draws.variable, est)
    rhat = np.full(n, np.nan)
    rhat_bad = np.zeros(n, dtype=bool)
    checked = np.zeros(n, dtype=bool)
    chain_max = np.full(n, np.nan)  # the largest per-chain P(useful), chainwise mode only
    prior = _PriorState(n, sensitivity.available(dt, costs.estimand))
    # Forget set = prefix of the allowed memories in rank order. R-hat and the
    # prior check are made only on that prefix; a failing memory leaves the
    # allowed set and the prefix is recomputed (neither depends on the costs'
    # capacity, so the result is the same as checking every memory first).
    while True:
        forget_idx, shortfall = _forget_set(
            rank_key, allowed & ~rhat_bad & ~prior.waits, bayes_forget, costs.capacity
        )
        unchecked = forget_idx[~checked[forget_idx]]
        bad = unchecked[:0]
        if unchecked.size:
            rhat[unchecked] = _memory_rhat(est, ids, unchecked, stored)
            checked[unchecked] = True
            if chainwise:
                # the hyperparameters' chains disagree: the forget must hold in each chain
                chain_max[unchecked] = _chain_p_useful(est, unchecked, costs.threshold).max(axis=0)
                bad = unchecked[~(chain_max[unchecked] < costs.forget_below)]
            else:
                bad = unchecked[~(rhat[unchecked] <= costs.max_rhat) & ~np.isnan(rhat[unchecked])]
            rhat_bad[bad] = True
        # only forgets the Bayes rule makes: a forget for capacity is the user's demand
        waits = prior.run(dt, ids, forget_idx[bayes_forget[forget_idx]], costs, exposed)
        if bad.size == 0 and waits == 0:
            break

    action = np.where(bayes_forget, DEFER, RETAIN).astype(object)
    action[forget_idx] = FORGET

    needed = np.full(n, np.nan)
    defer_design = np.flatnonzero((action == DEFER) & ~eligible)
    # in chunks: each memory's answer is its own, and one (37k x 500) float64 gather
    # at 100k memories is 150 MB of fresh pages, whose faults cost more than the copy
    for lo in range(0, defer_design.size, _PREPOSTERIOR_CHUNK):
        part = defer_design[lo : lo + _PREPOSTERIOR_CHUNK]
        start = np.maximum(costs.min_exposures - exposed[part], 1)
        e_np, t_np = draws.numpy(part, _PREPOSTERIOR_DRAWS)
        needed[part] = exposures_to_resolve(e_np, t_np, costs.threshold, costs.forget_below, start)
    # a prior-driven forget waits until the alternative prior that keeps it would also decide
    waiting = np.flatnonzero(prior.waits & (action == DEFER))
    if waiting.size:
        t_alt = sensitivity.alternative_draws(dt, ids, waiting, prior.worst[waiting], _PREPOSTERIOR_DRAWS)
        start = np.maximum(costs.min_exposures - exposed[waiting], 1)
        needed[waiting] = exposures_to_resolve(t_alt, t_alt, costs.threshold, costs.forget_below, start)
    defer_sampler = (action == DEFER) & eligible & ~prior.waits  # blocked by sampler health
    needed[defer_sampler] = 0  # exposures do not help

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
        reason_texts(
            frame, costs, health, bayes_forget, eligible, rhat_bad, draws.variable,
            chain_max if chainwise else None, store_averaged=averaged,
        ),
        dtype="string",
    )
    prior.annotate(frame, costs)
    if shortfall:
        why = why_not_allowed(frame, costs, eligible, health, rhat_bad, chainwise, averaged is not None)
        note_shortfall(frame, rank_key, costs, shortfall, why)
        warnings.warn(
            f"capacity {costs.capacity} not met: {shortfall} more memories would have to go, "
            "but none of the rest may be forgotten (not identified, too few exposures, "
            "or a failed sampler check)",
            DecisionWarning,
            stacklevel=2,
        )
    if chainwise:
        warnings.warn(
            "; ".join(health.problems) + ": forgets made only where every chain agrees "
            f"(R-hat up to max_rhat_chainwise = {costs.max_rhat_chainwise})",
            DecisionWarning, stacklevel=2,
        )
    elif not health.ok:
        warnings.warn(
            "no memory forgotten: " + "; ".join(health.problems), DecisionWarning, stacklevel=2
        )
    frame = prior.columns(frame, costs)
    frame["p_useful_chain_max"] = chain_max
    source = provenance(dt.attrs)
    frame["log_checksum"] = pd.Series([source["log_checksum"]] * n, dtype="string")
    frame["log_id"] = pd.Series([source["log_id"]] * n, dtype="string")
    texts = memory_texts(dt)
    frame = add_text(frame, texts)
    # forgets made (store_average 'allow') or deferred ('defer') on a store average: say so
    averaged_count = 0
    if store_avg:
        averaged_count = int((frame["action"] == FORGET).sum()) if averaged is None else int(averaged.sum())
    questions = None
    if store_avg and averaged_count:
        questions = _store_questions(dt)
        warnings.warn(
            store_average_text(draws.variable, questions, averaged_count, deferred=averaged is not None),
            DecisionWarning, stacklevel=2,
        )
    rule = DecisionRule(
        variable=draws.variable,
        threshold=costs.threshold,
        forget_below=costs.forget_below,
        forget_cost=costs.forget_cost,
        retain_cost=costs.retain_cost,
    )
    return Decisions(
        table=frame,
        rule=rule,
        health=health,
        costs=costs,
        capacity_shortfall=int(shortfall),
        log_checksum=source["log_checksum"],
        log_id=source["log_id"],
        store=source["store"],
        texts=texts,
        chainwise=chainwise,
        out_of_reach=out_of_reach,
        store_average=questions,
        store_average_count=averaged_count,
    )


def _store_questions(dt: xr.DataTree) -> int:
    """The number of distinct questions of a gated posterior's pairs (``query_id`` along ``pair``)."""
    post = dt["posterior"]
    if "query_id" not in post.coords:
        return 0
    return int(pd.unique(np.asarray(post["query_id"].values)).size)


def _out_of_reach(est: xr.DataArray, variable: str, costs: Costs) -> float:
    """No draw of any memory clears the threshold: warn that the forgets are the threshold's,
    and return the largest draw.

    On all ten LoCoMo conversations ``--estimand workload --threshold 0.02`` forgot
    2,684 memories, 24% of them required (the store's share): the largest workload
    value of any memory is about 1e-4, a per-question average over 200 questions.
    """
    top = float(np.nanmax(est.to_numpy()))
    warnings.warn(out_of_reach_text(variable, costs.threshold, top), DecisionWarning, stacklevel=3)
    return top


def _chainwise(dt: xr.DataTree, health: SamplerHealth, costs: Costs) -> bool:
    """Whether forgets go ahead chain by chain: only R-hat failed, and only up to the chainwise limit."""
    if health.ok or costs.max_rhat_chainwise <= costs.max_rhat or health.chains < 2:
        return False
    loose = sampler_health(
        dt, estimand=costs.estimand, max_rhat=costs.max_rhat_chainwise,
        max_divergence_share=costs.max_divergence_share, advisory=False,
    )
    return loose.ok


def _chain_p_useful(est: xr.DataArray, index: np.ndarray, threshold: float) -> np.ndarray:
    """Share of each chain's draws with the estimand above ``threshold``: (chains, len(index))."""
    values = est.transpose("chain", "draw", "memory").values[:, :, index]
    return (values > threshold).mean(axis=1)


def _memory_rhat(
    est: xr.DataArray, ids: np.ndarray, index: np.ndarray, stored: StoredRhat | None
) -> np.ndarray:
    """R-hat of memories ``index`` (positions): stored where usable, else :func:`memory_rhat`."""
    if stored is None:
        return memory_rhat(est, ids[index])
    out, usable = stored.lookup(index)
    if not usable.all():
        out[~usable] = memory_rhat(est, ids[index[~usable]])
    return out


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


class _PriorState:
    """decide's prior-sensitivity bookkeeping (:mod:`cmp_bayes.decision.sensitivity`)."""

    def __init__(self, n: int, on: bool) -> None:
        self.on = on
        self.p_max = np.full(n, np.nan)
        self.worst = np.full(n, None, dtype=object)
        self.checked = np.zeros(n, dtype=bool)
        self.waits = np.zeros(n, dtype=bool)
        self.descriptions: dict[str, str] = {}

    def run(
        self, dt: xr.DataTree, ids: np.ndarray, rows: np.ndarray, costs: Costs, exposed: np.ndarray
    ) -> int:
        """Check the not yet checked ``rows``; mark those that must wait; return how many."""
        if not self.on:
            return 0
        todo = rows[~self.checked[rows]]
        if todo.size == 0:
            return 0
        res = sensitivity.check(dt, ids, todo, costs.threshold)
        self.descriptions = res.descriptions
        self.p_max[todo], self.worst[todo] = res.p_max[todo], res.worst[todo]
        self.checked[todo] = True
        flips = todo[self.p_max[todo] >= costs.forget_below]
        if costs.prior_driven == "defer_few":
            flips = flips[exposed[flips] <= sensitivity.FEW_EXPOSURES]
        elif costs.prior_driven == "allow":
            flips = flips[:0]
        self.waits[flips] = True
        return int(flips.size)

    def driven(self, costs: Costs) -> np.ndarray:
        return self.checked & (self.p_max >= costs.forget_below)

    def annotate(self, frame: pd.DataFrame, costs: Costs) -> None:
        """Say, in ``reason``, why a prior-driven forget waits or that it was flagged."""
        if not self.on or not self.checked.any():
            return
        rows = np.flatnonzero(self.driven(costs))
        if rows.size == 0:
            return
        p = frame["p_useful"].to_numpy(dtype="float64")
        n_exp = frame["exposed"].to_numpy(dtype="int64")
        reasons = frame["reason"].to_numpy(dtype=object)
        needed = frame["exposures_needed"]
        for i in rows:
            alt = self.descriptions.get(str(self.worst[i]), str(self.worst[i]))
            what = (
                f"P(useful) is {p[i]:.3f} under the fitted prior but {self.p_max[i]:.3f} "
                f">= {costs.forget_below:.3f} with {alt}"
            )
            if not self.waits[i]:
                reasons[i] = f"{reasons[i]} (prior-driven: {what})"
                continue
            n = int(n_exp[i])
            rule = (
                f"on {n} exposure{'s' if n != 1 else ''} a prior-driven forget waits"
                if costs.prior_driven == "defer_few"
                else "prior_driven = 'defer' makes every prior-driven forget wait"
            )
            more = needed.iloc[i]
            expose = (
                f"expose it {int(more)} more time{'s' if more != 1 else ''} (then {alt} decides too)"
                if not pd.isna(more)
                else f"more than {MAX_EXPOSURES} exposures would not settle it under {alt}"
            )
            reasons[i] = (
                f"forgetting would be the prior's decision, not the data's: {what}; {rule}: "
                f"{expose}, or decide with prior_driven = 'allow'"
            )
        frame["reason"] = pd.Series(reasons, index=frame.index, dtype="string")

    def columns(self, frame: pd.DataFrame, costs: Costs) -> pd.DataFrame:
        """``prior_driven`` (<NA> where not checked), ``p_useful_prior_max``, ``prior_alternative``."""
        flag = pd.array(self.driven(costs), dtype="boolean")
        flag[~self.checked] = pd.NA
        frame["prior_driven"] = flag
        frame["p_useful_prior_max"] = self.p_max
        frame["prior_alternative"] = pd.Series(self.worst, index=frame.index, dtype="string")
        return frame
