"""LoCoMo (``locomo10.json``): one store per conversation, with all its questions.

Licence: CC BY-NC 4.0 (non-commercial). Never bundle the data, or anything
derived from it (logs, stores), in the package or the repository.

Memories: a dialogue turn (``granularity="turn"``, id ``<conv>/<dia_id>``,
e.g. ``conv-42/D3:7``) or a session (``"session"``, id ``<conv>/S<k>``). A
turn's text is ``"<speaker>: <text>"``, followed by ``" [image: <blip
caption>]"`` for image turns (the caption is how a text-only memory system
would store a shared photo). Queries: every QA item, id ``<conv>/q<index>``
(0-based index in the conversation's ``qa`` list), group the category name
(1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial, as in
the official evaluation code). Evidence: the item's ``evidence`` dia ids (for
sessions: the sessions holding them).

Normalisation of the raw evidence strings (the 9 malformed ones in
``locomo10.json`` at commit 3eb6f2c; each is recorded in ``Dataset.notes``):

* several ids in one string, separated by ``;`` / ``,`` / spaces (conv-26 q37
  ``"D8:6; D9:17"``, conv-49 q31 ``"D9:1 D4:4 D4:6"``, q38 ``"D22:1 D22:2
  D9:10 D9:11"``, q46 ``"D21:18 D21:22 D11:15 D11:19"``): split;
* a stray colon (conv-43 q18 ``"D:11:26"`` -> ``D11:26``);
* a zero-padded turn (conv-50 q69 ``"D30:05"`` -> ``D30:5``);
* a bare ``"D"`` (conv-42 q88): dropped;
* ids of turns that do not exist (conv-42 q58 ``"D10:19"``: session 10 has 18
  turns; conv-47 q38 ``"D4:36"``): dropped; the item keeps its other evidence.

An item whose evidence becomes empty keeps its query but has no required
memory (4 category items in the raw file already have none).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

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

LICENSE = "CC BY-NC 4.0 (non-commercial; never bundle)"
CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"^D:?(\d+):0*(\d+)$")


def normalize_evidence(raw: str) -> list[str]:
    """Split one raw evidence string into canonical dia ids ``D<session>:<turn>``.

    Fixes separators, a stray colon after ``D`` and zero padding; returns the
    parts that look like dia ids (a bare ``"D"`` gives nothing). Whether the
    id exists in the conversation is checked by the caller.
    """
    out = []
    for part in re.split(r"[;,\s]+", raw.strip()):
        m = _DIA_ID.match(part)
        if m:
            out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def load_locomo(
    path: str | Path,
    granularity: str = TURN,
    conversations: list[str] | None = None,
    categories: list[int] | None = None,
) -> Dataset:
    """Read LoCoMo into one store per conversation.

    Parameters
    ----------
    path : str or Path
        ``locomo10.json``.
    granularity : {"turn", "session"}
        What one memory is.
    conversations : list of str, optional
        Sample ids to keep (e.g. ``["conv-42"]``), in file order; all by default.
    categories : list of int, optional
        QA categories to keep (1-5); all by default.

    Returns
    -------
    Dataset
    """
    check_granularity("locomo", granularity, (TURN, SESSION))
    file = need_file(path, "locomo")
    samples = json.loads(file.read_text(encoding="utf-8"))
    if conversations is not None:
        known = {s["sample_id"] for s in samples}
        missing = [c for c in conversations if c not in known]
        if missing:
            raise ConfigError(f"locomo: unknown conversation(s) {missing}; known {sorted(known)}")
        samples = [s for s in samples if s["sample_id"] in set(conversations)]
    notes: list[str] = []
    stores = tuple(_store(s, granularity, categories, notes) for s in samples)
    return Dataset("locomo", granularity, stores, file, LICENSE, tuple(notes))


def _turns(conv: dict) -> list[tuple[int, dict]]:
    """(session number, turn) in dialogue order; date keys without a session are skipped."""
    sessions = sorted(
        (int(m.group(1)), v)
        for k, v in conv.items()
        if (m := _SESSION_KEY.match(k)) and isinstance(v, list)
    )
    return [(k, t) for k, turns in sessions for t in turns]


def _turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return text


def _store(sample: dict, granularity: str, categories: list[int] | None, notes: list[str]) -> Store:
    sid = sample["sample_id"]
    turns = _turns(sample["conversation"])
    dia_session = {t["dia_id"]: k for k, t in turns}
    if granularity == TURN:
        mem_rows = [
            {"memory_id": f"{sid}/{t['dia_id']}", "position": i, "session": f"S{k}", "text": _turn_text(t)}
            for i, (k, t) in enumerate(turns)
        ]
    else:
        by_session: dict[int, list[str]] = {}
        for k, t in turns:
            by_session.setdefault(k, []).append(_turn_text(t))
        mem_rows = [
            {"memory_id": f"{sid}/S{k}", "position": i, "session": f"S{k}", "text": "\n".join(v)}
            for i, (k, v) in enumerate(sorted(by_session.items()))
        ]
    q_rows: list[dict[str, str]] = []
    ev_rows: list[dict[str, str]] = []
    for i, qa in enumerate(sample["qa"]):
        cat = int(qa["category"])
        if categories is not None and cat not in categories:
            continue
        qid = f"{sid}/q{i}"
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        q_rows.append({"query_id": qid, "text": qa["question"], "group": CATEGORIES.get(cat, str(cat)), "answer": str(answer)})
        ids: list[str] = []
        for raw in qa["evidence"]:
            parts = normalize_evidence(raw)
            if parts != [raw]:
                notes.append(f"{sid} q{i}: evidence {raw!r} -> {parts}")
            for d in parts:
                if d not in dia_session:
                    notes.append(f"{sid} q{i}: evidence {d!r} names no turn of the conversation: dropped")
                    continue
                mid = f"{sid}/{d}" if granularity == TURN else f"{sid}/S{dia_session[d]}"
                if mid not in ids:
                    ids.append(mid)
        ev_rows.extend({"query_id": qid, "memory_id": m} for m in ids)
    return Store(
        sid,
        frame(mem_rows, MEMORY_COLUMNS),
        frame(q_rows, QUERY_COLUMNS),
        frame(ev_rows, EVIDENCE_COLUMNS),
    )
