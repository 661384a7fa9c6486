"""The sentence behind each decision: why a memory is kept, forgotten or deferred."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import DEFER, FORGET
from cmp_bayes.decision.preposterior import MAX_EXPOSURES
from cmp_bayes.posterior.health import SamplerHealth


def reasons(
    frame: pd.DataFrame,
    costs: Costs,
    health: SamplerHealth,
    bayes_forget: np.ndarray,
    eligible: np.ndarray,
    rhat_bad: np.ndarray,
    variable: str,
) -> list[str]:
    """One sentence per memory (rows of ``frame``, in order) saying what was decided and why.

    ``bayes_forget``, ``eligible`` and ``rhat_bad`` are boolean arrays over the rows:
    the Bayes rule alone would forget, the guards allow a forget, the memory's own
    R-hat failed. ``variable`` names the estimand (``tau`` or ``utility``).
    """
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
                    f"retrieved {times(n_ret)} but never exposed: utility identified only if "
                    f"retrieval is ignorable, so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif n_exp < costs.min_exposures:
                text = (
                    f"exposed {times(n_exp)}, fewer than min_exposures={costs.min_exposures}, "
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


def why_not_allowed(
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


def note_shortfall(
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


def times(k: int) -> str:
    """"1 time", "2 times"."""
    return f"{k} time" if k == 1 else f"{k} times"
