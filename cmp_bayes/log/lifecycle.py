"""The store's lifecycle while a log is written: ``memories.jsonl`` kept in memory, rewritten atomically.

A memory is in the store at step ``t`` when ``created_step <= t`` and
(``deleted_step`` is null or ``t < deleted_step``) (spec, ``memories.jsonl``).
:class:`MemoryBook` is the live writer's copy of that file: loaded when a log
is reopened, changed one memory at a time, and written back whole (temporary
file, then rename) after every change, so a crash leaves the previous store or
the new one, never half of it.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import pandas as pd

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.errors import LogError

MEMORIES_FILE = "memories.jsonl"


class MemoryBook:
    """The records of ``memories.jsonl``, by memory id, in file order.

    Parameters
    ----------
    file : Path
        The log's ``memories.jsonl``; read when it exists.
    """

    def __init__(self, file: Path) -> None:
        self.file = file
        self.records: dict[str, dict[str, Any]] = {}
        #: whether the log has a memories.jsonl (without one every memory is in the store always)
        self.tracked = file.is_file()
        if self.tracked:
            self._load()

    # ------------------------------------------------------------------ reads
    def known(self, memory_id: str) -> bool:
        """Whether ``memory_id`` has a record (in the store now or deleted)."""
        return str(memory_id) in self.records

    def text(self, memory_id: str) -> str | None:
        """The memory's ``text`` (None when it has none); LogError for an unknown id."""
        return self._record(str(memory_id), "memory_id").get("text")

    def in_store(self, memory_id: str, step: int) -> bool:
        """Whether the memory is in the store at ``step`` (always, when the log tracks no store)."""
        if not self.tracked:
            return True
        rec = self.records.get(memory_id)
        if rec is None:
            return False
        d = rec["deleted_step"]
        return rec["created_step"] <= step and (d is None or step < d)

    def size_at(self, step: int) -> int | None:
        """How many memories are in the store at ``step``; None when the log tracks no store."""
        if not self.tracked:
            return None
        return sum(
            1
            for r in self.records.values()
            if r["created_step"] <= step and (r["deleted_step"] is None or step < r["deleted_step"])
        )

    # ---------------------------------------------------------------- changes
    def replace(self, memories: pd.DataFrame | Sequence[Mapping[str, Any]]) -> None:
        """Replace the whole store with ``memories`` (records or a DataFrame) and write it."""
        rows = memories.to_dict(orient="records") if isinstance(memories, pd.DataFrame) else [dict(r) for r in memories]
        records: dict[str, dict[str, Any]] = {}
        for r in rows:
            rec: dict[str, Any] = {"memory_id": str(r["memory_id"]), "created_step": int(r.get("created_step", 0))}
            d = r.get("deleted_step")
            rec["deleted_step"] = None if d is None or pd.isna(d) else int(d)
            for key in ("text", "meta"):
                if not _missing(r.get(key)):
                    rec[key] = r[key]
            records[rec["memory_id"]] = rec
        self.records = records
        self.tracked = True
        self._save()

    def add(
        self,
        memory_id: str,
        created_step: int,
        text: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a new memory created at ``created_step`` and write the file."""
        mid = str(memory_id)
        old = self.records.get(mid)
        if old is not None:
            if old["deleted_step"] is not None:
                raise LogError(
                    self.file,
                    f"memory {mid!r} was deleted at step {old['deleted_step']}; re-adding a deleted id "
                    "is not allowed: pick a new id",
                    field="memory_id",
                )
            raise LogError(
                self.file, f"memory {mid!r} is already in the store (created at step {old['created_step']})", field="memory_id"
            )
        if not _is_int(created_step) or created_step < 0:
            raise LogError(self.file, f"created_step must be an integer >= 0, got {created_step!r}", field="created_step")
        if text is not None and not isinstance(text, str):
            raise LogError(self.file, f"text must be a string, got {type(text).__name__}", field="text")
        if meta is not None and not isinstance(meta, Mapping):
            raise LogError(self.file, f"meta must be an object, got {type(meta).__name__}", field="meta")
        rec: dict[str, Any] = {"memory_id": mid, "created_step": int(created_step), "deleted_step": None}
        if text is not None:
            rec["text"] = text
        if meta is not None:
            rec["meta"] = dict(meta)
        self.records[mid] = rec
        self.tracked = True
        self._save()

    def delete(self, memory_id: str, step: int) -> None:
        """Set the memory's ``deleted_step`` (its first step out of the store) and write the file."""
        mid = str(memory_id)
        rec = self._record(mid, "memory_id")
        if rec["deleted_step"] is not None:
            raise LogError(self.file, f"memory {mid!r} was already deleted at step {rec['deleted_step']}", field="deleted_step")
        if not _is_int(step) or step < rec["created_step"]:
            raise LogError(
                self.file,
                f"cannot delete memory {mid!r} at step {step!r}: before its creation at step {rec['created_step']}",
                field="deleted_step",
            )
        rec["deleted_step"] = int(step)
        self._save()

    # -------------------------------------------------------------- internals
    def _record(self, mid: str, field: str) -> dict[str, Any]:
        rec = self.records.get(mid)
        if rec is None:
            raise LogError(self.file, f"memory {mid!r} is not in the log's store (never added)", field=field)
        return rec

    def _save(self) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.records.values())
        write_text_atomic(self.file, text)

    def _load(self) -> None:
        for i, raw in enumerate(self.file.read_text(encoding="utf-8").splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise LogError(self.file, f"malformed JSON: {exc.msg}", line=i) from None
            if not isinstance(obj, dict) or not isinstance(obj.get("memory_id"), str):
                raise LogError(self.file, "missing required field", line=i, field="memory_id")
            c, d = obj.get("created_step"), obj.get("deleted_step")
            if not _is_int(c) or c < 0:
                raise LogError(self.file, f"created_step must be an integer >= 0, got {c!r}", line=i, field="created_step")
            if d is not None and (not _is_int(d) or d < c):
                raise LogError(self.file, f"deleted_step must be null or an integer >= created_step, got {d!r}", line=i, field="deleted_step")
            rec = dict(obj)
            rec["deleted_step"] = d
            self.records[obj["memory_id"]] = rec


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _is_int(v: Any) -> TypeGuard[int]:
    # numpy integers pass too (JSON never yields them, frames do); they compare as int does
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)
