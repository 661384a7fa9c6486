"""CMP inside a real Mem0 store, offline (Qdrant embedded in a temporary folder).

One session-scoped run: a small dialogue (48 turns written for this test, so
no licensed data is needed) goes into Mem0 with ``add(..., infer=False)``;
``CMPMemory`` then answers 48 searches with ``B = 4``, ``k = 2``. The checks
are exact (design arithmetic and equality with Mem0's own answers), so no
statistical tolerance is involved.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if not os.environ.get("MEM0_TELEMETRY"):
    os.environ["MEM0_TELEMETRY"] = "False"  # before mem0 is imported: telemetry tries the network
if not os.environ.get("MEM0_DIR"):  # Mem0 writes a config file there at import
    os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="cmp-mem0-home-")
    atexit.register(shutil.rmtree, os.environ["MEM0_DIR"], True)

pytest.importorskip("mem0", reason="mem0ai is not installed (pip install 'cmp-bayes[mem0]')")

from cmp_bayes.design.scheduler import ExposureScheduler  # noqa: E402
from cmp_bayes.errors import ConfigError  # noqa: E402
from cmp_bayes.integrations.mem0 import CMPMemory, store_snapshot  # noqa: E402
from cmp_bayes.integrations.mem0_offline import offline_config, offline_memory  # noqa: E402
from cmp_bayes.log.append import LogWriter  # noqa: E402

B, K = 4, 2
STEPS = 48
USER = "alice"

_PEOPLE = ["Caroline", "Melanie", "Jon", "Gina"]
_ACTS = [
    "painted a sunrise over the lake",
    "ran a half marathon in Boston",
    "adopted a grey cat named Oscar",
    "started a bakery selling sourdough",
    "went to a pottery class on Tuesday",
    "read a novel about deep sea divers",
    "planted tomatoes and basil in the garden",
    "learned three chords on the guitar",
    "visited her grandmother in Lisbon",
    "fixed the leaking kitchen sink",
    "joined a volunteer group at the shelter",
    "cooked a spicy lentil curry for friends",
]
_QUERIES = [
    "Who painted a sunrise?",
    "Where did someone run a half marathon?",
    "What is the name of the cat?",
    "What does the bakery sell?",
    "What did they plant in the garden?",
    "Which city did someone visit to see a grandmother?",
]


def _dialogue() -> list[str]:
    """48 distinct turns: each person mentions each activity once."""
    return [f"{p}: Last week I {a}." for a in _ACTS for p in _PEOPLE]


class HashEmbedder:
    """Stand-in embedder (bag of hashed words, 384 dims) when the MiniLM extra is missing."""

    name = "hash-bow-384"
    dims = 384

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims))
        for i, t in enumerate(texts):
            for w in t.lower().replace("?", " ").replace(".", " ").replace(":", " ").split():
                # hash() varies with PYTHONHASHSEED, but within one run it is fixed
                out[i, hash(w) % self.dims] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def _embedder() -> Any:
    try:
        from cmp_bayes.retrieval.dense import MiniLMEmbedder

        return MiniLMEmbedder()
    except Exception:  # the dense extra is optional: the wrapper does not depend on it
        return HashEmbedder()


@pytest.fixture(scope="session")
def mem0_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("mem0")
    memory = offline_memory(root / "store", _embedder())
    turns = _dialogue()
    memory.embedding_model.prime(turns + _QUERIES)
    added = memory.add([{"role": "user", "content": t} for t in turns], user_id=USER, infer=False)
    # another user's memories share the collection; filters must keep them out
    memory.add([{"role": "user", "content": "Bob: I collect stamps."}], user_id="bob", infer=False)
    ids = [r["id"] for r in added["results"]]
    store = store_snapshot(memory, {"user_id": USER})
    sched = ExposureScheduler(B, K, ids, STEPS, seed=3)
    writer = LogWriter(root / "log", design=sched.design(), memories=store)
    cmp = CMPMemory(memory, sched, writer, slots=B)
    rng = np.random.default_rng(0)
    answers, queries = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a shortfall warning would break the exact-count checks
        for t in range(STEPS):
            q = _QUERIES[t % len(_QUERIES)]
            res = cmp.search(
                q, filters={"user_id": USER}, query_id=f"q{t % len(_QUERIES)}", group="demo"
            )
            answers.append(res)
            queries.append(q)
            cmp.report_outcome(res["cmp"]["step"], float(rng.random() < 0.5))
    cmp.close()
    yield {
        "root": root,
        "memory": memory,
        "ids": ids,
        "sched": sched,
        "cmp": cmp,
        "answers": answers,
        "queries": queries,
        "turns": turns,
    }
    memory.close()  # releases Qdrant's folder lock


def test_exposure_counts_and_propensities_are_the_schedulers(mem0_run: dict[str, Any]) -> None:
    from cmp_bayes.log.read import read_log

    log = read_log(mem0_run["root"] / "log")
    sched, ids = mem0_run["sched"], mem0_run["ids"]
    assert log.n_steps == STEPS
    exp = log.contexts[log.contexts["source"] == "exposure"]
    counts = Counter(exp["memory_id"].astype(str))
    # balanced: T*k = 96 slots over 48 pool memories -> exactly 2 each
    assert sum(counts.values()) == STEPS * K
    assert {m: counts.get(m, 0) for m in ids} == {
        m: int(n) for m, n in zip(ids, sched.counts, strict=True)
    }
    assert set(counts.values()) == {STEPS * K // len(ids)}
    # logged propensity = design pool = n_m / T
    prop = exp.groupby("memory_id")["propensity"].agg(["min", "max"])
    for m, row in prop.iterrows():
        assert row["min"] == row["max"] == log.design["pool"][m] == counts[m] / STEPS
    assert sched.shortfall == {}


def test_log_is_read_and_counted(mem0_run: dict[str, Any]) -> None:
    from cmp_bayes.log.read import read_log
    from cmp_bayes.statistics import exposure_stats

    log = read_log(mem0_run["root"] / "log")
    stats = exposure_stats(log)
    assert sorted(stats["memory"].to_numpy().astype(str)) == sorted(mem0_run["ids"])
    assert int(stats["exposed"].sum()) == STEPS * K
    assert bool(stats["in_pool"].all())
    # every step: B - k retriever slots then k exposure slots, outcomes as reported
    per_step = log.contexts.groupby("step")["source"].agg(list)
    assert all(s == ["retriever"] * (B - K) + ["exposure"] * K for s in per_step)
    assert set(log.steps["group"]) == {"demo"}


def test_retriever_slots_are_mem0s_own_results(mem0_run: dict[str, Any]) -> None:
    memory = mem0_run["memory"]
    direct: dict[str, dict[str, Any]] = {}
    for q, res in zip(mem0_run["queries"], mem0_run["answers"], strict=True):
        if q not in direct:
            direct[q] = memory.search(q, filters={"user_id": USER}, top_k=B - K)
        own = direct[q]["results"]
        assert len(own) == B - K
        assert res["results"][: B - K] == own  # same dicts, same order, same scores
        exposed = res["results"][B - K :]
        assert [e["id"] for e in exposed] == res["cmp"]["exposed"]
        assert len(exposed) == K
        assert not {e["id"] for e in exposed} & {o["id"] for o in own}
        for e in exposed:
            assert e["metadata"]["cmp"]["source"] == "exposure"
            assert e["metadata"]["cmp"]["step"] == res["cmp"]["step"]
            assert e["memory"] == memory.get(e["id"])["memory"]
            assert e["user_id"] == USER  # another user's memory is never exposed


def test_ranking_logged_once_per_query(mem0_run: dict[str, Any]) -> None:
    from cmp_bayes.log.read import read_log

    log = read_log(mem0_run["root"] / "log")
    ranked_steps = sorted(set(log.rankings["step"]))
    assert ranked_steps == list(range(len(_QUERIES)))  # first ask of each of the 6 queries
    for step in ranked_steps:
        ranking = log.rankings[log.rankings["step"] == step]["memory_id"].astype(str).tolist()
        top = log.contexts[(log.contexts["step"] == step) & (log.contexts["source"] == "retriever")]
        assert ranking[: B - K] == top["memory_id"].astype(str).tolist()
        assert set(ranking) <= set(mem0_run["ids"])  # the filter kept "bob" out


def test_delegation_and_refusals(mem0_run: dict[str, Any], tmp_path: Path) -> None:
    cmp, memory, ids = mem0_run["cmp"], mem0_run["memory"], mem0_run["ids"]
    assert cmp.get(ids[0]) == memory.get(ids[0])
    assert cmp.get_all.__self__ is memory  # every method but the lifecycle ones is Mem0's own
    assert cmp.add.__self__ is cmp  # add / update / delete are recorded in the log
    with pytest.raises(ConfigError, match="top_k"):
        cmp.search("anything", filters={"user_id": USER}, top_k=3)
    other = ExposureScheduler(B, K, ids[:5], 10)
    with pytest.raises(ConfigError, match="design"):
        CMPMemory(memory, other, LogWriter(tmp_path / "l", design=mem0_run["sched"].design()))
    cfg = offline_config(tmp_path, dims=384)
    assert cfg["vector_store"]["config"]["on_disk"] is True
    assert cfg["llm"]["config"]["openai_base_url"].startswith("http://127.0.0.1")
