"""CMP inside a Mem0 store: randomized retrieval exposure around ``mem0.Memory.search``.

Turning CMP on for an existing Mem0 deployment takes a scheduler, a log
writer and one wrapper::

    from cmp_bayes.integrations.mem0 import CMPMemory

    # a new log, or the same log reopened after a restart
    cmp = CMPMemory.open(memory, "logs/alice", filters={"user_id": "alice"}, slots=10, exposure_slots=2)

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
memory ids.

The store's lifecycle is logged: :meth:`CMPMemory.add`, :meth:`CMPMemory.update`
and :meth:`CMPMemory.delete` call Mem0's own method and record the change in
``memories.jsonl`` (an update gets a new log id, ``<id>~v2``: see
:mod:`cmp_bayes.live.session`); a memory Mem0 returns that the log does not
know is recorded as created at that step. :meth:`CMPMemory.apply` deletes the
memories ``decide`` forgets and records the deletions. Every other method
(``get``, ``get_all``, ``history``, ...) is the wrapped ``Memory``'s own.

Restarts: :meth:`CMPMemory.open` on a log directory that holds a
``live_state.json`` continues exactly where the log stopped (see
:class:`~cmp_bayes.live.session.LiveSession`).

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
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from cmp_bayes.constants import EXPOSURE
from cmp_bayes.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

    from cmp_bayes.design.scheduler import ExposureScheduler
    from cmp_bayes.live.session import LiveSession
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
    scheduler : ExposureScheduler or LiveSession
        The exposure design, or a whole :class:`~cmp_bayes.live.session.LiveSession`
        (what :meth:`open` builds; then ``writer`` is not given). A scheduler's
        pool are Mem0 memory ids and its steps are the log's steps, so it must
        be fresh when the writer starts at step 0.
    writer : LogWriter, optional
        Where steps go, with a scheduler. If it has no design yet the
        scheduler's is written; a different design is refused.
    slots : int, optional
        ``B``; only checked against the scheduler's.
    filters : mapping, optional
        The Mem0 scope (``{"user_id": ...}``) :meth:`add`, :meth:`apply` and
        ``delete_all`` work in; taken from the session's store when it has one.
    log_ranking : {"first", "always", "never"}
        When to log Mem0's full ranking (module docstring). Window designs log
        it at every step.
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
        scheduler: ExposureScheduler | LiveSession,
        writer: LogWriter | None = None,
        slots: int | None = None,
        *,
        filters: Mapping[str, Any] | None = None,
        log_ranking: Literal["first", "always", "never"] = "first",
        track_store: bool = True,
        ranking_depth: int = 10_000,
    ) -> None:
        from cmp_bayes.live.session import LiveSession

        if log_ranking not in ("first", "always", "never"):
            raise ConfigError(
                f"log_ranking must be 'first', 'always' or 'never', got {log_ranking!r}"
            )
        if isinstance(scheduler, LiveSession):
            session = scheduler
        else:
            if writer is None:
                raise ConfigError("CMPMemory(memory, scheduler, writer): a scheduler needs its LogWriter")
            session = LiveSession.from_parts(scheduler, writer, log_ranking=log_ranking)
        if slots is not None and int(slots) != session.scheduler.slots:
            raise ConfigError(f"slots={slots} disagrees with the scheduler's B={session.scheduler.slots}")
        self.memory = memory
        self.session = session
        self.scheduler = session.scheduler
        self.writer = session.writer
        self.slots = session.scheduler.slots
        self.exposure_slots = session.scheduler.exposure_slots
        self.filters = dict(filters or session.store or {})
        self.log_ranking = log_ranking
        self.track_store = track_store
        self.ranking_depth = int(ranking_depth)
        self._store_hint = 256

    @classmethod
    def open(
        cls,
        memory: Any,
        path: str | Path,
        filters: Mapping[str, Any],
        *,
        slots: int | None = None,
        exposure_slots: int | None = None,
        log_ranking: Literal["first", "always", "never"] = "first",
        track_store: bool = True,
        **design: Any,
    ) -> CMPMemory:
        """Start a live log for the Mem0 scope ``filters`` at ``path``, or continue it after a restart.

        A new log lists the scope's memories (every page of ``get_all``) as
        the store and the pool; ``design`` goes to
        :class:`~cmp_bayes.live.session.LiveSession` (``round_steps``,
        ``steps``, ``assignment``, ``window``, ``pool_slots``, ``positions``,
        ``seed``, ``expire_after_steps``, ...). Reopening checks that the log is
        for the same scope.
        """
        from cmp_bayes.live.session import STATE_FILE, LiveSession

        flt = dict(filters)
        if not any(k in flt for k in _ENTITY_KEYS):
            raise ConfigError(f"filters must name one of {', '.join(_ENTITY_KEYS)}, got {flt}")
        if (Path(path) / STATE_FILE).is_file():
            session = LiveSession(
                path, slots=slots, exposure_slots=exposure_slots, store=flt, log_ranking=log_ranking, **design
            )
        else:
            snapshot = store_snapshot(memory, flt)
            session = LiveSession(
                path,
                slots=slots,
                exposure_slots=exposure_slots,
                memories=snapshot,
                store=flt,
                log_ranking=log_ranking,
                **design,
            )
        return cls(memory, session, filters=flt, log_ranking=log_ranking, track_store=track_store)

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
            Mem0's filters (must name a ``user_id``, ``agent_id`` or ``run_id``;
            default: the scope this object was opened for).
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
            any other top-level keys of Mem0's own answer. ``results`` are in
            context order (exposure slots where the design put them).
        """
        if "top_k" in kwargs or "limit" in kwargs:
            raise ConfigError(
                f"top_k is fixed by the CMP design: {self.slots - self.exposure_slots} Mem0 results "
                f"+ {self.exposure_slots} exposures"
            )
        flt = dict(filters if filters is not None else self.filters)
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
        window = self.scheduler.window if self.scheduler.assignment == "window" else None
        ranked_items: dict[str, dict[str, Any]] = {}
        ranking = list(own_ids)
        if self.session.wants_ranking(qid):
            depth = max(len(store), 1) if store is not None else self.ranking_depth
            if window is not None:
                depth = min(depth, nret + int(window) + len(own_ids))
            full = self.memory.search(
                query,
                filters=flt,
                top_k=depth,
                threshold=0.0,
                show_expired=kwargs.get("show_expired", False),
            )
            ranked_items = {str(item["id"]): item for item in full.get("results", [])}
            # the retriever slots are Mem0's own answer; the rest of its ranking follows
            ranking += [m for m in ranked_items if m not in set(own_ids)]

        # the window needs the ranking below Mem0's answer; otherwise the slots are Mem0's answer
        fill = ranking if window is not None else own_ids
        opened = self.session.step(qid, fill, group=group, store=store, logged_ranking=ranking)
        own_by_log = {self.session.log_id_of(i["id"]): i for i in own_items}
        results: list[dict[str, Any]] = []
        exposed: list[str] = []
        for slot in opened.context:
            lid = slot["memory_id"]
            sid = self.session.store_id(lid)
            if slot["source"] != EXPOSURE:
                # Mem0's own item; a window design fills a short answer from the ranking
                results.append(own_by_log.get(lid) or copy.deepcopy(ranked_items.get(sid)) or self.memory.get(sid))
                continue
            exposed.append(sid)
            item = ranked_items.get(sid)
            item = copy.deepcopy(item) if item is not None else self.memory.get(sid)
            if item is None:  # deleted between listing and fetching: keep the slot visible
                item = {"id": sid, "memory": None}
            meta = dict(item.get("metadata") or {})
            meta["cmp"] = {"source": EXPOSURE, "propensity": slot["propensity"], "step": opened.step}
            if "arm" in slot:
                meta["cmp"]["arm"] = slot["arm"]
            item["metadata"] = meta
            results.append(item)
        out = {k: v for k, v in own.items() if k != "results"}
        out["results"] = results
        out["cmp"] = {"step": opened.step, "query_id": qid, "exposed": exposed}
        return out

    def report_outcome(self, step: int, outcome: float) -> None:
        """The outcome (in ``[0, 1]``) of the step a :meth:`search` opened, also after a restart."""
        self.session.report(step, outcome)

    def cancel(self, step: int, reason: str) -> None:
        """Cancel a step whose outcome will never come (logged with ``reason``, not estimated from)."""
        self.session.cancel(step, reason)

    # -------------------------------------------------------------- lifecycle
    def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        """Mem0's ``add``; every memory it adds, updates or deletes is recorded in the log."""
        if not any(k in kwargs for k in _ENTITY_KEYS) and "filters" not in kwargs:
            kwargs.update({k: v for k, v in self.filters.items() if k in _ENTITY_KEYS})
        res = self.memory.add(messages, **kwargs)
        for item in (res or {}).get("results", []):
            event = str(item.get("event", "ADD")).upper()
            mid = str(item["id"])
            if event == "ADD":
                self.session.add(mid, text=item.get("memory"))
            elif event == "UPDATE":
                self.session.update(mid, text=item.get("memory"))
            elif event == "DELETE":
                self.session.delete(mid)
        return res

    def update(self, memory_id: str, data: str, **kwargs: Any) -> Any:
        """Mem0's ``update``; the log gets a new version of the memory (module docstring)."""
        res = self.memory.update(memory_id, data, **kwargs)
        self.session.update(memory_id, text=data)
        return res

    def delete(self, memory_id: str) -> Any:
        """Mem0's ``delete``; the deletion is recorded in the log.

        A memory Mem0 no longer holds (deleted behind the wrapper's back, or a
        crash between Mem0's delete and the log's record) is only recorded.
        """
        res = self.memory.delete(memory_id) if self.memory.get(memory_id) is not None else None
        self.session.delete(memory_id)
        return res

    def delete_all(self, **kwargs: Any) -> Any:
        """Mem0's ``delete_all``; every memory of the scope it deletes is recorded in the log."""
        flt = {k: v for k, v in kwargs.items() if k in _ENTITY_KEYS} or dict(self.filters)
        ids = self._store_ids(flt, False)
        res = self.memory.delete_all(**kwargs) if kwargs else self.memory.delete_all(**flt)
        for mid in sorted(ids):
            if self.writer.memory_alive(self.session.log_id_of(mid), self.writer.next_step):
                self.session.delete(mid)
        return res

    def apply(
        self,
        decisions: Any,
        dry_run: bool = True,
        *,
        allow_unverified: bool = False,
        echo: Any = print,
    ) -> pd.DataFrame:
        """Delete the memories ``decide`` forgets from Mem0, and record it in the log.

        Refuses decisions made from another log or store (their ``log_id`` and
        store scope); checks each forget against every page of the scope's
        ``get_all``. ``dry_run=True`` (the default) prints what would happen and
        changes nothing. See :func:`cmp_bayes.live.apply.apply_decisions` for the
        statuses of the returned table.
        """
        from cmp_bayes.live.apply import apply_decisions

        scope = self._store_ids(self.filters, False) if self.filters else None
        return apply_decisions(
            self.session,
            decisions,
            self.memory,
            dry_run=dry_run,
            in_store=scope,
            allow_unverified=allow_unverified,
            echo=echo,
        )

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
        """Close the log (steps still waiting for an outcome stay in ``live_state.json``)."""
        self.session.close()

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


