"""LogWriter in a live system: pending steps in live_state.json, late outcomes after a restart,
cancel / expire, the store's lifecycle in memories.jsonl, rounds- and window-aware checks, SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import cmp_bayes.log.lifecycle as lc
from cmp_bayes.atomic import atomic_path
from cmp_bayes.errors import LogError, TornLineWarning
from cmp_bayes.log import live_state as ls
from cmp_bayes.log.append import LogWriter
from cmp_bayes.log.layout import log_checksum
from cmp_bayes.log.read import read_log

DESIGN = {"slots": 3, "exposure_slots": 1, "assignment": "balanced", "steps": 100, "seed": 0,
          "pool": {"m1": 0.5, "m2": 0.5}}
ROUNDS = {"slots": 3, "exposure_slots": 1, "assignment": "balanced",
          "rounds": [{"start": 0, "steps": 4, "seed": 0, "pool": {"m1": 0.5, "m2": 0.5}},
                     {"start": 4, "steps": 4, "seed": 1, "pool": {"m1": 0.25, "m3": 0.75}}]}


def _ctx(i: int) -> list[dict]:
    return [{"memory_id": "m0", "source": "retriever", "rank": 0},
            {"memory_id": f"m{1 + i % 2}", "source": "exposure", "propensity": 0.5}]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _state(path: Path) -> dict:
    return json.loads((path / "live_state.json").read_text())


# ------------------------------------------------------------- live_state.json
def test_state_saved_at_every_operation_with_the_hooks_extra(tmp_path: Path, monkeypatch) -> None:
    writes: list[str] = []
    real = ls.write_state
    monkeypatch.setattr(ls, "write_state", lambda f, text, fsync: (writes.append(text), real(f, text, fsync)))
    place = {"deck": 0}
    w = LogWriter(tmp_path, design=DESIGN, state_hook=lambda: dict(place))
    assert w.saved_extra is None and writes == []
    place["deck"] = 1
    a = w.begin("qa", _ctx(0))
    assert len(writes) == 1
    st = _state(tmp_path)
    assert st["version"] == 1 and st["extra"] == {"deck": 1}
    assert st["pending"][str(a)]["line"] == {"step": 0, "query_id": "qa", "outcome": None, "context": _ctx(0)}
    assert isinstance(st["pending"]["0"]["begun_at"], float)
    place["deck"] = 2
    b = w.begin("qb", _ctx(1))
    w.finish(b, 1)  # waits for step 0: only in live_state.json
    assert len(writes) == 3 and (tmp_path / "steps.jsonl").read_text() == ""
    assert _state(tmp_path)["pending"]["1"]["line"]["outcome"] == 1
    w.cancel(a, "user left")
    assert len(writes) == 4
    assert [x["step"] for x in _lines(tmp_path / "steps.jsonl")] == [1]
    assert _state(tmp_path)["pending"] == {} and _state(tmp_path)["extra"] == {"deck": 2}
    w.append("qc", 0, _ctx(0))  # nothing pending before or after, same extra: nothing to rewrite
    assert len(writes) == 4
    place["deck"] = 3
    w.append("qd", 1, _ctx(1))  # one operation, one write
    assert len(writes) == 5 and _state(tmp_path)["extra"] == {"deck": 3}
    w.close()
    # begun_at is the writer's bookkeeping, never part of a step line
    assert all("begun_at" not in x for x in _lines(tmp_path / "steps.jsonl") + _lines(tmp_path / "cancelled.jsonl"))


def test_pending_survive_close_and_finish_after_restart(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN, state_hook=lambda: {"scheduler": "at step 3"})
    a = w.begin("qa", _ctx(0), group="g", ranking=["m0", "m1"])
    b = w.append("qb", 1, _ctx(1))
    c = w.begin("qc", _ctx(0))
    with pytest.warns(UserWarning, match=r"steps \[0, 1, 2\].*live_state.json.*finish\(step, outcome\).*cancel\(step, reason\)"):
        w.close()
    assert (tmp_path / "steps.jsonl").read_text() == ""
    w = LogWriter(tmp_path)
    assert w.saved_extra == {"scheduler": "at step 3"}
    assert w.pending == [a, b, c] and w.next_step == 3
    w.finish(a, 0.25)  # the late outcome, after a restart
    assert [x["step"] for x in _lines(tmp_path / "steps.jsonl")] == [0, 1]
    with pytest.raises(LogError, match="already in steps.jsonl"):
        w.finish(a, 1)
    w.finish(c, 1)
    w.close()
    log = read_log(tmp_path)
    assert log.steps["step"].tolist() == [0, 1, 2]
    assert log.steps["outcome"].tolist() == [0.25, 1, 1]
    assert _state(tmp_path)["pending"] == {}
    # with nothing new to say, reopening leaves the saved extra in place
    assert LogWriter(tmp_path).saved_extra == {"scheduler": "at step 3"}


class _Crash(Exception):
    pass


def _crash_at_state_write(monkeypatch, n: int) -> None:
    """Make the ``n``-th state rewrite from now die before it happens (a kill after the lines)."""
    real, seen = ls.write_state, [0]

    def write(f: Path, text: str, fsync: bool) -> None:
        seen[0] += 1
        if seen[0] == n:
            raise _Crash
        real(f, text, fsync)

    monkeypatch.setattr(ls, "write_state", write)


def test_reopen_reconciles_a_kill_between_the_line_and_the_state(tmp_path: Path, monkeypatch) -> None:
    w = LogWriter(tmp_path, design=DESIGN, state_hook=lambda: {"ops": len(w.pending)})
    for i in range(4):
        w.begin(f"q{i}", _ctx(i))
    w.finish(1, 1)
    w.finish(2, 0)
    _crash_at_state_write(monkeypatch, 1)
    with pytest.raises(_Crash):
        w.finish(0, 1)  # steps 0-2 reach steps.jsonl, the state still says all four wait
    assert [x["step"] for x in _lines(tmp_path / "steps.jsonl")] == [0, 1, 2]
    assert sorted(_state(tmp_path)["pending"]) == ["0", "1", "2", "3"]
    monkeypatch.undo()
    w = LogWriter(tmp_path)
    assert w.pending == [3] and w.next_step == 4  # written ones dropped, the one in neither file kept
    assert sorted(_state(tmp_path)["pending"]) == ["3"]
    _crash_at_state_write(monkeypatch, 1)
    with pytest.raises(_Crash):
        w.cancel(3, "timeout")  # its cancelled.jsonl line is written, the state is not
    monkeypatch.undo()
    w = LogWriter(tmp_path)
    assert w.pending == [] and w.cancelled == {3: "timeout"} and w.next_step == 4
    assert w.append("q", 1, _ctx(0)) == 4
    w.close()
    assert read_log(tmp_path).steps["step"].tolist() == [0, 1, 2, 4]  # the gap is the cancelled step


def test_a_begin_cut_short_leaves_no_step_and_the_old_extra(tmp_path: Path, monkeypatch) -> None:
    deck = {"n": 0}
    w = LogWriter(tmp_path, design=DESIGN, state_hook=lambda: dict(deck))
    deck["n"] = 1
    w.begin("q0", _ctx(0))
    _crash_at_state_write(monkeypatch, 1)
    deck["n"] = 2
    with pytest.raises(_Crash):
        w.begin("q1", _ctx(1))
    monkeypatch.undo()
    w = LogWriter(tmp_path)
    # the scheduler's place and the pending steps were saved together: both from before step 1
    assert w.saved_extra == {"n": 1} and w.pending == [0] and w.next_step == 1
    with pytest.raises(LogError, match="never begun"):
        w.finish(1, 1)


def test_torn_pending_line_is_written_again_on_reopen(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN)
    a, b, c = (w.begin(f"q{i}", _ctx(i)) for i in range(3))
    w.finish(b, 1)
    w.finish(c, 0)
    state = (tmp_path / "live_state.json").read_bytes()
    w.finish(a, 1)
    w.close()
    # as if killed while writing step 2's line, before the state rewrite
    steps = tmp_path / "steps.jsonl"
    good = steps.read_bytes().splitlines(keepends=True)
    steps.write_bytes(b"".join(good[:2]) + good[2][:10])
    (tmp_path / "live_state.json").write_bytes(state)
    with pytest.warns(TornLineWarning, match=r"steps.jsonl, line 3"):
        w = LogWriter(tmp_path)
    # step 2 had its outcome in the state and steps 0, 1 are on disk: it goes out again at once
    assert w.pending == []
    w.close()
    assert [x["step"] for x in _lines(steps)] == [0, 1, 2]
    assert [x["outcome"] for x in _lines(steps)] == [1, 1, 0]


def test_state_of_another_log_is_refused(tmp_path: Path) -> None:
    with LogWriter(tmp_path, design=DESIGN) as w:
        w.begin("q", _ctx(0))
        w.begin("q", _ctx(1))
        w.finish(0, 1)
        w.cancel(1, "gone")
        w.append("q", 1, _ctx(0))
    (tmp_path / "cancelled.jsonl").unlink()  # step 1 is now in neither file, below the last step
    (tmp_path / "live_state.json").write_text(json.dumps(
        {"version": 1, "pending": {"1": {"line": {"step": 1, "query_id": "q", "outcome": None, "context": []},
                                         "begun_at": 0.0}}, "extra": None}))
    with pytest.raises(LogError, match="pending but steps.jsonl already goes past it"):
        LogWriter(tmp_path)
    (tmp_path / "live_state.json").write_text(json.dumps({"version": 2, "pending": {}}))
    with pytest.raises(LogError, match="live_state.json, field 'version'"):
        LogWriter(tmp_path)


# ------------------------------------------------------------- cancel / expire
def test_cancel_writes_its_reason_and_unblocks_later_steps(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN)
    a = w.begin("qa", _ctx(0), group="g", ranking=["m0"])
    b = w.append("qb", 1, _ctx(1))
    assert _lines(tmp_path / "steps.jsonl") == []
    w.cancel(a, "no answer from the user")
    assert [x["step"] for x in _lines(tmp_path / "steps.jsonl")] == [b]
    assert _lines(tmp_path / "cancelled.jsonl") == [
        {"step": 0, "query_id": "qa", "outcome": None, "group": "g", "context": _ctx(0), "ranking": ["m0"],
         "cancelled": "no answer from the user"}]
    with pytest.raises(LogError, match="was cancelled .* cancelled.jsonl"):
        w.finish(a, 1)
    with pytest.raises(LogError, match="already in steps.jsonl"):
        w.cancel(b, "late")
    c = w.begin("qc", _ctx(0))
    with pytest.raises(LogError, match="reason"):
        w.cancel(c, "")
    w.cancel(c, "bad")
    w.close()
    log = read_log(tmp_path)  # live_state.json and cancelled.jsonl are not part of the log
    assert log.steps["step"].tolist() == [1]
    checksum = log_checksum(tmp_path)
    (tmp_path / "live_state.json").unlink()
    (tmp_path / "cancelled.jsonl").unlink()
    assert log_checksum(tmp_path) == checksum


def test_expire_after_steps(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN, expire_after_steps=2)
    w.begin("q0", _ctx(0))
    w.begin("q1", _ctx(1))
    w.finish(1, 1)
    assert w.pending == [0, 1]
    w.begin("q2", _ctx(0))  # the second step after step 0
    assert w.cancelled == {0: "expired"} and w.pending == [2]
    assert [x["step"] for x in _lines(tmp_path / "steps.jsonl")] == [1]
    w.append("q3", 0, _ctx(1))
    assert w.pending == [2, 3]  # only one step after 2 so far; 3 waits for it
    with pytest.warns(UserWarning, match="waiting for the outcome of \\[2\\]"):
        w.close()
    w = LogWriter(tmp_path, expire_after_steps=2)  # the count goes on after a restart
    w.append("q4", 1, _ctx(0))
    assert w.cancelled == {0: "expired", 2: "expired"} and w.pending == []
    w.close()
    assert read_log(tmp_path).steps["step"].tolist() == [1, 3, 4]


def test_expire_after_seconds_across_a_restart(tmp_path: Path) -> None:
    now = [1000.0]
    w = LogWriter(tmp_path, design=DESIGN, expire_after_seconds=60)
    w._clock = lambda: now[0]
    w.begin("q0", _ctx(0))
    now[0] += 30
    w.begin("q1", _ctx(1))
    assert w.expire() == [] and w.pending == [0, 1]
    assert _state(tmp_path)["pending"]["0"]["begun_at"] == 1000.0
    with pytest.warns(UserWarning, match="live_state.json"):
        w.close()
    w = LogWriter(tmp_path, expire_after_seconds=60)
    w._clock = lambda: now[0]
    now[0] += 40  # step 0 has waited 70 s, step 1 40 s
    w.finish(1, 1)  # step 1's own outcome is kept; step 0 expires, so step 1 goes out
    assert w.cancelled == {0: "expired"} and w.pending == []
    w.begin("q2", _ctx(0))
    now[0] += 61
    assert w.expire() == [2]
    w.close()
    assert [x["cancelled"] for x in _lines(tmp_path / "cancelled.jsonl")] == ["expired", "expired"]
    assert read_log(tmp_path).steps["step"].tolist() == [1]


def test_expiry_settings_checked(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="expire_after_steps"):
        LogWriter(tmp_path, expire_after_steps=0)
    with pytest.raises(LogError, match="expire_after_seconds"):
        LogWriter(tmp_path, expire_after_seconds=-1)


# ------------------------------------------------------------------ lifecycle
def test_store_lifecycle_in_memories_jsonl(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN, memories=[{"memory_id": m, "created_step": 0, "text": f"fact {m}"}
                                                   for m in ("m0", "m1", "m2")])
    w.append("q", 1, _ctx(0))
    w.add_memory("m9", text="Caroline moved to Boston.", meta={"mem0": {"hash": "abc"}})
    assert w.memory_known("m9") and not w.memory_known("m8")
    assert w.memory_text("m9") == "Caroline moved to Boston." and w.memory_text("m0") == "fact m0"
    w.append("q", 0, _ctx(1) + [{"memory_id": "m9", "source": "retriever", "rank": 1}])
    w.delete_memory("m2")  # out of the store from the next step on
    w.append("q", 1, _ctx(0))
    w.close()
    mems = {r["memory_id"]: r for r in _lines(tmp_path / "memories.jsonl")}
    assert mems["m9"] == {"memory_id": "m9", "created_step": 1, "deleted_step": None,
                          "text": "Caroline moved to Boston.", "meta": {"mem0": {"hash": "abc"}}}
    assert mems["m2"]["deleted_step"] == 2 and mems["m0"]["deleted_step"] is None
    w = LogWriter(tmp_path)  # loaded again
    assert w.memory_known("m2") and w.memory_text("m9") == "Caroline moved to Boston."
    with pytest.raises(LogError, match=r"memories.jsonl, field 'memory_id'.*re-adding a deleted id is not allowed: pick a new id"):
        w.add_memory("m2")
    with pytest.raises(LogError, match=r"memories.jsonl, field 'memory_id'.*already in the store"):
        w.add_memory("m9")
    with pytest.raises(LogError, match=r"memories.jsonl, field 'memory_id'.*never added"):
        w.delete_memory("m8")
    with pytest.raises(LogError, match=r"memories.jsonl, field 'deleted_step'.*already deleted"):
        w.delete_memory("m2")
    w.add_memory("m10", created_step=20)
    with pytest.raises(LogError, match=r"memories.jsonl, field 'deleted_step'.*before its creation at step 20"):
        w.delete_memory("m10", step=5)
    with pytest.raises(LogError, match="memories.jsonl"):
        w.memory_text("m8")
    w.close()
    log = read_log(tmp_path)
    assert set(log.memories["memory_id"]) == {"m0", "m1", "m2", "m9", "m10"}
    # write_memories still replaces the whole store
    w = LogWriter(tmp_path, memories=[{"memory_id": "m0", "created_step": 0}])
    assert not w.memory_known("m9") and w.memory_text("m0") is None
    w.close()


def test_a_crash_leaves_memories_jsonl_whole(tmp_path: Path, monkeypatch) -> None:
    w = LogWriter(tmp_path, memories=[{"memory_id": "m0", "created_step": 0}])
    before = (tmp_path / "memories.jsonl").read_bytes()

    def dying(target: Path, text: str) -> Path:
        with atomic_path(target) as tmp:
            tmp.write_text(text[: len(text) // 2])
            raise _Crash

    monkeypatch.setattr(lc, "write_text_atomic", dying)
    with pytest.raises(_Crash):
        w.add_memory("m1", text="x" * 100)
    assert (tmp_path / "memories.jsonl").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".memories")]


# -------------------------------------------------------------------- checks
def test_rounds_design_checks_the_pool_of_the_steps_round(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=ROUNDS)
    for i in range(4):
        w.append("q", 1, _ctx(i))
    with pytest.raises(LogError, match=r"round 1's pool \(0.25 there\)"):
        w.append("q", 1, _ctx(4))  # m1 has 0.5 in round 0, 0.25 in round 1
    with pytest.raises(LogError, match=r"round 1's pool \(not in it\)"):
        w.append("q", 1, [{"memory_id": "m2", "source": "exposure", "propensity": 0.5}])
    for _ in range(4):
        w.append("q", 0, [{"memory_id": "m3", "source": "exposure", "propensity": 0.75}])
    with pytest.raises(LogError, match=r"field 'step'.*falls in no round.*write_design"):
        w.append("q", 0, [{"memory_id": "m0", "source": "retriever", "rank": 0}])
    more = json.loads(json.dumps(ROUNDS))
    more["rounds"].append({"start": 8, "steps": 4, "seed": 2, "pool": {"m4": 1.0}})
    w.write_design(more)
    assert w.append("q", 1, [{"memory_id": "m4", "source": "exposure", "propensity": 1.0}]) == 8
    w.close()
    with pytest.raises(LogError, match="design.json"):
        w.write_design({**ROUNDS, "pool": {"m1": 0.5}})  # rounds beside a top-level pool
    # an open-ended design before its first round is laid out
    w = LogWriter(tmp_path / "empty", design={**ROUNDS, "rounds": []})
    with pytest.raises(LogError, match=r"field 'step'.*falls in no round of design.json \(it has none yet\)"):
        w.begin("q", [{"memory_id": "m0", "source": "retriever", "rank": 0}])
    assert w.pending == [] and w.next_step == 0
    w.close()


WINDOW = {"slots": 4, "exposure_slots": 2, "assignment": "window", "window": 3, "pool_slots": 1,
          "steps": 10, "seed": 0, "pool": {"p1": 0.5, "p2": 0.5}}
RANKING = ["r0", "r1", "w0", "w1", "w2", "x0"]  # B - k = 2: ranks 2 .. 4 are the window


def _wctx(window_slot: dict | None = None, pool: str = "p1") -> list[dict]:
    ctx = [{"memory_id": "r0", "source": "retriever", "rank": 0},
           {"memory_id": "r1", "source": "retriever", "rank": 1},
           {"memory_id": pool, "source": "exposure", "propensity": 0.5, "arm": "pool"}]
    return ctx + ([window_slot] if window_slot else [])


def _slot(m: str, p: float) -> dict:
    return {"memory_id": m, "source": "exposure", "propensity": p, "arm": "window"}


def test_window_design_slots(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=WINDOW)
    assert w.append("q", 1, _wctx(_slot("w1", 1 / 3)), ranking=RANKING) == 0
    # a pool memory in the window is not in W_t (rule 3): the window is w0, w2
    rk = ["r0", "r1", "w0", "p1", "w2"]
    assert w.append("q", 1, _wctx(_slot("w2", 0.5)), ranking=rk) == 1
    with pytest.raises(LogError, match=r"context\[3\].propensity.*\|W_t\| = 2"):
        w.append("q", 1, _wctx(_slot("w2", 1 / 3)), ranking=rk)
    with pytest.raises(LogError, match=r"context\[3\].memory_id.*not in this step's window"):
        w.append("q", 1, _wctx(_slot("x0", 1 / 3)), ranking=RANKING)
    # |W_t| = 1 <= k - j: exposed with propensity 1
    assert w.append("q", 0, _wctx(_slot("w0", 1.0)), ranking=["r0", "r1", "w0"]) == 2
    # without a ranking W_t cannot be rebuilt: only (0, 1] is checked
    assert w.append("q", 0, _wctx(_slot("zz", 0.1))) == 3
    with pytest.raises(LogError, match=r"context\[3\].propensity"):
        w.append("q", 0, _wctx(_slot("zz", 0.0)))
    bad = _wctx(_slot("w1", 1 / 3))
    del bad[2]["arm"]
    with pytest.raises(LogError, match=r"context\[2\].arm.*window design every exposure slot needs 'arm'"):
        w.append("q", 1, bad, ranking=RANKING)
    with pytest.raises(LogError, match="2 window slots"):
        w.append("q", 1, _wctx(_slot("w1", 1 / 3))[:2] + [_slot("w0", 1 / 3), _slot("w1", 1 / 3)], ranking=RANKING)
    two_pool = _wctx() + [{"memory_id": "p2", "source": "exposure", "propensity": 0.5, "arm": "pool"}]
    with pytest.raises(LogError, match="2 pool slots"):
        w.append("q", 1, two_pool, ranking=RANKING)
    with pytest.raises(LogError, match=r"context\[2\].propensity.*pool"):
        w.append("q", 1, _wctx(pool="w0"), ranking=RANKING)
    w.close()


def test_window_uses_the_store_and_ranking_length(tmp_path: Path) -> None:
    mems = [{"memory_id": m, "created_step": 0} for m in ["r0", "r1", "w0", "w1", "w2", "x0", "p1", "p2"]]
    w = LogWriter(tmp_path, design=WINDOW, memories=mems)
    w.delete_memory("w1", step=0)  # in the store for no step: not in any window
    with pytest.raises(LogError, match=r"not in this step's window"):
        w.append("q", 1, _wctx(_slot("w1", 0.5)), ranking=RANKING)
    assert w.append("q", 1, _wctx(_slot("w2", 0.5)), ranking=RANKING) == 0
    with pytest.raises(LogError, match=r"field 'ranking'.*ranks 0 .. 4"):
        w.append("q", 1, _wctx(_slot("w0", 1.0)), ranking=["r0", "r1", "w0"])
    w.close()


def test_arm_outside_window_designs(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN)
    ok = [{"memory_id": "m1", "source": "exposure", "propensity": 0.5, "arm": "pool"}]
    assert w.append("q", 1, ok) == 0
    with pytest.raises(LogError, match="window design"):
        w.append("q", 1, [{"memory_id": "m1", "source": "exposure", "propensity": 0.5, "arm": "window"}])
    with pytest.raises(LogError, match="arm must be one of"):
        w.append("q", 1, [{"memory_id": "m1", "source": "exposure", "propensity": 0.5, "arm": "near"}])
    with pytest.raises(LogError, match=r"context\[0\].arm.*exposure slots"):
        w.append("q", 1, [{"memory_id": "m0", "source": "retriever", "arm": "pool"}])
    with pytest.raises(LogError, match="2 exposure slots, design allows 1"):
        w.append("q", 1, ok + [{"memory_id": "m2", "source": "exposure", "propensity": 0.5}])
    w.close()
    assert read_log(tmp_path).steps["step"].tolist() == [0]


# ------------------------------------------------------------------ SIGKILL
_CHILD = """
import os, random, sys
from cmp_bayes.log.append import LogWriter
from cmp_bayes.log.layout import log_checksum
path, seed, ack_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
design = {"slots": 3, "exposure_slots": 1, "assignment": "balanced", "steps": 100000, "seed": 0,
          "pool": {"m1": 0.5, "m2": 0.5}}
rng = random.Random(seed)
begun = [0]
w = LogWriter(path, design=design, state_hook=lambda: {"begun": begun[0]})
ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
waiting = []
while True:
    r = rng.random()
    if r < 0.5 or not waiting or len(waiting) > 25:
        if len(waiting) > 25:
            s = waiting.pop(0)
            w.cancel(s, "backlog")
            os.write(ack, b"c %d\\n" % s)
            continue
        i = begun[0]
        ctx = [{"memory_id": "m0", "source": "retriever", "rank": 0},
               {"memory_id": "m%d" % (1 + i % 2), "source": "exposure", "propensity": 0.5}]
        begun[0] += 1  # the state saved with this step counts it
        s = w.begin("q%d" % (i % 7), ctx, group="g%d" % (i % 2), ranking=["m0", "m1", "m2"])
        waiting.append(s)
        os.write(ack, b"b %d\\n" % s)
    elif r < 0.93:
        # outcomes out of order; the oldest often enough that lines go out (and a kill can split them)
        s = waiting.pop(0 if rng.random() < 0.5 else rng.randrange(len(waiting)))
        y = rng.choice([0, 1, 0.5, rng.random()])
        w.finish(s, y)
        os.write(ack, ("f %d %r\\n" % (s, y)).encode())
    else:
        s = waiting.pop(rng.randrange(len(waiting)))
        w.cancel(s, "gave up")
        os.write(ack, b"c %d\\n" % s)
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sigkill_at_a_random_point_loses_no_reported_outcome(tmp_path: Path, seed: int) -> None:
    log_dir, ack = tmp_path / "live", tmp_path / "ack.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(log_dir), str(seed), str(ack)], env=env)
    want = random.Random(seed).randrange(100, 600)  # acknowledged operations before the kill
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not ack.exists() or ack.read_bytes().count(b"\n") < want):
        time.sleep(0.005)
    time.sleep(random.Random(seed).random() * 0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    acks = [x.split() for x in ack.read_text().splitlines()]  # one os.write each: never torn
    begun = {int(a[1]) for a in acks if a[0] == "b"}
    finished = {int(a[1]): float(a[2]) for a in acks if a[0] == "f"}
    cancelled = {int(a[1]) for a in acks if a[0] == "c"}
    assert len(begun) >= 50

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornLineWarning)  # a kill mid-line is one of the cases
        w = LogWriter(log_dir)
    written = {x["step"]: x for x in _lines(log_dir / "steps.jsonl")}
    steps = [x["step"] for x in _lines(log_dir / "steps.jsonl")]
    assert steps == sorted(set(steps))
    pending = {int(s): r["line"] for s, r in _state(log_dir)["pending"].items()}
    assert sorted(pending) == w.pending
    gone = w.cancelled
    # each step is in exactly one place; every acknowledged one is somewhere
    assert not (set(written) & set(pending)) and not (set(written) & set(gone)) and not (set(pending) & set(gone))
    everywhere = set(written) | set(pending) | set(gone)
    assert begun <= everywhere
    # the scheduler's state was saved in the same write as the steps: it counts exactly these
    assert w.saved_extra["begun"] == len(everywhere) == w.next_step
    assert everywhere == set(range(w.next_step))
    for s, y in finished.items():  # every outcome reported before the kill is kept
        line = written.get(s) or pending.get(s)
        assert line is not None and line["outcome"] == y, (s, y)
    assert cancelled <= set(gone)
    assert len(set(gone) - cancelled) <= 1  # at most the operation the kill cut short
    assert len(begun) <= len(everywhere) <= len(begun) + 1
    # late outcomes and cancels after the restart
    rest = [s for s in w.pending if pending[s]["outcome"] is None]
    for i, s in enumerate(rest):
        if i % 3 == 2:
            w.cancel(s, "after restart")
        else:
            w.finish(s, 1)
    assert w.pending == []
    w.close()
    log = read_log(log_dir)
    got = dict(zip(log.steps["step"].tolist(), log.steps["outcome"].tolist(), strict=True))
    assert set(got) == set(written) | (set(pending) - {s for i, s in enumerate(rest) if i % 3 == 2})
    assert all(got[s] == y for s, y in finished.items())
    assert not set(got) & set(LogWriter(log_dir).cancelled)
