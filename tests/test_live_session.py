"""LiveSession: a live log that survives restarts, records the store's lifecycle and applies decisions.

The checks are exact (the same contexts with and without restarts, the design's
counts per round, what is on disk), so no statistical tolerance is involved.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cmp_bayes.design.scheduler import ExposureScheduler
from cmp_bayes.errors import ConfigError
from cmp_bayes.live.apply import apply_decisions
from cmp_bayes.live.session import STATE_FILE, LiveSession, default_round_steps
from cmp_bayes.log.design import design_rounds
from cmp_bayes.log.read import read_log

B, K, R = 5, 2, 30
MEMS = [{"memory_id": f"m{i}", "text": f"fact {i}"} for i in range(20)]


def _open(path: Path, **kw: Any) -> LiveSession:
    fresh = not (path / STATE_FILE).is_file()
    args: dict[str, Any] = {"seed": 4, **kw}
    if fresh:
        args.update(slots=B, exposure_slots=K, memories=MEMS, round_steps=R)
    return LiveSession(path, **args)


def _ranking(session: LiveSession, t: int) -> list[str]:
    alive = sorted(session.writer.alive_memories(t))
    order = np.random.default_rng(t % 7).permutation(len(alive))
    return [session.store_id(alive[i]) for i in order]


@pytest.mark.filterwarnings("ignore::cmp_bayes.design.scheduler.ExposureShortfallWarning")
def _drive(path: Path, steps: int, restart_every: int | None) -> list[dict[str, Any]]:
    s = _open(path)
    for t in range(steps):
        if restart_every and t and t % restart_every == 0:
            s.close()
            s = _open(path)
        opened = s.step(f"q{t % 7}", _ranking(s, t))
        s.report(opened.step, float(t % 3 == 0))
        if t == 40:
            s.add("m_new", text="learned late")
        if t == 50:
            s.delete("m3")
    s.close()
    return [json.loads(line) for line in (path / "steps.jsonl").read_text().splitlines()]


def test_restarts_continue_exactly(tmp_path: Path) -> None:
    straight = _drive(tmp_path / "a", 100, None)
    restarted = _drive(tmp_path / "b", 100, 7)
    assert restarted == straight
    log = read_log(tmp_path / "b")
    assert log.n_steps == 100


def test_rounds_are_balanced_and_new_memories_wait_for_the_next_round(tmp_path: Path) -> None:
    _drive(tmp_path, 100, 9)
    design = json.loads((tmp_path / "design.json").read_text())
    rounds = design_rounds(design)
    assert [(r.start, r.steps) for r in rounds] == [(0, R), (R, R), (2 * R, R), (3 * R, R)]
    log = read_log(tmp_path)
    ctx = log.contexts
    exp = ctx[ctx["source"] == "exposure"]
    sched = ExposureScheduler.from_state(json.loads((tmp_path / STATE_FILE).read_text())["extra"]["scheduler"])
    short = 0
    for i, r in enumerate(rounds[:3]):  # finished rounds
        got = Counter(exp[(exp["step"] >= r.start) & (exp["step"] < r.stop)]["memory_id"].astype(str))
        n = r.steps * K / len(r.pool)
        acc = sched.accounts(i)
        for m, p in r.pool.items():
            planned = round(p * r.steps)
            assert planned in (math.floor(n), math.ceil(n)) and acc["planned"][m] == planned
            # a deferral the round's last steps could not serve is a shortfall (warned), a deletion a withdrawal
            lost = acc["shortfall"].get(m, 0) + acc["withdrawn"].get(m, 0)
            assert got[m] == planned - lost, (r, m)
            assert acc["withdrawn"].get(m, 0) == 0 or m == "m3"
            short += acc["shortfall"].get(m, 0)
    assert short <= 0.05 * sum(r.steps * K for r in rounds[:3])
    # added at step 40 (round 1): not in round 1's pool, in round 2's
    assert "m_new" not in rounds[1].pool and "m_new" in rounds[2].pool
    assert "m3" in rounds[1].pool and "m3" not in rounds[2].pool
    mem = log.memories.set_index("memory_id")
    assert int(mem.loc["m_new", "created_step"]) == 41
    assert int(mem.loc["m3", "deleted_step"]) == 51
    assert not ((exp["memory_id"] == "m3") & (exp["step"] >= 51)).any()


def test_a_log_with_steps_but_no_state_is_refused(tmp_path: Path) -> None:
    _drive(tmp_path, 5, None)
    (tmp_path / STATE_FILE).unlink()
    with pytest.raises(ConfigError, match="replay its deck"):
        _open(tmp_path)


def test_resuming_with_another_design_is_refused(tmp_path: Path) -> None:
    _drive(tmp_path, 3, None)
    with pytest.raises(ConfigError, match="slots"):
        LiveSession(tmp_path, slots=B + 1)


def test_unknown_retrieved_memory_is_recorded_not_fatal(tmp_path: Path) -> None:
    s = _open(tmp_path)
    opened = s.step("q0", ["stranger", *_ranking(s, 0)])
    s.report(opened.step, 1.0)
    s.close()
    log = read_log(tmp_path)
    mem = log.memories.set_index("memory_id")
    assert int(mem.loc["stranger", "created_step"]) == 0
    assert "stranger" in set(log.contexts["memory_id"].astype(str))


def test_update_makes_a_new_version(tmp_path: Path) -> None:
    s = _open(tmp_path)
    s.report(s.step("q0", _ranking(s, 0)).step, 0.0)
    new = s.update("m5", text="fact 5, corrected")
    assert new == "m5~v2" and s.log_id_of("m5") == "m5~v2" and s.store_id(new) == "m5"
    # the memory system still says m5; the log records its current version
    opened = s.step("q1", ["m5", *[m for m in _ranking(s, 1) if m != "m5"]])
    assert opened.context[0]["memory_id"] == "m5~v2"
    s.report(opened.step, 1.0)
    s.close()
    mem = read_log(tmp_path).memories.set_index("memory_id")
    assert int(mem.loc["m5", "deleted_step"]) == 1
    assert int(mem.loc["m5~v2", "created_step"]) == 1
    assert mem.loc["m5~v2", "text"] == "fact 5, corrected"


def test_late_outcome_after_restart_and_expiry(tmp_path: Path) -> None:
    s = _open(tmp_path, expire_after_steps=3)
    first = s.step("q0", _ranking(s, 0)).step
    for t in range(1, 3):
        s.report(s.step(f"q{t}", _ranking(s, t)).step, 1.0)
    s.close()  # step 0 still waits: kept, not dropped
    assert json.loads((tmp_path / STATE_FILE).read_text())["pending"]
    s = _open(tmp_path, expire_after_steps=3)
    assert s.pending == [first]
    s.report(first, 0.5)  # the late outcome, after the restart
    lost = s.step("q9", _ranking(s, 3)).step  # never reported
    for t in range(4, 9):
        s.report(s.step(f"q{t}", _ranking(s, t)).step, 0.0)
    s.close()
    log = read_log(tmp_path)
    assert lost not in set(log.steps["step"])
    assert float(log.steps.set_index("step").loc[first, "outcome"]) == 0.5
    cancelled = [json.loads(x) for x in (tmp_path / "cancelled.jsonl").read_text().splitlines()]
    assert [c["step"] for c in cancelled] == [lost] and cancelled[0]["cancelled"] == "expired"
    assert sorted(log.steps["step"]) == [t for t in range(9) if t != lost]


class DictStore:
    """The smallest memory store: ids to texts, and the one method apply needs."""

    def __init__(self, ids: list[str]) -> None:
        self.items = {m: f"text of {m}" for m in ids}
        self.deleted: list[str] = []

    def delete(self, memory_id: str) -> None:
        del self.items[memory_id]
        self.deleted.append(memory_id)


def test_apply_deletes_forgets_and_records_them(tmp_path: Path) -> None:
    s = _open(tmp_path)
    for t in range(6):
        s.report(s.step(f"q{t}", _ranking(s, t)).step, 1.0)
    s.update("m2", text="edited")  # a decision about the old m2 is stale
    store = DictStore([m["memory_id"] for m in MEMS])
    table = pd.DataFrame(
        {
            "memory_id": ["m1", "m2", "m4", "m7", "ghost"],
            "action": ["forget", "forget", "retain", "forget", "forget"],
            "log_id": s.log_id,
        }
    )
    dry = apply_decisions(s, table, store, dry_run=True, echo=None)
    assert store.deleted == [] and s.writer.memory_alive("m1", s.next_step)
    assert dict(zip(dry["memory_id"], dry["status"], strict=True)) == {
        "m1": "would delete", "m2": "superseded", "m7": "would delete", "ghost": "unknown",
    }
    lines: list[str] = []
    done = apply_decisions(s, table, store, dry_run=False, echo=lines.append)
    assert store.deleted == ["m1", "m7"]
    assert (done["status"] == "deleted").sum() == 2
    assert "4 forget decisions" in lines[-1]
    again = apply_decisions(s, table, store, dry_run=False, echo=None)
    assert set(again.loc[again["memory_id"].isin(["m1", "m7"]), "status"]) == {"already deleted"}
    s.close()
    mem = read_log(tmp_path).memories.set_index("memory_id")
    assert int(mem.loc["m1", "deleted_step"]) == 6 and int(mem.loc["m7", "deleted_step"]) == 6


def test_apply_refuses_decisions_from_another_log(tmp_path: Path) -> None:
    s = _open(tmp_path)
    table = pd.DataFrame({"memory_id": ["m1"], "action": ["forget"], "log_id": "0" * 32})
    with pytest.raises(ConfigError, match="not from this log"):
        apply_decisions(s, table, DictStore(["m1"]), dry_run=False, echo=None)
    with pytest.raises(ConfigError, match="no log_id"):
        apply_decisions(s, table.drop(columns="log_id"), DictStore(["m1"]), dry_run=False, echo=None)
    # without a log_id, the log's checksum as it is now identifies it (and only it)
    from cmp_bayes.log.layout import log_checksum

    by_sum = table.drop(columns="log_id").assign(log_checksum=log_checksum(tmp_path))
    out = apply_decisions(s, by_sum, DictStore(["m1"]), dry_run=True, echo=None)
    assert list(out["status"]) == ["would delete"]
    with pytest.raises(ConfigError, match="no log_id"):
        apply_decisions(s, by_sum.assign(log_checksum="sha256:" + "0" * 64), None, echo=None)
    s.close()


def test_default_round_length() -> None:
    assert default_round_steps(40, 2) == 40
    assert default_round_steps(3, 2) == 10


def test_soak_with_kills(tmp_path: Path) -> None:
    from cmp_bayes.live.soak import soak

    out = soak(tmp_path, steps=400, kills=3, seed=1, timeout=240)
    assert out["kills"] == 3
    assert out["steps"] + out["cancelled"] + out["pending"] == 400
    assert out["reported"] > 0 and out["rounds"] >= 6
    assert out["memory_rounds_exact"] > 0.8 * out["memory_rounds_checked"]


def test_soak_window_design_with_kills(tmp_path: Path) -> None:
    from cmp_bayes.live.soak import soak

    out = soak(tmp_path, steps=300, kills=3, seed=2, timeout=240, window=8, pool_slots=1)
    assert out["kills"] == 3
    assert out["steps"] + out["cancelled"] + out["pending"] == 300
