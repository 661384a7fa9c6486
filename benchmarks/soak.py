"""The soak test at length: live logs killed with SIGKILL many times, then checked.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/soak.py
[--out reports/benchmarks/soak.md]``.

Three runs of :func:`cmp_bayes.live.soak.soak`, each in a fresh temporary
directory: the toy agent on an open-ended balanced design (5000 steps, 20
kills), the toy agent on a window design in rounds (W = 8, j = 1; 5000 steps,
20 kills), and the agent on an offline Mem0 store through ``CMPMemory`` (1000
steps, 10 kills). Kills alternate between a ``SIGKILL`` from outside at a
random moment and one the agent sends itself at a random step and point in
it. Every run must pass :func:`cmp_bayes.live.soak.check_soak` (the log reads
under the strict reader; every reported outcome is in it; every step is in
exactly one of steps.jsonl, cancelled.jsonl and the pending steps; each
memory's exposures per round are the plan less withdrawals and reported
shortfalls); the table says what each run did. The machine and its load go
in the header.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.live.soak import soak

RUNS = [
    ("toy agent, balanced rounds", {"steps": 5000, "kills": 20, "seed": 11}),
    ("toy agent, window design (W=8, j=1) in rounds", {"steps": 5000, "kills": 20, "seed": 12, "window": 8, "pool_slots": 1}),
    ("Mem0 agent (offline), balanced rounds", {"steps": 1000, "kills": 10, "seed": 13, "worker": "cmp_bayes.integrations.mem0_soak"}),
]
COLUMNS = [
    "steps", "cancelled", "pending", "reported", "kills", "rounds", "memory_rounds_checked",
    "memory_rounds_exact", "memories", "seconds",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("reports/benchmarks/soak.md"))
    p.add_argument("--quick", action="store_true", help="a tenth of the steps and kills (a smoke run)")
    a = p.parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    for name, kw in RUNS:
        kw = dict(kw)
        if a.quick:
            kw["steps"], kw["kills"] = kw["steps"] // 10, max(2, kw["kills"] // 10)
        with tempfile.TemporaryDirectory(prefix="cmp-soak-") as tmp:
            out = soak(tmp, timeout=3600, **kw)
        rows.append((name, out))
        print(name, out, flush=True)
    load_after = os.getloadavg()
    lines = [
        "# Soak test: live logs killed and restarted",
        "",
        "`benchmarks/soak.py`; every run passed `check_soak` (the log reads under the strict reader, every "
        "reported outcome is in `steps.jsonl`, every step is in exactly one of `steps.jsonl`, "
        "`cancelled.jsonl` and the pending steps, each memory's exposures per round are the plan less "
        "withdrawals and reported shortfalls).",
        "",
        f"Machine: nproc={os.cpu_count()}, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}; load average (1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/"
        f"{load_before[2]:.2f} before, {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after.",
        "",
        "| run | " + " | ".join(COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    for name, out in rows:
        lines.append(f"| {name} | " + " | ".join(str(out[c]) for c in COLUMNS) + " |")
    lines += [
        "",
        "`cancelled`: steps whose outcome never came (expired after 15 later steps, or cancelled at "
        "shutdown); `memory_rounds_exact`: (memory, round) pairs whose exposures equal the plan exactly "
        "(the rest lost an exposure to a deletion mid-round or to a deferral the round's last steps could "
        "not serve, both recorded by the scheduler); `seconds`: wall time including every restart's imports.",
        "",
    ]
    write_text_atomic(a.out, "\n".join(lines))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
