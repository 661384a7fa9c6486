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

from dataclasses import asdict, dataclass, field
from typing import Any

import xarray as xr

from cmp_bayes.constants import MAX_DIVERGENCE_SHARE, RHAT_MAX
from cmp_bayes.posterior import sampling_checks as checks
from cmp_bayes.posterior.sampling_checks import (
    ENTITY_DIMS,
    SAMPLE_DIMS,
    Check,
    divergences,
    hyperparameter_names,
    is_hyperparameter,
    memory_rhat,
    rhat,
)

__all__ = [
    "DIVERGENCE_CHECK",
    "ENTITY_DIMS",
    "RHAT_CHECK",
    "SAMPLE_DIMS",
    "Check",
    "SamplerHealth",
    "divergences",
    "hyperparameter_names",
    "is_hyperparameter",
    "memory_rhat",
    "rhat",
    "sampler_health",
]

#: names of the gating checks (the verdict's).
DIVERGENCE_CHECK: str = "divergences"
RHAT_CHECK: str = "R-hat (hyperparameters)"


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
        diag = checks.diagnose_stats(posterior, hyper)
        rows = [
            div_check,
            checks.treedepth_check(diag),
            checks.bfmi_check(diag),
            rhat_check,
            checks.ess_check(post, hyper, chains),
            checks.tau_rhat_check(post, chains),
        ]
    else:
        rows = [div_check, rhat_check]
    return SamplerHealth(
        ok=not problems,
        checks=rows,
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
    worst = None
    if hyper:
        values = checks.flatten(checks.rhat(post[hyper]))
        worst = checks.extreme(values, checks.element_labels(post[hyper]), largest=True)
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


