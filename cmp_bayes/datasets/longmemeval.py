"""LongMemEval (S ``.jsonl.xz``, or the oracle / cleaned ``.json`` list): one store per question.

Licence: MIT. Each question's haystack is its own memory store (the
benchmark's setting: the chat history the assistant remembers when the
question is asked). Memories: a turn (``granularity="turn"``, id
``<question_id>/<session_id>/<turn index>``, text = the turn's content) or a
session (``"session"``, id ``<question_id>/<session_id>``, text = its turns'
contents joined by newlines). Store ids are question ids, so a session that
recurs in several haystacks is a different memory in each store. Queries: the
question (id = question id, group = ``question_type``). Evidence: turns with
``has_answer: true`` (turn level), ``answer_session_ids`` (session level).

Reading the S file streams it with :mod:`lzma` one record per line. With a
``limit``, ``sample="stratified"`` (default) allocates the limit over question
types in proportion to their counts (largest remainders) and picks within a
type by a seeded hash of the question id; this costs a first pass that reads
only each line's ``question_id`` / ``question_type`` prefix. ``"first"``
takes records in file order (the file is sorted by question type, so the
first records are all ``knowledge-update``).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from cmp_bayes.datasets.base import (
    EVIDENCE_COLUMNS,
    MEMORY_COLUMNS,
    QUERY_COLUMNS,
    SESSION,
    TURN,
    Dataset,
    Store,
    check_granularity,
    frame,
    need_file,
)
from cmp_bayes.errors import ConfigError

LICENSE = "MIT"
QUESTION_TYPES: tuple[str, ...] = (
    "knowledge-update",
    "multi-session",
    "single-session-assistant",
    "single-session-preference",
    "single-session-user",
    "temporal-reasoning",
)
_PREFIX = re.compile(r'"question_id":\s*"([^"]+)".*?"question_type":\s*"([^"]+)"')


def load_longmemeval(
    path: str | Path,
    granularity: str = TURN,
    limit: int | None = None,
    sample: str = "stratified",
    seed: int = 0,
    question_types: list[str] | None = None,
    require_evidence: bool = True,
) -> Dataset:
    """Read LongMemEval questions into one store each.

    Parameters
    ----------
    path : str or Path
        ``longmemeval_s_cleaned.jsonl.xz`` (or ``.jsonl``), or a JSON list
        file such as ``longmemeval_oracle.json``.
    granularity : {"turn", "session"}
        What one memory is.
    limit : int, optional
        Number of questions to keep (after the filters); all by default.
    sample : {"stratified", "first"}
        How to choose ``limit`` questions (module docstring).
    seed : int
        Seed of the stratified choice.
    question_types : list of str, optional
        Keep only these question types.
    require_evidence : bool
        Skip questions without evidence at the chosen granularity (the
        ``_abs`` abstention questions have no ``has_answer`` turn).

    Returns
    -------
    Dataset
        Stores in file order.
    """
    check_granularity("longmemeval", granularity, (TURN, SESSION))
    if sample not in ("stratified", "first"):
        raise ConfigError(f"longmemeval: sample must be 'stratified' or 'first', got {sample!r}")
    if question_types is not None and (bad := set(question_types) - set(QUESTION_TYPES)):
        raise ConfigError(f"longmemeval: unknown question types {sorted(bad)}")
    file = need_file(path, "longmemeval")
    chosen: set[str] | None = None
    if limit is not None and sample == "stratified":
        chosen = _stratified_ids(file, limit, seed, question_types, granularity, require_evidence)
    stores: list[Store] = []
    for rec in _records(file):
        if limit is not None and len(stores) >= limit:
            break
        if question_types is not None and rec["question_type"] not in question_types:
            continue
        if chosen is not None and rec["question_id"] not in chosen:
            continue
        store = _store(rec, granularity)
        if require_evidence and store.evidence.empty:
            continue
        stores.append(store)
    return Dataset("longmemeval", granularity, tuple(stores), file, LICENSE)


def _open(file: Path) -> IO[str]:
    if file.suffix == ".xz":
        return lzma.open(file, "rt", encoding="utf-8")
    return file.open("r", encoding="utf-8")


def _records(file: Path) -> Iterator[dict]:
    """Yield records one at a time (JSON Lines streamed; a JSON list loaded whole)."""
    with _open(file) as f:
        first = f.read(1)
        while first and first.isspace():
            first = f.read(1)
        if first == "[":
            yield from json.loads(first + f.read())
            return
        line = first + f.readline()
        while line:
            if line.strip():
                yield json.loads(line)
            line = f.readline()


def _has_evidence_line(line: str, granularity: str) -> bool:
    # Cheap pre-filter for the sampling pass; the full parse decides for the records kept.
    if granularity == TURN:
        return re.search(r'"has_answer":\s*true', line) is not None
    return re.search(r'"answer_session_ids":\s*\[\s*"', line) is not None


def _stratified_ids(
    file: Path,
    limit: int,
    seed: int,
    question_types: list[str] | None,
    granularity: str,
    require_evidence: bool,
) -> set[str]:
    by_type: dict[str, list[str]] = {}
    recs: Iterator[tuple[str, str, str]]
    if file.suffix == ".json":
        recs = ((r["question_id"], r["question_type"], json.dumps(r)) for r in _records(file))
    else:
        recs = _prefixes(file)
    for qid, qtype, line in recs:
        if question_types is not None and qtype not in question_types:
            continue
        if require_evidence and not _has_evidence_line(line, granularity):
            continue
        by_type.setdefault(qtype, []).append(qid)
    total = sum(len(v) for v in by_type.values())
    limit = min(limit, total)
    # Largest-remainder allocation of the limit over types, proportional to their counts.
    exact = {t: limit * len(v) / total for t, v in by_type.items()}
    quota = {t: int(x) for t, x in exact.items()}
    for t in sorted(exact, key=lambda t: (-(exact[t] - quota[t]), t))[: limit - sum(quota.values())]:
        quota[t] += 1
    chosen: set[str] = set()
    for t, ids in by_type.items():
        ids = sorted(ids, key=lambda q: hashlib.sha256(f"{seed}:{q}".encode()).hexdigest())
        chosen.update(ids[: quota[t]])
    return chosen


def _prefixes(file: Path) -> Iterator[tuple[str, str, str]]:
    with _open(file) as f:
        for line in f:
            m = _PREFIX.search(line, 0, 2000)
            if m is None:
                rec = json.loads(line)
                yield rec["question_id"], rec["question_type"], line
            else:
                yield m.group(1), m.group(2), line


def _store(rec: dict, granularity: str) -> Store:
    qid = rec["question_id"]
    mem_rows: list[dict[str, object]] = []
    ev_rows: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    for sid, session in zip(rec["haystack_session_ids"], rec["haystack_sessions"], strict=True):
        # A session id repeated within one haystack would collide: suffix the repeats.
        n = seen.get(sid, 0)
        seen[sid] = n + 1
        local = sid if n == 0 else f"{sid}#{n}"
        if granularity == TURN:
            for j, turn in enumerate(session):
                mid = f"{qid}/{local}/{j}"
                mem_rows.append({"memory_id": mid, "position": len(mem_rows), "session": local, "text": turn["content"]})
                if turn.get("has_answer") is True:
                    ev_rows.append({"query_id": qid, "memory_id": mid})
        else:
            mid = f"{qid}/{local}"
            text = "\n".join(t["content"] for t in session)
            mem_rows.append({"memory_id": mid, "position": len(mem_rows), "session": local, "text": text})
            if n == 0 and sid in rec.get("answer_session_ids", ()):
                ev_rows.append({"query_id": qid, "memory_id": mid})
    query = {
        "query_id": qid,
        "text": rec["question"],
        "group": rec["question_type"],
        "answer": str(rec.get("answer", "")),
    }
    return Store(
        qid,
        frame(mem_rows, MEMORY_COLUMNS),
        frame([query], QUERY_COLUMNS),
        frame(ev_rows, EVIDENCE_COLUMNS),
    )
