"""Append steps to an exposure log while a memory system runs.

:class:`LogWriter` keeps ``<path>/steps.jsonl`` open for appending and writes
each step as one whole line, flushed at once (``fsync=True`` also forces it to
disk). ``design.json`` and ``memories.jsonl`` are replaced atomically.

Outcomes that arrive later: :meth:`LogWriter.begin` reserves a step number and
:meth:`LogWriter.finish` supplies its outcome. Lines must stay in step order,
so a finished step waits until every earlier step is finished or cancelled.
Waiting steps are kept in ``<path>/live_state.json`` (one atomic rewrite per
:meth:`~LogWriter.begin`, :meth:`~LogWriter.finish`, :meth:`~LogWriter.cancel`,
together with the caller's own state, ``state_hook()``), so they survive a
crash or a :meth:`~LogWriter.close` and can be finished after a restart. A step
whose outcome never comes is cancelled (:meth:`~LogWriter.cancel`, or expired
after ``expire_after_steps`` / ``expire_after_seconds``): it goes to
``<path>/cancelled.jsonl`` with its reason, never to ``steps.jsonl``, so it is
not estimated from (the steps of ``steps.jsonl`` then have a gap, which the
spec allows: steps need only increase).

Crash safety: a process killed mid-write can leave at most the last line of
``steps.jsonl`` or ``cancelled.jsonl`` incomplete. Reopening the log checks it;
a torn line is reported (:class:`TornLineWarning`, naming the file and line),
appended to ``<file>.torn`` and cut off, so every complete line is kept. Then
the pending steps of ``live_state.json`` are reconciled with both files (a kill
can fall between a line and the state rewrite): a pending step already in
either file is dropped from pending; any other stays pending. ``next_step`` is
one past the highest step written, cancelled or pending.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import pandas as pd

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.errors import LogError
from cmp_bayes.log import live_state as ls
from cmp_bayes.log.design import check_design
from cmp_bayes.log.layout import read_design
from cmp_bayes.log.lifecycle import MEMORIES_FILE, MemoryBook
from cmp_bayes.log.step_check import check_step

STEPS_FILE = "steps.jsonl"
TORN_SUFFIX = ls.TORN_SUFFIX
#: the reason :meth:`LogWriter.expire` gives
EXPIRED = "expired"


class LogWriter:
    """Live writer of a JSONL exposure log directory.

    Parameters
    ----------
    path : str or Path
        The log directory (created if missing). An existing log is resumed:
        ``steps.jsonl`` after its last complete line, the pending steps of
        ``live_state.json``, the store of ``memories.jsonl``.
    design : dict, optional
        ``design.json`` content (e.g. :meth:`ExposureScheduler.design`); written
        atomically. Exposure slots are checked against it (the pool of each
        step's round, the cap of ``k`` slots, window slots).
    memories : pandas.DataFrame or sequence of dict, optional
        The store (``memory_id``, ``created_step``, ``deleted_step``, optional
        ``text``, ``meta``); replaces ``memories.jsonl`` atomically.
    fsync : bool
        Call ``os.fsync`` after every line and state rewrite (durable across
        power loss, slower). A killed process loses nothing either way.
    expire_after_steps : int, optional
        Cancel a step still without an outcome (reason ``"expired"``) once this
        many later steps have been begun.
    expire_after_seconds : float, optional
        Likewise once it has waited this many seconds (wall clock, so the wait
        counts across restarts); checked at every :meth:`begin` and
        :meth:`finish` and by :meth:`expire`.
    state_hook : callable, optional
        Returns the caller's own state (JSON-serialisable, e.g. the scheduler's
        ``state()``), saved as ``extra`` in the same atomic write as the
        pending steps. May also be set later (``writer.state_hook = ...``).

    Attributes
    ----------
    next_step : int
        The step number the next :meth:`begin` / :meth:`append` gets.
    saved_extra : object
        The ``extra`` found in ``live_state.json`` when the log was opened
        (None on a fresh log): e.g. the state to restore a scheduler from.
    """

    def __init__(
        self,
        path: str | Path,
        design: Mapping[str, Any] | None = None,
        memories: pd.DataFrame | Sequence[Mapping[str, Any]] | None = None,
        *,
        fsync: bool = False,
        expire_after_steps: int | None = None,
        expire_after_seconds: float | None = None,
        state_hook: Callable[[], Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.file = self.path / STEPS_FILE
        self.state_file = self.path / ls.STATE_FILE
        self.cancelled_file = self.path / ls.CANCELLED_FILE
        self.fsync = fsync
        if expire_after_steps is not None and (int(expire_after_steps) != expire_after_steps or expire_after_steps < 1):
            raise LogError(self.state_file, f"expire_after_steps must be an integer >= 1, got {expire_after_steps!r}")
        if expire_after_seconds is not None and not (expire_after_seconds > 0):
            raise LogError(self.state_file, f"expire_after_seconds must be > 0, got {expire_after_seconds!r}")
        self.expire_after_steps = None if expire_after_steps is None else int(expire_after_steps)
        self.expire_after_seconds = None if expire_after_seconds is None else float(expire_after_seconds)
        self.state_hook = state_hook
        self._clock: Callable[[], float] = time.time
        self.design: dict[str, Any] | None = None
        if design is not None:
            self.write_design(design)
        elif (self.path / "design.json").is_file():
            read_design(self.path / "design.json")  # refuse a broken design now, not at the first step
            # kept as written (not normalised), so a caller can compare it with its scheduler's
            self.design = json.loads((self.path / "design.json").read_text(encoding="utf-8"))
        self._book = MemoryBook(self.path / MEMORIES_FILE)
        if memories is not None:
            self.write_memories(memories)
        self._cfh: BinaryIO | None = None  # cancelled.jsonl, opened at the first cancel
        self._resume()

    def _resume(self) -> None:
        """Recover both append-only files, then reconcile ``live_state.json`` with them."""
        data = ls.recover_jsonl(self.file)
        cdata = ls.recover_jsonl(self.cancelled_file)
        self._cancelled = ls.read_cancelled(cdata, self.cancelled_file)
        self._fh = self.file.open("ab")
        pending, self.saved_extra, self._saved_text = ls.load_state(self.state_file)
        self._extra = self.saved_extra
        last = ls.last_step(data, self.file)
        self._pending = ls.reconcile(pending, data, last, self._cancelled, self.file, self.state_file)
        self._last = last
        highest = [x for x in (last, max(self._pending, default=None), max(self._cancelled, default=None)) if x is not None]
        self.next_step = max(highest) + 1 if highest else 0
        self._flush_ready()  # finished steps whose torn or unwritten predecessor was already done
        if self._saved_text is not None:
            # the caller restores its own state from saved_extra after this, so keep that, not the hook's
            self._save(use_hook=False)

    # ---------------------------------------------------------------- sidecars
    def write_design(self, design: Mapping[str, Any]) -> None:
        """Check ``design`` (the spec's forms) and replace ``design.json`` atomically.

        A live system rewrites it whenever the scheduler lays out a new round,
        before that round's first step is begun.
        """
        check_design(dict(design), str(self.path / "design.json"))
        self.design = dict(design)
        write_text_atomic(self.path / "design.json", json.dumps(self.design, indent=1) + "\n")

    def write_memories(self, memories: pd.DataFrame | Sequence[Mapping[str, Any]]) -> None:
        """Replace ``memories.jsonl`` atomically with the given store records."""
        self._book.replace(memories)

    def add_memory(
        self,
        memory_id: str,
        created_step: int | None = None,
        text: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a memory added to the store; ``memories.jsonl`` is rewritten atomically.

        Parameters
        ----------
        memory_id : str
            A new id. An id already in the store, or one deleted before (ids
            are never reused: the log's lifetimes would overlap), is a LogError.
        created_step : int, optional
            Its first step in the store (default :attr:`next_step`).
        text : str, optional
            The memory's text, shown wherever people read about it.
        meta : mapping, optional
            Free-form, JSON-serialisable.

        Notes
        -----
        Once a log has ``memories.jsonl`` every memory its steps name must be
        in it; start it with ``memories=`` (the whole store) before adding.
        """
        self._book.add(memory_id, self.next_step if created_step is None else created_step, text, meta)

    def delete_memory(self, memory_id: str, step: int | None = None) -> None:
        """Record a memory's deletion: ``deleted_step`` = ``step`` (default :attr:`next_step`).

        The memory is in the store up to ``step - 1``. Unknown ids, second
        deletions and a step before its creation are LogErrors naming
        ``memories.jsonl``.
        """
        self._book.delete(memory_id, self.next_step if step is None else step)

    def memory_known(self, memory_id: str) -> bool:
        """Whether ``memories.jsonl`` has ``memory_id`` (in the store now, or deleted)."""
        return self._book.known(memory_id)

    @property
    def has_memories(self) -> bool:
        """Whether the log tracks its store in ``memories.jsonl`` (without it every memory always is)."""
        return self._book.tracked

    def memory_alive(self, memory_id: str, step: int) -> bool:
        """Whether the memory is in the store at ``step`` (always, when no store is tracked)."""
        return self._book.in_store(str(memory_id), int(step))

    def memory_records(self) -> list[dict[str, Any]]:
        """Every ``memories.jsonl`` record (copies), in the file's order."""
        return [dict(r) for r in self._book.records.values()]

    def alive_memories(self, step: int) -> list[str]:
        """Ids of the memories in the store at ``step``, in the file's order (empty when none is tracked)."""
        return [m for m in self._book.records if self._book.in_store(m, int(step))]

    def save_state(self) -> None:
        """Rewrite ``live_state.json`` now (after an owner's state changed between steps)."""
        self._save()

    def memory_text(self, memory_id: str) -> str | None:
        """The memory's ``text`` in ``memories.jsonl`` (None without one; LogError if unknown)."""
        return self._book.text(memory_id)

    # ------------------------------------------------------------------- steps
    def append(
        self,
        query_id: str,
        outcome: float,
        context: Sequence[Mapping[str, Any]],
        group: str | None = None,
        ranking: Sequence[str] | None = None,
    ) -> int:
        """Log a finished step; returns its step number.

        The line is on disk when this returns unless earlier steps opened with
        :meth:`begin` are still waiting for their outcome.
        """
        y = _outcome(outcome, self.file)  # before reserving a step, so a bad outcome leaves none pending
        step = self._begin(query_id, context, group, ranking)
        self._pending[step]["line"]["outcome"] = y
        self._flush_ready()
        self._save()
        return step

    def begin(
        self,
        query_id: str,
        context: Sequence[Mapping[str, Any]],
        group: str | None = None,
        ranking: Sequence[str] | None = None,
    ) -> int:
        """Reserve the next step for a query whose outcome comes later; returns the step.

        The step is in ``live_state.json`` when this returns (with
        ``state_hook()``'s state); steps it makes expire are cancelled first.
        """
        step = self._begin(query_id, context, group, ranking)
        self._flush_ready()
        self._save()
        return step

    def finish(self, step: int, outcome: float) -> None:
        """Give the outcome of a step opened with :meth:`begin` (also after a restart).

        Writes every step that is then ready, in step order. An outcome that
        arrives after its step's deadline but before any expiry was applied is
        kept; other steps past theirs are expired afterwards.
        """
        step = int(step)
        rec = self._waiting(step)
        if rec["line"]["outcome"] is not None:
            raise LogError(self.file, f"step {step} already has an outcome", field="outcome")
        rec["line"]["outcome"] = _outcome(outcome, self.file)
        self._expire_due(self.next_step, exclude=step)
        self._flush_ready()
        self._save()

    def cancel(self, step: int, reason: str) -> None:
        """Cancel a pending step: it goes to ``cancelled.jsonl`` with ``reason``, never to ``steps.jsonl``.

        The steps after it that have their outcomes are written at once. A
        cancelled step is not estimated from; its exposures are lost to the
        design, so cancel only steps whose outcome will not come.
        """
        step = int(step)
        self._waiting(step)
        if not isinstance(reason, str) or not reason:
            raise LogError(self.cancelled_file, f"reason must be a non-empty string, got {reason!r}", field="cancelled")
        self._cancel(step, reason)
        self._flush_ready()
        self._save()

    def expire(self) -> list[int]:
        """Cancel (reason ``"expired"``) every pending step past its deadline now; returns them."""
        out = self._expire_due(self.next_step)
        if out:
            self._flush_ready()
            self._save()
        return out

    def write_step(self, record: Mapping[str, Any]) -> int:
        """Log a whole spec step object (``step`` optional: the next one is used)."""
        rec = dict(record)
        step = rec.get("step", self.next_step)
        if step != self.next_step:
            raise LogError(
                self.file, f"step must be {self.next_step} (the next step), got {step!r}", field="step"
            )
        rec["step"] = self.next_step
        if "outcome" not in rec:
            raise LogError(self.file, "missing required field", field="outcome")
        rec["outcome"] = _outcome(rec["outcome"], self.file)
        check_step(rec, self.design, self._book, self.file)
        self._expire_due(self.next_step + 1)
        self._add_pending(rec)
        self._flush_ready()
        self._save()
        return rec["step"]

    @property
    def pending(self) -> list[int]:
        """Steps begun and not yet written or cancelled (with or without their outcome), in order."""
        return sorted(self._pending)

    @property
    def waiting(self) -> list[int]:
        """Steps begun whose outcome has not arrived (a subset of :attr:`pending`), in order."""
        return sorted(s for s, rec in self._pending.items() if rec["line"]["outcome"] is None)

    @property
    def cancelled(self) -> dict[int, str]:
        """Every cancelled step of the log (``cancelled.jsonl``) with its reason."""
        return dict(self._cancelled)

    def close(self) -> None:
        """Save the state and close the files; pending steps stay in ``live_state.json``."""
        if self._fh.closed:
            return
        self._save()
        self._fh.close()
        if self._cfh is not None:
            self._cfh.close()
        if self._pending:
            waiting = [s for s, r in sorted(self._pending.items()) if r["line"]["outcome"] is None]
            warnings.warn(
                f"{self.state_file}: steps {self.pending} are not written yet (waiting for the outcome of "
                f"{waiting}); they wait in {ls.STATE_FILE}: reopen LogWriter({str(self.path)!r}) and call "
                "finish(step, outcome) or cancel(step, reason)",
                UserWarning,
                stacklevel=2,
            )

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --------------------------------------------------------------- internals
    def _begin(
        self,
        query_id: str,
        context: Sequence[Mapping[str, Any]],
        group: str | None,
        ranking: Sequence[str] | None,
    ) -> int:
        rec: dict[str, Any] = {"step": self.next_step, "query_id": str(query_id), "outcome": None}
        if group is not None:
            rec["group"] = str(group)
        rec["context"] = [dict(s) for s in context]
        if ranking is not None:
            rec["ranking"] = [str(m) for m in ranking]
        check_step(rec, self.design, self._book, self.file)
        self._expire_due(self.next_step + 1)
        return self._add_pending(rec)

    def _add_pending(self, rec: dict[str, Any]) -> int:
        step = int(rec["step"])
        self._pending[step] = {"line": rec, "begun_at": self._clock()}
        self.next_step = step + 1
        return step

    def _waiting(self, step: int) -> dict[str, Any]:
        rec = self._pending.get(step)
        if rec is not None:
            return rec
        if step in self._cancelled:
            why = f"was cancelled ({self._cancelled[step]!r}) and is in {ls.CANCELLED_FILE}"
        elif step >= self.next_step or self._last is None or step > self._last:
            why = "was never begun (a begin cut short by a crash leaves no step)"
        else:
            why = f"is already in {STEPS_FILE}"
        raise LogError(self.file, f"step {step} is not waiting for an outcome: it {why}", field="step")

    def _expire_due(self, begun: int, exclude: int | None = None) -> list[int]:
        """Cancel the steps without outcome past a deadline, ``begun`` steps having been begun."""
        if self.expire_after_steps is None and self.expire_after_seconds is None:
            return []
        due = ls.due(self._pending, begun, self._clock(), self.expire_after_steps, self.expire_after_seconds)
        due = [s for s in due if s != exclude]
        for s in due:
            self._cancel(s, EXPIRED)
        return due

    def _cancel(self, step: int, reason: str) -> None:
        rec = self._pending[step]
        line = ls.step_line(rec["line"])
        line["cancelled"] = reason
        if self._cfh is None:
            self._cfh = self.cancelled_file.open("ab")
        # the line first: a kill before the state rewrite leaves a step the reopen drops from pending
        ls.append_line(self._cfh, line, self.fsync)
        del self._pending[step]
        self._cancelled[step] = reason

    def _flush_ready(self) -> None:
        # every step below the lowest pending one is written or cancelled, so it may go next
        while self._pending:
            step = min(self._pending)
            line = self._pending[step]["line"]
            if line["outcome"] is None:
                break
            ls.append_line(self._fh, ls.step_line(line), self.fsync)
            del self._pending[step]
            self._last = step

    def _save(self, use_hook: bool = True) -> None:
        """Rewrite ``live_state.json`` (pending steps + ``extra``) when its content changed."""
        if use_hook and self.state_hook is not None:
            self._extra = self.state_hook()
        text = ls.state_text(self._pending, self._extra)
        if text != self._saved_text:
            ls.write_state(self.state_file, text, self.fsync)
            self._saved_text = text


def _outcome(y: Any, file: Path) -> float:
    if isinstance(y, bool) or not isinstance(y, int | float) or not math.isfinite(y) or not (0 <= y <= 1):
        raise LogError(file, f"outcome must be a finite number in [0, 1], got {y!r}", field="outcome")
    return float(y)
