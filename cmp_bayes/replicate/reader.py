"""Readers: what maps a step's (question, context texts, gold answer) to an outcome in [0, 1].

Two kinds of reader:

* **Text readers** (the :class:`Reader` protocol): read the texts and score the
  answer. :class:`~cmp_bayes.replicate.llm_reader.LLMReader` runs a small GGUF
  model on the CPU; :class:`CallableReader` wraps any Python function (the LLM
  a user runs in production); :class:`~cmp_bayes.replicate.reader_cache.CachedReader`
  stores the calls of either on disk. Results with a text reader are labelled
  ``real-reader``.
* The **semi-synthetic** :class:`ReaderModel` below: no text is read.

The semi-synthetic reader model: there is no LLM here. On real stores, with real queries, real evidence and a
real retriever, the outcome of a step is drawn from a stated model:

    p_t = clip(base_q + gain * e_t / n_q + eps_t, floor, ceil)
    outcome_t ~ Bernoulli(p_t)

* ``e_t``: how many of query ``q``'s evidence memories are in the step's
  context; ``n_q``: how many the benchmark lists (so ``e_t / n_q`` is the
  share of the question's evidence the reader sees);
* ``base_q ~ Beta(base_a, base_b)`` per query (how guessable the answer is
  without evidence; default mean 0.2);
* ``eps_t ~ Normal(0, noise)`` step noise (reader stochasticity beyond the
  Bernoulli draw).

Nominal truth: an evidence memory of ``q`` adds ``gain / n_q`` to the success
probability when in the context, every other memory adds 0 (before clipping).
Results that use this reader are **semi-synthetic** and labelled so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cmp_bayes.errors import CmpBayesError


class ReaderError(CmpBayesError, ValueError):
    """A text reader returned something that is not an outcome in [0, 1]."""


@runtime_checkable
class Reader(Protocol):
    """A text reader: scores the answer it gives to a question from context texts.

    Attributes
    ----------
    name : str
        Says which reader produced an outcome (``"llm:<model file stem>"``,
        ``"callable:<function name>"``); written in the result JSON and part of
        the cache key, so two readers must not share a name.
    """

    name: str

    def score(self, question: str, contexts: Sequence[str], answer: str) -> float:
        """Outcome in [0, 1] of answering ``question`` from ``contexts`` (slot order), ``answer`` the gold one."""
        ...


def check_outcome(value: Any, reader: str) -> float:
    """``value`` as a float in [0, 1] (True / False read as 1 / 0); :class:`ReaderError` naming ``reader`` otherwise (NaN included)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ReaderError(f"reader {reader} returned {value!r}, not a number in [0, 1]") from None
    if not (math.isfinite(x) and 0.0 <= x <= 1.0):
        raise ReaderError(f"reader {reader} returned {value!r}, outside [0, 1]")
    return x


class CallableReader:
    """A text reader from any function ``fn(question, contexts, answer) -> float`` in [0, 1].

    Parameters
    ----------
    fn : callable
        Called as ``fn(question, list_of_context_texts, answer)``; ``answer``
        is the gold answer, for the function to score its own reply against.
    name : str, optional
        Default ``"callable:<fn.__qualname__>"`` (the cache key uses it: name
        a changed function anew, or the cache returns the old one's scores).

    Raises
    ------
    ReaderError
        From :meth:`score`, when ``fn`` returns a value outside [0, 1] or not a number.
    """

    def __init__(self, fn: Callable[[str, list[str], str], float], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"CallableReader needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or f"callable:{getattr(fn, '__qualname__', type(fn).__name__)}"

    def score(self, question: str, contexts: Sequence[str], answer: str) -> float:
        """``fn(question, list(contexts), answer)``, checked to lie in [0, 1]."""
        return check_outcome(self.fn(question, list(contexts), answer), self.name)

    def __repr__(self) -> str:
        return f"CallableReader({self.name!r})"


@dataclass(frozen=True)
class ReaderModel:
    """Parameters of the reader (see the module docstring).

    Attributes
    ----------
    gain : float
        Success-probability gain with all of the query's evidence in context.
    noise : float
        Sd of the per-step noise on the probability.
    base_a, base_b : float
        Beta prior of each query's evidence-free success rate.
    floor, ceil : float
        Clipping bounds of the probability.
    """

    gain: float = 0.6
    noise: float = 0.05
    base_a: float = 2.0
    base_b: float = 8.0
    floor: float = 0.02
    ceil: float = 0.98

    def base_rates(self, n_queries: int, rng: np.random.Generator) -> np.ndarray:
        """Per-query evidence-free success rates, shape ``(n_queries,)``."""
        return rng.beta(self.base_a, self.base_b, size=n_queries)

    def probability(self, base: np.ndarray, share: np.ndarray, noise: np.ndarray | None = None,
                    position: np.ndarray | None = None) -> np.ndarray:
        """Success probability per step from base rate and evidence share (arrays of one shape).

        ``position`` (where the evidence sits in the context) is ignored: this
        model states no position effect; the measured reader's has one.
        """
        p = base + self.gain * share
        if noise is not None:
            p = p + noise
        return np.clip(p, self.floor, self.ceil)

    def outcomes(self, base: np.ndarray, share: np.ndarray, rng: np.random.Generator,
                 position: np.ndarray | None = None) -> np.ndarray:
        """Binary outcomes (float64 0/1) for steps with these base rates and evidence shares (``position`` ignored)."""
        eps = rng.normal(0.0, self.noise, size=np.shape(share)) if self.noise > 0 else None
        return (rng.random(np.shape(share)) < self.probability(base, share, eps)).astype(np.float64)

    def describe(self) -> str:
        """One line stating the model, for reports."""
        return (
            f"semi-synthetic reader: p = clip(base_q + {self.gain} * evidence share + N(0, {self.noise}^2), "
            f"{self.floor}, {self.ceil}), base_q ~ Beta({self.base_a}, {self.base_b})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return asdict(self)
