"""Sampler health: may a posterior be trusted? One implementation for fit, report and decide.

Everything the package says about the sampler comes from :func:`sampler_health`:
``cmp-bayes fit`` prints :meth:`SamplerHealth.line`, the report shows
:attr:`SamplerHealth.checks`, and ``decide`` refuses every forget unless
:attr:`SamplerHealth.ok` (with the thresholds of its ``Costs``). So one
posterior gets one verdict.

Definitions, each written once here:

* **Hyperparameter** (:func:`is_hyperparameter`): a numeric ``posterior``
  variable over (chain, draw) without a ``memory`` or ``query`` dim. These are
  the only quantities NUTS samples in the grid model (each memory's tau and rho
  are drawn exactly given them), so the only ones whose mixing is in question.
* **R-hat** (:func:`rhat`): rank-normalized split R-hat, the larger of the
  bulk (rank-normalized draws) and the tail (rank-normalized draws folded
  about the median) versions: Vehtari et al. 2021's recommended R-hat and
  ``arviz_stats.rhat(method="rank")``, which ``arviz_stats.diagnose`` uses.
  The bulk version catches chains that disagree on location, the folded one
  chains that disagree on scale (the same centre, a different spread).
* **Divergences** (:func:`divergences`): the count of True in
  ``sample_stats.diverging``, over all chains and draws.

The verdict (:attr:`SamplerHealth.ok`) gates on the two checks that say the
draws may not represent the posterior at all: divergences (share of divergent
draws at most ``max_divergence_share``; any divergence by default) and the
hyperparameters' R-hat (at most ``max_rhat``, ``<=`` passes). A gating check
that cannot be made (no ``diverging`` variable; one chain) fails the verdict:
nothing irreversible rests on an unchecked sampler. The other checks are
advisory (shown as "warn", never failing the verdict): tree depth, E-BFMI and
ESS measure efficiency and Monte Carlo precision, and the per-memory tau R-hat
over thousands of memories exceeds 1.01 by chance (``decide`` checks the R-hat
of each memory it is about to forget with :func:`memory_rhat`). Thresholds are
in :mod:`cmp_bayes.constants`.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from cmp_bayes.constants import BFMI_MIN, ESS_PER_CHAIN, MAX_DIVERGENCE_SHARE, RHAT_MAX

#: dims that mark a per-memory (not hyper-) parameter.
ENTITY_DIMS: frozenset[str] = frozenset({"memory", "query"})
SAMPLE_DIMS: tuple[str, str] = ("chain", "draw")
#: names of the gating checks (the verdict's).
DIVERGENCE_CHECK: str = "divergences"
RHAT_CHECK: str = "R-hat (hyperparameters)"


def is_hyperparameter(da: xr.DataArray) -> bool:
    """Whether a ``posterior`` variable is a hyperparameter (see the module docstring)."""
    return (
        set(SAMPLE_DIMS) <= set(da.dims)
        and not (ENTITY_DIMS & set(da.dims))
        and np.issubdtype(da.dtype, np.number)
    )


def hyperparameter_names(posterior: xr.DataTree) -> list[str]:
    """Names of the hyperparameters of a posterior's ``posterior`` group, in group order."""
    post = posterior["posterior"].to_dataset()
    return [str(name) for name, da in post.data_vars.items() if is_hyperparameter(da)]


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


def memory_rhat(draws: xr.DataArray, memories: np.ndarray) -> np.ndarray:
    """:func:`rhat` of each listed memory's draws.

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
    sub = draws.sel(memory=list(memories))
    return rhat(xr.Dataset({"x": sub}))["x"].to_numpy().astype("float64")


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
        Whether a failure fails the overall verdict (see the module docstring).
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


@dataclass(frozen=True)
class SamplerHealth:
    """Every check and the one verdict.

    Attributes
    ----------
    ok : bool
        True when forgets may proceed: no gating check failed or was impossible.
    checks : list of Check
        Gating and advisory checks, in report order.
    hyperparameters : list of str
        Variables R-hat and ESS were computed on.
    chains, draws : int
        Posterior chains and draws per chain.
    divergences : int or None
        Divergent post-warmup draws (None when not recorded).
    divergence_share : float or None
        ``divergences / (chains * draws)``.
    max_rhat : float or None
        Largest :func:`rhat` over the hyperparameters' elements (None: one
        chain, no hyperparameters, or constant draws).
    worst_variable : str or None
        The element with that R-hat (``name`` or ``name[coord]``).
    problems : list of str
        One phrase per gating check that failed or could not be made.
    rhat_threshold, divergence_share_threshold : float
        The thresholds the verdict used.
    """

    ok: bool
    checks: list[Check] = field(default_factory=list)
    hyperparameters: list[str] = field(default_factory=list)
    chains: int = 0
    draws: int = 0
    divergences: int | None = None
    divergence_share: float | None = None
    max_rhat: float | None = None
    worst_variable: str | None = None
    problems: list[str] = field(default_factory=list)
    rhat_threshold: float = RHAT_MAX
    divergence_share_threshold: float = MAX_DIVERGENCE_SHARE

    @property
    def verdict(self) -> str:
        """One line a person reads first (the report's)."""
        if self.ok:
            return (
                f"PASS: {self.chains} chains x {self.draws} draws, every recorded check passed; "
                "the posterior can be trusted for decisions."
            )
        failed = [c.name for c in self.checks if c.gate and c.ok is not True]
        return (
            f"FAIL: {', '.join(failed)} ({'; '.join(self.problems)}). Do not act on forgets "
            "from this posterior; see what to do below."
        )

    def summary(self) -> str:
        """One line: chains, draws, R-hat, divergences, verdict (the decide CLI's)."""
        rh = "n/a" if self.max_rhat is None else f"{self.max_rhat:.3f}"
        div = "n/a" if self.divergences is None else str(self.divergences)
        verdict = "ok" if self.ok else "FAILED: " + "; ".join(self.problems)
        return (
            f"sampler health: {self.chains} chains x {self.draws} draws, "
            f"max hyperparameter R-hat {rh}, divergences {div}: {verdict}"
        )

    def line(self) -> str:
        """One line after a fit: verdict, R-hat, divergences (``cmp-bayes fit``'s)."""
        if self.max_rhat is not None:
            rhat_txt = (
                f"max R-hat {self.max_rhat:.3f} over {len(self.hyperparameters)} hyperparameters"
            )
        elif self.chains < 2:
            rhat_txt = "R-hat n/a (one chain)"
        else:
            rhat_txt = "R-hat n/a"
        div = "n/a" if self.divergences is None else str(self.divergences)
        flag = "ok" if self.ok else "check"
        return (
            f"health: {flag}: {rhat_txt}; {div} divergences in {self.chains * self.draws} draws"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (checks as dicts)."""
        return asdict(self)


def sampler_health(
    posterior: xr.DataTree,
    *,
    max_rhat: float = RHAT_MAX,
    max_divergence_share: float = MAX_DIVERGENCE_SHARE,
    advisory: bool = True,
) -> SamplerHealth:
    """Run every sampler check and give the one verdict.

    Parameters
    ----------
    posterior : xarray.DataTree
        Follows the posterior contract (``posterior``; ``sample_stats`` with
        ``diverging`` and optionally ``energy`` and the tree-depth flag).
    max_rhat : float
        Largest hyperparameter R-hat that passes (dimensionless, ``<=``).
    max_divergence_share : float
        Largest share of divergent draws that passes (in [0, 1], ``<=``).
    advisory : bool
        Also run the advisory checks (tree depth, E-BFMI, ESS, R-hat of tau
        over every memory: about 3 s per 1,000 memories). They never change
        ``ok``, so ``decide`` skips them.

    Returns
    -------
    SamplerHealth
    """
    post = posterior["posterior"].to_dataset()
    chains = int(post.sizes.get("chain", 0))
    draws = int(post.sizes.get("draw", 0))
    hyper = hyperparameter_names(posterior)
    problems: list[str] = []

    div_check, n_div, share = _divergence_check(posterior, max_divergence_share, problems)
    rhat_check, worst = _rhat_check(post, hyper, chains, max_rhat, problems)
    if advisory:
        diag = _diagnose(posterior, hyper)
        checks = [
            div_check,
            _treedepth_check(diag),
            _bfmi_check(diag),
            rhat_check,
            _ess_check(post, hyper, chains),
            _tau_rhat_check(post, chains),
        ]
    else:
        checks = [div_check, rhat_check]
    return SamplerHealth(
        ok=not problems,
        checks=checks,
        hyperparameters=hyper,
        chains=chains,
        draws=draws,
        divergences=n_div,
        divergence_share=share,
        max_rhat=None if worst is None else worst[0],
        worst_variable=None if worst is None else worst[1],
        problems=problems,
        rhat_threshold=float(max_rhat),
        divergence_share_threshold=float(max_divergence_share),
    )


def _divergence_check(
    posterior: xr.DataTree, max_share: float, problems: list[str]
) -> tuple[Check, int | None, float | None]:
    threshold = (
        "0 divergent transitions" if max_share == 0 else f"<= {max_share:.2%} of draws divergent"
    )
    counted = divergences(posterior)
    if counted is None:
        problems.append("divergences not recorded (sample_stats.diverging missing)")
        return Check(DIVERGENCE_CHECK, "n/a", threshold, None), None, None
    n, total = counted
    share = n / max(total, 1)
    ok = share <= max_share
    if not ok:
        problems.append(f"{n} divergent draws ({share:.2%} > {max_share:.2%})")
    check = Check(
        DIVERGENCE_CHECK,
        f"{n} of {total} ({100 * share:.2f}%)",
        threshold,
        ok,
        ""
        if ok
        else (
            "the sampler missed part of the posterior: refit with a higher target acceptance "
            "(e.g. --target-accept 0.95) or more tuning; persisting divergences mean the model "
            "needs reparameterising"
        ),
    )
    return check, n, share


def _rhat_check(
    post: xr.Dataset, hyper: list[str], chains: int, max_rhat: float, problems: list[str]
) -> tuple[Check, tuple[float, str] | None]:
    if chains < 2:
        problems.append(f"R-hat needs at least 2 chains, the posterior has {chains}")
        return Check(RHAT_CHECK, "n/a (needs 2+ chains)", f"<= {max_rhat}", None), None
    worst = _worst(_flat(rhat(post[hyper])), _labels(post[hyper]), largest=True) if hyper else None
    if worst is None:  # no hyperparameters, or constant draws: nothing can disagree
        return Check(RHAT_CHECK, "n/a", f"<= {max_rhat}", None), None
    value, name = worst
    ok = value <= max_rhat
    if not ok:
        # enough digits that a value just above the threshold does not read as equal to it
        shown = f"{value:.3f}" if f"{value:.3f}" != f"{max_rhat:.3f}" else f"{value:.12g}"
        problems.append(f"R-hat of {name} is {shown} > {max_rhat}")
    check = Check(
        RHAT_CHECK,
        f"max {value:.3f} ({name})",
        f"<= {max_rhat}",
        ok,
        ""
        if ok
        else "chains disagree: run more tuning and draws "
        "(--tune, --draws), then check the trace plots for a stuck chain",
    )
    return check, worst


def _diagnose(posterior: xr.DataTree, hyper: list[str]) -> dict:
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


def _treedepth_check(diag: dict) -> Check:
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


def _bfmi_check(diag: dict) -> Check:
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


def _ess_check(post: xr.Dataset, hyper: list[str], chains: int) -> Check:
    import arviz_stats

    ess_min = ESS_PER_CHAIN * max(chains, 1)
    worst = None
    if hyper:
        ds = post[hyper]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ess = np.fmin(
                _flat(arviz_stats.ess(ds, sample_dims=list(SAMPLE_DIMS), method="bulk")),
                _flat(arviz_stats.ess(ds, sample_dims=list(SAMPLE_DIMS), method="tail")),
            )
        worst = _worst(ess, _labels(ds), largest=False)
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


def _tau_rhat_check(post: xr.Dataset, chains: int) -> Check:
    name = "tau_memory" if "tau_memory" in post else "tau"
    if name not in post or chains < 2:
        return Check("R-hat (tau, every memory)", "n/a", f"<= {RHAT_MAX}", None, gate=False)
    values = rhat(post[[name]])[name].to_numpy()
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


def _labels(ds: xr.Dataset) -> list[str]:
    """Element labels ``var[coord,...]`` in the order :func:`_flat` flattens them."""
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


def _flat(ds: xr.Dataset) -> np.ndarray:
    parts = [np.ravel(ds[name].to_numpy()).astype(float) for name in ds.data_vars]
    return np.concatenate(parts) if parts else np.empty(0)


def _worst(values: np.ndarray, labels: list[str], *, largest: bool) -> tuple[float, str] | None:
    finite = np.isfinite(values)
    if not finite.any():
        return None
    masked = np.where(finite, values, -np.inf if largest else np.inf)
    i = int(np.argmax(masked) if largest else np.argmin(masked))
    return float(values[i]), labels[i]
