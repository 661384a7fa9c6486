"""Real retrievers over benchmark stores: BM25 (default) and dense (optional extra)."""

from __future__ import annotations

from cmp_bayes.retrieval.base import Retriever, get_retriever, rank_store, ranks_from_scores

__all__ = ["Retriever", "get_retriever", "rank_store", "ranks_from_scores"]
