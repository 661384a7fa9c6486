"""Calibration calls of a text reader: how its outcome depends on the evidence in the context.

A designed set of contexts, each asked of the reader once, measures what the
semi-synthetic :class:`~cmp_bayes.replicate.reader.ReaderModel` only states.
For every call (:func:`calibration_design`):

* a question of the benchmark (questions are dealt in turn, shuffled, so each
  gets about ``calls / questions`` calls);
* a context size ``B`` drawn uniformly from ``slots``;
* ``e``, how many of the question's ``n_q`` evidence memories are in the
  context, drawn uniformly from ``0 .. min(n_q, B)``, and which ones, at random;
* the other ``B - e`` slots filled with the retriever's highest-ranked
  non-evidence memories for that question (the distractors an experiment's
  context holds);
* the ``B`` memories in a random slot order.

Recorded per call: ``share = e / n_q`` (the evidence share, as the reader
model uses it), ``slots`` (``B``), ``position`` (the evidence's mean slot
scaled to [0, 1]: 0 first, 1 last; NaN without evidence) and the reader's
``score``. :func:`run_calibration` asks the reader;
:func:`~cmp_bayes.replicate.measured_reader.fit_reader_curve` fits the curve.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.datasets.base import Dataset
from cmp_bayes.errors import ConfigError
from cmp_bayes.progress import Progress
from cmp_bayes.replicate.measured_reader import SHARE_GRID, ReaderCurve, fit_reader_curve
from cmp_bayes.replicate.reader import Reader, ReaderModel
from cmp_bayes.replicate.reading import ReadingSummary, score_contexts
from cmp_bayes.retrieval.base import Retriever, rank_store

#: Columns of :func:`calibration_design`'s call table (``score`` added by :func:`run_calibration`).
CALL_COLUMNS: tuple[str, ...] = ("call", "store_id", "query_id", "slots", "n_evidence", "evidence_in_context",
                                 "share", "position")


def calibration_design(
    dataset: Dataset,
    retriever: Retriever,
    calls: int = 300,
    slots: Sequence[int] = (2, 4, 6),
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The calibration contexts (module docstring).

    Parameters
    ----------
    dataset : Dataset
        Questions with evidence are used; stores smaller than ``max(slots)`` are skipped.
    retriever : Retriever
        Orders each question's distractors.
    calls : int
        Contexts to build (>= 1).
    slots : sequence of int
        Context sizes ``B`` to draw from (each >= 1).
    seed : int

    Returns
    -------
    calls : pandas.DataFrame
        One row per call, columns :data:`CALL_COLUMNS`.
    contexts : pandas.DataFrame
        ``call``, ``slot``, ``memory_id``, ``evidence`` (bool): the context of every call, in slot order.

    Raises
    ------
    ConfigError
        No usable question, or bad ``calls`` / ``slots``.
    """
    sizes = sorted({int(b) for b in slots})
    if calls < 1 or not sizes or sizes[0] < 1:
        raise ConfigError(f"calibration needs calls >= 1 and slots >= 1, got calls={calls}, slots={list(slots)}")
    rng = np.random.default_rng([seed, 23])
    progress = progress or Progress.silent()
    questions: list[tuple[str, str, np.ndarray, np.ndarray]] = []  # store, query, memory ids by rank, evidence mask
    for store in progress.track(dataset.stores, "ranking stores", unit="stores"):
        if store.size < sizes[-1] or store.evidence.empty:
            continue
        ranks = rank_store(store, retriever)
        mids = ranks["memory"].to_numpy().astype(str)
        ev = store.evidence.groupby("query_id")["memory_id"].agg(lambda s: set(s.astype(str)))
        for i, qid in enumerate(ranks["query"].to_numpy().astype(str)):
            if qid not in ev.index:
                continue
            order = np.argsort(ranks.to_numpy()[i], kind="stable")
            by_rank = mids[order]
            questions.append((store.store_id, qid, by_rank, np.isin(by_rank, list(ev[qid]))))
    if not questions:
        raise ConfigError(f"{dataset.name}: no question with evidence in a store of at least {sizes[-1]} memories")
    deal = np.concatenate([rng.permutation(len(questions)) for _ in range(-(-calls // len(questions)))])[:calls]
    rows, ctx = [], []
    for c, qi in enumerate(deal):
        sid, qid, by_rank, is_ev = questions[qi]
        b = int(rng.choice(sizes))
        ev_idx = np.flatnonzero(is_ev)
        e = int(rng.integers(0, min(len(ev_idx), b) + 1))
        chosen = rng.choice(ev_idx, size=e, replace=False) if e else np.empty(0, dtype=np.int64)
        distract = np.flatnonzero(~is_ev)[: b - e]
        members = np.r_[chosen, distract]
        slot_of = rng.permutation(len(members))
        evid = np.r_[np.ones(e, dtype=bool), np.zeros(len(distract), dtype=bool)]
        order = np.argsort(slot_of)
        ctx.append(pd.DataFrame({"call": c, "slot": np.arange(len(members)), "memory_id": by_rank[members[order]],
                                 "evidence": evid[order]}))
        position = float(slot_of[:e].mean() / (len(members) - 1)) if e and len(members) > 1 else (0.0 if e else np.nan)
        rows.append((c, sid, qid, len(members), len(ev_idx), e, e / len(ev_idx), position))
    return pd.DataFrame(rows, columns=list(CALL_COLUMNS)), pd.concat(ctx, ignore_index=True)


def run_calibration(
    dataset: Dataset,
    calls: pd.DataFrame,
    contexts: pd.DataFrame,
    reader: Reader,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, ReadingSummary]:
    """Ask ``reader`` every calibration call
    (:func:`~cmp_bayes.replicate.reading.score_contexts`, each call asked once, in order).

    Parameters
    ----------
    dataset : Dataset
        Where question, answer and memory texts are.
    calls, contexts : pandas.DataFrame
        From :func:`calibration_design`.
    reader : Reader
        Usually a :class:`~cmp_bayes.replicate.reader_cache.CachedReader`
        (a rerun of the same design then reads nothing).

    Returns
    -------
    calls : pandas.DataFrame
        The input with a ``score`` column in [0, 1].
    summary : ReadingSummary
        The calls' wall time and, for a cached reader, cache hits and misses.
    """
    by_call = contexts.sort_values(["call", "slot"]).groupby("call")["memory_id"].agg(list)
    asked = [(str(qid), by_call[c]) for c, qid in zip(calls["call"], calls["query_id"], strict=True)]
    scores, summary = score_contexts(dataset, asked, reader, "calibration", progress)
    return calls.assign(score=scores), summary


@dataclass
class CalibrationResult:
    """A measured reader: the calibration calls' summary and the fitted curve.

    Attributes
    ----------
    dataset, retriever : str
    curve : ReaderCurve
    reading : dict
        ``calls``, ``seconds``, ``calls_per_s`` and, for a cached reader, ``cache_hits`` / ``cache_misses``.
    design : dict
        ``calls``, ``slots``, ``seed``.
    """

    dataset: str
    retriever: str
    curve: ReaderCurve
    reading: dict[str, Any]
    design: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``curve`` is what ``replicate experiment --reader measured --reader-curve`` reads,
        ``hand_picked`` the default reader model's curve at its mean base rate, for comparison."""
        hand = ReaderModel()
        base = hand.base_a / (hand.base_a + hand.base_b)
        return {
            "label": "reader-calibration",
            "dataset": self.dataset,
            "retriever": self.retriever,
            "reader": self.curve.reader,
            "design": self.design,
            "reading": self.reading,
            "curve": self.curve.to_dict(),
            "hand_picked": [{"gain": g, "share": s, "mean": float(np.clip(base + g * s, hand.floor, hand.ceil))}
                            for g in (0.6, 0.2) for s in SHARE_GRID],
        }

    def to_json(self) -> str:
        """One JSON object."""
        return json.dumps(self.to_dict(), indent=1, default=float)

    def to_text(self) -> str:
        """The coefficients and the curve at each B, as a table."""
        c = self.curve
        r = self.reading
        lines = [f"[reader-calibration] {self.dataset}, {c.reader}, {c.outcome} outcomes; {c.calls} calls over "
                 f"{c.questions} questions, B in {c.slots}; {r['seconds']:.0f} s"
                 + (f" ({r['cache_hits']} from the cache)" if r.get("cache_hits") is not None else ""),
                 f"  {'coefficient':<16}{'mean':>8}  90% interval",]
        for name, v in c.coefficients.items():
            lines.append(f"  {name:<16}{v['mean']:>8.3f}  [{v['low']:.3f}, {v['high']:.3f}]")
        lines.append(f"  fit: {c.fit_health}")
        lines.append("  mean score over questions (middle position), by B and evidence share:")
        lines.append("  " + f"{'B':>4}" + "".join(f"{s:>7.1f}" for s in SHARE_GRID[::2]))
        for b in c.slots:
            row = {round(p["share"], 2): p["mean"] for p in c.curve if p["slots"] == b}
            lines.append("  " + f"{b:>4}" + "".join(f"{row[round(s, 2)]:>7.3f}" for s in SHARE_GRID[::2]))
        lines.append("  hand-picked reader (mean base 0.2): gain 0.6 -> " + " ".join(
            f"{min(0.98, 0.2 + 0.6 * s):.2f}" for s in SHARE_GRID[::2]))
        return "\n".join(lines)


def calibrate(
    dataset: Dataset,
    retriever: Retriever,
    reader: Reader,
    calls: int = 300,
    slots: Sequence[int] = (2, 4, 6),
    outcome: str = "fractional",
    draws: int = 500,
    tune: int = 500,
    seed: int = 0,
    progress: Progress | None = None,
    question_slopes: bool = False,
) -> CalibrationResult:
    """Design the calls, ask the reader, fit the curve (:func:`calibration_design`,
    :func:`run_calibration`, :func:`~cmp_bayes.replicate.measured_reader.fit_reader_curve`)."""
    design, contexts = calibration_design(dataset, retriever, calls, slots, seed, progress)
    scored, summary = run_calibration(dataset, design, contexts, reader, progress)
    curve = fit_reader_curve(scored, dataset.name, reader.name, outcome, draws=draws, tune=tune, seed=seed,
                             question_slopes=question_slopes)
    # every call is one step here: the result's "reading" has no separate step count
    reading = {k: v for k, v in summary.to_dict().items() if k != "steps"}
    return CalibrationResult(dataset.name, retriever.name, curve, reading,
                             {"calls": calls, "slots": sorted({int(b) for b in slots}), "seed": seed})
