"""diagnose / ``cmp-bayes diagnose`` on logs written by an independent script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cmp_bayes.cli.main import main


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _retr(m: str, r: int) -> dict:
    return {"memory_id": m, "source": "retriever", "rank": r}


def _expo(m: str, p: float) -> dict:
    return {"memory_id": m, "source": "exposure", "propensity": p}


@pytest.fixture(scope="module")
def hand_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six memories, four steps, two queries; every count below is worked out by hand."""
    root = tmp_path_factory.mktemp("hand") / "log"
    root.mkdir()
    steps = [
        {
            "step": 0,
            "query_id": "q1",
            "outcome": 1,
            "context": [_retr("m1", 0), _expo("m2", 0.5)],
            "ranking": ["m1", "m3", "m4", "m6"],
        },
        {
            "step": 1,
            "query_id": "q2",
            "outcome": 0,
            "context": [_retr("m3", 0), _expo("m6", 0.25)],
            "ranking": ["m3", "m1", "m6"],
        },
        {
            "step": 2,
            "query_id": "q1",
            "outcome": 1,
            "context": [_retr("m1", 0), _expo("m2", 0.5)],
            "ranking": ["m1", "m3", "m5", "m6", "m4"],
        },
        {
            "step": 3,
            "query_id": "q2",
            "outcome": 0,
            "context": [_retr("m3", 0), _expo("m5", 0.25)],
            "ranking": ["m3", "m5", "m1", "m6"],
        },
    ]
    _write_jsonl(root / "steps.jsonl", steps)
    (root / "design.json").write_text(
        json.dumps(
            {
                "slots": 2,
                "exposure_slots": 1,
                "assignment": "balanced",
                "steps": 4,
                "seed": 1,
                "pool": {"m2": 0.5, "m5": 0.25, "m6": 0.25},
            }
        )
    )
    _write_jsonl(
        root / "memories.jsonl",
        [
            {"memory_id": "m1", "created_step": 0, "deleted_step": None},
            {"memory_id": "m2", "created_step": 0, "deleted_step": None},
            {"memory_id": "m3", "created_step": 0, "deleted_step": None},
            {"memory_id": "m4", "created_step": 0, "deleted_step": 3},
            {"memory_id": "m5", "created_step": 2, "deleted_step": None},
            {"memory_id": "m6", "created_step": 0, "deleted_step": None},
        ],
    )
    _write_jsonl(
        root / "labels.jsonl",
        [
            {"query_id": "q1", "memory_id": "m4", "required": True},
            {"query_id": "q1", "memory_id": "m1", "required": True},
            {"query_id": "q2", "memory_id": "m1", "required": True},
            {"query_id": "q2", "memory_id": "m6", "required": True},
            {"query_id": "q2", "memory_id": "m3", "required": False},
            {"query_id": "q1", "memory_id": "m5", "required": True},
        ],
    )
    return root


def test_hand_counts_json(hand_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.read_bytes() for p in hand_log.iterdir()}
    assert main(["diagnose", str(hand_log), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON object on one line
    s = json.loads(out)
    # memories: m2, m5, m6 exposed; m1, m3 only retrieved; m4 never in a context
    assert (s["memories"], s["identified"], s["retrieved_only"], s["unidentified"]) == (6, 3, 2, 1)
    # required (any label): m1, m4, m5, m6; never retrieved by the retriever: m4, m5, m6
    assert s["required"] == 4
    assert s["required_unidentified_fraction"] == pytest.approx(3 / 4)
    # pairs in the store: all 12 (m4 is in the store at steps 0-2, m5 at 2-3: both queries)
    # identified: (m2,q1) (m5,q2) (m6,q2); retrieved-only: (m1,q1) (m3,q2); 7 unidentified
    p = s["pairs"]
    assert (p["pairs"], p["identified"], p["retrieved_only"], p["unidentified"]) == (12, 3, 2, 7)
    # required pairs (m4,q1) (m1,q1) (m1,q2) (m6,q2) (m5,q1); never retrieved: all but (m1,q1)
    assert p["required"] == 5
    assert p["required_unidentified_fraction"] == pytest.approx(4 / 5)
    r = s["ranking"]
    # median ranks: m4 [2,4] -> 3, m6 [3,2,3,3] -> 3, m5 [2,1] -> 1.5; median of those = 3
    assert r["required_unretrieved_median_rank"] == 3.0
    # pairs: (m4,q1) 3, (m6,q2) [2,3] 2.5, (m5,q1) 2, (m1,q2) [1,2] 1.5 -> median 2.25
    assert r["pairs_required_unretrieved_median_rank"] == 2.25
    # store size per step: 5, 5, 6 (m5 created, m4 not yet deleted), 5
    assert r["median_store_size"] == 5.0
    assert s["operations_check"]["verdict"] == "passes"
    assert s["retrieval_check"]["verdict"] == "fails"
    # the input is untouched
    assert {p.name: p.read_bytes() for p in hand_log.iterdir()} == before


def test_hand_counts_table_and_frames(hand_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cmp_bayes.diagnostics.positivity import diagnose
    from cmp_bayes.log.read import read_log

    rep = diagnose(read_log(hand_log))
    m = rep.memories.set_index("memory_id")
    assert m.loc["m4", "in_store"] == 3 and m.loc["m5", "in_store"] == 2
    assert list(m["status"]) == [
        "retrieved-only",
        "identified",
        "retrieved-only",
        "unidentified",
        "identified",
        "identified",
    ]
    assert list(m["required"]) == [True, False, False, True, True, True]
    pr = rep.pairs.set_index(["memory_id", "query_id"])
    assert pr.loc[("m4", "q2"), "in_store"] == 1 and pr.loc[("m5", "q1"), "in_store"] == 1
    assert pr.loc[("m1", "q2"), "status"] == "unidentified"
    assert main(["diagnose", str(hand_log)]) == 0
    text = capsys.readouterr().out
    assert "unidentified" in text and "PASSES" in text and "FAILS" in text
    assert "3 of a median store of 5" in text


def test_bare_steps_file_without_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "steps.jsonl"
    _write_jsonl(
        f,
        [
            {
                "step": 0,
                "query_id": "a",
                "outcome": 0.5,
                "context": [_retr("x", 0)],
                "ranking": ["x", "y"],
            },
            {"step": 5, "query_id": "b", "outcome": 1, "context": [_retr("y", 0)]},
        ],
    )
    assert main(["diagnose", str(f), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["memories"], s["identified"], s["retrieved_only"], s["unidentified"]) == (2, 0, 2, 0)
    assert s["required"] is None and s["required_unidentified_fraction"] is None
    assert s["pairs"]["pairs"] == 4 and s["pairs"]["unidentified"] == 2
    assert s["retrieval_check"]["verdict"] == "passes"


def test_missing_log_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err
