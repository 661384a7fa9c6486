"""MuSiQue-Ans (v1.0 format, JSON Lines or JSON list): one store per question.

Licence: CC BY 4.0. Memories: the question's paragraphs (id ``<id>/p<idx>``,
text = title, a newline, then ``paragraph_text``; position = ``idx``).
Query: the question (id = ``id``, group = the hop structure, the id's prefix
before ``__``: ``2hop``, ``3hop1``, ...). Evidence: paragraphs with
``is_supporting`` (one per hop).
"""

from __future__ import annotations

from pathlib import Path

from cmp_bayes.datasets.base import (
    EVIDENCE_COLUMNS,
    MEMORY_COLUMNS,
    PARAGRAPH,
    QUERY_COLUMNS,
    Dataset,
    Store,
    check_granularity,
    frame,
    need_file,
    read_json_records,
)

LICENSE = "CC BY 4.0"


def load_musique(path: str | Path, granularity: str = PARAGRAPH, limit: int | None = None) -> Dataset:
    """Read MuSiQue records into one store per question.

    Parameters
    ----------
    path : str or Path
        A ``.jsonl`` file or a ``.json`` list (both shipped samples work).
    granularity : {"paragraph"}
        What one memory is.
    limit : int, optional
        Keep the first ``limit`` questions of the file.
    """
    check_granularity("musique", granularity, (PARAGRAPH,))
    file = need_file(path, "musique")
    stores = []
    for rec in read_json_records(file, limit):
        qid = rec["id"]
        mem_rows, ev_rows = [], []
        for p in sorted(rec["paragraphs"], key=lambda p: p["idx"]):
            mid = f"{qid}/p{p['idx']}"
            text = p["title"] + "\n" + p["paragraph_text"]
            mem_rows.append({"memory_id": mid, "position": int(p["idx"]), "session": p["title"], "text": text})
            if p.get("is_supporting"):
                ev_rows.append({"query_id": qid, "memory_id": mid})
        query = {"query_id": qid, "text": rec["question"], "group": qid.split("__")[0], "answer": str(rec.get("answer", ""))}
        stores.append(
            Store(qid, frame(mem_rows, MEMORY_COLUMNS), frame([query], QUERY_COLUMNS), frame(ev_rows, EVIDENCE_COLUMNS))
        )
    return Dataset("musique", granularity, tuple(stores), file, LICENSE)
