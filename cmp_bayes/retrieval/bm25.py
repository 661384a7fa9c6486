"""BM25 over one store with ``bm25s``: the default real retriever.

Tokenization (``bm25s.tokenize`` defaults, stated here because results
depend on it): lower-cased, tokens are runs of two or more word characters
(regex ``(?u)\\b\\w\\w+\\b``), English stop words removed (bm25s' list), no
stemming unless a ``stemmer`` callable (e.g. ``Stemmer.Stemmer("english").stemWords``
from PyStemmer) is given. Scoring: Lucene BM25 with ``k1=1.5``, ``b=0.75``.
The index is built per store (its own document frequencies), as a memory
system indexes its own store. Documents that share no token with the query
score 0 and are ranked after all others in store order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class BM25Retriever:
    """BM25 scorer (see the module docstring for tokenization and parameters).

    Parameters
    ----------
    k1, b : float
        BM25 saturation and length normalisation.
    stopwords : str or None
        bm25s stop-word list name (``"en"``) or None to keep every token.
    stemmer : callable, optional
        Maps a list of tokens to stems.
    """

    k1: float = 1.5
    b: float = 0.75
    stopwords: str | None = "en"
    stemmer: Callable[[list[str]], list[str]] | None = None
    name: str = "bm25"

    def scores(self, documents: Sequence[str], queries: Sequence[str]) -> np.ndarray:
        """BM25 scores, shape ``(len(queries), len(documents))``."""
        import bm25s

        out = np.zeros((len(queries), len(documents)), dtype=np.float64)
        if not documents or not queries:
            return out
        kw = {"stopwords": self.stopwords, "stemmer": self.stemmer, "show_progress": False}
        corpus = bm25s.tokenize(list(documents), return_ids=False, **kw)
        if not any(corpus):
            return out
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(bm25s.tokenize(list(documents), **kw), show_progress=False)
        vocab = model.vocab_dict
        for i, q in enumerate(bm25s.tokenize(list(queries), return_ids=False, **kw)):
            toks = [t for t in q if t in vocab]
            if toks:
                out[i] = model.get_scores(toks)
        return out
