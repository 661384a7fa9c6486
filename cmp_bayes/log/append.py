"""Append steps to an exposure log while a memory system runs.

:class:`LogWriter` keeps ``<path>/steps.jsonl`` open for appending and writes
each step as one whole line, flushed at once (``fsync=True`` also forces it to
disk). ``design.json`` and ``memories.jsonl`` are replaced atomically.

Crash safety: a process killed mid-write can leave at most the last line
incomplete. Reopening the log checks that line; if it has no trailing newline
or does not parse it is reported (:class:`TornLineWarning`, naming the file and
line), appended to ``steps.jsonl.torn`` and cut off, so every complete step is
kept and the next step number is the last complete step + 1.

Outcomes that arrive later: :meth:`LogWriter.begin` reserves a step number and
:meth:`LogWriter.finish` supplies its outcome. Lines must stay in step order,
so finished steps wait in memory until every earlier step is finished.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pandas as pd

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.constants import EXPOSURE, SOURCES
from cmp_bayes.errors import LogError, TornLineWarning

STEPS_FILE = "steps.jsonl"
TORN_SUFFIX = ".torn"


class LogWriter:
    """Live writer of a JSONL exposure log directory.

    Parameters
    ----------
    path : str or Path
        The log directory (created if missing). An existing ``steps.jsonl`` is
        resumed after its last complete line.
    design : dict, optional
        ``design.json`` content (e.g. :meth:`ExposureScheduler.design`); written
        atomically. Exposure slots are checked against its pool and cap.
    memories : pandas.DataFrame or sequence of dict, optional
        The store (``memory_id``, ``created_step``, ``deleted_step``, optional
        ``text``, ``meta``); written atomically to ``memories.jsonl``.
    fsync : bool
        Call ``os.fsync`` after every line (durable across power loss, slower).

    Attributes
    ----------
    next_step : int
        The step number the next :meth:`begin` / :meth:`append` gets.
    """

    def __init__(
        self,
        path: str | Path,
        design: Mapping[str, Any] | None = None,
        memories: pd.DataFrame | Sequence[Mapping[str, Any]] | None = None,
        *,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.file = self.path / STEPS_FILE
        self.fsync = fsync
        self.design: dict[str, Any] | None = None
        if design is not None:
            self.write_design(design)
        elif (self.path / "design.json").is_file():
            self.design = json.loads((self.path / "design.json").read_text(encoding="utf-8"))
        if memories is not None:
            self.write_memories(memories)
        last = _recover(self.file)
        self.next_step = 0 if last is None else last + 1
        self._written = self.next_step  # every step below this is on disk
        self._pending: dict[int, dict[str, Any]] = {}
        self._fh = self.file.open("ab")

    # ---------------------------------------------------------------- sidecars
    def write_design(self, design: Mapping[str, Any]) -> None:
        """Replace ``design.json`` atomically."""
        self.design = dict(design)
        write_text_atomic(self.path / "design.json", json.dumps(self.design, indent=1) + "\n")

    def write_memories(self, memories: pd.DataFrame | Sequence[Mapping[str, Any]]) -> None:
        """Replace ``memories.jsonl`` atomically with the given store records."""
        if isinstance(memories, pd.DataFrame):
            records = memories.to_dict(orient="records")
        else:
            records = [dict(r) for r in memories]
        lines = []
        for r in records:
            rec: dict[str, Any] = {"memory_id": str(r["memory_id"]), "created_step": int(r.get("created_step", 0))}
            d = r.get("deleted_step")
            rec["deleted_step"] = None if d is None or pd.isna(d) else int(d)
            for key in ("text", "meta"):
                v = r.get(key)
                if v is not None and not (isinstance(v, float) and math.isnan(v)) and v is not pd.NA:
                    rec[key] = v
            lines.append(json.dumps(rec, ensure_ascii=False))
        write_text_atomic(self.path / "memories.jsonl", "".join(line + "\n" for line in lines))

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
        _outcome(outcome, self.file)  # before reserving a step, so a bad outcome leaves none pending
        step = self.begin(query_id, context, group=group, ranking=ranking)
        self.finish(step, outcome)
        return step

    def begin(
        self,
        query_id: str,
        context: Sequence[Mapping[str, Any]],
        group: str | None = None,
        ranking: Sequence[str] | None = None,
    ) -> int:
        """Reserve the next step for a query whose outcome comes later; returns the step."""
        rec: dict[str, Any] = {"step": self.next_step, "query_id": str(query_id), "outcome": None}
        if group is not None:
            rec["group"] = str(group)
        rec["context"] = [dict(s) for s in context]
        if ranking is not None:
            rec["ranking"] = [str(m) for m in ranking]
        self._check(rec, check_outcome=False)
        self._pending[self.next_step] = rec
        self.next_step += 1
        return rec["step"]

    def finish(self, step: int, outcome: float) -> None:
        """Give the outcome of a step opened with :meth:`begin`; writes every ready step."""
        rec = self._pending.get(int(step))
        if rec is None:
            raise LogError(self.file, f"step {step} is not waiting for an outcome", field="step")
        if rec["outcome"] is not None:
            raise LogError(self.file, f"step {step} already has an outcome", field="outcome")
        rec["outcome"] = _outcome(outcome, self.file)
        self._flush_ready()

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
        self._check(rec, check_outcome=True)
        self._pending[self.next_step] = rec
        self.next_step += 1
        self._flush_ready()
        return rec["step"]

    @property
    def pending(self) -> list[int]:
        """Steps reserved with :meth:`begin` and not yet written."""
        return sorted(self._pending)

    def close(self) -> None:
        """Close the file; warns about steps still waiting for an outcome (they are not written)."""
        if self._pending:
            warnings.warn(
                f"{self.file}: steps {sorted(self._pending)} never got an outcome and were not written",
                UserWarning,
                stacklevel=2,
            )
        if not self._fh.closed:
            self._fh.close()

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
    def _flush_ready(self) -> None:
        while self._written in self._pending and self._pending[self._written]["outcome"] is not None:
            rec = self._pending.pop(self._written)
            line = json.dumps(_ordered(rec), ensure_ascii=False, separators=(", ", ": ")) + "\n"
            # one write call per line: a kill can tear only the line being written
            self._fh.write(line.encode("utf-8"))
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
            self._written += 1

    def _check(self, rec: dict[str, Any], check_outcome: bool) -> None:
        f = self.file
        ctx = rec.get("context")
        if not isinstance(ctx, list):
            raise LogError(f, "context must be an array of slot objects", field="context")
        seen: set[str] = set()
        n_exp = 0
        pool = (self.design or {}).get("pool", {})
        for i, s in enumerate(ctx):
            where = f"context[{i}]"
            if "memory_id" not in s:
                raise LogError(f, "missing required field", field=f"{where}.memory_id")
            m = s["memory_id"] = str(s["memory_id"])
            if m in seen:
                raise LogError(f, f"memory {m!r} twice in one context", field=f"{where}.memory_id")
            seen.add(m)
            src = s.get("source")
            if src not in SOURCES:
                raise LogError(f, f"source must be one of {SOURCES}, got {src!r}", field=f"{where}.source")
            if src == EXPOSURE:
                n_exp += 1
                p = s.get("propensity")
                if not isinstance(p, int | float) or not (0 < p <= 1):
                    raise LogError(f, f"exposure slot needs a propensity in (0, 1], got {p!r}", field=f"{where}.propensity")
                if self.design is None:
                    raise LogError(f, "exposure slot without a design (pass design=...)", field=f"{where}.source")
                if m not in pool or not math.isclose(float(pool[m]), float(p), rel_tol=1e-9):
                    raise LogError(f, f"propensity {p!r} of {m!r} disagrees with the design's pool", field=f"{where}.propensity")
        if self.design is not None and n_exp > int(self.design.get("exposure_slots", 0)):
            raise LogError(f, f"{n_exp} exposure slots, design allows {self.design.get('exposure_slots')}", field="context")
        if check_outcome:
            _outcome(rec["outcome"], f)


def _ordered(rec: dict[str, Any]) -> dict[str, Any]:
    keys = ["step", "query_id", "outcome", "group", "context", "ranking"]
    out = {k: rec[k] for k in keys if k in rec}
    out.update({k: v for k, v in rec.items() if k not in out})
    y = out["outcome"]
    out["outcome"] = int(y) if float(y).is_integer() else float(y)
    return out


def _outcome(y: Any, file: Path) -> float:
    if isinstance(y, bool) or not isinstance(y, int | float) or not math.isfinite(y) or not (0 <= y <= 1):
        raise LogError(file, f"outcome must be a finite number in [0, 1], got {y!r}", field="outcome")
    return float(y)


def _recover(file: Path) -> int | None:
    """Cut a torn last line off ``file`` (set aside, warned); return the last complete step.

    Returns ``None`` for a missing or empty file.
    """
    if not file.is_file():
        return None
    data = file.read_bytes()
    if not data:
        return None
    end = len(data)
    torn: bytes | None = None
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        torn, end = data[cut:], cut
    else:
        cut = data.rfind(b"\n", 0, end - 1) + 1
        try:
            json.loads(data[cut : end - 1].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            torn, end = data[cut : end - 1], cut
    if torn is not None:
        line_no = data.count(b"\n", 0, end) + 1
        with (file.parent / (file.name + TORN_SUFFIX)).open("ab") as fh:
            fh.write(torn + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.truncate(file, end)
        warnings.warn(
            f"{file}, line {line_no}: incomplete last line (crash while writing?) set aside "
            f"in {file.name + TORN_SUFFIX}; {line_no - 1} complete lines kept",
            TornLineWarning,
            stacklevel=3,
        )
    if end == 0:
        return None
    cut = data.rfind(b"\n", 0, end - 1) + 1
    try:
        last = json.loads(data[cut : end - 1].decode("utf-8"))
        return int(last["step"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise LogError(file, f"last complete line is not a step object ({exc})", line=data.count(b"\n", 0, end)) from None
