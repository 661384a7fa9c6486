"""What a log directory holds: its files, its form (JSONL or Parquet), its design and its checksum.

Forms (``shared/spec/exposure-log.md``):

* a single ``steps.jsonl`` file (a system without CMP);
* a directory with ``steps.jsonl`` (and optional ``design.json``,
  ``memories.jsonl``, ``labels.jsonl``);
* a directory with ``steps.parquet`` / ``contexts.parquet`` (or folders
  ``steps/`` / ``contexts/`` of part files), ``design.json``,
  ``memories.parquet``, ``labels.parquet``.

Both readers (:mod:`cmp_bayes.log.read`, :mod:`cmp_bayes.log.parquet`) and the
Dask engine (:mod:`cmp_bayes.scale.dask_stats`) find a log's files here, so the
three agree on which files make a log.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from cmp_bayes.errors import LogError
from cmp_bayes.log.design import check_design

#: every file (or folder of Parquet part files) a log directory may hold
LOG_FILES: tuple[str, ...] = (
    "steps.jsonl",
    "design.json",
    "memories.jsonl",
    "labels.jsonl",
    "steps.parquet",
    "contexts.parquet",
    "memories.parquet",
    "labels.parquet",
    "steps",
    "contexts",
    "memories",
    "labels",
)

#: ``"steps-file"``: a bare steps.jsonl; ``"jsonl"`` / ``"parquet"``: a log directory of that form
LogForm = Literal["steps-file", "jsonl", "parquet"]


def log_form(path: Path) -> LogForm | None:
    """The form of the log at ``path`` (an existing file or directory); None: not a log.

    A directory with both ``steps.jsonl`` and Parquet steps is read as JSONL,
    the form the spec names first.
    """
    if path.is_file():
        return "steps-file"
    if (path / "steps.jsonl").is_file():
        return "jsonl"
    if parquet_files(path, "steps") is not None:
        return "parquet"
    return None


def parquet_files(root: Path, name: str) -> list[Path] | None:
    """The Parquet file(s) of table ``name``: ``name.parquet``, or the part files under
    the folder ``name/`` in path order (possibly none); None when neither exists."""
    single = root / f"{name}.parquet"
    if single.is_file():
        return [single]
    folder = root / name
    if folder.is_dir():
        return sorted(x for x in folder.rglob("*.parquet") if x.is_file())
    return None


def log_files(root: Path) -> list[Path]:
    """The files of the log directory ``root`` that are part of the log (:data:`LOG_FILES`,
    and the part files under its folders), in :data:`LOG_FILES` order."""
    out = []
    for name in LOG_FILES:
        f = root / name
        if f.is_file():
            out.append(f)
        elif f.is_dir():
            out.extend(x for x in f.rglob("*.parquet") if x.is_file())
    return out


def log_checksum(path: str | Path) -> str:
    """SHA-256 of a log: every log file's relative path and bytes, in sorted order.

    Identifies the exact input a posterior was fitted on. For a directory only
    the spec's files (and part files under its folders) take part, so unrelated
    files beside them do not change it.

    Returns
    -------
    str
        ``"sha256:"`` followed by 64 hex digits.
    """
    p = Path(path)
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(log_files(p))
    for f in files:
        rel = f.name if p.is_file() else f.relative_to(p).as_posix()
        h.update(rel.encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


def read_design(file: Path) -> dict[str, Any] | None:
    """The checked ``design.json`` (:func:`cmp_bayes.log.design.check_design`); None when absent."""
    if not file.is_file():
        return None
    try:
        obj = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LogError(file, f"malformed JSON: {exc.msg}", line=exc.lineno) from None
    except UnicodeDecodeError as exc:
        raise LogError(file, f"not valid UTF-8 ({exc.reason})") from None
    return check_design(obj, str(file))


def is_text(t: pa.DataType) -> bool:
    """Whether an Arrow type is a string type (``string`` or ``large_string``, not a dictionary)."""
    return pa.types.is_string(t) or pa.types.is_large_string(t)
