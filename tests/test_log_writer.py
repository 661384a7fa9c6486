"""LogWriter: whole flushed lines, resume, torn-line set-aside, late outcomes, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmp_bayes.errors import LogError, TornLineWarning
from cmp_bayes.log.append import LogWriter
from cmp_bayes.log.read import read_log

DESIGN = {"slots": 3, "exposure_slots": 1, "assignment": "balanced", "steps": 100, "seed": 0,
          "pool": {"m1": 0.5, "m2": 0.5}}


def _ctx(i: int) -> list[dict]:
    return [{"memory_id": "m0", "source": "retriever", "rank": 0},
            {"memory_id": f"m{1 + i % 2}", "source": "exposure", "propensity": 0.5}]


def test_append_reads_back(tmp_path: Path) -> None:
    with LogWriter(tmp_path / "log", design=DESIGN, memories=[{"memory_id": m, "created_step": 0} for m in ("m0", "m1", "m2")]) as w:
        for i in range(5):
            assert w.append(f"q{i % 2}", i % 2, _ctx(i), group="g", ranking=["m0", "m1"]) == i
    log = read_log(tmp_path / "log")
    assert log.steps["step"].tolist() == list(range(5))
    assert log.steps["outcome"].tolist() == [0, 1, 0, 1, 0]
    assert log.design["pool"] == DESIGN["pool"] and len(log.memories) == 3
    assert len(log.contexts) == 10


def test_resume_after_reopen(tmp_path: Path) -> None:
    with LogWriter(tmp_path, design=DESIGN) as w:
        w.append("q", 1, _ctx(0))
        w.append("q", 0, _ctx(1))
    with LogWriter(tmp_path) as w:  # design.json is picked up again
        assert w.next_step == 2
        assert w.append("q", 1, _ctx(2)) == 2
    assert read_log(tmp_path).steps["step"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("tail", [b'{"step": 2, "query_id": "q", "outc', b'{"step": 2, garbage}\n'])
def test_torn_last_line_set_aside(tmp_path: Path, tail: bytes) -> None:
    with LogWriter(tmp_path, design=DESIGN) as w:
        w.append("q", 1, _ctx(0))
        w.append("q", 0, _ctx(1))
    steps = tmp_path / "steps.jsonl"
    good = steps.read_bytes()
    steps.write_bytes(good + tail)
    with pytest.warns(TornLineWarning, match=r"steps.jsonl, line 3"):
        w = LogWriter(tmp_path)
    assert w.next_step == 2
    assert steps.read_bytes() == good  # nothing before the torn line lost
    assert (tmp_path / "steps.jsonl.torn").read_bytes() == tail.rstrip(b"\n") + b"\n"
    w.append("q", 1, _ctx(2))
    w.close()
    assert read_log(tmp_path).steps["step"].tolist() == [0, 1, 2]


def test_late_outcomes_written_in_step_order(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN)
    a = w.begin("qa", _ctx(0))
    b = w.begin("qb", _ctx(1))
    w.finish(b, 1)
    assert (tmp_path / "steps.jsonl").read_text() == ""  # step 1 waits for step 0
    w.finish(a, 0)
    c = w.append("qc", 1, _ctx(0))
    w.close()
    lines = [json.loads(x) for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [a, b, c] == [0, 1, 2]
    assert [x["query_id"] for x in lines] == ["qa", "qb", "qc"]
    with pytest.raises(LogError):
        LogWriter(tmp_path).finish(0, 1)


def test_rejects_bad_steps(tmp_path: Path) -> None:
    w = LogWriter(tmp_path, design=DESIGN)
    with pytest.raises(LogError, match="outcome"):
        w.append("q", 1.5, _ctx(0))
    with pytest.raises(LogError, match="propensity"):
        w.append("q", 1, [{"memory_id": "m1", "source": "exposure", "propensity": 0.3}])
    with pytest.raises(LogError, match="twice"):
        w.append("q", 1, [{"memory_id": "m0", "source": "retriever"}] * 2)
    assert w.pending == [] and w.next_step == 0
    w.close()


_CHILD = """
import sys, time
from cmp_bayes.log.append import LogWriter
w = LogWriter(sys.argv[1])
ctx = [{"memory_id": "m0", "source": "retriever", "rank": 0}]
i = 0
while True:
    w.append("q" + str(i % 7), i % 2, ctx, ranking=["m%d" % j for j in range(40)])
    i += 1
    if i % 50 == 0:
        time.sleep(0.001)
"""


def test_crash_sigkill_mid_run_leaves_readable_log(tmp_path: Path) -> None:
    log_dir = tmp_path / "live"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(log_dir)])
    steps = log_dir / "steps.jsonl"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not steps.exists() or steps.stat().st_size < 200_000):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    raw = steps.read_bytes()
    complete = raw.count(b"\n")
    assert complete > 100
    w = LogWriter(log_dir)  # may warn about a torn line; must keep every complete one
    assert w.next_step == complete
    w.append("q", 1, [{"memory_id": "m0", "source": "retriever", "rank": 0}])
    w.close()
    log = read_log(log_dir)
    assert log.steps["step"].tolist() == list(range(complete + 1))
