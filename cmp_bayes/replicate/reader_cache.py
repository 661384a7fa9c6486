"""A disk cache of text-reader calls, so a rerun of an experiment costs no reader call.

Key: sha256 of the JSON array ``[reader id, question, contexts, answer]``
(``contexts`` in slot order; the reader id is its ``cache_id`` where it has
one, e.g. an LLM reader's name with its prompt version and token limit, else
its ``name``). One JSONL file per reader id in the cache folder,
``<name>-<sha256 of the id, 12 hex>.jsonl``, one ``{"key": ..., "score": ...}``
object per line. Lines are appended and flushed one at a time, so a crash
loses at most the call in flight; a torn last line (no newline, or not JSON)
is skipped when the file is read, and the next append starts a new line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from cmp_bayes.replicate.reader import Reader, check_outcome


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/cmp_bayes/reader``, or ``~/.cache/cmp_bayes/reader``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cmp_bayes" / "reader"


def reader_id(reader: Reader) -> str:
    """What identifies the reader's outputs: its ``cache_id`` if it has one, else its ``name``."""
    return str(getattr(reader, "cache_id", reader.name))


def call_key(reader: str, question: str, contexts: Sequence[str], answer: str) -> str:
    """sha256 (hex) of one call: reader id, question, context texts in slot order, gold answer."""
    blob = json.dumps([reader, question, list(contexts), answer], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CachedReader:
    """A text reader whose calls are looked up in, and added to, a JSONL cache.

    Parameters
    ----------
    reader : Reader
        The reader called on a miss; its ``name`` is this reader's name.
    folder : path, optional
        The cache folder (created on the first miss); default :func:`default_cache_dir`.

    Attributes
    ----------
    hits, misses : int
        Calls answered from the cache and calls passed to ``reader`` since construction.
    path : Path
        This reader's cache file.
    """

    def __init__(self, reader: Reader, folder: str | Path | None = None) -> None:
        self.reader = reader
        self.name = reader.name
        self._id = reader_id(reader)
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", reader.name)[:60]
        digest = hashlib.sha256(self._id.encode("utf-8")).hexdigest()[:12]
        self.path = Path(folder if folder is not None else default_cache_dir()) / f"{slug}-{digest}.jsonl"
        self.hits = 0
        self.misses = 0
        self._scores = _read_cache(self.path)

    def __len__(self) -> int:
        return len(self._scores)

    def score(self, question: str, contexts: Sequence[str], answer: str) -> float:
        """The cached score of this call, else the reader's (then stored)."""
        key = call_key(self._id, question, contexts, answer)
        hit = self._scores.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        value = check_outcome(self.reader.score(question, contexts, answer=answer), self.name)
        self.misses += 1
        self._scores[key] = value
        _append(self.path, {"key": key, "score": value})
        return value

    def __repr__(self) -> str:
        return f"CachedReader({self.reader!r}, {str(self.path.parent)!r})"


def _read_cache(path: Path) -> dict[str, float]:
    """Key -> score of every whole line of the file (none if it does not exist)."""
    if not path.is_file():
        return {}
    out: dict[str, float] = {}
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # torn last line: a crash mid-append
            try:
                row = json.loads(line)
                out[str(row["key"])] = float(row["score"])
            except (ValueError, KeyError, TypeError):
                continue  # a line that is not a whole record holds nothing to trust
    return out


def _append(path: Path, row: dict[str, object]) -> None:
    """Append one JSON line; a torn last line gets its newline first, so the new line stays whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(row, separators=(",", ":")) + "\n"
    with path.open("a+b") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                line = "\n" + line
        fh.seek(0, os.SEEK_END)
        # one write of the whole line, then flush: a crash leaves at most this line torn
        fh.write(line.encode("utf-8"))
        fh.flush()
