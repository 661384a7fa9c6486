"""HotpotQA (distractor setting, JSON Lines or JSON list): one store per question.

Licence: CC BY-SA 4.0. Memories: the question's context paragraphs (id
``<_id>/p<index>``, text = title, a newline, then the sentences joined by
spaces; position = the paragraph's index in ``context``). Query: the question
(id = ``_id``, group = ``type``: bridge / comparison). Evidence: the
paragraphs whose title appears in ``supporting_facts`` (2 per question).
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

LICENSE = "CC BY-SA 4.0"


def load_hotpotqa(path: str | Path, granularity: str = PARAGRAPH, limit: int | None = None) -> Dataset:
    """Read HotpotQA distractor records into one store per question.

    Parameters
    ----------
    path : str or Path
        A ``.jsonl`` file (one record a line) or a ``.json`` list.
    granularity : {"paragraph"}
        What one memory is.
    limit : int, optional
        Keep the first ``limit`` questions of the file.
    """
    check_granularity("hotpotqa", granularity, (PARAGRAPH,))
    file = need_file(path, "hotpotqa")
    stores = []
    for rec in read_json_records(file, limit):
        qid = rec["_id"]
        support = {title for title, _ in rec["supporting_facts"]}
        mem_rows, ev_rows = [], []
        for i, (title, sentences) in enumerate(rec["context"]):
            mid = f"{qid}/p{i}"
            text = title + "\n" + " ".join(s.strip() for s in sentences)
            mem_rows.append({"memory_id": mid, "position": i, "session": title, "text": text})
            if title in support:
                ev_rows.append({"query_id": qid, "memory_id": mid})
        query = {"query_id": qid, "text": rec["question"], "group": rec.get("type", ""), "answer": str(rec.get("answer", ""))}
        stores.append(
            Store(qid, frame(mem_rows, MEMORY_COLUMNS), frame([query], QUERY_COLUMNS), frame(ev_rows, EVIDENCE_COLUMNS))
        )
    return Dataset("hotpotqa", granularity, tuple(stores), file, LICENSE)
