"""Retrieval positivity: which memories (and memory-query pairs) the design identifies.

The status comes from the exposure design only (counts in the sufficient
statistics), never from a posterior:

* ``identified``: exposed at least once through an exposure slot. Every such
  slot carries its known propensity (the log spec requires it, the reader
  enforces it), so the memory's conditional utility is identified by design.
* ``retrieved-only``: never exposed, but retrieved by the logging policy at
  least once. Its utility is identified only under an ignorability
  assumption: that the steps where the retriever chose it are comparable to
  those where it did not (no confounding of retrieval and outcome).
* ``unidentified``: never in any context. Retrieval positivity fails:
  ``rho = 0`` so no experiment on the store can reveal ``tau``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.diagnostics.eligibility import cancelled_steps, eligible_pool, eligible_window
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.statistics.pandas_engine import lifetimes
from cmp_bayes.text import add_text, texts_from_memories


def identification_status(stats: xr.Dataset) -> xr.DataArray:
    """Identification status of every memory (or memory x query / group cell).

    Parameters
    ----------
    stats : xarray.Dataset
        Output of :func:`cmp_bayes.statistics.exposure_stats` (any ``by``);
        only ``exposed`` and ``retrieved`` are read.

    Returns
    -------
    xarray.DataArray
        Strings from ``cmp_bayes.constants.STATUSES``, same dims and coords as
        ``stats.exposed``, named ``status``.
    """
    exposed = stats["exposed"].to_numpy() >= 1
    retrieved = stats["retrieved"].to_numpy() >= 1
    status = np.where(exposed, IDENTIFIED, np.where(retrieved, RETRIEVED_ONLY, UNIDENTIFIED))
    return xr.DataArray(
        status.astype(object),
        dims=stats["exposed"].dims,
        coords=stats["exposed"].coords,
        name="status",
    )


#: what the store-level diagnostic checks, said once for the text and the JSON
_OPERATIONS_RULE = (
    "store-level check (memory operations only): every memory was in the store at some "
    "step, so it had a nonzero chance of being kept or deleted"
)
_RETRIEVAL_RULE = (
    "retrieval positivity: every memory was in a context at some step (exposed under a "
    "known propensity, or at least retrieved)"
)


@dataclass
class PositivityReport:
    """Which memories and memory-query pairs the log identifies, and why not.

    Attributes
    ----------
    memories : pandas.DataFrame
        One row per memory (``log.memory_ids()`` order): ``memory_id``,
        ``status``, ``retrieved``, ``exposed``, ``in_store`` (counts of
        steps), ``rank_median`` (median 0-based retriever rank over the steps
        whose ranking lists it; NaN if never ranked), ``required``
        (nullable bool: True if any label says the memory is required for
        some query; <NA> without labels), ``eligible_pool`` and
        ``eligible_window`` (bool: ever eligible under the design's pool arm /
        a window design's window arm); when the log's memories have texts,
        ``text`` after ``memory_id`` (the first 60 characters; <NA> for a
        memory without one).
    pairs : pandas.DataFrame
        One row per (memory, query) with the memory in the store at some step
        of the query: ``memory_id``, ``query_id`` and the same columns,
        counted over that query's steps (``required`` from the pair's label;
        False for an unlabelled pair when the log has labels), and ``text``
        after ``query_id`` as in ``memories``.
    summary : dict
        Counts and checks, exactly what ``to_json`` prints (see ``diagnose``).
    """

    memories: pd.DataFrame
    pairs: pd.DataFrame
    summary: dict[str, Any]

    def to_json(self) -> str:
        """The summary as one JSON object (NaN written as null)."""
        return json.dumps(_jsonable(self.summary), indent=None, sort_keys=False)

    def to_text(self, max_rows: int = 15) -> str:
        """A readable table: status counts, required memories, ranks, both checks.

        ``max_rows`` caps the list of memories that are not identified
        (required ones first).
        """
        s = self.summary
        p = s["pairs"]
        lines = [
            f"Retrieval positivity of {s['memories']} memories over {s['steps']} steps "
            f"({s['queries']} queries)",
            "",
            f"{'status':<16}{'memories':>10}{'share':>9}{'pairs':>10}{'share':>9}",
        ]
        for key, label in (
            ("identified", IDENTIFIED),
            ("retrieved_only", RETRIEVED_ONLY),
            ("unidentified", UNIDENTIFIED),
        ):
            lines.append(
                f"{label:<16}{s[key]:>10}{_pct(s[key], s['memories']):>9}"
                f"{p[key]:>10}{_pct(p[key], p['pairs']):>9}"
            )
        lines.append(f"{'total':<16}{s['memories']:>10}{'':>9}{p['pairs']:>10}")
        lines.append("")
        if s["required"] is None:
            lines.append("required memories: no labels in this log")
        else:
            lines.append(
                f"required memories: {s['required']}; never retrieved by the retriever "
                f"(unidentified under the retriever alone): {s['required_never_retrieved']} "
                f"= {_frac(s['required_unidentified_fraction'])} "
                f"(pairs: {_frac(p['required_unidentified_fraction'])})"
            )
        r = s["ranking"]
        if r is None:
            lines.append("retriever ranks: no ranking in this log")
        else:
            who = "required memories" if s["required"] is not None else "memories"
            key = (
                "required_unretrieved_median_rank"
                if s["required"] is not None
                else "unretrieved_median_rank"
            )
            lines.append(
                f"median retriever rank (0-based) of {who} never retrieved: "
                f"{_num(r[key])} of a median store of {_num(r['median_store_size'])} memories"
            )
        cancelled = s.get("cancelled_steps")
        if cancelled:
            # a live writer's cancelled or expired steps: not in the estimates, but not hidden
            lines.append(
                f"cancelled steps: {cancelled} (in cancelled.jsonl: no outcome, or cancelled with a "
                "reason; excluded from every estimate)"
            )
        lines.append("")
        ops, ret = s["operations_check"], s["retrieval_check"]
        lines.append(f"{ops['verdict'].upper():<6} {ops['rule']}")
        lines.append(f"{ret['verdict'].upper():<6} {ret['rule']}")
        if ops["verdict"] == "passes" and ret["verdict"] == "fails":
            lines.append(
                "       the store-level check passes, yet "
                f"{s['unidentified']} memories were never in any context: no keep/delete "
                "experiment can tell them apart from useless ones"
            )
        todo = self.memories[self.memories["status"] != IDENTIFIED]
        if len(todo):
            req = todo["required"].fillna(False).astype(bool)
            todo = todo.assign(_r=~req).sort_values(["_r", "status", "rank_median", "memory_id"])
            lines += ["", f"memories not identified ({len(todo)}; first {min(max_rows, len(todo))}):"]
            has_text = "text" in todo
            lines.append(
                f"  {'memory_id':<24}{'status':<16}{'retrieved':>10}{'in_store':>10}"
                f"{'rank_median':>13}{'required':>10}" + ("  text" if has_text else "")
            )
            for row in todo.head(max_rows).itertuples():
                text = f"  {row.text}" if has_text and not pd.isna(row.text) else ""
                lines.append(
                    f"  {str(row.memory_id)[:23]:<24}{row.status:<16}{row.retrieved:>10}"
                    f"{row.in_store:>10}{_num(row.rank_median):>13}"
                    f"{'' if pd.isna(row.required) else str(bool(row.required)):>10}{text}"
                )
        return "\n".join(lines) + "\n"


def diagnose(log: ExposureLog) -> PositivityReport:
    """Diagnose retrieval positivity of ``log``, per memory and per memory-query pair.

    Parameters
    ----------
    log : ExposureLog
        The log (``cmp_bayes.read_log``).

    Returns
    -------
    PositivityReport
        ``summary`` holds the integer counts ``memories``, ``identified``,
        ``retrieved_only``, ``unidentified``; ``steps``, ``queries``;
        ``required`` (number of required memories, memory-level: a memory is
        required if any label says so; None without labels);
        ``required_never_retrieved`` and ``required_unidentified_fraction``:
        the share of required memories that the retriever never put in a
        context, i.e. that would be unidentified under the retriever alone
        (exposures are ignored on purpose: this is the failure CMP fixes);
        None without labels or without a required memory; ``pairs``: the
        same counts over (memory, query) pairs with the memory in the store
        at some step of the query (a pair is required when its label says
        so); ``ranking`` (None without rankings): median 0-based retriever
        rank of required memories never retrieved (memory-level, each
        memory's own median rank; and pair-level), of all never-retrieved
        memories, and the median store size over steps; and two verdicts,
        ``operations_check`` (the store-level check) and
        ``retrieval_check`` (retrieval positivity), each
        ``{"verdict": "passes" | "fails", "rule": ...}``; ``cancelled_steps``:
        the lines of the live writer's ``cancelled.jsonl`` beside the log (steps
        never written to ``steps.jsonl``), None without that file.

        ``memories`` and ``pairs`` also hold ``eligible_pool`` (the memory was
        in some round's pool while in the store; for a pair, at some step of
        the query) and ``eligible_window`` (in some step's window ``W_t`` of a
        window design; for a pair, at a step of the query), both bool.
    """
    from cmp_bayes.statistics import exposure_stats

    stats = exposure_stats(log)
    qstats = exposure_stats(log, by="query")
    memory = stats["memory"].to_numpy()
    status = identification_status(stats).to_numpy()

    req_mem, req_pair = _required(log, memory)
    mem = pd.DataFrame(
        {
            "memory_id": memory,
            "status": status,
            "retrieved": stats["retrieved"].to_numpy(),
            "exposed": stats["exposed"].to_numpy(),
            "in_store": stats["in_store"].to_numpy(),
            "rank_median": stats["rank_median"].to_numpy(),
            "required": req_mem,
        }
    )
    pairs = _pairs(qstats, req_pair)
    mem["eligible_pool"], pairs["eligible_pool"] = eligible_pool(log, memory, pairs)
    mem["eligible_window"], pairs["eligible_window"] = eligible_window(log, memory, pairs)
    # the start of each memory's text beside its id, when memories.jsonl has texts
    texts = texts_from_memories(log.memories)
    mem, pairs = add_text(mem, texts), add_text(pairs, texts)

    counts = mem["status"].value_counts()
    pcounts = pairs["status"].value_counts()
    n_req = None if log.labels is None else int(mem["required"].fillna(False).sum())
    req_mask = mem["required"].fillna(False).to_numpy(bool)
    never = mem["retrieved"].to_numpy() == 0
    preq = pairs["required"].fillna(False).to_numpy(bool)
    pnever = pairs["retrieved"].to_numpy() == 0
    summary: dict[str, Any] = {
        "memories": len(mem),
        "identified": int(counts.get(IDENTIFIED, 0)),
        "retrieved_only": int(counts.get(RETRIEVED_ONLY, 0)),
        "unidentified": int(counts.get(UNIDENTIFIED, 0)),
        "required": n_req,
        "required_never_retrieved": None if n_req is None else int((req_mask & never).sum()),
        "required_unidentified_fraction": _share(req_mask & never, req_mask, n_req),
        "steps": int(stats.attrs["n_steps"]),
        "queries": int(qstats.sizes["query"]),
        "pairs": {
            "pairs": len(pairs),
            "identified": int(pcounts.get(IDENTIFIED, 0)),
            "retrieved_only": int(pcounts.get(RETRIEVED_ONLY, 0)),
            "unidentified": int(pcounts.get(UNIDENTIFIED, 0)),
            "required": None if n_req is None else int(preq.sum()),
            "required_unidentified_fraction": _share(preq & pnever, preq, n_req),
        },
        "ranking": None,
        "cancelled_steps": cancelled_steps(log),
        "operations_check": {
            "verdict": "passes" if bool((mem["in_store"] > 0).all()) else "fails",
            "rule": _OPERATIONS_RULE,
        },
        "retrieval_check": {
            "verdict": "passes" if int(counts.get(UNIDENTIFIED, 0)) == 0 else "fails",
            "rule": _RETRIEVAL_RULE,
        },
    }
    if log.rankings is not None:
        created, deleted = lifetimes(log, pd.Index(memory))
        rank = mem["rank_median"].to_numpy()
        prank = pairs["rank_median"].to_numpy()
        summary["ranking"] = {
            "required_unretrieved_median_rank": _median(rank[req_mask & never]),
            "required_unretrieved_ranked": int(np.isfinite(rank[req_mask & never]).sum()),
            "pairs_required_unretrieved_median_rank": _median(prank[preq & pnever]),
            "unretrieved_median_rank": _median(rank[never]),
            "median_store_size": _median_store_size(
                log.steps["step"].to_numpy(np.int64), created, deleted, log.memories is None
            ),
        }
    return PositivityReport(memories=mem, pairs=pairs, summary=summary)


def _required(log: ExposureLog, memory: np.ndarray) -> tuple[pd.Series, pd.DataFrame | None]:
    """Memory-level required flags (nullable bool) and the required (query, memory) pairs."""
    if log.labels is None:
        return pd.Series(pd.NA, index=range(len(memory)), dtype="boolean"), None
    lab = log.labels.astype({"memory_id": str, "query_id": str})
    anyreq = lab.groupby("memory_id")["required"].any()
    flags = anyreq.reindex(memory, fill_value=False).astype("boolean").reset_index(drop=True)
    pairs = lab.loc[lab["required"].astype(bool), ["memory_id", "query_id"]].drop_duplicates()
    return flags, pairs


def _pairs(qstats: xr.Dataset, req_pair: pd.DataFrame | None) -> pd.DataFrame:
    """Rows for (memory, query) cells with the memory in the store at some step of the query."""
    status = identification_status(qstats).to_numpy()
    in_store = qstats["in_store"].to_numpy()
    mi, qi = np.nonzero(in_store > 0)
    out = pd.DataFrame(
        {
            "memory_id": qstats["memory"].to_numpy()[mi],
            "query_id": qstats["query"].to_numpy()[qi],
            "status": status[mi, qi],
            "retrieved": qstats["retrieved"].to_numpy()[mi, qi],
            "exposed": qstats["exposed"].to_numpy()[mi, qi],
            "in_store": in_store[mi, qi],
            "rank_median": qstats["rank_median"].to_numpy()[mi, qi],
        }
    )
    if req_pair is None:
        out["required"] = pd.Series(pd.NA, index=out.index, dtype="boolean")
    else:
        key = pd.MultiIndex.from_frame(out[["memory_id", "query_id"]])
        want = pd.MultiIndex.from_frame(req_pair[["memory_id", "query_id"]])
        out["required"] = pd.array(key.isin(want), dtype="boolean")
    return out


def _median_store_size(
    steps: np.ndarray, created: np.ndarray, deleted: np.ndarray, everything: bool
) -> float:
    """Median over steps of the number of memories in the store."""
    if len(steps) == 0:
        return float("nan")
    if everything:
        return float(len(created))
    deleted = np.maximum(deleted, created)  # an empty lifetime never counts
    size = np.searchsorted(np.sort(created), steps, side="right") - np.searchsorted(
        np.sort(deleted), steps, side="right"
    )
    return float(np.median(size))


def _share(num: np.ndarray, den: np.ndarray, n_req: int | None) -> float | None:
    if n_req is None or int(den.sum()) == 0:
        return None
    return float(num.sum() / den.sum())


def _median(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else None


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return _jsonable(float(obj))
    return obj


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "-"


def _frac(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:g}"
