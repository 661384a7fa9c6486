"""The live writer's files beside a log: ``live_state.json``, ``cancelled.jsonl``, torn-line recovery.

Neither file is part of the log (:data:`cmp_bayes.log.layout.LOG_FILES`): the
readers and the checksum ignore them. ``live_state.json`` holds the steps a
:class:`~cmp_bayes.log.append.LogWriter` has begun and not yet written, with
the caller's own state (``extra``, e.g. the scheduler's place in its deck), in
one atomic rewrite::

    {"version": 1,
     "pending": {"12": {"line": {"step": 12, "query_id": "q", "outcome": null, "context": [...]},
                        "begun_at": 1718000000.25}},
     "extra": {...}}

``line`` is the step object as it will be written to ``steps.jsonl``
(``outcome`` null until it arrives); ``begun_at`` (Unix seconds, wall clock so
that it survives a restart) is the writer's own bookkeeping and never reaches
``steps.jsonl``. ``cancelled.jsonl`` holds one step object per cancelled or
expired step with ``"cancelled": reason``.

Both append-only files (``steps.jsonl``, ``cancelled.jsonl``) are written one
whole line per ``write`` call, so a kill can tear only their last line; it is
set aside by :func:`recover_jsonl` when the log is reopened.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, BinaryIO

from cmp_bayes.atomic import atomic_path
from cmp_bayes.errors import LogError, TornLineWarning

STATE_FILE = "live_state.json"
CANCELLED_FILE = "cancelled.jsonl"
TORN_SUFFIX = ".torn"
STATE_VERSION = 1


def recover_jsonl(file: Path) -> bytes:
    """Cut a torn last line off ``file`` (set aside in ``<file>.torn``, warned); return the rest.

    A last line without its newline, or one that does not parse, was being
    written when the process died: it is appended to ``<name>.torn`` (fsynced)
    and truncated away, so every complete line is kept. Returns ``b""`` for a
    missing or empty file.
    """
    if not file.is_file():
        return b""
    data = file.read_bytes()
    if not data:
        return b""
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
            stacklevel=4,
        )
    return data[:end]


def _step_of(line: bytes, file: Path, line_no: int) -> int:
    try:
        return int(json.loads(line.decode("utf-8"))["step"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise LogError(file, f"line is not a step object ({exc})", line=line_no) from None


def last_step(data: bytes, file: Path) -> int | None:
    """The ``step`` of the last line of ``data`` (complete lines); None when empty."""
    if not data:
        return None
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    return _step_of(data[cut:-1], file, data.count(b"\n"))


def steps_from(data: bytes, lo: int, file: Path) -> set[int]:
    """The steps ``>= lo`` among the lines of ``data``, read backwards (steps increase down a file)."""
    out: set[int] = set()
    end = len(data)
    line_no = data.count(b"\n")
    while end > 0:
        cut = data.rfind(b"\n", 0, end - 1) + 1
        step = _step_of(data[cut : end - 1], file, line_no)
        if step < lo:
            break
        out.add(step)
        end, line_no = cut, line_no - 1
    return out


def reconcile(
    pending: dict[int, dict[str, Any]],
    data: bytes,
    last: int | None,
    cancelled: dict[int, str],
    steps_file: Path,
    state_file: Path,
) -> dict[int, dict[str, Any]]:
    """The saved pending steps that are still pending: not in ``steps.jsonl`` (``data``) nor cancelled.

    A kill can fall between a step's line and the state rewrite, so a saved
    pending step may already be written or cancelled: it is dropped. One
    below the last written step and in neither file cannot be written any
    more (steps increase down the file): the state is not this log's.
    """
    written = steps_from(data, min(pending), steps_file) if pending and last is not None else set()
    out: dict[int, dict[str, Any]] = {}
    for step, rec in pending.items():
        if step in written or step in cancelled:
            continue
        if last is not None and step <= last:
            raise LogError(
                state_file,
                f"step {step} is pending but {steps_file.name} already goes past it (step {last}); "
                "the state does not belong to these steps",
                field=f"pending.{step}",
            )
        out[step] = rec
    return out


def due(
    pending: dict[int, dict[str, Any]],
    begun: int,
    now: float,
    after_steps: int | None,
    after_seconds: float | None,
) -> list[int]:
    """The pending steps without an outcome past their deadline, in step order.

    ``begun`` steps (0 .. begun - 1) have been begun; step ``s`` is due once
    ``after_steps`` later steps were begun, or ``after_seconds`` passed since
    its ``begun_at`` (``now``: Unix seconds).
    """
    return [
        s
        for s, r in sorted(pending.items())
        if r["line"]["outcome"] is None
        and (
            (after_steps is not None and begun - 1 - s >= after_steps)
            or (after_seconds is not None and now - r["begun_at"] >= after_seconds)
        )
    ]


def step_line(rec: dict[str, Any]) -> dict[str, Any]:
    """A step record in the spec's field order, an integral outcome as an integer."""
    keys = ["step", "query_id", "outcome", "group", "context", "ranking"]
    out = {k: rec[k] for k in keys if k in rec}
    out.update({k: v for k, v in rec.items() if k not in out})
    y = out["outcome"]
    if y is not None:
        out["outcome"] = int(y) if float(y).is_integer() else float(y)
    return out


def read_cancelled(data: bytes, file: Path) -> dict[int, str]:
    """``cancelled.jsonl`` content (complete lines) as step -> reason."""
    out: dict[int, str] = {}
    for i, raw in enumerate(data.splitlines(), start=1):
        try:
            obj = json.loads(raw.decode("utf-8"))
            out[int(obj["step"])] = str(obj["cancelled"])
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise LogError(file, f"line is not a cancelled step object ({exc})", line=i) from None
    return out


def load_state(file: Path) -> tuple[dict[int, dict[str, Any]], Any, str | None]:
    """``live_state.json`` as (pending step -> record, extra, the file's text); empty when absent."""
    if not file.is_file():
        return {}, None, None
    text = file.read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogError(file, f"malformed JSON: {exc.msg}", line=exc.lineno) from None
    if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
        got = obj.get("version") if isinstance(obj, dict) else obj
        raise LogError(file, f"version must be {STATE_VERSION}, got {got!r}", field="version")
    pending = obj.get("pending")
    if not isinstance(pending, dict):
        raise LogError(file, "pending must be an object of step -> record", field="pending")
    out: dict[int, dict[str, Any]] = {}
    for key, rec in pending.items():
        where = f"pending.{key}"
        if not isinstance(rec, dict) or not isinstance(rec.get("line"), dict):
            raise LogError(file, "a pending record needs its step object in 'line'", field=f"{where}.line")
        try:
            step = int(key)
        except ValueError:
            raise LogError(file, f"pending keys are step numbers, got {key!r}", field=where) from None
        if rec["line"].get("step") != step:
            raise LogError(file, f"record's step {rec['line'].get('step')!r} is not its key", field=f"{where}.line.step")
        out[step] = rec
    return out, obj.get("extra"), text


def state_text(pending: dict[int, dict[str, Any]], extra: Any) -> str:
    """The ``live_state.json`` text for ``pending`` (step order) and ``extra``."""
    body = {"version": STATE_VERSION, "pending": {str(s): pending[s] for s in sorted(pending)}, "extra": extra}
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state_hook() must return JSON-serialisable data ({exc})") from None


def write_state(file: Path, text: str, fsync: bool) -> None:
    """Replace ``file`` with ``text`` atomically (fsynced before the rename when ``fsync``)."""
    with atomic_path(file) as tmp, tmp.open("wb") as fh:
        fh.write(text.encode("utf-8"))
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())


def append_line(fh: BinaryIO, obj: dict[str, Any], fsync: bool) -> None:
    """Write ``obj`` as one JSON line in one ``write`` call, flushed (and fsynced)."""
    line = json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")) + "\n"
    # one write call per line: a kill can tear only the line being written
    fh.write(line.encode("utf-8"))
    fh.flush()
    if fsync:
        os.fsync(fh.fileno())
