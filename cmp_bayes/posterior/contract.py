"""The posterior contract of docs/model.md as data: groups, variables, dims, root attributes.

Everything that writes a posterior (``cmp_bayes.model.fit``, the synthetic
builder in :mod:`cmp_bayes.testing`) and everything that checks one
(:func:`cmp_bayes.posterior.io.check_posterior`) reads the names from here, so
the contract is stated once. The version rule (:func:`compatible`) lives here
too: which saved posteriors this install can read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cmp_bayes.errors import PosteriorError

#: Sample dims of every drawn variable.
SAMPLE_DIMS: tuple[str, str] = ("chain", "draw")
#: The per-memory variables of ``posterior`` and ``prior``.
MEMORY_VARS: tuple[str, ...] = ("rho", "tau", "utility")
#: Suffix of the memory-level copies of ``MEMORY_VARS`` in a per-query posterior.
MEMORY_SUFFIX: str = "_memory"
#: The pointwise log-likelihood variable of the ``log_likelihood`` group.
LOG_LIKELIHOOD_VAR: str = "tau_obs"
#: The optional group of per-memory diagnostics computed at fit time
#: (:mod:`cmp_bayes.posterior.memory_diagnostics`): for each estimand e, ``rhat_e`` over
#: ``memory`` (the rank R-hat of the memory-level draws of e: ``e``, or ``e_memory`` in
#: per-query and gated posteriors) and ``split_mean_e`` over (``memory``, :data:`SPLIT_DIM`)
#: (each half-chain's mean of those draws); group attributes ``chains`` and ``draws``.
MEMORY_DIAGNOSTICS: str = "memory_diagnostics"
MEMORY_DIAGNOSTICS_ESTIMANDS: tuple[str, ...] = ("tau", "utility")
MEMORY_DIAGNOSTICS_VARS: tuple[str, ...] = (
    *(f"rhat_{e}" for e in MEMORY_DIAGNOSTICS_ESTIMANDS),
    *(f"split_mean_{e}" for e in MEMORY_DIAGNOSTICS_ESTIMANDS),
)
MEMORY_DIAGNOSTICS_ATTRS: tuple[str, ...] = ("chains", "draws")
SPLIT_DIM: str = "split_chain"
#: The optional group of hyperparameter R-hats the fit measured on more draws than it stored
#: (:mod:`cmp_bayes.posterior.hyper_diagnostics`): ``rhat`` over ``element`` and
#: ``split_mean`` over (``element``, :data:`SPLIT_DIM`); attributes ``chains``, ``draws``,
#: ``fit_draws``.
HYPER_DIAGNOSTICS: str = "hyper_diagnostics"
HYPER_DIAGNOSTICS_VARS: tuple[str, ...] = ("rhat", "split_mean")
#: Root attribute ``by`` of each form.
BY_MEMORY, BY_QUERY = "memory", "query"


@dataclass(frozen=True)
class GroupContract:
    """What one group of the DataTree holds.

    Attributes
    ----------
    name : str
        The group's name.
    variables : tuple of str
        Variables it must hold.
    dims : tuple of str
        Dims each of those variables must have (at least), memory-level form.
    query_dims : tuple of str
        The same in the per-query form (``by = "query"``).
    required : bool
        Whether every posterior has the group; the others may be left out by
        ``save_posterior(drop_groups=...)`` but, when present, follow the contract.
    """

    name: str
    variables: tuple[str, ...]
    dims: tuple[str, ...]
    query_dims: tuple[str, ...]
    required: bool


_DRAWN = (*SAMPLE_DIMS, "memory")
_DRAWN_Q = (*_DRAWN, "query")

#: Root attribute naming the pair model of a per-query posterior, and its gated value.
PAIR_MODEL_ATTR, PAIR_GATED = "pair_model", "gated"
#: The gated pair model's variables over (chain, draw, pair) and over (chain, draw, memory),
#: its hyperparameters (``gate_coef`` over ``gate_covariate`` only when the log has rankings),
#: and the coordinates along ``pair``.
GATED_PAIR_VARS: tuple[str, ...] = ("tau", "rho", "utility", "p_relevant")
GATED_MEMORY_VARS: tuple[str, ...] = (
    "tau_relevant", "p_relevant_any", "tau_memory", "rho_memory", "utility_memory",
)
GATED_HYPER_VARS: tuple[str, ...] = ("gate_intercept",)
PAIR_COORDS: tuple[str, str] = ("memory_id", "query_id")
#: Dims of each group's contract variables in the gated form (groups not listed: as memory-level).
GATED_DIMS: dict[str, tuple[str, ...]] = {
    "posterior": (*SAMPLE_DIMS, "pair"),
    "prior": (*SAMPLE_DIMS, "pair"),
    "posterior_predictive": (*SAMPLE_DIMS, "pair"),
    "prior_predictive": (*SAMPLE_DIMS, "pair"),
    "observed_data": ("pair",),
}
#: The gated form's extra group: the design's identification status of every pair (``status``
#: over ``pair``); optional.
PAIR_IDENTIFICATION: str = "pair_identification"
#: The gated form's group of delta's posterior on the grid: ``pmf`` over (``memory``,
#: ``tau_cell``), each memory's P(delta_m in the cell | data) averaged over every draw the fit
#: judged (coordinates ``tau_cell_lower``, ``tau_cell_upper``, ``tau_cell_point``; attribute
#: ``within_cell``: ``"uniform"`` when the draws spread delta over its cell, ``"point"`` when
#: they put it at the cell's point); optional. ``decide(estimand="relevant")`` takes
#: P(tau_relevant > threshold) and its mean from it, exactly, instead of from the stored draws.
TAU_RELEVANT_GRID: str = "tau_relevant_grid"


# Root attributes are typed Mapping[Any, Any]: xarray types attrs dict[Hashable, Any], and
# Mapping's key type is invariant, so Mapping[str, Any] would refuse a DataTree's own attrs.
def is_gated(attrs: Mapping[Any, Any]) -> bool:
    """Whether a posterior's root attributes say it is the gated pair model's."""
    return str(attrs.get(PAIR_MODEL_ATTR, "")) == PAIR_GATED


#: Every group of the contract, in the order docs/model.md lists them.
GROUPS: tuple[GroupContract, ...] = (
    GroupContract("posterior", MEMORY_VARS, _DRAWN, _DRAWN_Q, required=True),
    GroupContract("prior", MEMORY_VARS, _DRAWN, _DRAWN_Q, required=False),
    GroupContract("posterior_predictive", ("exposed_outcome_sum",), _DRAWN, _DRAWN_Q, required=False),
    GroupContract("prior_predictive", ("exposed_outcome_sum",), _DRAWN, _DRAWN_Q, required=False),
    GroupContract(
        "observed_data",
        ("exposed", "exposed_outcome_sum", "control", "control_outcome_sum", "retrieved", "in_store"),
        ("memory",),
        ("memory", "query"),
        required=False,
    ),
    GroupContract("sample_stats", ("diverging",), SAMPLE_DIMS, SAMPLE_DIMS, required=False),
    GroupContract(
        "identification",
        (
            "status", "exposed", "retrieved", "in_store", "contraction", "mean_shift", "propensity",
            "tau_mean", "tau_sd", "prior_tau_mean", "prior_tau_sd", "p_tau_positive", "p_helps",
        ),
        ("memory",),
        ("memory",),
        required=True,
    ),
    # each exposed memory's marginal log-likelihood per draw, for PSIS-LOO; memory-level
    # fits only, over the exposed memories (a subset of the posterior's memory ids)
    GroupContract("log_likelihood", (LOG_LIKELIHOOD_VAR,), _DRAWN, _DRAWN, required=False),
    # each memory's R-hat of tau and utility over the saved draws (a gated fit stored thinner:
    # of their conditional means over every judged draw), computed at fit time (decide reads it
    # instead of recomputing); posteriors written before it existed have none
    GroupContract(
        MEMORY_DIAGNOSTICS, MEMORY_DIAGNOSTICS_VARS, ("memory",), ("memory",), required=False
    ),
    # each hyperparameter's R-hat on the draws the fit judged, where it stored fewer (the gated
    # model on a shared store); the sampler checks read it while the stored draws are the fit's
    GroupContract(
        HYPER_DIAGNOSTICS, HYPER_DIAGNOSTICS_VARS, ("element",), ("element",), required=False
    ),
)
#: Group name -> its contract.
GROUP: dict[str, GroupContract] = {g.name: g for g in GROUPS}
#: Groups every posterior must have (``save_posterior`` may not drop them).
REQUIRED_GROUPS: tuple[str, ...] = tuple(g.name for g in GROUPS if g.required)
#: Root attributes every posterior carries (``model_config`` and ``sampler_config`` are JSON).
REQUIRED_ATTRS: tuple[str, ...] = (
    "cmp_bayes_version", "model_config", "sampler_config", "log_checksum", "log_path",
    "outcome_kind", "created_at", "by", "thin_step",
)

#: Root attributes a posterior may carry: ``fit_attempts`` (JSON list, one object per
#: NUTS attempt of fit's retry schedule; see :func:`fit_attempts`) and
#: ``fit_attempt_kept`` (int, the attempt whose draws the posterior holds). Posteriors
#: written before retries existed, and synthetic ones, have neither. ``log_id`` (str)
#: and ``store`` (JSON) are the fitted log's ``design.json`` top-level fields of the
#: same names (a live session's log id and the memory system's scope), copied by
#: ``fit`` when the design has them; see :mod:`cmp_bayes.posterior.provenance`.
#: ``pair_model`` (str) is ``"gated"`` on the gated pair model's posteriors (:data:`GATED_DIMS`).
OPTIONAL_ATTRS: tuple[str, ...] = ("fit_attempts", "fit_attempt_kept", "log_id", "store", PAIR_MODEL_ATTR)
#: Non-dimension coordinate along ``memory`` of the ``posterior`` group: each memory's
#: text from the log's ``memories.jsonl`` ("" for a memory without one). Present only
#: when the fitted log had texts; see :mod:`cmp_bayes.posterior.provenance`.
MEMORY_TEXT: str = "memory_text"
#: Keys of each object in ``fit_attempts``.
FIT_ATTEMPT_KEYS: tuple[str, ...] = (
    "attempt", "seed", "target_accept", "tune", "divergences", "max_rhat", "worst_variable",
    "ok", "problems", "seconds", "kept",
)


def fit_attempts(attrs: Mapping[Any, Any], where: str = "posterior") -> list[dict[str, Any]]:
    """The fit attempts recorded in a posterior's root attributes ([] when not recorded).

    Parameters
    ----------
    attrs : mapping
        The DataTree's root attributes.
    where : str
        Names the posterior in error messages.

    Returns
    -------
    list of dict
        One per attempt, in order, with the keys :data:`FIT_ATTEMPT_KEYS`.

    Raises
    ------
    PosteriorError
        ``fit_attempts`` is not a JSON list of objects with those keys.
    """
    raw = attrs.get("fit_attempts")
    if raw is None:
        return []
    try:
        data = json.loads(str(raw))
    except json.JSONDecodeError as exc:
        raise PosteriorError(f"{where}: root attribute 'fit_attempts' is not JSON ({exc})") from exc
    if not isinstance(data, list) or not all(isinstance(a, dict) for a in data):
        raise PosteriorError(f"{where}: root attribute 'fit_attempts' is not a JSON list of objects")
    for a in data:
        missing = [k for k in FIT_ATTEMPT_KEYS if k not in a]
        if missing:
            raise PosteriorError(f"{where}: a 'fit_attempts' entry lacks {missing}")
    return data


def memory_level_vars(by: str) -> tuple[str, ...]:
    """The (chain, draw, memory) variables of the posterior in form ``by``."""
    if by == BY_QUERY:
        return tuple(v + MEMORY_SUFFIX for v in MEMORY_VARS)
    return MEMORY_VARS


def version_key(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``"0.1.0"``; None if it has none."""
    match = re.match(r"\s*v?(\d+)\.(\d+)", str(version))
    return (int(match[1]), int(match[2])) if match else None


def compatible(written: str, running: str) -> bool:
    """Whether a posterior written by cmp_bayes ``written`` can be read by ``running``.

    Semantic versioning: the same major version, and before 1.0 the same minor
    too (0.x releases may change the contract). A version without a
    major.minor (unparseable) is compatible with nothing.
    """
    w, r = version_key(written), version_key(running)
    if w is None or r is None:
        return False
    return w == r if w[0] == 0 else w[0] == r[0]
