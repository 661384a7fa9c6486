"""CMP inside a Mem0 store: randomized retrieval exposure around ``mem0.Memory.search``.

Turning CMP on for an existing Mem0 deployment takes a scheduler, a log
writer and one wrapper::

    from cmp_bayes import ExposureScheduler, LogWriter
    from cmp_bayes.integrations.mem0 import CMPMemory, store_snapshot

    store = store_snapshot(memory, filters={"user_id": "alice"})
    sched = ExposureScheduler(slots=10, exposure_slots=2, pool=store["memory_id"].tolist(), steps=2000)
    writer = LogWriter("logs/alice", design=sched.design(), memories=store)
    cmp = CMPMemory(memory, sched, writer)

    hits = cmp.search("where does Caroline live?", filters={"user_id": "alice"}, query_id="q17")
    ...                                   # the LLM answers from hits["results"]
    cmp.report_outcome(hits["cmp"]["step"], 1.0)

What :meth:`CMPMemory.search` does at each call (one log step):

1. Mem0's own results: ``memory.search(query, top_k=B - k, **kwargs)`` with
   the caller's keyword arguments (``threshold``, ``rerank``, ...) untouched.
   These fill the retriever slots, objects and order unchanged.
2. The ``k`` exposure slots come from the
   :class:`~cmp_bayes.design.scheduler.ExposureScheduler` (balanced
   assignment, known propensities), skipping memories already in Mem0's
   results and memories no longer in the store.
3. The step is opened in the log with
   :meth:`~cmp_bayes.log.append.LogWriter.begin`; the caller finishes it with
   :meth:`CMPMemory.report_outcome` once the answer is scored.

The returned object has Mem0's shape, ``{"results": [...]}``: the retriever
items first, then the exposure items, each a Mem0 memory dict whose
``metadata["cmp"]`` says ``{"source": "exposure", "propensity": p, "step": t}``.
A top-level ``"cmp"`` key carries the step id, the query id and the exposed
memory ids. Every other method (``add``, ``get``, ``update``, ``delete``, ...)
is the wrapped ``Memory``'s own, unchanged.

Rankings: the log's optional ``ranking`` field is Mem0's full ranking for the
query, ``memory.search(query, top_k=<store size>, threshold=0.0)``. Mem0
accepts no threshold below 0, so memories whose similarity to the query is
negative are missing from it (the spec allows a truncated ranking). It is
logged the first time each ``query_id`` is asked (``log_ranking="first"``):
a deterministic retriever gives the same ranking again, and logging it at
every step would make the log grow with ``steps x store size``.

Offline Mem0 (:func:`~cmp_bayes.integrations.mem0_offline.offline_config`, :func:`~cmp_bayes.integrations.mem0_offline.offline_memory`): a Qdrant
store embedded on disk, an embedder running locally (default: the torch-free
all-MiniLM-L6-v2 ONNX model of :mod:`cmp_bayes.retrieval.dense`), telemetry
off. Without spaCy's model and fastembed's BM25 download Mem0's search is
**vector-only** (its BM25 and entity boosts switch themselves off); results
measured with it must say so.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from cmp_bayes.constants import EXPOSURE
from cmp_bayes.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

    from cmp_bayes.design.scheduler import ExposureScheduler
    from cmp_bayes.log.append import LogWriter

#: What to install when mem0ai is missing.
INSTALL_HINT = "pip install 'cmp-bayes[mem0]' (mem0ai)"
_ENTITY_KEYS = ("user_id", "agent_id", "run_id")


class CMPMemory:
    """A ``mem0.Memory`` whose ``search`` runs the CMP exposure design and logs each step.

    Parameters
    ----------
    memory : mem0.Memory
        The user's Mem0 memory (any vector store, embedder, reranker).
    scheduler : ExposureScheduler
        The exposure design: ``B = scheduler.slots`` context slots of which
        ``k = scheduler.exposure_slots`` are exposure slots; its pool are Mem0
        memory ids. Its steps are the log's steps, so it must be fresh when
        the writer starts at step 0.
    writer : LogWriter
        Where steps go. If it has no design yet the scheduler's is written;
        a different design is refused.
    slots : int, optional
        ``B``; only checked against ``scheduler.slots``.
    log_ranking : {"first", "always", "never"}
        When to log Mem0's full ranking (module docstring).
    track_store : bool
        List the store (``get_all`` with the search's filters) at every step,
        so that a pool memory deleted from Mem0 is never exposed (its exposure
        is deferred) and the ranking depth is the store size. ``False`` saves
        that call when memories are never deleted during the design.
    ranking_depth : int
        ``top_k`` of the ranking search when the store is not tracked.
    """

    def __init__(
        self,
        memory: Any,
        scheduler: ExposureScheduler,
        writer: LogWriter,
        slots: int | None = None,
        *,
        log_ranking: Literal["first", "always", "never"] = "first",
        track_store: bool = True,
        ranking_depth: int = 10_000,
    ) -> None:
        if slots is not None and int(slots) != scheduler.slots:
            raise ConfigError(f"slots={slots} disagrees with the scheduler's B={scheduler.slots}")
        if log_ranking not in ("first", "always", "never"):
            raise ConfigError(
                f"log_ranking must be 'first', 'always' or 'never', got {log_ranking!r}"
            )
        design = scheduler.design()
        if writer.design is None:
            writer.write_design(design)
        elif dict(writer.design) != design:
            raise ConfigError(
                f"{writer.path}: the log's design.json is not this scheduler's design; "
                "open a new log directory for a new design"
            )
        self.memory = memory
        self.scheduler = scheduler
        self.writer = writer
        self.slots = scheduler.slots
        self.exposure_slots = scheduler.exposure_slots
        self.log_ranking = log_ranking
        self.track_store = track_store
        self.ranking_depth = int(ranking_depth)
        self._ranked: set[str] = set()
        self._store_hint = 256

    # ----------------------------------------------------------------- search
    def search(
        self,
        query: str,
        *,
        filters: Mapping[str, Any] | None = None,
        query_id: str | None = None,
        group: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Mem0's top ``B - k`` plus ``k`` scheduled exposures; opens one log step.

        Parameters
        ----------
        query : str
            The query, as for ``Memory.search``.
        filters : mapping, optional
            Mem0's filters (must name a ``user_id``, ``agent_id`` or ``run_id``).
        query_id : str, optional
            The log's ``query_id`` (default: the query text).
        group : str, optional
            The log's ``group`` (the query's kind).
        user_id, agent_id, run_id : str, optional
            Shorthand merged into ``filters`` (Mem0 2.x itself only accepts them there).
        **kwargs
            Passed to ``Memory.search`` unchanged (``threshold``, ``rerank``,
            ``explain``, ``show_expired``, metadata filters). ``top_k`` is
            refused: the design fixes the context at ``B`` slots.

        Returns
        -------
        dict
            ``{"results": [...], "cmp": {"step", "query_id", "exposed"}}`` plus
            any other top-level keys of Mem0's own answer.
        """
        if "top_k" in kwargs or "limit" in kwargs:
            raise ConfigError(
                f"top_k is fixed by the CMP design: {self.slots - self.exposure_slots} Mem0 results "
                f"+ {self.exposure_slots} exposures"
            )
        flt = dict(filters or {})
        for key, value in zip(_ENTITY_KEYS, (user_id, agent_id, run_id), strict=True):
            if value is not None:
                flt[key] = value
        qid = str(query if query_id is None else query_id)
        nret = self.slots - self.exposure_slots
        own = self.memory.search(query, filters=flt, top_k=nret, **kwargs)
        own_items = list(own.get("results", []))
        own_ids = [str(item["id"]) for item in own_items]

        store = (
            self._store_ids(flt, kwargs.get("show_expired", False)) if self.track_store else None
        )
        ranking: list[str] | None = None
        ranked_items: dict[str, dict[str, Any]] = {}
        if self.log_ranking == "always" or (
            self.log_ranking == "first" and qid not in self._ranked
        ):
            depth = max(len(store), 1) if store is not None else self.ranking_depth
            full = self.memory.search(
                query,
                filters=flt,
                top_k=depth,
                threshold=0.0,
                show_expired=kwargs.get("show_expired", False),
            )
            ranked_items = {str(item["id"]): item for item in full.get("results", [])}
            ranking = list(ranked_items)
            self._ranked.add(qid)

        step = self.writer.next_step
        context = self.scheduler.context(step, own_ids, store)
        opened = self.writer.begin(qid, context, group=group, ranking=ranking)
        if opened != step:  # pragma: no cover - LogWriter numbers steps itself
            raise RuntimeError(f"log step {opened} != scheduled step {step}")

        exposed: list[str] = []
        results = own_items
        for slot in context:
            if slot["source"] != EXPOSURE:
                continue
            mid = slot["memory_id"]
            exposed.append(mid)
            item = ranked_items.get(mid)
            item = copy.deepcopy(item) if item is not None else self.memory.get(mid)
            if item is None:  # deleted between listing and fetching: keep the slot visible
                item = {"id": mid, "memory": None}
            meta = dict(item.get("metadata") or {})
            meta["cmp"] = {"source": EXPOSURE, "propensity": slot["propensity"], "step": step}
            item["metadata"] = meta
            results = [*results, item]
        out = {k: v for k, v in own.items() if k != "results"}
        out["results"] = results
        out["cmp"] = {"step": step, "query_id": qid, "exposed": exposed}
        return out

    def report_outcome(self, step: int, outcome: float) -> None:
        """The outcome (in ``[0, 1]``) of the step a :meth:`search` opened; writes it to the log."""
        self.writer.finish(step, outcome)

    # ---------------------------------------------------------------- helpers
    def _store_ids(self, filters: Mapping[str, Any], show_expired: bool) -> set[str]:
        """Ids of every memory in scope: ``get_all`` with a limit doubled until it is not reached."""
        top_k = self._store_hint
        while True:
            items = self.memory.get_all(
                filters=dict(filters), top_k=top_k, show_expired=show_expired
            )["results"]
            if len(items) < top_k:
                break
            top_k *= 2
        self._store_hint = max(self._store_hint, 2 * len(items) + 1)
        return {str(item["id"]) for item in items}

    def close(self) -> None:
        """Close the log writer (steps still waiting for an outcome are warned about)."""
        self.writer.close()

    def __enter__(self) -> CMPMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # only called for names CMPMemory lacks: the rest of Mem0's API, unchanged
        if name == "memory":  # not yet set (during unpickling / a failed __init__)
            raise AttributeError(name)
        return getattr(self.memory, name)


def store_snapshot(memory: Any, filters: Mapping[str, Any], created_step: int = 0) -> pd.DataFrame:
    """The memories in scope now, as ``memories.jsonl`` rows for :class:`LogWriter`.

    Parameters
    ----------
    memory : mem0.Memory
    filters : mapping
        Mem0 filters naming the scope (``{"user_id": ...}``).
    created_step : int
        The step from which they count as in the store.

    Returns
    -------
    pandas.DataFrame
        ``memory_id``, ``created_step``, ``deleted_step`` (<NA>), ``text``; one
        row per memory, in Mem0's listing order.
    """
    import pandas as pd

    top_k = 1024
    while True:
        items = memory.get_all(filters=dict(filters), top_k=top_k)["results"]
        if len(items) < top_k:
            break
        top_k *= 2
    return pd.DataFrame(
        {
            "memory_id": pd.array([str(i["id"]) for i in items], dtype="string"),
            "created_step": np.full(len(items), int(created_step), dtype=np.int64),
            "deleted_step": pd.array([pd.NA] * len(items), dtype="Int64"),
            "text": pd.array([i.get("memory") for i in items], dtype="string"),
        }
    )


