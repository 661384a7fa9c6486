"""The common shape every benchmark adapter returns: stores of memories, queries, evidence.

A benchmark becomes a :class:`Dataset`: a tuple of :class:`Store` objects. A
store is one memory store (a LoCoMo conversation, a LongMemEval haystack, the
paragraphs of one HotpotQA / MuSiQue question) together with the queries asked
against it and the benchmark's evidence annotations, which say which memories
each query requires. Memory and query ids are unique across the whole dataset
(prefixed with the store id), so stores can share one exposure log.

Tables (pandas DataFrames, string columns as pandas' ``string`` dtype):

* ``memories``: ``memory_id``, ``position`` (int64, 0-based order in the
  store, e.g. dialogue order), ``session`` (the session / paragraph title the
  memory belongs to), ``text``.
* ``queries``: ``query_id``, ``text``, ``group`` (the benchmark's question
  category), ``answer``.
* ``evidence``: ``query_id``, ``memory_id``: one row per required pair.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pandas as pd

from cmp_bayes.errors import ConfigError

#: Memory granularities an adapter may offer.
TURN: Final[str] = "turn"
SESSION: Final[str] = "session"
PARAGRAPH: Final[str] = "paragraph"

MEMORY_COLUMNS: Final[dict[str, str]] = {
    "memory_id": "string",
    "position": "int64",
    "session": "string",
    "text": "string",
}
QUERY_COLUMNS: Final[dict[str, str]] = {
    "query_id": "string",
    "text": "string",
    "group": "string",
    "answer": "string",
}
EVIDENCE_COLUMNS: Final[dict[str, str]] = {"query_id": "string", "memory_id": "string"}


def frame(rows: Iterable[dict], columns: dict[str, str]) -> pd.DataFrame:
    """Build a DataFrame with exactly ``columns`` (name -> dtype) from dict rows."""
    df = pd.DataFrame(list(rows), columns=list(columns))
    return df.astype(columns)


@dataclass(frozen=True)
class Store:
    """One memory store and the queries asked against it.

    Attributes
    ----------
    store_id : str
        Unique within the dataset (a conversation or question id).
    memories, queries, evidence : pandas.DataFrame
        See the module docstring for columns. Every evidence row names a
        memory and a query of this store.
    """

    store_id: str
    memories: pd.DataFrame
    queries: pd.DataFrame
    evidence: pd.DataFrame

    def __post_init__(self) -> None:
        mem = set(self.memories["memory_id"])
        if len(mem) != len(self.memories):
            raise ValueError(f"store {self.store_id}: duplicate memory ids")
        if not set(self.evidence["memory_id"]) <= mem:
            raise ValueError(f"store {self.store_id}: evidence names a memory not in the store")
        if not set(self.evidence["query_id"]) <= set(self.queries["query_id"]):
            raise ValueError(f"store {self.store_id}: evidence names an unknown query")

    @property
    def size(self) -> int:
        """Number of memories in the store."""
        return len(self.memories)

    def labels(self, all_pairs: bool = False) -> pd.DataFrame:
        """Labels in the log spec's form (``query_id``, ``memory_id``, ``required``).

        Parameters
        ----------
        all_pairs : bool
            False: one row per required pair. True: one row per (query,
            memory) pair of the store, ``required`` False where the benchmark
            names no evidence (size: queries x memories).
        """
        ev = self.evidence.assign(required=True)
        if not all_pairs:
            return ev.reset_index(drop=True)
        pairs = self.queries[["query_id"]].merge(self.memories[["memory_id"]], how="cross")
        out = pairs.merge(ev, on=["query_id", "memory_id"], how="left")
        out["required"] = out["required"].fillna(False).astype(bool)
        return out


@dataclass(frozen=True)
class Dataset:
    """A benchmark as memory stores.

    Attributes
    ----------
    name : str
        Benchmark name (``longmemeval``, ``locomo``, ``hotpotqa``, ``musique``).
    granularity : str
        What one memory is: ``turn``, ``session`` or ``paragraph``.
    stores : tuple of Store
    source : Path
        The file read.
    license : str
        The data's licence; LoCoMo's (CC BY-NC 4.0) forbids bundling.
    notes : tuple of str
        Every normalisation the adapter applied to the raw annotations.
    """

    name: str
    granularity: str
    stores: tuple[Store, ...]
    source: Path
    license: str
    notes: tuple[str, ...] = field(default=())

    def store(self, store_id: str) -> Store:
        """The store with this id (ConfigError naming the known ids if absent)."""
        for s in self.stores:
            if s.store_id == store_id:
                return s
        known = ", ".join(s.store_id for s in self.stores[:10])
        raise ConfigError(f"{self.name}: no store {store_id!r} (first stores: {known})")

    def memories(self) -> pd.DataFrame:
        """All memories with a ``store_id`` column."""
        return _concat([s.memories.assign(store_id=s.store_id) for s in self.stores])

    def queries(self) -> pd.DataFrame:
        """All queries with a ``store_id`` column."""
        return _concat([s.queries.assign(store_id=s.store_id) for s in self.stores])

    def evidence(self) -> pd.DataFrame:
        """All required (query, memory) pairs with a ``store_id`` column."""
        return _concat([s.evidence.assign(store_id=s.store_id) for s in self.stores])

    def subset(self, store_ids: Iterable[str]) -> Dataset:
        """The same dataset restricted to some stores (in the given order)."""
        stores = tuple(self.store(s) for s in store_ids)
        return Dataset(self.name, self.granularity, stores, self.source, self.license, self.notes)

    def summary(self) -> dict[str, int]:
        """Counts: stores, memories, queries, required pairs, queries with evidence."""
        ev = self.evidence()
        return {
            "stores": len(self.stores),
            "memories": int(sum(s.size for s in self.stores)),
            "queries": int(sum(len(s.queries) for s in self.stores)),
            "required_pairs": len(ev),
            "queries_with_evidence": int(ev["query_id"].nunique()),
        }


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def check_granularity(name: str, granularity: str, allowed: tuple[str, ...]) -> None:
    """Raise ConfigError unless ``granularity`` is one the adapter offers."""
    if granularity not in allowed:
        raise ConfigError(
            f"{name}: granularity must be one of {', '.join(allowed)}, got {granularity!r}"
        )


def need_file(path: str | Path, what: str) -> Path:
    """Return ``path`` as a Path, or raise ConfigError if no such file exists."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what}: no such file {p}")
    return p


def read_json_records(file: Path, limit: int | None = None) -> list[dict]:
    """Records of a JSON Lines file or a JSON list file, the first ``limit`` of them."""
    import json

    with file.open("r", encoding="utf-8") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        if head == "[":
            records = json.loads(head + f.read())
            return records[:limit] if limit is not None else records
        out: list[dict] = []
        line = head + f.readline()
        while line and (limit is None or len(out) < limit):
            if line.strip():
                out.append(json.loads(line))
            line = f.readline()
        return out
