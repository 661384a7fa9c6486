"""The sampler checks' building blocks: what a hyperparameter is, the one R-hat, divergences.

Definitions written once (see :mod:`cmp_bayes.posterior.health` for why each
is what it is, and for the verdict built from them), the :class:`Check` row
the report shows, and the advisory checks (tree depth, E-BFMI, ESS, R-hat of
tau over every memory) that never change the verdict.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Final

import numpy as np
import xarray as xr

from cmp_bayes.constants import BFMI_MIN, ESS_PER_CHAIN, RHAT_MAX
from cmp_bayes.posterior.rhat_kernel import rank_rhat

#: dims that mark a per-memory (not hyper-) parameter (``pair``: the gated model's per-pair ones).
ENTITY_DIMS: frozenset[str] = frozenset({"memory", "query", "pair"})
SAMPLE_DIMS: tuple[str, str] = ("chain", "draw")


def is_hyperparameter(da: xr.DataArray) -> bool:
    """Whether a ``posterior`` variable is a hyperparameter (see :mod:`cmp_bayes.posterior.health`)."""
    return (
        set(SAMPLE_DIMS) <= set(da.dims)
        and not (ENTITY_DIMS & set(da.dims))
        and np.issubdtype(da.dtype, np.number)
    )


def hyperparameter_names(posterior: xr.DataTree) -> list[str]:
    """Names of the hyperparameters of a posterior's ``posterior`` group, in group order."""
    post = posterior["posterior"].to_dataset()
    return [str(name) for name, da in post.data_vars.items() if is_hyperparameter(da)]


#: Hyperparameter families by name prefix, and the per-memory quantity each one's draws
#: enter (docs/model.md): the mixture shape (``tau_*``) and its weights (``weight_*``)
#: make each memory's tau prior (in the gated pair model, the prior of ``delta_m``,
#: also ``delta_*``); ``rho_*`` make its rho prior; the gate's coefficients
#: (``gate_*``, ``relevance_*``: P(relevant) from the retriever's rank) make the prior of
#: each pair's relevance indicator z(m, q).
HYPERPARAMETER_FAMILIES: dict[str, str] = {
    "tau_": "tau", "weight_": "tau", "delta_": "tau", "rho_": "rho",
    "gate_": "relevance", "relevance_": "relevance",
}
#: The per-memory quantities each decision estimand is a function of. utility = rho * tau.
#: In the gated model tau(m, q) = z(m, q) * delta_m, so every estimand built from tau
#: depends on the gate too; ``relevant`` is delta_m, "useful when relevant", whose
#: posterior still depends on the gate (which exposures count as relevant ones) and on
#: the delta prior; ``workload`` = E_q[rho(m, q) tau(m, q)] depends on all three. A
#: posterior without gate hyperparameters is unaffected by the ``relevance`` entries.
ESTIMAND_DEPENDS_ON: dict[str, frozenset[str]] = {
    "tau": frozenset({"tau", "relevance"}),
    "utility": frozenset({"tau", "rho", "relevance"}),
    "relevant": frozenset({"tau", "relevance"}),
    "workload": frozenset({"tau", "rho", "relevance"}),
}


def posterior_estimands(post: xr.Dataset) -> list[str]:
    """The decision estimands a ``posterior`` group supports, in :data:`ESTIMAND_DEPENDS_ON` order.

    ``tau`` and ``utility`` always; ``relevant`` with a ``tau_relevant`` variable
    (gated pair posteriors); ``workload`` when ``tau`` varies by query (a
    ``query`` or ``pair`` dim).
    """
    tau_dims = set(post["tau"].dims) if "tau" in post else set()
    has = {
        "relevant": "tau_relevant" in post,
        "workload": bool(tau_dims & {"query", "pair"}),
    }
    return [e for e in ESTIMAND_DEPENDS_ON if has.get(e, True)]


def hyperparameter_family(name: str) -> str | None:
    """``"tau"`` or ``"rho"``: which per-memory quantity a hyperparameter enters (None: unknown)."""
    for prefix, family in HYPERPARAMETER_FAMILIES.items():
        if name.startswith(prefix):
            return family
    return None


def check_estimand(estimand: str | None) -> str | None:
    """``estimand`` itself when it is None or a key of :data:`ESTIMAND_DEPENDS_ON`.

    Raises
    ------
    ValueError
        Any other estimand.
    """
    if estimand is not None and estimand not in ESTIMAND_DEPENDS_ON:
        raise ValueError(
            f"estimand must be None or one of {sorted(ESTIMAND_DEPENDS_ON)}, got {estimand!r}"
        )
    return estimand


def estimand_depends_on(name: str, estimand: str | None) -> bool:
    """Whether decisions on ``estimand`` depend on hyperparameter ``name``.

    The one definition fit, the report and decide use. ``estimand=None`` means
    any decision: every hyperparameter counts. A name of no known family counts
    for every estimand, so an unrecognised variable can only make the guard stricter.

    Raises
    ------
    ValueError
        An estimand other than None and the keys of :data:`ESTIMAND_DEPENDS_ON`.
    """
    checked = check_estimand(estimand)
    if checked is None:
        return True
    family = hyperparameter_family(name)
    return family is None or family in ESTIMAND_DEPENDS_ON[checked]


def estimand_hyperparameters(names: list[str], estimand: str | None) -> list[str]:
    """The hyperparameters among ``names`` that decisions on ``estimand`` depend on, in order."""
    return [n for n in names if estimand_depends_on(n, estimand)]


def rhat(ds: xr.Dataset) -> xr.Dataset:
    """The one R-hat: max of bulk and folded rank-normalized split R-hat, per element.

    Parameters
    ----------
    ds : xarray.Dataset
        Variables over (chain, draw, ...); at least 2 chains.

    Returns
    -------
    xarray.Dataset
        Same variables without (chain, draw), float64 (dimensionless). NaN where
        the draws are constant: nothing to disagree about.
    """
    import arviz_stats

    ds = ds.astype("float64")
    with warnings.catch_warnings():
        # constant draws give 0/0 inside arviz_stats; the NaN is the answer
        warnings.simplefilter("ignore", RuntimeWarning)
        # method="rank" is max(bulk, folded tail) already (arviz_stats base/diagnostics.py)
        return arviz_stats.rhat(ds, sample_dims=list(SAMPLE_DIMS), method="rank")


#: Memories per gather of :func:`memory_rhat` (2,048 x 1,000 draws = 16 MB).
_GATHER_CHUNK: Final[int] = 2048


def memory_rhat(draws: xr.DataArray, memories: np.ndarray) -> np.ndarray:
    """:func:`rhat` of each listed memory's draws (vectorised: :func:`rank_rhat`).

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
        or where there are fewer than 2 chains.
    """
    if len(memories) == 0 or int(draws.sizes.get("chain", 0)) < 2:
        return np.full(len(memories), np.nan)
    index = draws.indexes["memory"].get_indexer(np.asarray(memories))
    if (index < 0).any():
        raise KeyError(f"memory {np.asarray(memories)[index < 0][0]!r} not in the draws")
    # the draws lie memory-last: gather memories per (chain, draw) row, in
    # chunks that keep the copies small, and hand rank_rhat (memory, chain,
    # draw) views of them
    values = draws.transpose("chain", "draw", "memory").to_numpy()
    out = np.empty(len(index))
    for lo in range(0, len(index), _GATHER_CHUNK):
        part = np.take(values, index[lo : lo + _GATHER_CHUNK], axis=2)
        out[lo : lo + part.shape[2]] = rank_rhat(np.moveaxis(part, 2, 0))
    return out


def divergences(posterior: xr.DataTree) -> tuple[int, int] | None:
    """Divergent draws and all draws in ``sample_stats.diverging``; None if not recorded."""
    if "sample_stats" not in posterior.children:
        return None
    stats = posterior["sample_stats"].to_dataset()
    if "diverging" not in stats:
        return None
    div = np.asarray(stats["diverging"].to_numpy(), dtype=bool)
    return int(div.sum()), int(div.size)


@dataclass(frozen=True)
class Check:
    """One sampler check.

    Attributes
    ----------
    name : str
        What is checked (e.g. "R-hat (hyperparameters)").
    value : str
        The measured value, formatted.
    threshold : str
        The pass condition, formatted.
    ok : bool or None
        True pass, False fail, None not recorded.
    advice : str
        What to do when it fails ("" when it passes).
    gate : bool
        Whether a failure fails the overall verdict (see :mod:`cmp_bayes.posterior.health`).
    """

    name: str
    value: str
    threshold: str
    ok: bool | None
    advice: str = ""
    gate: bool = True

    @property
    def verdict(self) -> str:
        """ "pass", "FAIL", "warn" (advisory check failed) or "not recorded"."""
        if self.ok is False and not self.gate:
            return "warn"
        return {True: "pass", False: "FAIL", None: "not recorded"}[self.ok]


def diagnose_stats(posterior: xr.DataTree, hyper: list[str]) -> dict:
    """arviz_stats.diagnose's tree-depth and E-BFMI results ({} without sample_stats)."""
    import arviz_stats

    if "sample_stats" not in posterior.children:
        return {}
    stats = posterior["sample_stats"].to_dataset()
    # nutpie names the max-depth flag differently from PyMC; diagnose reads PyMC's name
    if "reached_max_treedepth" not in stats and "maxdepth_reached" in stats:
        stats = stats.assign(reached_max_treedepth=stats["maxdepth_reached"])
    keep = [v for v in ("reached_max_treedepth", "energy") if v in stats]
    if not keep:
        return {}
    post = posterior["posterior"].to_dataset()
    tree = xr.DataTree.from_dict(
        {"posterior": post[hyper] if hyper else post, "sample_stats": stats[keep]}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, diag = arviz_stats.diagnose(
            tree,
            var_names=hyper or None,
            rhat_max=RHAT_MAX,
            bfmi_threshold=BFMI_MIN,
            show_diagnostics=False,
            return_diagnostics=True,
        )
    return diag


def treedepth_check(diag: dict) -> Check:
    """Advisory: transitions at the maximum tree depth (from :func:`diagnose_stats`)."""
    d = diag.get("treedepth")
    if d is None:
        return Check("tree depth", "n/a", "no transition at the maximum depth", None, gate=False)
    n, total = int(d["n_max"]), int(d["total_samples"])
    return Check(
        "tree depth",
        f"{n} of {total} at the maximum",
        "no transition at the maximum depth",
        n == 0,
        ""
        if n == 0
        else "exploration is slow: raise the maximum tree depth or rescale the "
        "hyperparameters' priors",
        gate=False,
    )


def bfmi_check(diag: dict) -> Check:
    """Advisory: E-BFMI of every chain against ``BFMI_MIN`` (from :func:`diagnose_stats`)."""
    d = diag.get("bfmi")
    if d is None:
        return Check("E-BFMI", "n/a", f">= {BFMI_MIN} in every chain", None, gate=False)
    values = np.asarray(d["bfmi_values"], dtype=float)
    ok = not d["failed_chains"]
    return Check(
        "E-BFMI",
        f"min {float(np.nanmin(values)):.3g}" if values.size else "n/a",
        f">= {BFMI_MIN} in every chain",
        ok,
        ""
        if ok
        else "the energy distribution is poorly explored: reparameterise (non-centred "
        "group effects) or tighten the hyperpriors",
        gate=False,
    )


def ess_check(post: xr.Dataset, hyper: list[str], chains: int) -> Check:
    """Advisory: smallest of bulk and tail ESS over the hyperparameters' elements."""
    import arviz_stats

    ess_min = ESS_PER_CHAIN * max(chains, 1)
    worst = None
    if hyper:
        ds = post[hyper]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ess = np.fmin(
                flatten(arviz_stats.ess(ds, sample_dims=list(SAMPLE_DIMS), method="bulk")),
                flatten(arviz_stats.ess(ds, sample_dims=list(SAMPLE_DIMS), method="tail")),
            )
        worst = extreme(ess, element_labels(ds), largest=False)
    if worst is None:
        return Check("ESS (hyperparameters)", "n/a", f">= {ess_min}", None, gate=False)
    value, name = worst
    return Check(
        "ESS (hyperparameters)",
        f"min {value:,.0f} ({name})",
        f">= {ess_min} ({ESS_PER_CHAIN} per chain)",
        value >= ess_min,
        ""
        if value >= ess_min
        else "too few effective draws for stable intervals: "
        "draw more (--draws) or keep more draws (--keep-draws)",
        gate=False,
    )


def tau_rhat_check(post: xr.Dataset, chains: int, values: np.ndarray | None = None) -> Check:
    """Advisory: :func:`rhat` of tau for every memory (over 1.01 by chance among many).

    ``values``: those R-hats when already known (the fit's stored ones,
    :mod:`cmp_bayes.posterior.memory_diagnostics`); otherwise computed here.
    """
    name = "tau_memory" if "tau_memory" in post else "tau"
    if name not in post or chains < 2:
        return Check("R-hat (tau, every memory)", "n/a", f"<= {RHAT_MAX}", None, gate=False)
    if values is None:
        values = rhat(post[[name]])[name].to_numpy()
    values = np.asarray(values, dtype="float64")
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Check(
            "R-hat (tau, every memory)", "n/a (constant draws)", f"<= {RHAT_MAX}", None, gate=False
        )
    bad = int((values > RHAT_MAX).sum())
    return Check(
        "R-hat (tau, every memory)",
        f"max {float(values.max()):.3f}; {bad} of {values.size} above",
        f"<= {RHAT_MAX}",
        bad == 0,
        ""
        if bad == 0
        else "some memories' draws disagree between chains: draw more, and "
        "treat those memories' intervals with care",
        gate=False,
    )


def element_labels(ds: xr.Dataset) -> list[str]:
    """Element labels ``var[coord,...]`` in the order :func:`flatten` flattens them."""
    labels: list[str] = []
    for name, da in ds.data_vars.items():
        rest = [d for d in da.dims if d not in SAMPLE_DIMS]
        if not rest:
            labels.append(str(name))
            continue
        stacked = da.isel(chain=0, draw=0).stack(_e=rest)
        for idx in stacked["_e"].to_index():
            key = idx if isinstance(idx, tuple) else (idx,)
            labels.append(f"{name}[{', '.join(str(k) for k in key)}]")
    return labels


def flatten(ds: xr.Dataset) -> np.ndarray:
    """Every variable's values, raveled and concatenated (float64), in variable order."""
    parts = [np.ravel(ds[name].to_numpy()).astype(float) for name in ds.data_vars]
    return np.concatenate(parts) if parts else np.empty(0)


def extreme(values: np.ndarray, labels: list[str], *, largest: bool) -> tuple[float, str] | None:
    """The largest (or smallest) finite value and its label; None if none is finite."""
    finite = np.isfinite(values)
    if not finite.any():
        return None
    masked = np.where(finite, values, -np.inf if largest else np.inf)
    i = int(np.argmax(masked) if largest else np.argmin(masked))
    return float(values[i]), labels[i]
