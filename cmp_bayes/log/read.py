"""Read an exposure log in any of the spec's three forms, rejecting what breaks it.

The forms and the files each holds: :mod:`cmp_bayes.log.layout`. This module
reads the JSONL form and hands the Parquet form to
:func:`cmp_bayes.log.parquet.read_parquet_log`; either way the memories'
lifetimes are checked against the contexts here. Nothing is ever written to
the input.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from cmp_bayes.errors import LogError, TornLineWarning
from cmp_bayes.log import validate
from cmp_bayes.log.codes import encode
from cmp_bayes.log.layout import log_checksum, log_form, read_design
from cmp_bayes.log.parquet import read_parquet_log
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)
from cmp_bayes.log.window import ReadRows, check_window_log

# log_checksum is re-exported: cmp_bayes.log_checksum has always lived at this path
__all__ = ["log_checksum", "read_log"]


def read_log(path: str | Path) -> ExposureLog:
    """Read and validate an exposure log.

    Parameters
    ----------
    path : str or Path
        A log directory (JSONL or Parquet form) or a bare ``steps.jsonl`` file.

    Returns
    -------
    ExposureLog
        Tables as pandas DataFrames with the dtypes of :mod:`cmp_bayes.log.schema`.

    Raises
    ------
    LogError
        Naming the file, the line (JSONL) or row (Parquet) and the field of the
        first violation of the spec. The input is never modified.

    Notes
    -----
    A last line without its newline that does not parse is taken as torn by a
    crash while writing: it is skipped with a :class:`TornLineWarning` (every
    complete step before it is kept). Any other malformed line is an error.
    """
    p = Path(path)
    if not p.exists():
        raise LogError(p, "no such file or directory")
    form = log_form(p)
    if form == "steps-file":
        steps, contexts, rankings, where = _read_steps_jsonl(p, design=None, design_file="design.json")
        log = ExposureLog(steps=steps, contexts=contexts, rankings=rankings, source=p)
    elif form == "jsonl":
        design = read_design(p / "design.json")
        steps, contexts, rankings, where = _read_steps_jsonl(
            p / "steps.jsonl", design=design, design_file=str(p / "design.json")
        )
        memories = _read_jsonl_table(p / "memories.jsonl", _memory_record, MEMORY_COLUMNS)
        labels = _read_jsonl_table(p / "labels.jsonl", _label_record, LABEL_COLUMNS)
        log = ExposureLog(steps, contexts, rankings, memories, design, labels, source=p)
    elif form == "parquet":
        log, where = read_parquet_log(p)
    else:
        raise LogError(p, "not an exposure log: no steps.jsonl, steps.parquet or steps/ found")
    _check_memories(log)
    # a window slot's W_t needs the store: checked once the memories are known to be valid
    check_window_log(log, where)
    log.checksum = log_checksum(p)
    return log


# --------------------------------------------------------------------------- JSONL


def _iter_json_lines(file: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line_number, object) for each line; handles blank and torn lines."""
    with file.open("rb") as fh:
        data = fh.read()
    if not data:
        return
    lines = data.split(b"\n")
    trailing_newline = lines[-1] == b""
    if trailing_newline:
        lines.pop()
    last = len(lines)
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            raise LogError(file, "blank line (only a trailing newline is allowed)", line=i)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LogError(file, f"not valid UTF-8 ({exc.reason})", line=i) from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            if i == last and not trailing_newline:
                warnings.warn(
                    f"{file}, line {i}: incomplete last line (torn by a crash while writing?) "
                    "set aside; every complete line before it is kept",
                    TornLineWarning,
                    stacklevel=4,
                )
                return
            raise LogError(file, f"malformed JSON: {exc.msg} (column {exc.colno})", line=i) from None
        if not isinstance(obj, dict):
            raise LogError(file, f"each line must be a JSON object, got {type(obj).__name__}", line=i)
        yield i, obj


def _need(obj: dict, key: str, file: Path, line: int, field: str | None = None) -> Any:
    if key not in obj:
        raise LogError(file, "missing required field", line=line, field=field or key)
    return obj[key]


def _type_error(file: Path, line: int, field: str, expected: str, value: Any) -> LogError:
    return LogError(
        file, f"expected {expected}, got {_json_type(value)} {json.dumps(value)[:40]}", line=line, field=field
    )


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _read_steps_jsonl(
    file: Path, design: dict[str, Any] | None, design_file: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None, ReadRows]:
    s_step, s_query, s_out, s_group, s_line, s_ranked = [], [], [], [], [], []
    c_step, c_slot, c_mem, c_src, c_rank, c_prop, c_arm, c_line = [], [], [], [], [], [], [], []
    r_step: list[int] = []
    r_rank: list[int] = []
    r_mem: list[str] = []
    any_ranking = False
    for line, obj in _iter_json_lines(file):
        step = _need(obj, "step", file, line)
        if not _is_int(step):
            raise _type_error(file, line, "step", "an integer", step)
        qid = _need(obj, "query_id", file, line)
        if not isinstance(qid, str):
            raise _type_error(file, line, "query_id", "a string", qid)
        out = _need(obj, "outcome", file, line)
        if not _is_num(out):
            raise _type_error(file, line, "outcome", "a number in [0, 1]", out)
        ctx = _need(obj, "context", file, line)
        if not isinstance(ctx, list):
            raise _type_error(file, line, "context", "an array of slot objects", ctx)
        group = obj.get("group")
        if group is not None and not isinstance(group, str):
            raise _type_error(file, line, "group", "a string", group)
        s_step.append(step)
        s_query.append(qid)
        s_out.append(float(out))
        s_group.append(group)
        s_line.append(line)
        for j, slot in enumerate(ctx):
            f = f"context[{j}]"
            if not isinstance(slot, dict):
                raise _type_error(file, line, f, "a slot object", slot)
            mid = _need(slot, "memory_id", file, line, f"{f}.memory_id")
            if not isinstance(mid, str):
                raise _type_error(file, line, f"{f}.memory_id", "a string", mid)
            src = _need(slot, "source", file, line, f"{f}.source")
            if not isinstance(src, str):
                raise _type_error(file, line, f"{f}.source", "a string", src)
            rank = slot.get("rank")
            if rank is not None and not _is_int(rank):
                raise _type_error(file, line, f"{f}.rank", "an integer >= 0", rank)
            prop = slot.get("propensity")
            if prop is not None and (not _is_num(prop) or not math.isfinite(prop)):
                raise _type_error(file, line, f"{f}.propensity", "a number in (0, 1]", prop)
            arm = slot.get("arm")
            if arm is not None and not isinstance(arm, str):
                raise _type_error(file, line, f"{f}.arm", "\"pool\" or \"window\"", arm)
            c_step.append(step)
            c_slot.append(j)
            c_mem.append(mid)
            c_src.append(src)
            c_rank.append(rank)
            c_prop.append(prop)
            c_arm.append(arm)
            c_line.append(line)
        if "ranking" in obj and obj["ranking"] is not None:
            ranking = obj["ranking"]
            if not isinstance(ranking, list) or not all(isinstance(m, str) for m in ranking):
                raise _type_error(file, line, "ranking", "an array of memory id strings", ranking)
            if len(set(ranking)) != len(ranking):
                raise LogError(file, "a memory appears twice in the ranking", line=line, field="ranking")
            any_ranking = True
            s_ranked.append(len(s_step) - 1)
            r_step.extend([step] * len(ranking))
            r_rank.extend(range(len(ranking)))
            r_mem.extend(ranking)

    steps = pd.DataFrame(
        {"step": pd.array(s_step, dtype="int64"), "query_id": s_query, "outcome": s_out, "group": s_group}
    )
    steps = coerce(steps, STEP_COLUMNS)
    contexts = coerce(
        pd.DataFrame(
            {
                "step": pd.array(c_step, dtype="int64"),
                "slot": pd.array(c_slot, dtype="int64"),
                "memory_id": pd.array(c_mem, dtype="string"),
                "source": pd.array(c_src, dtype="string"),
                "rank": pd.array(c_rank, dtype="Int64"),
                "propensity": pd.array(c_prop, dtype="Float64"),
                "arm": pd.array(c_arm, dtype="string"),
            }
        ),
        CONTEXT_COLUMNS,
    )
    srows = validate.Rows.lines(str(file), s_line)
    crows = validate.Rows.lines(str(file), c_line)
    validate.check_steps(steps, srows)
    validate.check_step_rounds(steps, design, design_file, srows)
    validate.check_contexts(contexts, steps["step"].to_numpy(np.int64), design, design_file, crows)
    rankings = None
    if any_ranking:
        rankings = coerce(
            pd.DataFrame({"step": r_step, "rank": r_rank, "memory_id": r_mem}), RANKING_COLUMNS
        )
    has_ranking = np.zeros(len(s_step), dtype=bool)
    has_ranking[np.asarray(s_ranked, dtype=np.int64)] = True
    return steps, contexts, rankings, ReadRows(srows, crows, has_ranking)


def _memory_record(obj: dict, file: Path, line: int) -> dict[str, Any]:
    mid = _need(obj, "memory_id", file, line)
    if not isinstance(mid, str):
        raise _type_error(file, line, "memory_id", "a string", mid)
    created = _need(obj, "created_step", file, line)
    if not _is_int(created) or created < 0:
        raise _type_error(file, line, "created_step", "an integer >= 0", created)
    deleted = obj.get("deleted_step")
    if deleted is not None and (not _is_int(deleted) or deleted < created):
        raise _type_error(file, line, "deleted_step", "null or an integer >= created_step", deleted)
    text = obj.get("text")
    if text is not None and not isinstance(text, str):
        raise _type_error(file, line, "text", "a string", text)
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise _type_error(file, line, "meta", "an object", meta)
    return {"memory_id": mid, "created_step": created, "deleted_step": deleted, "text": text, "meta": meta}


def _label_record(obj: dict, file: Path, line: int) -> dict[str, Any]:
    qid = _need(obj, "query_id", file, line)
    if not isinstance(qid, str):
        raise _type_error(file, line, "query_id", "a string", qid)
    mid = _need(obj, "memory_id", file, line)
    if not isinstance(mid, str):
        raise _type_error(file, line, "memory_id", "a string", mid)
    req = _need(obj, "required", file, line)
    if not isinstance(req, bool):
        raise _type_error(file, line, "required", "true or false", req)
    util = obj.get("utility")
    if util is not None and (not _is_num(util) or not math.isfinite(util)):
        raise _type_error(file, line, "utility", "a finite number", util)
    return {"query_id": qid, "memory_id": mid, "required": req, "utility": util}


def _read_jsonl_table(
    file: Path, record: Callable[[dict, Path, int], dict[str, Any]], columns: dict[str, str]
) -> pd.DataFrame | None:
    if not file.is_file():
        return None
    rows, lines = [], []
    for line, obj in _iter_json_lines(file):
        rows.append(record(obj, file, line))
        lines.append(line)
    frame = pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(columns=list(columns))
    if "meta" in frame:
        frame["meta"] = frame["meta"].astype(object)
    frame = coerce(frame, columns)
    key = ["memory_id"] if "created_step" in columns else ["query_id", "memory_id"]
    dup = frame.duplicated(key).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise LogError(file, f"duplicate entry for {', '.join(key)}", line=lines[i], field=key[-1])
    return frame


def _check_memories(log: ExposureLog) -> None:
    """With a memories file, every memory named in a context must be in the store then."""
    if log.memories is None or log.contexts.empty:
        return
    ctx = log.contexts
    codes = encode(ctx["memory_id"])
    # each distinct context id's row in the memories table (-1: not there), then per context row
    ids = encode(log.memories["memory_id"])
    entry = pc.index_in(codes.dictionary, value_set=ids.dictionary).fill_null(-1).to_numpy(zero_copy_only=False)
    first = np.full(len(ids.dictionary) + 1, -1, dtype=np.int64)
    first[ids.indices] = np.arange(len(ids.indices))  # the memories row of each id (unique in a valid file)
    where = codes.lookup(np.where(entry >= 0, first[np.maximum(entry, 0)], -1), -1)
    file = _context_file(log)
    unknown = where < 0
    if unknown.any():
        i = int(np.argmax(unknown))
        raise LogError(
            file,
            f"memory '{ctx['memory_id'].iloc[i]}' at step {ctx['step'].iloc[i]} is not in memories",
            field=f"context[{ctx['slot'].iloc[i]}].memory_id",
        )
    created = log.memories["created_step"].to_numpy(np.int64)[where]
    deleted = log.memories["deleted_step"].to_numpy(np.int64, na_value=np.iinfo(np.int64).max)[where]
    st = ctx["step"].to_numpy(np.int64)
    outside = (st < created) | (st >= deleted)
    if outside.any():
        i = int(np.argmax(outside))
        raise LogError(
            file,
            f"memory '{ctx['memory_id'].iloc[i]}' is in the context at step {ctx['step'].iloc[i]} "
            "but not in the store then (see memories created_step / deleted_step)",
            field=f"context[{ctx['slot'].iloc[i]}].memory_id",
        )


def _context_file(log: ExposureLog) -> str:
    src = log.source
    if src is None:
        return "<log>"
    if src.is_file():
        return str(src)
    return str(src / "steps.jsonl") if (src / "steps.jsonl").exists() else str(src / "contexts.parquet")

