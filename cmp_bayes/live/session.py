"""CMP inside a running memory system: one object that survives a crash.

A :class:`LiveSession` owns the exposure scheduler and the log writer of one
log directory and keeps them consistent on disk:

- the scheduler's place (round, deck, deferrals, random state) and the steps
  waiting for an outcome are saved together in ``live_state.json``, in one
  atomic write per step, so reopening the directory after a ``SIGKILL``
  continues exactly where the log stopped (same deck, same propensities,
  every outcome reported before the kill kept);
- a new round of an open-ended design is written to ``design.json``
  (atomically) before its first step is logged, as the spec requires;
- the store's lifecycle goes to ``memories.jsonl``: :meth:`add`,
  :meth:`update` and :meth:`delete`, and memories the retriever returns that
  the log does not know yet (recorded, not fatal);
- a directory with steps but no saved state is refused: a fresh scheduler
  would replay its deck from the start and the logged propensities would no
  longer describe what was done.

Updated memories get a new log id (``<id>~v2``, ``<id>~v3``, ...): an edited
memory is a different treatment, and pooling the exposures of two texts under
one id would estimate neither. The old version is deleted in the log at the
update's step; the new one joins the pool at the next round. The memory
system keeps its own id; :meth:`log_id` and :meth:`store_id` translate.

How long a round should be: a round of ``R`` steps gives each of ``P`` pool
memories ``R k / P`` exposures, and a memory added during a round waits up to
``R`` steps for its first. The default ``R = ceil(2 P / k)`` (two exposures
per memory per round, at least 10 steps) keeps both short; a longer round
changes nothing in the estimates, only how fast new memories are reached.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from cmp_bayes.design.scheduler import Assignment, ExposureScheduler, Positions
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.append import LogWriter
from cmp_bayes.log.design import is_window

#: the state file (pending steps and the scheduler's place)
STATE_FILE = "live_state.json"
#: separator between a memory system's id and the log's version suffix
VERSION_SEP = "~v"

RankingPolicy = Literal["first", "always", "never"]


@dataclass(frozen=True)
class LiveStep:
    """One opened step: its number, query and context (the spec's slot objects, in position order)."""

    step: int
    query_id: str
    context: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exposed(self) -> list[str]:
        """Log ids of the memories in exposure slots."""
        return [s["memory_id"] for s in self.context if s["source"] == "exposure"]


class LiveSession:
    """An exposure design running in a live system, restartable after a crash.

    Parameters
    ----------
    path : str or Path
        The log directory. When it holds a ``live_state.json`` the session
        resumes from it (the design arguments, if given, must agree with it);
        a directory with steps but no state is refused.
    slots, exposure_slots : int
        ``B`` and ``k`` (required for a new log).
    pool : sequence of str, optional
        The exposure pool (default: every memory in ``memories``).
    memories : pandas.DataFrame or sequence of dict, optional
        The store at the start (``memory_id``, optional ``text``, ``meta``,
        ``created_step``, ``deleted_step``), written to ``memories.jsonl``.
    steps : int, optional
        A fixed design of ``T`` steps. Default: open-ended, in rounds.
    round_steps : int, optional
        Round length ``R`` of an open-ended design (default: module docstring).
    assignment : {"balanced", "bernoulli", "window"}
    window, pool_slots : int, optional
        Window designs: ``W`` and ``j`` (see the spec, "Targeted exposure").
    positions : {"end", "random"}
        Where exposure slots go in the context: last, or at random positions
        (readers weigh positions unequally; an agent that reads only its top
        results is never affected by exposures placed last).
    seed : int
        Seed of the design (round ``r`` uses ``seed + r``).
    store : mapping, optional
        The memory system's scope (e.g. Mem0 filters ``{"user_id": "alice"}``),
        recorded in ``design.json`` so that decisions are applied to the store
        they were made for.
    log_ranking : {"first", "always", "never"}
        When to log the retriever's ranking: the first time each query is asked,
        at every step, or never. Window designs log it at every step (the spec
        requires it).
    expire_after_steps, expire_after_seconds : optional
        A step still waiting for its outcome after this many later steps (or
        seconds) is cancelled with reason ``"expired"``.
    fsync : bool
        Force every line to disk (survives power loss, slower).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        slots: int | None = None,
        exposure_slots: int | None = None,
        pool: Sequence[str] | None = None,
        memories: pd.DataFrame | Sequence[Mapping[str, Any]] | None = None,
        steps: int | None = None,
        round_steps: int | None = None,
        assignment: Assignment = "balanced",
        window: int | None = None,
        pool_slots: int = 0,
        positions: Positions = "end",
        seed: int = 0,
        store: Mapping[str, Any] | None = None,
        log_ranking: RankingPolicy = "first",
        expire_after_steps: int | None = None,
        expire_after_seconds: float | None = None,
        fsync: bool = False,
    ) -> None:
        if log_ranking not in ("first", "always", "never"):
            raise ConfigError(f"log_ranking must be 'first', 'always' or 'never', got {log_ranking!r}")
        self.path = Path(path)
        self.log_ranking: RankingPolicy = log_ranking
        self._ranked: set[str] = set()
        writer_opts: dict[str, Any] = {
            "fsync": fsync,
            "expire_after_steps": expire_after_steps,
            "expire_after_seconds": expire_after_seconds,
        }
        if (self.path / STATE_FILE).is_file():
            self.writer = LogWriter(self.path, state_hook=self._state, **writer_opts)
            saved = self.writer.saved_extra or {}
            if "scheduler" not in saved:
                raise ConfigError(
                    f"{self.path / STATE_FILE}: no scheduler state in it (written by a LogWriter "
                    "without a LiveSession); continue in a new log directory"
                )
            self.scheduler = ExposureScheduler.from_state(saved["scheduler"])
            self._ranked = set(saved.get("ranked", []))
            self._check_resume(slots, exposure_slots, steps, round_steps, assignment, window, pool_slots, seed, store)
            self.log_id = str((self.writer.design or {}).get("log_id", ""))
            self.store = dict((self.writer.design or {}).get("store") or {}) or None
            self._reconcile()
        else:
            if _has_steps(self.path):
                raise ConfigError(
                    f"{self.path}: the log has steps but no {STATE_FILE}, so the design's place cannot "
                    "be restored (a fresh scheduler would replay its deck and the logged propensities "
                    "would be wrong); continue in a new log directory"
                )
            if slots is None or exposure_slots is None:
                raise ConfigError("a new live log needs slots (B) and exposure_slots (k)")
            table = _memory_table(memories)
            ids = [str(m) for m in (pool if pool is not None else table["memory_id"].tolist())]
            if steps is None and round_steps is None:
                round_steps = default_round_steps(len(ids), exposure_slots)
            self.scheduler = ExposureScheduler(
                slots,
                exposure_slots,
                ids,
                steps,
                assignment,
                seed,
                round_steps=round_steps,
                window=window,
                pool_slots=pool_slots,
                positions=positions,
            )
            self.log_id = uuid.uuid4().hex
            self.store = dict(store) if store else None
            self.writer = LogWriter(
                self.path,
                design=self._design(),
                memories=table if len(table) or memories is not None else None,
                state_hook=self._state,
                **writer_opts,
            )
            self.writer.save_state()
        self._design_version = self.scheduler.design_version
        self._current = _current_versions(self.writer)

    @classmethod
    def from_parts(
        cls, scheduler: ExposureScheduler, writer: LogWriter, *, log_ranking: RankingPolicy = "first"
    ) -> LiveSession:
        """A session over a scheduler and a writer built by hand (the writer must be at step 0
        or carry this scheduler's saved state)."""
        design = dict(scheduler.design())
        if writer.design is None:
            writer.write_design(design)
        elif {k: v for k, v in writer.design.items() if k not in ("log_id", "store")} != design:
            raise ConfigError(
                f"{writer.path}: the log's design.json is not this scheduler's design; "
                "open a new log directory for a new design"
            )
        self = cls.__new__(cls)
        self.path = Path(writer.path)
        self.log_ranking = log_ranking
        self._ranked = set()
        self.scheduler = scheduler
        self.writer = writer
        self.log_id = str(writer.design.get("log_id", "")) if writer.design else ""
        self.store = dict((writer.design or {}).get("store") or {}) or None
        writer.state_hook = self._state
        self._design_version = scheduler.design_version
        self._current = _current_versions(writer)
        return self

    # ---------------------------------------------------------------- steps
    def step(
        self,
        query_id: str,
        ranking: Sequence[str],
        *,
        group: str | None = None,
        store: Collection[str] | None = None,
        logged_ranking: Sequence[str] | None = None,
    ) -> LiveStep:
        """Open the next step: the context for ``query_id`` given the retriever's ranking.

        Parameters
        ----------
        query_id : str
        ranking : sequence of str
            The retriever's ranking for this query, best first, in the memory
            system's ids (translated to the log's ids); at least ``B - k``
            memories, and ``B - k + W`` in a window design.
        group : str, optional
            The query's kind.
        store : collection of str, optional
            The memory system's ids of every memory in scope now; pool memories
            outside it are not exposed. Memories in it (or in ``ranking``) that
            the log does not know are recorded as created at this step.
        logged_ranking : sequence of str, optional
            The ranking to log when it differs from the one that fills the
            slots (a memory system whose own answer is shorter than its full
            ranking); default ``ranking``.

        Returns
        -------
        LiveStep
            Report its outcome with :meth:`report` (or :meth:`cancel` it).
        """
        t = self.writer.next_step
        self.writer.expire()
        ranked = [self.log_id_of(m) for m in ranking]
        alive = None
        if store is not None:
            alive = {self.log_id_of(m) for m in store}
            for m in sorted(alive):
                self._discover(m, t)
        shown = ranked if logged_ranking is None else [self.log_id_of(m) for m in logged_ranking]
        for m in (*ranked, *shown):
            self._discover(m, t)
        if self.writer.has_memories:
            ranked = [m for m in ranked if self.writer.memory_alive(m, t)]
            shown = [m for m in shown if self.writer.memory_alive(m, t)]
        ctx = self.scheduler.context(t, ranked, alive)
        if self.scheduler.design_version != self._design_version:
            # the spec: a round is in design.json before its first step is written
            self.writer.write_design(self._design())
            self._design_version = self.scheduler.design_version
        qid = str(query_id)
        log_rank = self.wants_ranking(qid)
        if log_rank:
            self._ranked.add(qid)
        opened = self.writer.begin(qid, ctx, group=group, ranking=shown if log_rank else None)
        if opened != t:  # pragma: no cover - the writer numbers steps itself
            raise RuntimeError(f"log step {opened} != scheduled step {t}")
        return LiveStep(t, qid, ctx)

    def wants_ranking(self, query_id: str) -> bool:
        """Whether the next step of ``query_id`` logs its ranking (``log_ranking``; always in a window design)."""
        return is_window(self.writer.design) or self.log_ranking == "always" or (
            self.log_ranking == "first" and str(query_id) not in self._ranked
        )

    def report(self, step: int, outcome: float) -> None:
        """The outcome (in ``[0, 1]``) of an opened step, also after a restart."""
        self.writer.finish(step, outcome)

    def cancel(self, step: int, reason: str) -> None:
        """Cancel an opened step: written to ``cancelled.jsonl`` with ``reason``, never estimated from."""
        self.writer.cancel(step, reason)

    @property
    def pending(self) -> list[int]:
        """Steps still waiting for their outcome (also those begun before a restart)."""
        return self.writer.waiting

    @property
    def next_step(self) -> int:
        """The number the next :meth:`step` gets."""
        return self.writer.next_step

    # ------------------------------------------------------------ lifecycle
    def add(self, memory_id: str, text: str | None = None, meta: Mapping[str, Any] | None = None) -> str:
        """Record a memory created now (joins the pool at the next round); returns its log id."""
        mid = str(memory_id)
        t = self.writer.next_step
        self.writer.add_memory(mid, created_step=t, text=text, meta=dict(meta) if meta else None)
        self.scheduler.add_memory(mid, t)
        self._current[mid] = mid
        self.writer.save_state()
        return mid

    def delete(self, memory_id: str) -> str:
        """Record that a memory (the memory system's id) is deleted now; returns its log id."""
        lid = self.log_id_of(memory_id)
        t = self.writer.next_step
        self.writer.delete_memory(lid, step=t)
        self.scheduler.remove_memory(lid, t)
        self._current.pop(self.store_id(lid), None)
        self.writer.save_state()
        return lid

    def update(self, memory_id: str, text: str | None = None) -> str:
        """Record an edit: the current version is deleted now and a new log id created; returns it."""
        base = self.store_id(self.log_id_of(memory_id))
        old = self.log_id_of(base)
        version = _version(old) + 1
        new = f"{base}{VERSION_SEP}{version}"
        t = self.writer.next_step
        self.writer.delete_memory(old, step=t)
        self.scheduler.remove_memory(old, t)
        self.writer.add_memory(new, created_step=t, text=text, meta={"store_id": base, "version": version})
        self.scheduler.add_memory(new, t)
        self._current[base] = new
        self.writer.save_state()
        return new

    def log_id_of(self, store_id: str) -> str:
        """The log id of the current version of a memory system's memory."""
        s = str(store_id)
        return self._current.get(s, s)

    @staticmethod
    def store_id(log_id: str) -> str:
        """The memory system's id of a log id (the version suffix removed)."""
        s = str(log_id)
        head, sep, tail = s.rpartition(VERSION_SEP)
        return head if sep and tail.isdigit() else s

    def is_current(self, log_id: str) -> bool:
        """Whether ``log_id`` is its memory's current version."""
        return self._current.get(self.store_id(log_id), self.store_id(log_id)) == str(log_id)

    # --------------------------------------------------------------- closing
    def close(self) -> None:
        """Close the log (steps still waiting stay in ``live_state.json``)."""
        self.writer.close()

    def __enter__(self) -> LiveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- internals
    def _design(self) -> dict[str, Any]:
        design = dict(self.scheduler.design())
        design["log_id"] = self.log_id
        if self.store:
            design["store"] = self.store
        return design

    def _state(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state(), "ranked": sorted(self._ranked)}

    def _discover(self, log_id: str, step: int) -> None:
        if self.writer.has_memories and not self.writer.memory_known(log_id):
            self.writer.add_memory(log_id, created_step=step, meta={"discovered": True})
            self.scheduler.add_memory(log_id, step)

    def _reconcile(self) -> None:
        """After a crash between a lifecycle change and the next state save: tell the scheduler."""
        if not self.writer.has_memories:
            return
        t = self.writer.next_step
        known = self.scheduler.members()
        for rec in self.writer.memory_records():
            mid = rec["memory_id"]
            alive = rec.get("deleted_step") is None
            if alive and mid not in known:
                self.scheduler.add_memory(mid, t)
            elif not alive and mid in known:
                self.scheduler.remove_memory(mid, t)

    def _check_resume(
        self,
        slots: int | None,
        exposure_slots: int | None,
        steps: int | None,
        round_steps: int | None,
        assignment: str,
        window: int | None,
        pool_slots: int,
        seed: int,
        store: Mapping[str, Any] | None,
    ) -> None:
        s = self.scheduler
        given = {
            "slots": (slots, s.slots),
            "exposure_slots": (exposure_slots, s.exposure_slots),
            "steps": (steps, s.steps),
            "round_steps": (round_steps, s.round_steps),
            "window": (window, s.window),
        }
        for name, (want, have) in given.items():
            if want is not None and want != have:
                raise ConfigError(f"{self.path / STATE_FILE}: the log's design has {name}={have}, not {want}")
        saved_store = (self.writer.design or {}).get("store") or None
        if store and dict(store) != saved_store:
            raise ConfigError(
                f"{self.path / 'design.json'}: this log is for the store {saved_store}, not {dict(store)}"
            )


def default_round_steps(pool_size: int, exposure_slots: int) -> int:
    """``ceil(2 P / k)``, at least 10: two exposures per pool memory per round (module docstring)."""
    if exposure_slots <= 0:
        return 10
    return max(10, math.ceil(2 * pool_size / exposure_slots))


def _has_steps(path: Path) -> bool:
    for name in ("steps.jsonl", "cancelled.jsonl"):
        f = path / name
        if f.is_file() and f.stat().st_size > 0:
            return True
    return False


def _memory_table(memories: pd.DataFrame | Sequence[Mapping[str, Any]] | None) -> pd.DataFrame:
    if memories is None:
        return pd.DataFrame({"memory_id": pd.Series([], dtype="string")})
    table = memories.copy() if isinstance(memories, pd.DataFrame) else pd.DataFrame([dict(m) for m in memories])
    if "memory_id" not in table.columns:
        raise ConfigError("memories need a 'memory_id' column")
    return table


def _version(log_id: str) -> int:
    head, sep, tail = str(log_id).rpartition(VERSION_SEP)
    return int(tail) if sep and tail.isdigit() else 1


def _current_versions(writer: LogWriter) -> dict[str, str]:
    """The memory system's id -> the log id of its current version, from ``memories.jsonl``."""
    out: dict[str, str] = {}
    if not writer.has_memories:
        return out
    for rec in writer.memory_records():
        if rec.get("deleted_step") is None:
            mid = str(rec["memory_id"])
            out[LiveSession.store_id(mid)] = mid
    return out
