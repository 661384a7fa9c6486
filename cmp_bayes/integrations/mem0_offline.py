"""Mem0 fully offline: an embedded Qdrant store and a local embedder, with no LLM and no network.

:func:`offline_memory` builds a ``mem0.Memory`` whose vector store is a Qdrant
folder on disk and whose embeddings come from any cmp_bayes embedder (the
``dense`` extra's int8 MiniLM by default); memories are added with
``infer=False`` so no LLM is called. :class:`~cmp_bayes.integrations.mem0.CMPMemory`
wraps it like any other ``mem0.Memory``.
"""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cmp_bayes.errors import ConfigError
from cmp_bayes.integrations.mem0 import INSTALL_HINT

if TYPE_CHECKING:  # pragma: no cover - typing only
    from cmp_bayes.retrieval.dense import Embedder


#: Base URL given to Mem0's OpenAI clients offline: nothing listens there, so an
#: accidental LLM call (``add(..., infer=True)``) fails at once instead of hanging.
OFFLINE_OPENAI_URL = "http://127.0.0.1:9/v1"


#: Placeholder key: ``Memory.from_config`` builds an OpenAI client even when it is never called.
OFFLINE_API_KEY = "sk-offline-cmp-bayes-not-a-key"


# --------------------------------------------------------------------- offline Mem0
def _embedding_dims(embedder: Embedder) -> int:
    dims = getattr(embedder, "dims", None)
    if dims is None:
        dims = int(np.asarray(embedder(["dimension probe"])).shape[1])
    return int(dims)


def offline_config(
    path: str | Path,
    embedder: Embedder | None = None,
    *,
    collection_name: str = "mem0",
    dims: int | None = None,
) -> dict[str, Any]:
    """``Memory.from_config`` settings for a Mem0 that never touches the network.

    Parameters
    ----------
    path : str or Path
        Folder of the store: Qdrant's embedded database in ``path/qdrant``,
        Mem0's history in ``path/history.db``.
    embedder : Embedder, optional
        Only used for its dimension (``dims`` attribute, else one probe call).
        Mem0 builds embedders by provider name only, so the embedder itself is
        installed on the built ``Memory`` by :func:`offline_memory`.
    collection_name : str
        Qdrant collection.
    dims : int, optional
        Embedding dimension (default: the embedder's, 384 without one).

    Returns
    -------
    dict
        Qdrant embedded on disk (``on_disk: true``); OpenAI LLM and embedder
        entries with a placeholder key and an unreachable local base URL
        (Mem0 insists on an LLM client; neither is called by ``add(...,
        infer=False)`` or ``search`` once :func:`offline_memory` swaps the embedder).
    """
    path = Path(path)
    if dims is None:
        dims = _embedding_dims(embedder) if embedder is not None else 384
    dummy = {"api_key": OFFLINE_API_KEY, "openai_base_url": OFFLINE_OPENAI_URL}
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": collection_name,
                "path": str(path / "qdrant"),
                "embedding_model_dims": int(dims),
                "on_disk": True,
            },
        },
        "llm": {"provider": "openai", "config": dict(dummy)},
        "embedder": {"provider": "openai", "config": {**dummy, "embedding_dims": int(dims)}},
        "history_db_path": str(path / "history.db"),
    }


def offline_memory(
    path: str | Path,
    embedder: Embedder | None = None,
    *,
    collection_name: str = "mem0",
    cache_size: int = 50_000,
) -> Any:
    """A ``mem0.Memory`` on :func:`offline_config`, embedding with ``embedder``.

    Parameters
    ----------
    path : str or Path
        Store folder (created).
    embedder : Embedder, optional
        ``embedder(texts) -> array (n, d)``; default the MiniLM ONNX embedder
        (:class:`cmp_bayes.retrieval.dense.MiniLMEmbedder`, extra ``dense``).
    collection_name : str
        Qdrant collection.
    cache_size : int
        Texts whose embeddings are kept (repeated queries are embedded once).

    Notes
    -----
    Mem0 reads ``MEM0_TELEMETRY`` and ``MEM0_DIR`` when it is first imported.
    If they are unset this sets ``MEM0_TELEMETRY=False`` and
    ``MEM0_DIR=<path>/mem0_home`` before importing it; if Mem0 was already
    imported with telemetry on, a :class:`ConfigError` says so (telemetry
    would try the network).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", str(path / "mem0_home"))
    try:
        import mem0
        from mem0.memory import telemetry
    except ImportError as exc:
        raise ConfigError(f"the Mem0 integration needs mem0ai: {INSTALL_HINT}") from exc
    if telemetry.MEM0_TELEMETRY:
        raise ConfigError(
            "Mem0 telemetry is on (it sends events over the network): set MEM0_TELEMETRY=False "
            "before mem0 is first imported"
        )
    if embedder is None:
        from cmp_bayes.retrieval.dense import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    memory = mem0.Memory.from_config(
        offline_config(path, embedder, collection_name=collection_name)
    )
    memory.embedding_model = mem0_embedding(embedder, cache_size=cache_size)
    return memory


def mem0_embedding(embedder: Embedder, cache_size: int = 50_000) -> Any:
    """Wrap a cmp_bayes :class:`Embedder` as a ``mem0.embeddings.base.EmbeddingBase``.

    Embeddings are cached per text (least recently used dropped beyond
    ``cache_size``): the embedder is deterministic, and a query asked again
    costs no model call.
    """
    return _embedding_class()(embedder, cache_size)


@functools.cache
def _embedding_class() -> type:
    from mem0.embeddings.base import EmbeddingBase

    class CMPEmbedding(EmbeddingBase):
        """Mem0 embedder backed by a cmp_bayes ``Embedder`` (cached per text)."""

        def __init__(self, embedder: Embedder, cache_size: int) -> None:
            super().__init__(None)
            self.embedder = embedder
            self.cache_size = int(cache_size)
            self._cache: OrderedDict[str, list[float]] = OrderedDict()

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            return self.embed_batch([text], memory_action)[0]

        def embed_batch(
            self, texts: Sequence[str], memory_action: str | None = "add"
        ) -> list[list[float]]:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if missing:
                vecs = np.asarray(self.embedder(missing), dtype=np.float64)
                for t, v in zip(missing, vecs, strict=True):
                    self._cache[t] = v.tolist()
            out = []
            for t in texts:
                self._cache.move_to_end(t)
                out.append(self._cache[t])
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return out

        def prime(self, texts: Sequence[str]) -> None:
            """Embed many texts in batches ahead of ``add`` / ``search`` calls."""
            self.embed_batch(list(texts))

    return CMPEmbedding
