"""What a retriever is to cmp_bayes: a scorer of every memory of a store for every query.

A :class:`Retriever` turns a store's texts and the queries asked against it
into a score matrix (higher = more relevant). :func:`ranks_from_scores`
turns scores into the full 0-based ranking the exposure log's ``rank`` and
``ranking`` fields carry; ties are broken by store order (the memory's
``position``), so a retriever is deterministic. :func:`rank_store` does both
for a :class:`~cmp_bayes.datasets.base.Store` and returns an
``xarray.DataArray`` over ``(query, memory)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import xarray as xr

if TYPE_CHECKING:
    from cmp_bayes.datasets.base import Store


@runtime_checkable
class Retriever(Protocol):
    """Anything that scores documents for queries.

    Attributes
    ----------
    name : str
        Short name used in tables and log metadata (``bm25``, ``dense:<model>``).
    """

    name: str

    def scores(self, documents: Sequence[str], queries: Sequence[str]) -> np.ndarray:
        """Relevance scores, shape ``(len(queries), len(documents))``, float, higher is better."""
        ...


def ranks_from_scores(scores: np.ndarray) -> np.ndarray:
    """0-based rank of every document for every query (0 = best).

    Parameters
    ----------
    scores : numpy.ndarray, shape (queries, documents)

    Returns
    -------
    numpy.ndarray of int64, same shape: ``ranks[q, d]`` is document ``d``'s
    place in query ``q``'s ranking; ties keep document order (stable sort).
    """
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.empty_like(order)
    rows = np.arange(scores.shape[0])[:, None]
    ranks[rows, order] = np.arange(scores.shape[1])[None, :]
    return ranks.astype(np.int64)


def rank_store(store: Store, retriever: Retriever) -> xr.DataArray:
    """Rank every memory of ``store`` for each of its queries.

    Returns
    -------
    xarray.DataArray of int64, dims ``(query, memory)``, coordinates the
    store's query and memory ids (memories in store order), named ``rank``.
    """
    mem = store.memories.sort_values("position")
    scores = retriever.scores(mem["text"].tolist(), store.queries["text"].tolist())
    return xr.DataArray(
        ranks_from_scores(scores),
        dims=("query", "memory"),
        coords={
            "query": store.queries["query_id"].to_numpy(dtype=object),
            "memory": mem["memory_id"].to_numpy(dtype=object),
        },
        name="rank",
        attrs={"retriever": retriever.name},
    )


def get_retriever(name: str, **options: Any) -> Retriever:  # options: the retriever's own, checked there
    """A retriever by name: ``bm25`` (default) or ``dense`` (MiniLM ONNX, optional extra)."""
    from cmp_bayes.errors import ConfigError

    if name == "bm25":
        from cmp_bayes.retrieval.bm25 import BM25Retriever

        return BM25Retriever(**options)
    if name == "dense":
        from cmp_bayes.retrieval.dense import DenseRetriever, MiniLMEmbedder

        return DenseRetriever(MiniLMEmbedder(**options))
    raise ConfigError(f"unknown retriever {name!r}; choose bm25 or dense")
