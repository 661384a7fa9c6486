"""Retrievers: rank conventions, BM25 on toy and real stores, the Embedder protocol, MiniLM."""

from __future__ import annotations

import numpy as np
import pytest
from _replication_fixtures import LOCOMO, need

from cmp_bayes.datasets.base import EVIDENCE_COLUMNS, MEMORY_COLUMNS, QUERY_COLUMNS, Store, frame
from cmp_bayes.datasets.locomo import load_locomo
from cmp_bayes.errors import ConfigError
from cmp_bayes.retrieval.base import Retriever, get_retriever, rank_store, ranks_from_scores
from cmp_bayes.retrieval.bm25 import BM25Retriever
from cmp_bayes.retrieval.dense import DenseRetriever, Embedder


def test_ranks_from_scores_breaks_ties_by_store_order() -> None:
    s = np.array([[0.0, 2.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    r = ranks_from_scores(s)
    assert r.tolist() == [[2, 0, 3, 1], [0, 1, 2, 3]]
    assert r.dtype == np.int64


def _toy_store() -> Store:
    texts = [
        "The cat sat on the mat.",
        "I adopted a golden retriever puppy named Max last spring.",
        "Paris is the capital of France.",
        "My dog Max loves the beach.",
    ]
    mem = frame(
        [{"memory_id": f"s/m{i}", "position": i, "session": "s", "text": t} for i, t in enumerate(texts)],
        MEMORY_COLUMNS,
    )
    q = frame(
        [
            {"query_id": "s/q0", "text": "What is the name of my dog?", "group": "g", "answer": "Max"},
            {"query_id": "s/q1", "text": "capital of France", "group": "g", "answer": "Paris"},
        ],
        QUERY_COLUMNS,
    )
    ev = frame([{"query_id": "s/q0", "memory_id": "s/m3"}], EVIDENCE_COLUMNS)
    return Store("s", mem, q, ev)


def test_bm25_ranks_lexical_matches_first() -> None:
    ranks = rank_store(_toy_store(), BM25Retriever())
    assert ranks.dims == ("query", "memory")
    assert int(ranks.sel(query="s/q0", memory="s/m3")) == 0  # shares "dog"
    assert int(ranks.sel(query="s/q1", memory="s/m2")) == 0  # "capital", "france"
    # every row is a permutation of 0..n-1
    assert all(sorted(row) == list(range(4)) for row in ranks.to_numpy().tolist())


def test_bm25_query_with_no_known_token_keeps_store_order() -> None:
    s = BM25Retriever().scores(["alpha beta", "gamma delta"], ["zzz qqq", "the"])
    assert np.all(s == 0)
    assert ranks_from_scores(s)[0].tolist() == [0, 1]


class _BagOfWords:
    """A stand-in embedder: counts of a fixed vocabulary (any callable fits the protocol)."""

    name = "bow"
    vocab = ("dog", "max", "cat", "france", "paris", "capital")

    def __call__(self, texts):
        return np.array([[t.lower().count(w) for w in self.vocab] for t in texts], dtype=float)


def test_dense_retriever_with_a_plugged_embedder() -> None:
    emb = _BagOfWords()
    assert isinstance(emb, Embedder)
    r = DenseRetriever(emb)
    assert isinstance(r, Retriever) and r.name == "dense:bow"
    ranks = rank_store(_toy_store(), r)
    assert int(ranks.sel(query="s/q1", memory="s/m2")) == 0
    s = r.scores(["dog max", "cat"], ["dog"])
    np.testing.assert_allclose(s, [[1 / np.sqrt(2), 0.0]])


def test_get_retriever_rejects_unknown() -> None:
    with pytest.raises(ConfigError, match="bm25 or dense"):
        get_retriever("tfidf")


def test_minilm_embedder_offline() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    from cmp_bayes.retrieval.dense import MiniLMEmbedder

    try:
        emb = MiniLMEmbedder()
    except ConfigError as exc:  # the weights/tokenizer packages of the 'dense' extra are absent
        pytest.skip(str(exc))
    v = emb(["My dog is called Max.", "The name of my puppy is Max.", "Stock markets fell sharply today."])
    assert v.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sim = v @ v.T
    assert sim[0, 1] > sim[0, 2] + 0.2  # paraphrase far closer than an unrelated sentence


def test_bm25_on_real_store_is_deterministic_permutation() -> None:
    d = load_locomo(need(LOCOMO), conversations=["conv-26"])
    store = d.stores[0]
    a = rank_store(store, BM25Retriever())
    b = rank_store(store, BM25Retriever())
    assert (a == b).all()
    assert a.shape == (len(store.queries), store.size)
    assert np.array_equal(np.sort(a.to_numpy()[0]), np.arange(store.size))
