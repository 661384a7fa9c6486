"""The soak test's agent on a real (offline) Mem0 store, through :class:`CMPMemory`.

The same agent as :func:`cmp_bayes.live.soak.run_agent` (everything at step
``t`` a function of ``(seed, t)``; outcomes late, out of order or never;
memories added, updated and deleted), but its store is Mem0 with an embedded
Qdrant folder and the MiniLM embedder, so a kill can also land inside Mem0's
own writes. A kill between Mem0's change and the log's record of it is what a
deployment sees too: a memory Mem0 holds but the log does not is recorded
when it is next listed; a memory the log holds but Mem0 lost is recorded as
deleted when the agent deletes it again.

Run through :func:`cmp_bayes.live.soak.soak` with
``worker="cmp_bayes.integrations.mem0_soak"``.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from cmp_bayes.live.session import STATE_FILE
from cmp_bayes.live.soak import DONE, JOURNAL, AgentConfig, _rng, kill_point, report_due

USER = {"user_id": "soak"}
#: the Mem0 agent's defaults: a smaller store (each search embeds and queries Qdrant)
MEM0_AGENT = AgentConfig(memories=20, queries=8, slots=5, exposure_slots=2, round_steps=20)


def _fact(i: int) -> str:
    return f"Fact {i}: person {i % 7} keeps a notebook number {i}."


def run_mem0_agent(
    path: str | Path, steps: int, seed: int = 0, cfg: AgentConfig = MEM0_AGENT, stop_at: int | None = None
) -> None:
    """Run (or resume) the agent on an offline Mem0 store in ``path / "mem0"`` (``stop_at``: as
    :func:`cmp_bayes.live.soak.run_agent`)."""
    from cmp_bayes.integrations.mem0 import CMPMemory
    from cmp_bayes.integrations.mem0_offline import offline_memory

    path = Path(path)
    ready = path / "mem0_ready"
    if not ready.is_file():
        # a kill during the first fill leaves a partial store: start it again
        shutil.rmtree(path / "mem0", ignore_errors=True)
    memory = offline_memory(path / "mem0")
    if not ready.is_file():
        memory.add([{"role": "user", "content": _fact(i)} for i in range(cfg.memories)], infer=False, **USER)
        ready.write_text("ok\n")
    fresh = not (path / STATE_FILE).is_file()
    design: dict[str, Any] = {"round_steps": cfg.round_steps} if fresh else {}
    cmp = CMPMemory.open(
        memory, path, filters=USER,
        slots=cfg.slots if fresh else None, exposure_slots=cfg.exposure_slots if fresh else None,
        positions=cfg.positions, seed=seed, expire_after_steps=cfg.expire_after_steps, **design,
    )
    session = cmp.session
    maybe_die = kill_point()
    journal = (path / JOURNAL).open("a", encoding="utf-8")
    print("ready", flush=True)
    try:
        while session.next_step < (steps if stop_at is None else min(stop_at, steps)):
            t = session.next_step
            maybe_die(t, 0)
            report_due(session, seed, t, journal)  # cmp's own session: the same log
            maybe_die(t, 1)
            r = _rng(seed, t, 2)
            alive = [session.store_id(m) for m in sorted(session.writer.alive_memories(t))]
            if r.random() < cfg.p_add:
                cmp.add([{"role": "user", "content": f"Fact learned at step {t}."}], infer=False, **USER)
            if alive and r.random() < cfg.p_delete:
                cmp.delete(alive[int(r.integers(len(alive)))])
            if alive and r.random() < cfg.p_update:
                sid = alive[int(r.integers(len(alive)))]
                if session.writer.memory_alive(session.log_id_of(sid), t):
                    cmp.update(sid, f"Fact edited at step {t}.")
            maybe_die(t, 2)
            q = int(_rng(seed, t, 3).integers(cfg.queries))
            cmp.search(f"Which notebook does person {q} keep?", query_id=f"q{q}")
            maybe_die(t, 3)
        if session.next_step < steps:
            return  # a clean stop before the end (closed below)
        report_due(session, seed, None, journal)
    finally:
        journal.close()
        cmp.close()
        memory.close()
    if session.next_step >= steps:
        (path / DONE).write_text("ok\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cmp_bayes.integrations.mem0_soak")
    p.add_argument("path", type=Path)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=0)
    p.add_argument("--pool-slots", type=int, default=0)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--stop-at", type=int, default=None)
    a = p.parse_args(argv)
    cfg = AgentConfig(**{**MEM0_AGENT.__dict__, "window": a.window, "pool_slots": a.pool_slots})
    run_mem0_agent(a.path, a.steps, a.seed, cfg, a.stop_at)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
