"""What ``decide`` returns: the decision table with the rule, health and costs behind it.

Before, these travelled in ``DataFrame.attrs``, which pandas drops in many
operations (``set_index``, ``merge``, ``concat``...). A :class:`Decisions`
keeps them as fields (CausalPy's ``EffectSummary(table, text)`` is the
model): ``table`` is an ordinary DataFrame to filter and join, and the rest
stays with the object.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pandas as pd

from cmp_bayes.atomic import write_with
from cmp_bayes.decision.costs import Costs
from cmp_bayes.posterior.health import SamplerHealth
from cmp_bayes.text import TEXT_COLUMN, add_text

RETAIN: Final[str] = "retain"
FORGET: Final[str] = "forget"
DEFER: Final[str] = "defer"
ACTIONS: Final[tuple[str, ...]] = (RETAIN, FORGET, DEFER)
#: Columns of the decision table naming the log the decisions came from (one value each).
PROVENANCE_COLUMNS: Final[tuple[str, ...]] = ("log_checksum", "log_id")
#: Columns of the decision table, in order; a posterior with memory texts adds
#: ``text`` right after ``memory_id``.
COLUMNS: Final[tuple[str, ...]] = (
    "memory_id",
    "action",
    "p_useful",
    "expected_value",
    "expected_loss_retain",
    "expected_loss_forget",
    "status",
    "exposed",
    "retrieved",
    "in_store",
    "mean_shift",
    "rhat",
    "forgettable",
    "exposures_needed",
    "reason",
    *PROVENANCE_COLUMNS,
)


@dataclass(frozen=True)
class DecisionRule:
    """The rule that was applied.

    Attributes
    ----------
    variable : str
        Posterior variable of the estimand (``tau``, ``utility`` or their
        ``_memory`` form in a per-query posterior).
    threshold : float
        A memory is useful when the estimand exceeds it (outcome units).
    forget_below : float
        Forget when P(useful) is below this: ``r / (f + r)``.
    forget_cost, retain_cost : float
        ``f`` and ``r`` (cost units).
    """

    variable: str
    threshold: float
    forget_below: float
    forget_cost: float
    retain_cost: float

    def describe(self) -> str:
        """The rule in one line."""
        return (
            f"forget when P({self.variable} > {self.threshold}) < {self.forget_below:.4f} "
            f"(costs {self.forget_cost}:{self.retain_cost}), identified memories only"
        )


@dataclass(frozen=True, eq=False, repr=False)
class Decisions:
    """Retain / forget / defer per memory, with what produced it.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per memory in the posterior's memory order, columns
        :data:`cmp_bayes.decision.rule.COLUMNS` (see :func:`~cmp_bayes.decide`).
    rule : DecisionRule
        Estimand variable, threshold, forget probability and costs applied.
    health : SamplerHealth
        The sampler checks; no memory is forgotten unless ``health.ok``.
    costs : Costs
        Costs and guards used.
    capacity_shortfall : int
        Memories that would still have to go to meet ``costs.capacity`` but may
        not be forgotten (0 without a capacity or when it is met).
    log_checksum : str
        SHA-256 of the log the posterior was fitted to ("" when unknown); also
        the table's ``log_checksum`` column, so a CSV can be checked when applied.
    log_id : str or None
        ``design.json``'s top-level ``log_id`` (live sessions write one); also
        the ``log_id`` column.
    store : any JSON value or None
        ``design.json``'s top-level ``store``: the memory system's scope (e.g.
        Mem0 filters) the decisions belong to.
    texts : pandas.Series or None
        Memory id -> full text (the posterior's ``memory_text``); the table's
        ``text`` column holds the first characters, :meth:`to_csv` the whole text.
    """

    table: pd.DataFrame
    rule: DecisionRule
    health: SamplerHealth
    costs: Costs
    capacity_shortfall: int = 0
    log_checksum: str = ""
    log_id: str | None = None
    store: Any = None
    texts: pd.Series | None = None

    def __len__(self) -> int:
        return len(self.table)

    def counts(self) -> dict[str, int]:
        """Memories per action, every action present (``{"retain": n, ...}``)."""
        acts = self.table["action"]
        return {a: int((acts == a).sum()) for a in ACTIONS}

    @property
    def forgets(self) -> pd.DataFrame:
        """Rows whose action is forget."""
        return self.table[self.table["action"] == FORGET]

    @property
    def defers(self) -> pd.DataFrame:
        """Rows whose action is defer (the rule would forget; a guard refuses)."""
        return self.table[self.table["action"] == DEFER]

    @property
    def retains(self) -> pd.DataFrame:
        """Rows whose action is retain."""
        return self.table[self.table["action"] == RETAIN]

    @property
    def text(self) -> str:
        """A few sentences: counts, what blocked forgets, what to do."""
        return self.summary()

    def summary(self) -> str:
        """Counts per action, what blocked forgets and what to do, as sentences."""
        c = self.counts()
        parts = [
            f"{len(self)} memories: "
            + ", ".join(f"{c[a]} {a}" for a in ACTIONS)
            + f" ({self.rule.describe()})."
        ]
        if not self.health.ok:
            parts.append(
                "No memory was forgotten because the sampler failed its checks ("
                + "; ".join(self.health.problems)
                + "): refit with more tuning and draws, then decide again."
            )
        elif c[DEFER]:
            parts.append(
                f"{c[DEFER]} memories the rule would forget are deferred by the guards "
                "(not identified, too few exposures, or their own R-hat): expose them as "
                "exposures_needed says, then decide again."
            )
        if self.capacity_shortfall:
            parts.append(
                f"Capacity {self.costs.capacity} is not met: {self.capacity_shortfall} more "
                "would have to go, but none of the rest may be forgotten."
            )
        return " ".join(parts)

    def csv_table(self) -> pd.DataFrame:
        """The table as :meth:`to_csv` writes it: ``text`` holds each memory's full text."""
        if self.texts is None or TEXT_COLUMN not in self.table:
            return self.table
        return add_text(self.table, self.texts, full=True)

    def to_csv(self, path: str | Path) -> Path:
        """Write the table as CSV (no index; full texts), atomically; return the path.

        :func:`read_decisions_csv` reads it back and checks it.
        """
        table = self.csv_table()
        return write_with(path, lambda tmp: table.to_csv(tmp, index=False))

    def to_dict(self) -> dict[str, Any]:
        """Everything but the table, as plain values (for JSON)."""
        return {
            "counts": self.counts(),
            "rule": dict(self.rule.__dict__),
            "health": self.health.to_dict(),
            "costs": self.costs.to_dict(),
            "capacity_shortfall": int(self.capacity_shortfall),
            "log_checksum": self.log_checksum,
            "log_id": self.log_id,
            "store": self.store,
        }

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"Decisions({len(self)} memories: "
            + ", ".join(f"{c[a]} {a}" for a in ACTIONS)
            + f"; health {'ok' if self.health.ok else 'FAILED'})"
        )

    def _repr_html_(self) -> str:
        # the provenance columns repeat one value on every row: said once above the table
        shown = self.table.drop(columns=list(PROVENANCE_COLUMNS), errors="ignore").head(20)
        source = f"<p>log checksum {html.escape(self.log_checksum or 'unknown')}"
        source += f", log id {html.escape(self.log_id)}</p>" if self.log_id else "</p>"
        return f"<p>{html.escape(self.summary())}</p>" + source + shown.to_html(index=False)
