"""Sampler health for the report: ``arviz_stats.diagnose`` turned into a verdict.

Checks (each with a plain pass/fail and what to do on fail):

* divergences (``sample_stats.diverging``): any divergent transition fails;
* tree depth (``reached_max_treedepth``, or nutpie's ``maxdepth_reached``);
* E-BFMI per chain (``sample_stats.energy``) against 0.3;
* R-hat (rank-normalized split, the larger of rank and folded) of the
  hyperparameters against 1.01 (Vehtari et al. 2021);
* ESS (min of bulk and tail) of the hyperparameters against 100 per chain,
  the threshold ``arviz_stats.diagnose`` uses;
* R-hat of ``tau`` over every memory (advisory: reported, never fails the verdict).

Hyperparameters are the posterior variables without a ``memory`` or ``query``
dim: the only quantities NUTS samples in the grid model, so the only ones whose
mixing is in question. A check whose input is absent (an ADVI posterior has no
``energy``) is reported as "not recorded", neither pass nor fail.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import xarray as xr

#: dims that mark a per-memory (not hyper-) parameter.
ENTITY_DIMS: frozenset[str] = frozenset({"memory", "query"})
SAMPLE_DIMS: tuple[str, str] = ("chain", "draw")
#: thresholds (arviz_stats.diagnose's defaults, which follow Vehtari et al. 2021 and Betancourt 2016)
RHAT_MAX: float = 1.01
BFMI_MIN: float = 0.3
ESS_PER_CHAIN: int = 100


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
        Whether a failure fails the overall verdict. The per-memory R-hat is
        advisory: over thousands of memories the largest R-hat of independent
        draws exceeds 1.01 by chance, and the decision rule checks the R-hat of
        each memory it is about to forget itself.
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
    """All checks and the overall verdict.

    Attributes
    ----------
    ok : bool
        True when no gating check failed (checks not recorded do not fail).
    checks : list of Check
    hyperparameters : list of str
        Variables R-hat and ESS were computed on.
    chains, draws : int
        Posterior chains and draws per chain.
    """

    ok: bool
    checks: list[Check] = field(default_factory=list)
    hyperparameters: list[str] = field(default_factory=list)
    chains: int = 0
    draws: int = 0

    @property
    def verdict(self) -> str:
        """One line a person reads first."""
        if self.ok:
            return (
                f"PASS: {self.chains} chains x {self.draws} draws, every recorded check passed; "
                "the posterior can be trusted for decisions."
            )
        failed = [c.name for c in self.checks if c.ok is False and c.gate]
        return (
            f"FAIL: {', '.join(failed)}. Do not act on forgets from this posterior; "
            "see what to do below."
        )


def hyperparameter_names(posterior: xr.DataTree) -> list[str]:
    """Numeric ``posterior`` variables over (chain, draw) without a memory or query dim."""
    post = posterior["posterior"].to_dataset()
    return [
        str(name)
        for name, da in post.data_vars.items()
        if set(SAMPLE_DIMS) <= set(da.dims)
        and not (ENTITY_DIMS & set(da.dims))
        and np.issubdtype(da.dtype, np.number)
    ]


def sampler_health(posterior: xr.DataTree) -> SamplerHealth:
    """Run ``arviz_stats.diagnose`` on the hyperparameters and grade every check.

    Parameters
    ----------
    posterior : xarray.DataTree
        Follows the posterior contract (``posterior``; ``sample_stats`` optional).

    Returns
    -------
    SamplerHealth
    """
    import arviz_stats

    post = posterior["posterior"].to_dataset()
    chains = int(post.sizes.get("chain", 0))
    draws = int(post.sizes.get("draw", 0))
    hyper = hyperparameter_names(posterior)
    stats = posterior["sample_stats"].to_dataset() if "sample_stats" in posterior.children else None
    groups: dict[str, xr.Dataset] = {"posterior": post[hyper] if hyper else post}
    if stats is not None:
        stats = _standard_stats(stats)
        groups["sample_stats"] = stats
    tree = xr.DataTree.from_dict(groups)
    with warnings.catch_warnings():
        # constant draws give 0/0 inside arviz_stats; one chain has no R-hat: graded below
        warnings.simplefilter("ignore")
        _, diag = arviz_stats.diagnose(
            tree,
            var_names=hyper or None,
            rhat_max=RHAT_MAX,
            bfmi_threshold=BFMI_MIN,
            show_diagnostics=False,
            return_diagnostics=True,
        )

    checks = [
        _divergence_check(diag),
        _treedepth_check(diag),
        _bfmi_check(diag),
        *_hyper_checks(post, hyper, chains),
        _tau_rhat_check(post, chains),
    ]
    ok = not any(c.ok is False and c.gate for c in checks)
    return SamplerHealth(ok=ok, checks=checks, hyperparameters=hyper, chains=chains, draws=draws)


def _standard_stats(stats: xr.Dataset) -> xr.Dataset:
    # nutpie names the max-depth flag differently from PyMC; diagnose reads PyMC's name
    if "reached_max_treedepth" not in stats and "maxdepth_reached" in stats:
        stats = stats.assign(reached_max_treedepth=stats["maxdepth_reached"])
    keep = [v for v in ("diverging", "reached_max_treedepth", "energy") if v in stats]
    return stats[keep]


def _divergence_check(diag: dict) -> Check:
    d = diag.get("divergent")
    if d is None:
        return Check("divergences", "n/a", "0 divergent transitions", None)
    n, total = int(d["n_divergent"]), int(d["total_samples"])
    return Check(
        "divergences",
        f"{n} of {total} ({float(d['pct']):.2f}%)",
        "0 divergent transitions",
        n == 0,
        ""
        if n == 0
        else (
            "the sampler missed part of the posterior: refit with a higher target acceptance "
            "(e.g. --target-accept 0.95) or more tuning; persisting divergences mean the model "
            "needs reparameterising"
        ),
    )


def _treedepth_check(diag: dict) -> Check:
    d = diag.get("treedepth")
    if d is None:
        return Check("tree depth", "n/a", "no transition at the maximum depth", None)
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
    )


def _bfmi_check(diag: dict) -> Check:
    d = diag.get("bfmi")
    if d is None:
        return Check("E-BFMI", "n/a", f">= {BFMI_MIN} in every chain", None)
    values = np.asarray(d["bfmi_values"], dtype=float)
    ok = not d["failed_chains"]
    return Check(
        "E-BFMI",
        "min " + _num(float(np.nanmin(values))) if values.size else "n/a",
        f">= {BFMI_MIN} in every chain",
        ok,
        ""
        if ok
        else "the energy distribution is poorly explored: reparameterise (non-centred "
        "group effects) or tighten the hyperpriors",
    )


def _hyper_checks(post: xr.Dataset, hyper: list[str], chains: int) -> list[Check]:
    import arviz_stats

    if not hyper:
        return [
            Check("R-hat (hyperparameters)", "n/a", f"<= {RHAT_MAX}", None),
            Check("ESS (hyperparameters)", "n/a", f">= {ESS_PER_CHAIN} per chain", None),
        ]
    ds = post[hyper]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rhat = _worst(
            np.fmax(
                _flat(arviz_stats.rhat(ds, sample_dims=list(SAMPLE_DIMS), method="rank")),
                _flat(arviz_stats.rhat(ds, sample_dims=list(SAMPLE_DIMS), method="folded")),
            ),
            hyper_names(ds),
            largest=True,
        )
        ess = _worst(
            np.fmin(
                _flat(arviz_stats.ess(ds, sample_dims=list(SAMPLE_DIMS), method="bulk")),
                _flat(arviz_stats.ess(ds, sample_dims=list(SAMPLE_DIMS), method="tail")),
            ),
            hyper_names(ds),
            largest=False,
        )
    ess_min = ESS_PER_CHAIN * max(chains, 1)
    if chains < 2 or rhat is None:
        rhat_check = Check(
            "R-hat (hyperparameters)", "n/a (needs 2+ chains)", f"<= {RHAT_MAX}", None
        )
    else:
        value, name = rhat
        rhat_check = Check(
            "R-hat (hyperparameters)",
            f"max {value:.3f} ({name})",
            f"<= {RHAT_MAX}",
            value <= RHAT_MAX,
            ""
            if value <= RHAT_MAX
            else "chains disagree: run more tuning and draws "
            "(--tune, --draws), then check the trace plots for a stuck chain",
        )
    if ess is None:
        ess_check = Check("ESS (hyperparameters)", "n/a", f">= {ess_min}", None)
    else:
        value, name = ess
        ess_check = Check(
            "ESS (hyperparameters)",
            f"min {value:,.0f} ({name})",
            f">= {ess_min} ({ESS_PER_CHAIN} per chain)",
            value >= ess_min,
            ""
            if value >= ess_min
            else "too few effective draws for stable intervals: "
            "draw more (--draws) or keep more draws (--keep-draws)",
        )
    return [rhat_check, ess_check]


def _tau_rhat_check(post: xr.Dataset, chains: int) -> Check:
    import arviz_stats

    name = "tau_memory" if "tau_memory" in post else "tau"
    if name not in post or chains < 2:
        return Check("R-hat (tau, every memory)", "n/a", f"<= {RHAT_MAX}", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = arviz_stats.rhat(post[[name]].astype("float64"), sample_dims=list(SAMPLE_DIMS))[
            name
        ].to_numpy()
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Check("R-hat (tau, every memory)", "n/a (constant draws)", f"<= {RHAT_MAX}", None)
    worst = float(values.max())
    bad = int((values > RHAT_MAX).sum())
    return Check(
        "R-hat (tau, every memory)",
        f"max {worst:.3f}; {bad} of {values.size} above",
        f"<= {RHAT_MAX}",
        bad == 0,
        ""
        if bad == 0
        else "some memories' draws disagree between chains: draw more, and "
        "treat those memories' intervals with care",
        gate=False,
    )


def hyper_names(ds: xr.Dataset) -> list[str]:
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


def _num(x: float) -> str:
    return f"{x:.3g}"
