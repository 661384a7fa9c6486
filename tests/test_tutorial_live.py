"""The live Mem0 tutorial (docs/tutorials/live_mem0.py), run end to end.

A real offline Mem0 store, additions and deletions during the design, a
restart, an outcome that never arrives, a real fit, decisions and an apply
that deletes the forgotten memories from Mem0. The checks are exact
bookkeeping (what the log and the store hold afterwards), except that the
fit must pass its sampler checks for anything to be forgotten.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("MEM0_TELEMETRY"):
    os.environ["MEM0_TELEMETRY"] = "False"
if not os.environ.get("MEM0_DIR"):
    os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="cmp-mem0-home-")

pytest.importorskip("mem0", reason="mem0ai is not installed (pip install 'cmp-bayes[mem0]')")
pytest.importorskip("onnxruntime", reason="the tutorial embeds with the dense extra")

STEPS = 800
SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "live_mem0.py"


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("live_mem0_tutorial", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    root = tmp_path_factory.mktemp("tutorial")
    out = mod.main(root, steps=STEPS, seed=0)
    out["root"] = root
    out["facts"] = mod.FACTS
    out["preferences"] = mod.PREFERENCES
    yield out
    shutil.rmtree(root, ignore_errors=True)


def test_log_reads_with_the_stores_lifecycle(tutorial: dict[str, Any]) -> None:
    from cmp_bayes.log.read import read_log

    root = tutorial["root"]
    log = read_log(root / "log")  # the apply's deletions included
    mem = log.memories.set_index("memory_id")
    added = mem[mem["text"] == "Caroline adopted a cat named Oscar."]
    assert len(added) == 1 and int(added["created_step"].iloc[0]) == 40
    gone = mem[mem["text"] == tutorial["facts"][-1]]
    assert int(gone["deleted_step"].iloc[0]) == 60
    # the outcome that never arrived expired; every other step is in steps.jsonl
    cancelled = [json.loads(x) for x in (root / "log" / "cancelled.jsonl").read_text().splitlines()]
    assert [c["step"] for c in cancelled] == [tutorial["missing_step"]]
    assert cancelled[0]["cancelled"] == "expired"
    assert sorted(log.steps["step"]) == [t for t in range(STEPS) if t != tutorial["missing_step"]]
    design = json.loads((root / "log" / "design.json").read_text())
    assert design["store"] == {"user_id": "alice"} and len(design["rounds"]) >= 2
    # the memory added at step 40 joins the pool of the first round that starts after it
    mid = added.index[0]
    for r in design["rounds"]:
        assert (mid in r["pool"]) == (r["start"] > 40)


def test_apply_removes_forgotten_memories_from_mem0(tutorial: dict[str, Any]) -> None:
    from cmp_bayes.log.read import read_log

    decisions, applied, left = tutorial["decisions"], tutorial["applied"], tutorial["left"]
    assert decisions.health.ok, decisions.health.problems
    forgets = set(decisions.forgets["memory_id"].astype(str))
    assert forgets, decisions.summary()
    # the truth of the toy: the four preferences help every plan (+0.25 each when read), the
    # rest never matter. Over six runs the preferences' smallest P(useful) was 0.10 against a
    # forget threshold of 1/21 = 0.048, and at most 3 of the 27 others were kept.
    text = {str(m): t for m, t in decisions.texts.items()}
    assert not {m for m in forgets if text[m] in tutorial["preferences"]}, "a useful memory was forgotten"
    others = [m for m in text if text[m] not in tutorial["preferences"]]
    assert sum(m in forgets for m in others) >= len(others) // 2
    status = dict(zip(applied["memory_id"], applied["status"], strict=True))
    assert set(status) == forgets
    # only the memory the tutorial deleted itself at step 60 can have been gone already
    assert {m for m, st in status.items() if st != "deleted"} <= {
        m for m, st in status.items() if st == "already deleted"
    }
    assert sum(st == "already deleted" for st in status.values()) <= 1
    assert not forgets & left  # gone from Mem0
    mem = read_log(tutorial["root"] / "log").memories.set_index("memory_id")
    last = int(read_log(tutorial["root"] / "log").steps["step"].max())
    assert all(int(mem.loc[m, "deleted_step"]) == last + 1 for m, st in status.items() if st == "deleted")
    # capacity 24: retained + deferred at most 24 unless the guards refuse more forgets
    kept = len(decisions) - len(forgets)
    assert kept <= 24 or decisions.capacity_shortfall > 0
