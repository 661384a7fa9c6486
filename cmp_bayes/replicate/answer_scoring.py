"""Scoring a reader's answer against the gold answer (SQuAD-style), as an outcome in [0, 1].

Normalisation (:func:`normalize_answer`, the SQuAD v1.1 evaluation script's):
lower case, punctuation removed, the articles "a", "an", "the" removed, white
space collapsed.

* :func:`token_f1`: harmonic mean of token precision and recall between the
  normalised answer and gold tokens (bag of tokens, multiplicity counted);
  0 when either is empty.
* :func:`contains_answer`: the normalised gold answer occurs in the normalised
  answer as a whole-token run ("paris" in "it is paris", not "par" in "paris").
  Small instruction models answer in sentences ("The capital is Paris."),
  which F1 alone punishes for the extra tokens.
* :func:`score_answer`: **1.0 when the answer contains the gold answer, else
  its token F1** (the fractional outcome).
* :func:`binary_outcome`: 1.0 when that score is >= 0.5 (so: contained, or
  F1 >= 0.5), else 0.0 (the binary outcome; the issue's "correct" count).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Final

#: Outcome forms of a text reader's scores in an experiment.
OUTCOMES: Final[tuple[str, ...]] = ("fractional", "binary")

#: F1 at or above which an answer counts as correct in the binary form.
BINARY_THRESHOLD: Final[float] = 0.5

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (SQuAD v1.1)."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(answer: str, gold: str) -> float:
    """Token F1 in [0, 1] of ``answer`` against ``gold`` after :func:`normalize_answer`."""
    a, g = normalize_answer(answer).split(), normalize_answer(gold).split()
    if not a or not g:
        return 0.0
    common = sum((Counter(a) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(g)
    return 2 * precision * recall / (precision + recall)


def contains_answer(answer: str, gold: str) -> bool:
    """Whether the normalised gold answer is a whole-token run of the normalised answer (False for an empty gold)."""
    a, g = normalize_answer(answer), normalize_answer(gold)
    if not g:
        return False
    # padding with spaces makes the match respect token boundaries
    return f" {g} " in f" {a} "


def score_answer(answer: str, gold: str) -> float:
    """1.0 when ``answer`` contains ``gold`` (:func:`contains_answer`), else :func:`token_f1`."""
    return 1.0 if contains_answer(answer, gold) else token_f1(answer, gold)


def binary_outcome(score: float) -> float:
    """1.0 when ``score >= 0.5`` (contained, or token F1 >= 0.5), else 0.0."""
    return 1.0 if score >= BINARY_THRESHOLD else 0.0
