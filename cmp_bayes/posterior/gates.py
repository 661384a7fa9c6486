"""The two gating checks of the sampler-health verdict: divergences, and hyperparameter R-hat
limited to what a decision's estimand depends on.

:func:`cmp_bayes.posterior.health.sampler_health` builds the verdict from these;
the definitions they use (what a hyperparameter is, the one R-hat, which
hyperparameters an estimand depends on) are in
:mod:`cmp_bayes.posterior.sampling_checks`, read through the module so that a
change there reaches every consumer.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from cmp_bayes.posterior import sampling_checks as checks
from cmp_bayes.posterior.hyper_diagnostics import stored_hyper_rhat
from cmp_bayes.posterior.sampling_checks import ESTIMAND_DEPENDS_ON, Check

#: names of the gating checks (the verdict's).
DIVERGENCE_CHECK: str = "divergences"
RHAT_CHECK: str = "R-hat (hyperparameters)"
#: name of the advisory R-hat row: hyperparameters the estimand does not depend on.
ADVISORY_RHAT_CHECK: str = "R-hat (hyperparameters the estimand does not depend on)"


def divergence_check(
    posterior: xr.DataTree, max_share: float, problems: list[str]
) -> tuple[Check, int | None, float | None, int | None]:
    """The divergence gate: (check row, divergent draws, their share, the draws counted over;
    each None when ``sample_stats`` records no divergences).

    Appends a phrase to ``problems`` when it fails or cannot be made.
    """
    threshold = (
        "0 divergent transitions" if max_share == 0 else f"<= {max_share:.2%} of draws divergent"
    )
    counted = checks.divergences(posterior)
    if counted is None:
        problems.append("divergences not recorded (sample_stats.diverging missing)")
        return Check(DIVERGENCE_CHECK, "n/a", threshold, None), None, None, None
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
            "(e.g. --target-accept 0.99) or more tuning (fit retries so by itself up to "
            "--max-attempts times); persisting divergences mean the model needs reparameterising"
        ),
    )
    return check, n, share, total


#: (R-hat, element label, variable name) of each hyperparameter element, or None (one chain).
Elements = list[tuple[float, str, str]] | None


def hyper_rhat(
    post: xr.Dataset, hyper: list[str], chains: int, recorded: xr.DataTree | None = None
) -> Elements:
    """:func:`rhat` of every hyperparameter element, computed once for every estimand's gate.

    ``recorded``: the posterior tree, whose ``hyper_diagnostics`` (the fit's R-hat on the
    draws it judged, where it stored fewer) is used while it describes the stored draws.
    """
    if chains < 2:
        return None
    if not hyper:
        return []
    ds = post[hyper]
    values = None if recorded is None else stored_hyper_rhat(recorded, ds)
    if values is None:
        values = checks.flatten(checks.rhat(ds))
    labels = checks.element_labels(ds)
    names = [n for n in hyper for _ in range(int(ds[n].isel(chain=0, draw=0).size))]
    return list(zip(values.tolist(), labels, names, strict=True))


def subset(elements: Elements, estimand: str | None, *, depends: bool = True) -> list:
    """The elements whose variable ``estimand`` depends on (``depends=False``: the others)."""
    return [e for e in elements or [] if checks.estimand_depends_on(e[2], estimand) is depends]


def worst_element(elements: list) -> tuple[float, str] | None:
    """(largest finite R-hat, its label) among ``elements``; None if none is finite."""
    if not elements:
        return None
    return checks.extreme(
        np.asarray([e[0] for e in elements], dtype=float), [e[1] for e in elements], largest=True
    )


def rhat_ok(elements: Elements, chains: int, max_rhat: float, estimand: str | None) -> bool:
    """The R-hat gate's pass for ``estimand`` (what :func:`rhat_check` decides)."""
    if chains < 2:
        return False
    worst = worst_element(subset(elements, estimand))
    return worst is None or worst[0] <= max_rhat


def rhat_check(
    elements: Elements,
    hyper: list[str],
    chains: int,
    max_rhat: float,
    problems: list[str],
    estimand: str | None,
) -> tuple[Check, tuple[float, str] | None, list[str]]:
    """The R-hat gate for ``estimand``: (check row, (worst R-hat, label) or None, gated names).

    Appends a phrase to ``problems`` when it fails or cannot be made (one chain).
    """
    gated = checks.estimand_hyperparameters(hyper, estimand)
    if chains < 2:
        problems.append(f"R-hat needs at least 2 chains, the posterior has {chains}")
        return Check(RHAT_CHECK, "n/a (needs 2+ chains)", f"<= {max_rhat}", None), None, gated
    worst = worst_element(subset(elements, estimand))
    if worst is None:  # no hyperparameters, or constant draws: nothing can disagree
        return Check(RHAT_CHECK, "n/a", f"<= {max_rhat}", None), None, gated
    value, name = worst
    ok = value <= max_rhat
    if not ok:
        # enough digits that a value just above the threshold does not read as equal to it
        shown = f"{value:.3f}" if f"{value:.3f}" != f"{max_rhat:.3f}" else f"{value:.12g}"
        problems.append(f"R-hat of {name} is {shown} > {max_rhat}")
    scope = ""
    if estimand is not None and len(gated) < len(hyper):
        scope = f"; the {len(gated)} hyperparameters {estimand} depends on"
    check = Check(
        RHAT_CHECK,
        f"max {value:.3f} ({name}{scope})",
        f"<= {max_rhat}",
        ok,
        ""
        if ok
        else "chains disagree: run more tuning and draws "
        "(--tune, --draws, or --max-attempts for fit's retries), then check the trace plots "
        "for a stuck chain",
    )
    return check, worst, gated


def advisory_rhat_check(
    elements: Elements, hyper: list[str], chains: int, max_rhat: float, estimand: str | None
) -> Check | None:
    """Advisory row for the hyperparameters ``estimand`` does not depend on (None if there are none)."""
    gated = set(checks.estimand_hyperparameters(hyper, estimand))
    others = [n for n in hyper if n not in gated]
    if not others:
        return None
    worst = worst_element(subset(elements, estimand, depends=False))
    if chains < 2 or worst is None:
        return Check(ADVISORY_RHAT_CHECK, "n/a", f"<= {max_rhat}", None, gate=False)
    value, name = worst
    ok = value <= max_rhat
    families = sorted({checks.hyperparameter_family(n) or "?" for n in others})
    return Check(
        ADVISORY_RHAT_CHECK,
        f"max {value:.3f} ({name})",
        f"<= {max_rhat}",
        ok,
        ""
        if ok
        else f"{', '.join(others)} enter only {', '.join(families)}: decisions on {estimand} do "
        "not depend on them, so this does not block them; decisions on an estimand that does "
        "(utility) would be refused, and rho's intervals may be off",
        gate=False,
    )


def advisory_phrases(elements: Elements, max_rhat: float, estimand: str | None) -> list[str]:
    """"name R-hat 1.013 (advisory: rho only)" for each failing element some estimand ignores.

    Without an estimand every element gates, so the phrases name the elements that
    gate only some estimands (those fit's split line explains).
    """
    out = []
    for value, label, name in elements or []:
        if not value > max_rhat:
            continue
        ignored = not checks.estimand_depends_on(name, estimand) if estimand is not None else any(
            not checks.estimand_depends_on(name, e) for e in ESTIMAND_DEPENDS_ON
        )
        if ignored:
            out.append(f"{label} R-hat {value:.3f} (advisory: {checks.hyperparameter_family(name)} only)")
    return out
