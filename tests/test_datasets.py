"""Benchmark adapters checked against evidence counted by hand from the raw JSON.

Each test re-reads the raw file with plain ``json`` (no adapter code) for a few
specific question ids and compares with the adapter's stores.
"""

from __future__ import annotations

import json
import lzma

import pytest
from _replication_fixtures import (
    HOTPOTQA,
    LOCOMO,
    LONGMEMEVAL_ORACLE,
    LONGMEMEVAL_S,
    MUSIQUE,
    MUSIQUE_KAG,
    need,
)

from cmp_bayes.datasets import load_dataset
from cmp_bayes.datasets.hotpotqa import load_hotpotqa
from cmp_bayes.datasets.locomo import load_locomo, normalize_evidence
from cmp_bayes.datasets.longmemeval import load_longmemeval
from cmp_bayes.datasets.musique import load_musique
from cmp_bayes.errors import ConfigError


@pytest.fixture(scope="module")
def locomo_raw() -> dict:
    return {s["sample_id"]: s for s in json.loads(need(LOCOMO).read_text())}


@pytest.fixture(scope="module")
def locomo_turns():
    return load_locomo(need(LOCOMO), conversations=["conv-26", "conv-42", "conv-43", "conv-49", "conv-50"])


def _evidence(store, qid: str) -> list[str]:
    ev = store.evidence
    return sorted(ev.loc[ev["query_id"] == qid, "memory_id"].tolist())


def test_normalize_evidence_forms() -> None:
    assert normalize_evidence("D8:6; D9:17") == ["D8:6", "D9:17"]
    assert normalize_evidence("D9:1 D4:4 D4:6") == ["D9:1", "D4:4", "D4:6"]
    assert normalize_evidence("D:11:26") == ["D11:26"]
    assert normalize_evidence("D30:05") == ["D30:5"]
    assert normalize_evidence("D") == []
    assert normalize_evidence("D3:7") == ["D3:7"]


def test_locomo_store_sizes_and_queries_match_raw(locomo_raw, locomo_turns) -> None:
    for store in locomo_turns.stores:
        conv = locomo_raw[store.store_id]["conversation"]
        n_turns = sum(len(v) for k, v in conv.items() if k.startswith("session_") and isinstance(v, list))
        assert store.size == n_turns
        assert len(store.queries) == len(locomo_raw[store.store_id]["qa"])
    conv42 = locomo_turns.store("conv-42")
    assert conv42.size == 629  # counted: sessions 1-29 of conv-42


def test_locomo_well_formed_evidence_equals_raw(locomo_raw, locomo_turns) -> None:
    # conv-42's first 20 items carry only well-formed ids: evidence is the raw list, deduplicated.
    store = locomo_turns.store("conv-42")
    for i, qa in enumerate(locomo_raw["conv-42"]["qa"][:20]):
        assert _evidence(store, f"conv-42/q{i}") == sorted({f"conv-42/{d}" for d in qa["evidence"]})


def test_locomo_malformed_evidence_hand_counted(locomo_turns) -> None:
    s26, s42, s43, s49, s50 = (locomo_turns.store(c) for c in ("conv-26", "conv-42", "conv-43", "conv-49", "conv-50"))
    assert _evidence(s26, "conv-26/q37") == ["conv-26/D8:6", "conv-26/D9:17"]
    # 'D' dropped: two of three strings remain
    assert _evidence(s42, "conv-42/q88") == ["conv-42/D1:18", "conv-42/D1:20"]
    # 'D10:19' names no turn (session 10 has 18): six of seven remain
    assert len(_evidence(s42, "conv-42/q58")) == 6
    assert "conv-42/D10:19" not in set(s42.memories["memory_id"])
    assert "conv-43/D11:26" in _evidence(s43, "conv-43/q18")
    assert len(_evidence(s43, "conv-43/q18")) == 7
    assert _evidence(s49, "conv-49/q31") == ["conv-49/D4:4", "conv-49/D4:6", "conv-49/D9:1"]
    assert len(_evidence(s49, "conv-49/q46")) == 4
    assert _evidence(s50, "conv-50/q69") == ["conv-50/D30:5"]
    notes = "\n".join(locomo_turns.notes)
    assert "D10:19" in notes and "'D' -> []" in notes and "D30:05" in notes


def test_locomo_all_nine_malformed_strings_are_noted() -> None:
    d = load_locomo(need(LOCOMO))
    assert len(d.notes) == 9
    assert d.summary()["queries"] == 1986


def test_locomo_session_granularity(locomo_raw) -> None:
    d = load_locomo(need(LOCOMO), granularity="session", conversations=["conv-42"])
    s = d.stores[0]
    conv = locomo_raw["conv-42"]["conversation"]
    n_sessions = sum(1 for k, v in conv.items() if k.startswith("session_") and isinstance(v, list))
    assert s.size == n_sessions
    # q0's evidence sessions, from its raw dia ids
    raw = locomo_raw["conv-42"]["qa"][0]["evidence"]
    assert _evidence(s, "conv-42/q0") == sorted({f"conv-42/S{d.split(':')[0][1:]}" for d in raw})


def test_locomo_unknown_conversation_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="conv-99"):
        load_locomo(need(LOCOMO), conversations=["conv-99"])


def _raw_s_records(n: int) -> list[dict]:
    with lzma.open(need(LONGMEMEVAL_S), "rt") as f:
        return [json.loads(next(f)) for _ in range(n)]


def test_longmemeval_turn_evidence_hand_counted() -> None:
    raw = _raw_s_records(4)
    d = load_longmemeval(LONGMEMEVAL_S, limit=4, sample="first", require_evidence=False)
    assert [s.store_id for s in d.stores] == [r["question_id"] for r in raw]
    for r, s in zip(raw, d.stores, strict=True):
        n_turns = sum(len(x) for x in r["haystack_sessions"])
        n_ev = sum(1 for x in r["haystack_sessions"] for t in x if t.get("has_answer") is True)
        assert s.size == n_turns
        assert len(s.evidence) == n_ev
        assert s.queries["group"].tolist() == [r["question_type"]]
    # question 01493427: 47 sessions, evidence 2 turns in its 2 answer sessions
    first = d.store("01493427")
    assert len(first.evidence) == 2
    assert {m.split("/")[1] for m in first.evidence["memory_id"]} == {"answer_a7b44747_1", "answer_a7b44747_2"}


def test_longmemeval_session_evidence_is_answer_sessions() -> None:
    raw = _raw_s_records(3)
    d = load_longmemeval(LONGMEMEVAL_S, granularity="session", limit=3, sample="first")
    for r, s in zip(raw, d.stores, strict=True):
        assert s.size == len(r["haystack_session_ids"])
        assert sorted(m.split("/")[1] for m in s.evidence["memory_id"]) == sorted(r["answer_session_ids"])


def test_longmemeval_oracle_json_list_and_type_filter() -> None:
    raw = [r for r in json.loads(need(LONGMEMEVAL_ORACLE).read_text()) if r["question_type"] == "multi-session"][:2]
    d = load_longmemeval(LONGMEMEVAL_ORACLE, limit=2, sample="first", question_types=["multi-session"])
    assert [s.store_id for s in d.stores] == [r["question_id"] for r in raw]
    assert all(q == "multi-session" for q in d.queries()["group"])


def test_longmemeval_stratified_sample_covers_question_types() -> None:
    # oracle file (small) with the same records: 12 questions over 6 types, proportional allocation
    d = load_longmemeval(need(LONGMEMEVAL_ORACLE), limit=12, seed=1)
    groups = d.queries()["group"].value_counts()
    assert len(d.stores) == 12
    assert set(groups.index) >= {"multi-session", "temporal-reasoning", "knowledge-update"}
    assert groups.max() <= 4  # multi-session holds 133/470 of the evidence questions: 12 * 0.28 -> 3 or 4
    again = load_longmemeval(LONGMEMEVAL_ORACLE, limit=12, seed=1)
    assert [s.store_id for s in again.stores] == [s.store_id for s in d.stores]


def test_hotpotqa_supporting_titles_hand_counted() -> None:
    raw = [json.loads(line) for line in need(HOTPOTQA).open()][:5]
    d = load_hotpotqa(HOTPOTQA, limit=5)
    for r, s in zip(raw, d.stores, strict=True):
        titles = [c[0] for c in r["context"]]
        support = {t for t, _ in r["supporting_facts"]}
        expected = sorted(f"{r['_id']}/p{i}" for i, t in enumerate(titles) if t in support)
        assert _evidence(s, r["_id"]) == expected
        assert s.size == len(titles)
    first = d.stores[0]
    assert _evidence(first, "5a7f6fd75542992e7d278cfa") == ["5a7f6fd75542992e7d278cfa/p4", "5a7f6fd75542992e7d278cfa/p6"]


def test_musique_supporting_paragraphs_hand_counted() -> None:
    raw = [json.loads(line) for line in need(MUSIQUE).open()][:5]
    d = load_musique(MUSIQUE, limit=5)
    for r, s in zip(raw, d.stores, strict=True):
        sup = sorted(f"{r['id']}/p{p['idx']}" for p in r["paragraphs"] if p["is_supporting"])
        assert _evidence(s, r["id"]) == sup
        assert len(sup) == int(r["id"][0])  # supporting paragraphs = hops (id prefix '2hop', '3hop1', ...)
        assert s.queries["group"].iloc[0] == r["id"].split("__")[0]
    kag = load_musique(need(MUSIQUE_KAG), limit=3)
    assert len(kag.stores) == 3 and all(s.size == 20 for s in kag.stores)


def test_labels_all_pairs_and_registry() -> None:
    d = load_dataset("hotpotqa", need(HOTPOTQA), limit=2)
    lab = d.stores[0].labels(all_pairs=True)
    assert len(lab) == d.stores[0].size and lab["required"].sum() == 2
    assert d.stores[0].labels()["required"].all()
    with pytest.raises(ConfigError, match="unknown dataset"):
        load_dataset("nope", HOTPOTQA)
    with pytest.raises(ConfigError, match="granularity"):
        load_hotpotqa(HOTPOTQA, granularity="turn")
