"""The soak test on a real offline Mem0 store: CMPMemory killed with SIGKILL and restarted.

Bounded for CI (120 steps, 3 kills, about 10-20 s); the long run is
benchmarks/soak.py. What is checked is :func:`cmp_bayes.live.soak.check_soak`:
the log reads, every reported outcome is in it, every step is in exactly one
place, and each memory's exposures per round are the round's plan less only
withdrawals and reported shortfalls.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

if not os.environ.get("MEM0_TELEMETRY"):
    os.environ["MEM0_TELEMETRY"] = "False"
if not os.environ.get("MEM0_DIR"):
    os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="cmp-mem0-home-")

pytest.importorskip("mem0", reason="mem0ai is not installed (pip install 'cmp-bayes[mem0]')")
pytest.importorskip("onnxruntime", reason="the Mem0 agent embeds with the dense extra")


def test_mem0_soak_with_kills(tmp_path: Path) -> None:
    from cmp_bayes.live.soak import soak

    out = soak(tmp_path, steps=120, kills=3, seed=1, timeout=300, worker="cmp_bayes.integrations.mem0_soak")
    assert out["kills"] == 3
    assert out["steps"] + out["cancelled"] + out["pending"] == 120
    assert out["reported"] >= 0.8 * out["steps"]
    assert out["memory_rounds_exact"] >= 0.8 * out["memory_rounds_checked"]
