"""Reason codes of the report's decision tables, and what ``p_useful`` and ``expected_value`` mean.

Each decision's reason is a sentence (:mod:`cmp_bayes.decision.reasons`); repeated on every
row it buries the table, so the page shows a short code per row (:data:`REASON_CODES`) and
one legend of what each code means. ``decisions.csv`` keeps the full sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from cmp_bayes.reporting.blocks import fmt

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions


@dataclass(frozen=True)
class ReasonCode:
    """One group of decision reasons.

    Attributes
    ----------
    code : str
        Short code shown per row ("F1", "D2", ...: the action's initial and a number).
    action : str
        The action the reason belongs to.
    pattern : str
        Regular expression matched at the start of the reason sentence.
    meaning : str
        What the group means and what to do, in a few words (the legend's text).
    """

    code: str
    action: str
    pattern: str
    meaning: str


#: Every reason :func:`cmp_bayes.decision.reasons.reason_texts` writes, grouped (first match wins).
REASON_CODES: tuple[ReasonCode, ...] = (
    ReasonCode("F1", "forget", r"useless with P=", "P(useful) below the forget threshold"),
    ReasonCode("F2", "forget", r"forgotten to meet capacity", "forgotten to meet the capacity"),
    ReasonCode(
        "D1", "defer", r"never in any context",
        "unidentified (never in any context): expose it, then decide again",
    ),
    ReasonCode(
        "D2", "defer", r"retrieved .* but never exposed",
        "retrieved-only (never exposed at random): expose it, then decide again",
    ),
    ReasonCode(
        "D3", "defer", r"exposed .*fewer than min_exposures",
        "fewer exposures than min_exposures: expose it, then decide again",
    ),
    ReasonCode(
        "D4", "defer", r"data moved tau by only",
        "data moved its estimate less than min_mean_shift: expose it, then decide again",
    ),
    ReasonCode(
        "D5", "defer", r"the rule would forget .* but the sampler failed",
        "the sampler failed its checks: refit before forgetting",
    ),
    ReasonCode(
        "D6", "defer", r"the rule would forget .* but R-hat",
        "its own R-hat is too high: refit before forgetting",
    ),
    ReasonCode(
        "R1", "retain", r"never in any context",
        "unidentified: its prior says keep; expose it to learn its utility",
    ),
    ReasonCode(
        "R2", "retain", r"retrieved .* never exposed",
        "retrieved-only: kept on retrieval data alone (valid if retrieval is ignorable)",
    ),
    ReasonCode(
        "R3", "retain", r"useful when read .* fix retrieval",
        "useful when read, but the retriever never shows it: fix retrieval",
    ),
    ReasonCode("R4", "retain", r"useful \(P=", "useful: keep"),
    ReasonCode(
        "R5", "retain", r"uncertain", "uncertain: not sure enough it is useless to forget it"
    ),
)
#: Code of a reason no group matches (its sentence is then listed in the legend).
OTHER_CODE: str = "?"

_COMPILED: tuple[tuple[ReasonCode, re.Pattern[str]], ...] = tuple(
    (rc, re.compile(rc.pattern)) for rc in REASON_CODES
)


def reason_code(reason: object, action: object) -> str:
    """The :data:`REASON_CODES` code of one decision's reason (:data:`OTHER_CODE` when none)."""
    text, act = str(reason), str(action)
    for rc, rx in _COMPILED:
        if rc.action == act and rx.match(text):
            return rc.code
    return OTHER_CODE


def reason_codes(table: pd.DataFrame) -> pd.Series:
    """One code per row of a decision table (``action`` and ``reason`` columns)."""
    if "reason" not in table or "action" not in table:
        return pd.Series([OTHER_CODE] * len(table), index=table.index, dtype="string")
    codes = [reason_code(r, a) for r, a in zip(table["reason"], table["action"], strict=True)]
    return pd.Series(codes, index=table.index, dtype="string")


def reason_legend(table: pd.DataFrame) -> pd.DataFrame:
    """The codes that occur in ``table``: code, action, meaning, memories (count), in code order.

    A reason no group matches is listed with its own sentence under :data:`OTHER_CODE`.
    """
    codes = reason_codes(table)
    counts = codes.value_counts()
    rows = [
        {"code": rc.code, "action": rc.action, "meaning": rc.meaning, "memories": int(counts[rc.code])}
        for rc in REASON_CODES
        if rc.code in counts.index
    ]
    other = table[codes == OTHER_CODE]
    for reason, sub in other.groupby("reason", sort=True) if len(other) else []:
        rows.append(
            {
                "code": OTHER_CODE,
                "action": ", ".join(sorted(set(sub["action"].astype(str)))),
                "meaning": str(reason),
                "memories": len(sub),
            }
        )
    return pd.DataFrame(rows, columns=["code", "action", "meaning", "memories"])


#: What ``expected_value`` is, per estimand (the decisions' ``costs.estimand``).
VALUE_MEANING: dict[str, str] = {
    "tau": (
        "the posterior mean of tau, the change in the success probability when the memory is "
        "in the context (outcome units: 0.02 = 2 percentage points more successes)"
    ),
    "utility": (
        "the posterior mean of utility = rho x tau, the change in the success probability the "
        "memory brings given how often the retriever shows it (outcome units)"
    ),
    "relevant": (
        "the posterior mean of tau on the queries the memory is relevant to, the change in the "
        "success probability when it is in the context (outcome units)"
    ),
    "workload": (
        "the posterior mean of the workload value E_q[rho tau] over the query mix, a change in "
        "the success probability (outcome units)"
    ),
}


def definitions(decisions: Decisions) -> str:
    """The page's definitions of ``p_useful`` and ``expected_value`` for these decisions."""
    costs = decisions.costs
    meaning = VALUE_MEANING.get(
        costs.estimand, f"the posterior mean of {decisions.rule.variable} (outcome units)"
    )
    return (
        f"expected_value = {meaning}. p_useful = P({decisions.rule.variable} > "
        f"{fmt(costs.threshold)}), the posterior probability that the memory is useful. "
        f"The rule forgets when p_useful < {fmt(decisions.rule.forget_below)} = retain cost / "
        "(forget cost + retain cost), and only memories the design identifies."
    )
