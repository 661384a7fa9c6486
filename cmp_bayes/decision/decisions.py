"""What ``decide`` returns: the decision table with the rule, health and costs behind it.

Before, these travelled in ``DataFrame.attrs``, which pandas drops in many
operations (``set_index``, ``merge``, ``concat``...). A :class:`Decisions`
keeps them as fields (CausalPy's ``EffectSummary(table, text)`` is the
model): ``table`` is an ordinary DataFrame to filter and join, and the rest
stays with the object.
"""

from __future__ import annotations

import csv
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pandas as pd

from cmp_bayes.atomic import write_with
from cmp_bayes.decision.costs import Costs
from cmp_bayes.errors import ConfigError
from cmp_bayes.posterior.health import SamplerHealth
from cmp_bayes.text import TEXT_COLUMN, add_text

RETAIN: Final[str] = "retain"
FORGET: Final[str] = "forget"
DEFER: Final[str] = "defer"
ACTIONS: Final[tuple[str, ...]] = (RETAIN, FORGET, DEFER)
#: Columns of the decision table naming the log the decisions came from (one value each).
PROVENANCE_COLUMNS: Final[tuple[str, ...]] = ("log_checksum", "log_id")
#: The prior-sensitivity check's columns (decision/sensitivity.py): whether a forget the
#: Bayes rule makes depends on the prior (<NA>: not checked), the largest P(useful) over
#: the alternative priors, and the alternative that gives it.
PRIOR_COLUMNS: Final[tuple[str, ...]] = ("prior_driven", "p_useful_prior_max", "prior_alternative")
#: The chainwise check's column (``Costs.max_rhat_chainwise``): the largest per-chain
#: P(useful) of a memory the rule would forget, when the sampler's R-hat failed (NaN elsewhere).
CHAIN_COLUMNS: Final[tuple[str, ...]] = ("p_useful_chain_max",)
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
    *PRIOR_COLUMNS,
    *CHAIN_COLUMNS,
    *PROVENANCE_COLUMNS,
)
#: Columns :meth:`Decisions.to_csv` adds after :data:`COLUMNS`: the rule the decisions were
#: made under (one value each), so a CSV read alone says which costs and threshold produced it.
#: ``estimand`` names what ``threshold`` applies to; ``forget_below`` = r / (f + r).
RULE_COLUMNS: Final[tuple[str, ...]] = (
    "estimand",
    "threshold",
    "forget_cost",
    "retain_cost",
    "forget_below",
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


def out_of_reach_text(variable: str, threshold: float, top: float) -> str:
    """The sentence for a threshold no draw of any memory reaches."""
    return (
        f"No draw of any memory's {variable} is above the threshold {threshold:g} (the largest "
        f"is {top:.3g}): every identified memory counts as useless whatever its data, so the "
        "forgets do not tell memories apart; choose a threshold on the estimand's scale (a "
        "workload value is a per-question average: about delta / questions for a memory "
        "relevant to one question)."
    )


def store_average_text(variable: str, questions: int, count: int, *, deferred: bool = False) -> str:
    """The sentence for ``tau`` / ``utility`` forgets on a shared-store (gated) posterior:
    ``count`` forgets made, or (``deferred``) deferred by ``Costs.store_average = "defer"``."""
    what = (
        f"{count} forgets on {variable} deferred (Costs.store_average='defer')" if deferred
        else f"{count} forgets on {variable}, a shared-store average"
    )
    return (
        f"{what}: the gated posterior's {variable} averages each memory's effect over the "
        f"log's {questions} questions, so a memory that serves one of them with effect delta "
        f"scores about delta / {questions}, and a threshold on it forgets memories whether or "
        "not they serve a question (all ten LoCoMo conversations, threshold 0.02: 5,854 of "
        "5,882 forgotten, 24.3% of them required, the store's share). To keep a memory that "
        "serves some question, decide on estimand='relevant' (or 'workload', on its "
        "per-question scale)"
        + ("; store_average='allow' makes these forgets." if deferred else ".")
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
    chainwise : bool
        The sampler's hyperparameter R-hat failed within ``costs.max_rhat_chainwise``
        (``health.ok`` is False): forgets were made only where every chain agrees
        (``p_useful_chain_max`` below ``forget_below``).
    out_of_reach : float or None
        When no draw of any memory's estimand is above the threshold, the largest
        draw (the estimand's units): every identified memory then counts as
        useless whatever its data, and the forgets are the threshold's. None
        otherwise.
    store_average : int or None
        On a gated (shared-store) posterior decided on ``tau`` or ``utility`` with
        at least one forget made or (``Costs.store_average = "defer"``, the default)
        deferred for it: the number of questions ``tau_memory`` averages over (the
        log's). Such forgets do not tell memories that serve a question from the
        rest (:func:`store_average_text`); None otherwise.
    store_average_count : int
        Those forgets: made (``store_average = "allow"``) or deferred (``"defer"``);
        0 without ``store_average``.
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
    chainwise: bool = False
    out_of_reach: float | None = None
    store_average: int | None = None
    store_average_count: int = 0

    def __len__(self) -> int:
        return len(self.table)

    def store_average_sentence(self) -> str:
        """:func:`store_average_text` for these decisions ("" without ``store_average``)."""
        if self.store_average is None:
            return ""
        return store_average_text(
            self.rule.variable, self.store_average, self.store_average_count,
            deferred=self.costs.store_average == "defer",
        )

    def cautions(self) -> list[str]:
        """What the counts alone hide: a threshold out of reach, forgets on a store average."""
        parts = []
        if self.out_of_reach is not None:
            parts.append(out_of_reach_text(self.rule.variable, self.costs.threshold, self.out_of_reach))
        if self.store_average is not None:
            parts.append(self.store_average_sentence())
        return parts

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
        if self.chainwise:
            parts.append(
                "The sampler's chains did not mix ("
                + "; ".join(self.health.problems)
                + "): a memory was forgotten only where every chain alone says it is useless"
                + (f"; {c[DEFER]} memories the rule would forget are deferred (chains that "
                   "disagree, or the other guards): refit with more tuning and draws to decide them."
                   if c[DEFER] else ".")
            )
        elif not self.health.ok:
            parts.append(
                "No memory was forgotten because the sampler failed its checks ("
                + "; ".join(self.health.problems)
                + "): refit with more tuning and draws, then decide again."
            )
        elif c[DEFER]:
            parts.append(
                f"{c[DEFER]} memories the rule would forget are deferred by the guards "
                "(not identified, too few exposures, their own R-hat, or a forget that would "
                "be the prior's decision): expose them as exposures_needed says, then decide "
                "again."
            )
        parts.extend(self.cautions())
        if self.capacity_shortfall:
            parts.append(
                f"Capacity {self.costs.capacity} is not met: {self.capacity_shortfall} more "
                "would have to go, but none of the rest may be forgotten."
            )
        return " ".join(parts)

    def csv_table(self) -> pd.DataFrame:
        """The table as :meth:`to_csv` writes it.

        ``text`` holds each memory's full text, and the :data:`RULE_COLUMNS`
        follow the table's columns: ``estimand`` (string), ``threshold``
        (outcome units), ``forget_cost`` and ``retain_cost`` (cost units) and
        ``forget_below`` (probability), the same on every row.
        """
        table = self.table
        if self.texts is not None and TEXT_COLUMN in table:
            table = add_text(table, self.texts, full=True)
        n = len(table)
        rule = {
            "estimand": pd.Series([self.costs.estimand] * n, dtype="string", index=table.index),
            "threshold": float(self.costs.threshold),
            "forget_cost": float(self.costs.forget_cost),
            "retain_cost": float(self.costs.retain_cost),
            "forget_below": float(self.costs.forget_below),
        }
        # assign never reorders: a table that already has a rule column keeps it in place
        return table.assign(**{k: v for k, v in rule.items()})

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


#: How each column of a decisions CSV is read back (other columns stay strings).
_FLOAT_COLUMNS: Final[tuple[str, ...]] = (
    "p_useful", "expected_value", "expected_loss_retain", "expected_loss_forget", "mean_shift", "rhat",
    "threshold", "forget_cost", "retain_cost", "forget_below", "p_useful_prior_max",
    "p_useful_chain_max",
)
_INT_COLUMNS: Final[tuple[str, ...]] = ("exposed", "retrieved", "in_store")
#: String columns where an empty cell means "none" (<NA>), not the empty string.
_OPTIONAL_TEXT: Final[tuple[str, ...]] = (TEXT_COLUMN, "log_id", "prior_alternative")
_REQUIRED: Final[tuple[str, ...]] = ("memory_id", "action")


def read_decisions_csv(path: str | Path) -> pd.DataFrame:
    """Read a decisions CSV (:meth:`Decisions.to_csv`, ``cmp-bayes decide -o``) back, checked.

    Parameters
    ----------
    path : str or Path
        The CSV file.

    Returns
    -------
    pandas.DataFrame
        One row per memory, the file's columns in its order, typed as
        ``Decisions.table``: ``memory_id``, ``action``, ``status``, ``reason``,
        ``text``, ``log_checksum``, ``log_id`` as ``string`` (an empty
        ``text`` or ``log_id`` is <NA>); probabilities, values and losses
        float64; ``exposed``, ``retrieved``, ``in_store`` int64;
        ``exposures_needed`` Int64; ``forgettable`` bool; the rule columns
        (:data:`RULE_COLUMNS`): ``estimand`` string, ``threshold``,
        ``forget_cost``, ``retain_cost``, ``forget_below`` float64. Columns the file
        lacks are not added (a CSV written before ``log_checksum`` existed
        reads without it), so a caller that needs provenance checks for it.

    Raises
    ------
    ConfigError
        The file cannot be read as CSV, lacks a ``memory_id`` or ``action``
        column, or has a bad row: an empty memory id, an action other than
        retain / forget / defer, a memory listed twice, a cell that is not of
        its column's type, a row of the wrong length, or rows naming more
        than one log checksum. The message names the file, the line (1-based,
        where the row starts: full texts may span lines) and the column.
    """
    path = Path(path)
    header, rows, lines = _csv_records(path)
    for col in _REQUIRED:
        if col not in header:
            raise ConfigError(
                f"{path}, line 1: no column '{col}' (a decisions CSV starts "
                f"{', '.join(COLUMNS[:3])}, ...; has {', '.join(header) or 'no columns'})"
            )
    frame = pd.DataFrame(rows, columns=header, dtype=object)

    def bad(i: int, col: str, message: str) -> ConfigError:
        return ConfigError(f"{path}, line {lines[i]}, column '{col}': {message}")

    seen: dict[str, int] = {}
    for i, (mid, act) in enumerate(zip(frame["memory_id"], frame["action"], strict=True)):
        if mid == "":
            raise bad(i, "memory_id", "missing memory id")
        if act not in ACTIONS:
            raise bad(i, "action", f"unknown action {act!r} (one of {', '.join(ACTIONS)})")
        if mid in seen:
            raise bad(i, "memory_id", f"memory {mid!r} is already on line {seen[mid]}")
        seen[mid] = lines[i]
    if "log_checksum" in frame and frame["log_checksum"].nunique() > 1:
        i = int((frame["log_checksum"] != frame["log_checksum"].iloc[0]).to_numpy().argmax())
        raise bad(i, "log_checksum", "rows from more than one log (another checksum than line "
                  f"{lines[0]}'s): decisions apply to the log they were made from")
    out: dict[str, pd.Series] = {}
    for col in header:
        raw = frame[col]
        if col in _FLOAT_COLUMNS or col in _INT_COLUMNS or col == "exposures_needed":
            num = pd.to_numeric(raw.where(raw != ""), errors="coerce")
            wrong = (raw != "") & num.isna()
            if col in _INT_COLUMNS:
                wrong |= raw == ""
            if col in _INT_COLUMNS or col == "exposures_needed":
                wrong |= num.notna() & (num != num.round())
            if wrong.any():
                i = int(wrong.to_numpy().argmax())
                kind = "a number" if col in _FLOAT_COLUMNS else "a whole number"
                raise bad(i, col, f"expected {kind}, got {raw.iloc[i]!r}")
            dtype = "float64" if col in _FLOAT_COLUMNS else "int64" if col in _INT_COLUMNS else "Int64"
            out[col] = num.astype(dtype)
        elif col == "forgettable":
            wrong = ~raw.isin(("True", "False"))
            if wrong.any():
                i = int(wrong.to_numpy().argmax())
                raise bad(i, col, f"expected True or False, got {raw.iloc[i]!r}")
            out[col] = raw == "True"
        elif col == "prior_driven":  # <NA> (empty) where the check was not made
            wrong = ~raw.isin(("True", "False", ""))
            if wrong.any():
                i = int(wrong.to_numpy().argmax())
                raise bad(i, col, f"expected True, False or empty, got {raw.iloc[i]!r}")
            flag = pd.array(raw == "True", dtype="boolean")
            flag[(raw == "").to_numpy()] = pd.NA
            out[col] = pd.Series(flag, index=raw.index)
        else:
            text = raw.astype("string")
            out[col] = text.where(text != "") if col in _OPTIONAL_TEXT else text
    return pd.DataFrame(out, columns=header)


def _csv_records(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, rows (cells as written) and the line each row starts on."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such decisions CSV")
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"{path}: empty file, not a decisions CSV")
            start = reader.line_num + 1
            for record in reader:
                if record:  # csv yields [] for a blank line
                    if len(record) != len(header):
                        raise ConfigError(
                            f"{path}, line {start}: {len(record)} fields, the header has {len(header)}"
                        )
                    rows.append(record)
                    lines.append(start)
                start = reader.line_num + 1
    except csv.Error as exc:
        raise ConfigError(f"{path}, line {reader.line_num}: not CSV ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason})") from exc
    return header, rows, lines
