"""How often does a real retriever leave the evidence out of the context?

For each benchmark store, the retriever ranks every memory for every query.
With a context of ``B`` slots filled by the top ``B`` of the ranking:

* a required **pair** (query, evidence memory) is *unretrieved* when the
  memory's rank for that query is ``>= B``;
* a required **memory** (required by at least one query) is *never retrieved*
  when its rank is ``>= B`` for every query asked against its store. This is
  the log-level fact that makes it ``unidentified`` under the retriever alone
  (the memory-level ``required_unidentified_fraction`` of ``cmp-bayes
  diagnose``). Where each store has one query (LongMemEval, HotpotQA,
  MuSiQue) the two shares coincide.

Ranks are 0-based (the exposure log's convention); the paper's "rank 139 of
291" is reported as the median rank of unretrieved evidence pairs and the
median size of their stores.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.datasets.base import Dataset
from cmp_bayes.progress import Progress
from cmp_bayes.retrieval.base import Retriever, rank_store

DEFAULT_SLOTS: tuple[int, ...] = (5, 10, 20)


def evidence_ranks(
    dataset: Dataset, retriever: Retriever, progress: Progress | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rank every store with ``retriever`` and keep what positivity needs.

    ``progress`` (default silent) gets a bar over the stores.

    Returns
    -------
    pairs : pandas.DataFrame
        One row per required pair: ``store_id``, ``query_id``, ``group``,
        ``memory_id``, ``rank`` (0-based, for that query), ``store_size``.
    memories : pandas.DataFrame
        One row per required memory: ``store_id``, ``memory_id``,
        ``best_rank`` (its best rank over every query of the store),
        ``store_size``, ``group`` (the group of the first query requiring it).
    """
    pair_rows, mem_rows = [], []
    for store in (progress or Progress.silent()).track(dataset.stores, "ranking stores", unit="stores"):
        if store.evidence.empty:
            continue
        ranks = rank_store(store, retriever)
        groups = dict(zip(store.queries["query_id"], store.queries["group"], strict=True))
        ev = store.evidence
        r = ranks.sel(query=ev["query_id"].to_numpy(dtype=object), memory=ev["memory_id"].to_numpy(dtype=object))
        pair_rank = np.diagonal(r.to_numpy()) if len(ev) else np.array([], dtype=np.int64)
        for (q, m), k in zip(ev[["query_id", "memory_id"]].itertuples(index=False), pair_rank, strict=True):
            pair_rows.append((store.store_id, q, groups[q], m, int(k), store.size))
        best = ranks.min("query")
        first_q = ev.drop_duplicates("memory_id")
        for q, m in first_q[["query_id", "memory_id"]].itertuples(index=False):
            mem_rows.append((store.store_id, m, int(best.sel(memory=m)), store.size, groups[q]))
    pairs = pd.DataFrame(pair_rows, columns=["store_id", "query_id", "group", "memory_id", "rank", "store_size"])
    mems = pd.DataFrame(mem_rows, columns=["store_id", "memory_id", "best_rank", "store_size", "group"])
    return pairs, mems


def positivity_table(pairs: pd.DataFrame, memories: pd.DataFrame, slots: Sequence[int] = DEFAULT_SLOTS) -> pd.DataFrame:
    """One row per context size ``B``.

    Columns: ``slots``, ``required_pairs``, ``pairs_unretrieved``,
    ``pairs_unretrieved_share``, ``required_memories``,
    ``memories_never_retrieved``, ``memories_never_retrieved_share``,
    ``median_rank_unretrieved`` (0-based, over unretrieved pairs; NaN if
    none), ``median_store_size`` (over the stores of those pairs).
    """
    rows = []
    for b in slots:
        miss = pairs["rank"] >= b
        never = memories["best_rank"] >= b
        rows.append(
            {
                "slots": int(b),
                "required_pairs": len(pairs),
                "pairs_unretrieved": int(miss.sum()),
                "pairs_unretrieved_share": float(miss.mean()) if len(pairs) else float("nan"),
                "required_memories": len(memories),
                "memories_never_retrieved": int(never.sum()),
                "memories_never_retrieved_share": float(never.mean()) if len(memories) else float("nan"),
                "median_rank_unretrieved": float(pairs.loc[miss, "rank"].median()) if miss.any() else float("nan"),
                "median_store_size": float(pairs.loc[miss, "store_size"].median()) if miss.any() else float("nan"),
            }
        )
    return pd.DataFrame(rows)


@dataclass
class PositivityResult:
    """Positivity of a retriever over a benchmark.

    Attributes
    ----------
    dataset, retriever, granularity : str
    table : pandas.DataFrame
        :func:`positivity_table` over all stores.
    by_group : pandas.DataFrame
        The same per query group (column ``group`` first).
    pairs, memories : pandas.DataFrame
        From :func:`evidence_ranks`.
    summary : dict
        Dataset counts (:meth:`Dataset.summary`) and notes.
    """

    dataset: str
    retriever: str
    granularity: str
    table: pd.DataFrame
    by_group: pd.DataFrame
    pairs: pd.DataFrame
    memories: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tables as lists of records; NaN as null)."""
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.to_json(orient="records"))

        return {
            "dataset": self.dataset,
            "retriever": self.retriever,
            "granularity": self.granularity,
            "summary": self.summary,
            "table": records(self.table),
            "by_group": records(self.by_group),
        }

    def to_json(self) -> str:
        """One JSON object (see :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=1)

    def to_text(self) -> str:
        """A readable table: per B, the unretrieved shares and the median rank / store size."""
        s = self.summary
        lines = [
            f"{self.dataset} ({self.granularity} memories, {s.get('stores')} stores, "
            f"{s.get('queries_with_evidence')} queries with evidence), retriever {self.retriever}",
            f"{'B':>4} {'pairs not in top B':>22} {'memories never in top B':>26} {'median rank (0-based) / store':>31}",
        ]
        for r in self.table.itertuples(index=False):
            lines.append(
                f"{r.slots:>4} {r.pairs_unretrieved:>6}/{r.required_pairs:<6} {100 * r.pairs_unretrieved_share:6.1f}%"
                f" {r.memories_never_retrieved:>9}/{r.required_memories:<6} {100 * r.memories_never_retrieved_share:6.1f}%"
                f" {r.median_rank_unretrieved:>18.0f} / {r.median_store_size:<8.0f}"
            )
        if len(self.by_group):
            lines.append("by group (pairs not in top B):")
            for g, sub in self.by_group.groupby("group", sort=True):
                cells = "  ".join(
                    f"B={r.slots}: {100 * r.pairs_unretrieved_share:5.1f}% of {r.required_pairs}"
                    for r in sub.itertuples(index=False)
                )
                lines.append(f"  {g:<28} {cells}")
        return "\n".join(lines)


def measure_positivity(
    dataset: Dataset,
    retriever: Retriever,
    slots: Sequence[int] = DEFAULT_SLOTS,
    progress: Progress | None = None,
) -> PositivityResult:
    """Rank every store and tabulate the unretrieved evidence for each ``B`` in ``slots``.

    ``progress`` (a :class:`cmp_bayes.progress.Progress`; default silent) draws a
    bar over the stores being ranked, with its rate and time left.
    """
    pairs, mems = evidence_ranks(dataset, retriever, progress)
    table = positivity_table(pairs, mems, slots)
    groups = []
    for g in sorted(pairs["group"].dropna().unique()):
        t = positivity_table(pairs[pairs["group"] == g], mems[mems["group"] == g], slots)
        groups.append(t.assign(group=g))
    by_group = pd.concat(groups, ignore_index=True) if groups else table.iloc[:0].assign(group=pd.Series(dtype="string"))
    by_group = by_group[["group", *table.columns]]
    return PositivityResult(
        dataset.name, retriever.name, dataset.granularity, table, by_group, pairs, mems,
        {**dataset.summary(), "notes": list(dataset.notes)},
    )
