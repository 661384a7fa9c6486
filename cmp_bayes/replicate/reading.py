"""Outcomes of a log's steps from a text reader: it reads each step's question over its context texts.

A step's outcome is ``reader.score(question, contexts, answer=gold)`` where
``contexts`` are the texts of the step's context memories in slot order
(retrieved slots by rank, then the exposure slots), and ``gold`` the
benchmark's answer; in the ``binary`` form it is thresholded
(:func:`~cmp_bayes.replicate.answer_scoring.binary_outcome`: >= 0.5 -> 1).
Steps that ask the same question over the same memories in the same slots
read once (a HotpotQA store with ``B - k`` fixed retrieved slots has only as
many distinct contexts as exposure candidates); a
:class:`~cmp_bayes.replicate.reader_cache.CachedReader` also skips what an
earlier run read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.datasets.base import Dataset
from cmp_bayes.errors import ConfigError
from cmp_bayes.progress import Progress
from cmp_bayes.replicate.answer_scoring import OUTCOMES, binary_outcome
from cmp_bayes.replicate.reader import Reader, check_outcome


@dataclass
class ReadingSummary:
    """What the reader did for one log.

    Attributes
    ----------
    steps : int
        Steps given an outcome.
    calls : int
        Distinct (question, context) reads asked of the reader (cache hits included).
    seconds : float
        Wall time of those reads.
    cache_hits, cache_misses : int or None
        From a cached reader; None for a reader without a cache.
    """

    steps: int
    calls: int
    seconds: float
    cache_hits: int | None = None
    cache_misses: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``calls_per_s`` is distinct reads per second (cache hits included)."""
        out: dict[str, Any] = {"steps": self.steps, "calls": self.calls, "seconds": self.seconds,
                               "calls_per_s": self.calls / self.seconds if self.seconds > 0 else None}
        if self.cache_hits is not None:
            out |= {"cache_hits": self.cache_hits, "cache_misses": self.cache_misses}
        return out


def check_outcome_form(outcome: str) -> str:
    """``outcome`` if it is one of :data:`~cmp_bayes.replicate.answer_scoring.OUTCOMES`, else ConfigError."""
    if outcome not in OUTCOMES:
        raise ConfigError(f"reader outcome must be one of {list(OUTCOMES)}, got {outcome!r}")
    return outcome


def read_outcomes(
    steps: pd.DataFrame,
    contexts: pd.DataFrame,
    dataset: Dataset,
    reader: Reader,
    outcome: str = "fractional",
    progress: Progress | None = None,
) -> tuple[np.ndarray, ReadingSummary]:
    """The reader's outcome of every step (module docstring).

    Parameters
    ----------
    steps : pandas.DataFrame
        ``step``, ``query_id``: one row per step.
    contexts : pandas.DataFrame
        ``step``, ``slot``, ``memory_id``: the context rows of those steps.
    dataset : Dataset
        Where the question, answer and memory texts are.
    reader : Reader
    outcome : {"fractional", "binary"}
    progress : Progress, optional
        A bar over the distinct reads, with their rate and the time left.

    Returns
    -------
    outcomes : numpy.ndarray
        float64, shape ``(len(steps),)``, in ``steps``' row order, each in [0, 1].
    summary : ReadingSummary
    """
    check_outcome_form(outcome)
    ctx = contexts.sort_values(["step", "slot"], kind="stable")
    by_step: dict[int, tuple[str, ...]] = {
        int(t): tuple(str(m) for m in mids)
        for t, mids in ctx.groupby("step", sort=False)["memory_id"]
    }
    keys = [(str(qid), by_step.get(int(t), ())) for t, qid in zip(steps["step"], steps["query_id"], strict=True)]
    distinct = list(dict.fromkeys(keys))
    values, summary = score_contexts(dataset, distinct, reader, "reading", progress)
    scores = dict(zip(distinct, values.tolist(), strict=True))
    raw = np.array([scores[k] for k in keys], dtype=np.float64)
    out = np.array([binary_outcome(v) for v in raw], dtype=np.float64) if outcome == "binary" else raw
    summary = replace(summary, steps=len(keys))
    return out, summary


def score_contexts(
    dataset: Dataset,
    contexts: Sequence[tuple[str, Sequence[str]]],
    reader: Reader,
    what: str = "reading",
    progress: Progress | None = None,
) -> tuple[np.ndarray, ReadingSummary]:
    """Ask ``reader`` each (question id, memory ids in slot order) in ``contexts``, in order.

    The one loop over reader calls: :func:`read_outcomes` passes a log's
    distinct contexts, the reader calibration its designed ones.

    Parameters
    ----------
    dataset : Dataset
        Where the question, answer and memory texts are.
    contexts : sequence of (str, sequence of str)
    reader : Reader
    what : str
        The progress bar's label, after the reader's name.
    progress : Progress, optional
        A bar over the calls, with their rate and the time left.

    Returns
    -------
    scores : numpy.ndarray
        float64, shape ``(len(contexts),)``, each in [0, 1].
    summary : ReadingSummary
        ``steps`` and ``calls`` both ``len(contexts)``; cache hits and misses
        from a cached reader (its ``hits`` / ``misses`` counters before and after).
    """
    progress = progress or Progress.silent()
    memory_text = dict(zip(*(dataset.memories()[c].astype(str) for c in ("memory_id", "text")), strict=True))
    q = dataset.queries().assign(query_id=lambda d: d["query_id"].astype(str)).set_index("query_id")
    scores = np.empty(len(contexts), dtype=np.float64)
    hits0, misses0 = getattr(reader, "hits", None), getattr(reader, "misses", None)
    t0 = time.perf_counter()
    with progress.bar(f"{reader.name} {what}", total=len(contexts), unit="calls") as bar:
        for i, (qid, mids) in enumerate(contexts):
            row = q.loc[str(qid)]
            value = reader.score(str(row["text"]), [memory_text[str(m)] for m in mids], answer=str(row["answer"]))
            scores[i] = check_outcome(value, reader.name)
            bar.advance()
    seconds = time.perf_counter() - t0
    hits, misses = getattr(reader, "hits", None), getattr(reader, "misses", None)
    summary = ReadingSummary(
        len(contexts), len(contexts), seconds,
        None if hits is None or hits0 is None else int(hits - hits0),
        None if misses is None or misses0 is None else int(misses - misses0),
    )
    return scores, summary
