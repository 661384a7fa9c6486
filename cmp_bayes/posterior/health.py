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

**What a decision depends on** (``estimand=``): each memory's tau posterior is
drawn given the mixture's shape (``tau_*``) and weights (``weight_*``) only; the
``rho_*`` hyperparameters enter rho and so utility = rho * tau
(:func:`~cmp_bayes.posterior.sampling_checks.estimand_depends_on`, the one
definition). ``decide`` asks for the verdict of its estimand, so a badly mixed
retrievability group sd does not block forgets on tau (it is shown as an
advisory row and phrase), while it still blocks forgets on utility. Without an
estimand (``cmp-bayes fit``) every hyperparameter gates, and the line names both
verdicts when they differ. Divergences gate every estimand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import xarray as xr

from cmp_bayes.constants import MAX_DIVERGENCE_SHARE, RHAT_MAX
from cmp_bayes.posterior import gates
from cmp_bayes.posterior import sampling_checks as checks
from cmp_bayes.posterior.gates import ADVISORY_RHAT_CHECK, DIVERGENCE_CHECK, RHAT_CHECK
from cmp_bayes.posterior.memory_diagnostics import stored_tau_rhat
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
    "ADVISORY_RHAT_CHECK",
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
        ``divergences / sampled_draws``.
    sampled_draws : int or None
        The post-warmup draws the divergences were counted over (``sample_stats``,
        kept whole: more than ``chains * draws`` where the posterior was thinned;
        None when not recorded).
    max_rhat : float or None
        Largest :func:`rhat` over the hyperparameters' elements (None: one
        chain, no hyperparameters, or constant draws).
    worst_variable : str or None
        The element with that R-hat (``name`` or ``name[coord]``).
    problems : list of str
        One phrase per gating check that failed or could not be made.
    rhat_threshold, divergence_share_threshold : float
        The thresholds the verdict used.
    estimand : str or None
        The decision estimand the R-hat gate was limited to (None: every
        hyperparameter gates; see :func:`~cmp_bayes.posterior.sampling_checks.estimand_depends_on`).
    gated : list of str
        The hyperparameters whose R-hat gated the verdict (all of them without an estimand).
    ok_by_estimand : dict of str to bool
        The verdict each estimand this posterior supports would get with the same
        thresholds ("tau", "utility"; "relevant" and "workload" where the posterior
        has them: :func:`~cmp_bayes.posterior.sampling_checks.posterior_estimands`).
    advisory_rhat : list of str
        One phrase per hyperparameter element above ``rhat_threshold`` that does not
        gate the verdict, with what it enters, e.g. "rho_group_sd R-hat 1.013
        (advisory: rho only)".
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
    estimand: str | None = None
    gated: list[str] = field(default_factory=list)
    ok_by_estimand: dict[str, bool] = field(default_factory=dict)
    advisory_rhat: list[str] = field(default_factory=list)
    sampled_draws: int | None = None

    @property
    def split(self) -> bool:
        """Whether the estimands get different verdicts (a bad R-hat only some depend on)."""
        return len(set(self.ok_by_estimand.values())) > 1

    def _flag(self) -> str:
        """"ok", "check", or which estimands are ok ("ok for decisions on tau, check for utility")."""
        if not self.split:
            return "ok" if self.ok else "check"
        good = [e for e, ok in self.ok_by_estimand.items() if ok]
        bad = [e for e, ok in self.ok_by_estimand.items() if not ok]
        return f"ok for decisions on {', '.join(good)}, check for {', '.join(bad)}"

    def _advisory_sentence(self) -> str:
        """Why the non-gating R-hat failures are safe to ignore for this estimand ("" if none)."""
        if not self.advisory_rhat or self.estimand is None:
            return ""
        refused = [e for e, ok in self.ok_by_estimand.items() if not ok]
        tail = f"; decisions on {', '.join(refused)} would be refused" if refused else ""
        return (
            f" Advisory: {'; '.join(self.advisory_rhat)} above {self.rhat_threshold}: decisions "
            f"on {self.estimand} do not depend on {'it' if len(self.advisory_rhat) == 1 else 'them'}"
            f" (each memory's {self.estimand} posterior is drawn given the tau_* and weight_* "
            f"hyperparameters only){tail}."
        )

    @property
    def verdict(self) -> str:
        """One line a person reads first (the report's)."""
        if self.ok and self.estimand is not None and self.advisory_rhat:
            return (
                f"PASS: {self.chains} chains x {self.draws} draws, every check that decisions "
                f"on {self.estimand} depend on passed; the posterior can be trusted for "
                f"decisions on {self.estimand}.{self._advisory_sentence()}"
            )
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
        if self.ok and self.estimand is not None and self.advisory_rhat:
            verdict = f"ok for decisions on {self.estimand}; " + "; ".join(self.advisory_rhat)
        scope = "" if self.estimand is None else f" ({self.estimand} depends on {len(self.gated)})"
        return (
            f"sampler health: {self.chains} chains x {self.draws} draws, "
            f"max hyperparameter R-hat {rh}{scope}, divergences {div}: {verdict}"
        )

    def line(self) -> str:
        """One line after a fit: verdict, R-hat, divergences (``cmp-bayes fit``'s).

        When the estimands get different verdicts (a bad R-hat only utility depends
        on), the line names both and the hyperparameters behind the difference:
        "health: ok for decisions on tau, check for utility: ...; rho_group_sd R-hat
        1.013 (advisory: rho only); ...".
        """
        if self.max_rhat is not None:
            rhat_txt = f"max R-hat {self.max_rhat:.3f} over {len(self.gated)} hyperparameters"
            if self.estimand is not None and len(self.gated) < len(self.hyperparameters):
                rhat_txt += f" {self.estimand} depends on"
        elif self.chains < 2:
            rhat_txt = "R-hat n/a (one chain)"
        else:
            rhat_txt = "R-hat n/a"
        notes = "".join(f"; {n}" for n in self.advisory_rhat)
        div = "n/a" if self.divergences is None else str(self.divergences)
        sampled = self.chains * self.draws if self.sampled_draws is None else self.sampled_draws
        return f"health: {self._flag()}: {rhat_txt}{notes}; {div} divergences in {sampled} draws"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (checks as dicts)."""
        return asdict(self)


def sampler_health(
    posterior: xr.DataTree,
    *,
    estimand: str | None = None,
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
    estimand : {None, "tau", "utility"}
        The decision the verdict is for. With an estimand, R-hat gates only on
        the hyperparameters that estimand depends on (``tau``: the ``tau_*`` and
        ``weight_*`` ones; ``utility``: all); the others are checked as an
        advisory row. None (fit's default) gates on every hyperparameter.
        Divergences gate whatever the estimand: they bias every hyperparameter.
    max_rhat : float
        Largest hyperparameter R-hat that passes (dimensionless, ``<=``).
    max_divergence_share : float
        Largest share of divergent draws that passes (in [0, 1], ``<=``).
    advisory : bool
        Also run the advisory checks (tree depth, E-BFMI, ESS, R-hat of tau
        over every memory: about 3 s per 1,000 memories, unless the fit stored
        them in ``memory_diagnostics``). They never change ``ok``, so ``decide``
        skips them.

    Returns
    -------
    SamplerHealth
    """
    post = posterior["posterior"].to_dataset()
    chains = int(post.sizes.get("chain", 0))
    draws = int(post.sizes.get("draw", 0))
    hyper = hyperparameter_names(posterior)
    checks.check_estimand(estimand)
    problems: list[str] = []

    div_check, n_div, share, sampled = gates.divergence_check(posterior, max_divergence_share, problems)
    elements = gates.hyper_rhat(post, hyper, chains, recorded=posterior)
    rhat_check, worst, gated = gates.rhat_check(elements, hyper, chains, max_rhat, problems, estimand)
    other = gates.advisory_rhat_check(elements, hyper, chains, max_rhat, estimand)
    ok_by = {
        e: div_check.ok is True and gates.rhat_ok(elements, chains, max_rhat, e)
        for e in checks.posterior_estimands(post)
    }
    rhat_rows = [rhat_check] if other is None else [rhat_check, other]
    if advisory:
        diag = checks.diagnose_stats(posterior, hyper)
        rows = [
            div_check,
            checks.treedepth_check(diag),
            checks.bfmi_check(diag),
            *rhat_rows,
            checks.ess_check(post, hyper, chains),
            checks.tau_rhat_check(post, chains, stored_tau_rhat(posterior)),
        ]
    else:
        rows = [div_check, *rhat_rows]
    return SamplerHealth(
        ok=not problems,
        checks=rows,
        hyperparameters=hyper,
        chains=chains,
        draws=draws,
        divergences=n_div,
        divergence_share=share,
        sampled_draws=sampled,
        max_rhat=None if worst is None else worst[0],
        worst_variable=None if worst is None else worst[1],
        problems=problems,
        rhat_threshold=float(max_rhat),
        divergence_share_threshold=float(max_divergence_share),
        estimand=estimand,
        gated=gated,
        ok_by_estimand=ok_by,
        advisory_rhat=gates.advisory_phrases(elements, max_rhat, estimand),
    )
