"""A soak test of a live CMP log: a toy agent loop, killed and restarted, then checked.

:func:`run_agent` is a toy memory system driving a :class:`LiveSession`:
memories are added, updated and deleted as it runs, outcomes come late, out
of order or never (those steps expire), and everything it does at step ``t``
is a function of ``(seed, t)``, so a restarted agent carries on with exactly
what the killed one would have done. It notes every outcome it reported (after
``report`` returned) in ``journal.txt``.

:func:`soak` runs the agent in a child process, kills it with ``SIGKILL`` at
random moments, restarts it until it reaches its last step, then
:func:`check_soak` asserts what a crash must never break:

1. the log reads under the strict reader;
2. every outcome the agent reported is in ``steps.jsonl``, with its value;
3. every step number is in exactly one of ``steps.jsonl``, ``cancelled.jsonl``
   and the pending steps;
4. each memory's exposures in each round are the round's planned count (the
   floor or ceil of ``R k / P``), less only those withdrawn because it was
   deleted and those the scheduler reports as a shortfall.

``python -m cmp_bayes.live.soak DIR --steps 5000 --kills 20`` runs it at length
(the benchmark in ``benchmarks/soak.py`` records the result).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from cmp_bayes.design.scheduler import Positions
from cmp_bayes.live.session import STATE_FILE, LiveSession

JOURNAL = "journal.txt"
#: ``"step:phase"``: the agent kills itself there (phases 0-3 of a step, see run_agent)
KILL_ENV = "CMP_SOAK_KILL_AT"
DONE = "done"


@dataclass(frozen=True)
class AgentConfig:
    """The toy agent: store size, queries, churn and outcome delays (probabilities per step)."""

    memories: int = 40
    queries: int = 12
    slots: int = 6
    exposure_slots: int = 2
    round_steps: int = 60
    p_add: float = 0.02
    p_delete: float = 0.01
    p_update: float = 0.005
    p_missing: float = 0.03
    max_delay: int = 6
    expire_after_steps: int = 15
    positions: Positions = "random"
    #: a window design (``window`` > 0): ``k - pool_slots`` slots from each step's near misses
    window: int = 0
    pool_slots: int = 0


def _rng(seed: int, t: int, what: int) -> np.random.Generator:
    return np.random.default_rng([seed, t, what])


def _outcome(seed: int, t: int) -> tuple[float, int | None]:
    """Step ``t``'s outcome and the step at which it is reported (None: never)."""
    r = _rng(seed, t, 1)
    y = float(r.random() < 0.5)
    if r.random() < AgentConfig.p_missing:
        return y, None
    return y, t + int(r.integers(0, AgentConfig.max_delay + 1))


def run_agent(
    path: str | Path, steps: int, seed: int = 0, cfg: AgentConfig = AgentConfig(), stop_at: int | None = None
) -> None:
    """Run (or resume) the toy agent until the log has ``steps`` steps opened.

    ``stop_at``: leave cleanly (closing the log, as a restart would) once that
    many steps are opened, without the shutdown of the last step.
    """
    path = Path(path)
    fresh = not (path / STATE_FILE).is_file()
    init = [{"memory_id": f"m{i}", "text": f"fact number {i}"} for i in range(cfg.memories)]
    session = LiveSession(
        path,
        slots=cfg.slots if fresh else None,
        exposure_slots=cfg.exposure_slots if fresh else None,
        memories=init if fresh else None,
        round_steps=cfg.round_steps if fresh else None,
        assignment="window" if cfg.window else "balanced",
        window=cfg.window or None,
        pool_slots=cfg.pool_slots,
        positions=cfg.positions,
        seed=seed,
        expire_after_steps=cfg.expire_after_steps,
    )
    journal = (path / JOURNAL).open("a", encoding="utf-8")
    maybe_die = kill_point()
    print("ready", flush=True)
    try:
        while session.next_step < (steps if stop_at is None else min(stop_at, steps)):
            t = session.next_step
            maybe_die(t, 0)
            report_due(session, seed, t, journal)
            maybe_die(t, 1)
            _churn(session, seed, t, cfg)
            maybe_die(t, 2)
            alive = sorted(session.writer.alive_memories(t))
            q = int(_rng(seed, t, 3).integers(cfg.queries))
            order = np.random.default_rng([seed, 99, q]).permutation(len(alive))
            ranking = [session.store_id(alive[i]) for i in order]
            session.step(f"q{q}", ranking, group=f"g{q % 3}")
            maybe_die(t, 3)
        if session.next_step < steps:
            return  # a clean stop before the end (the log is closed below)
        report_due(session, seed, None, journal)
    finally:
        journal.close()
        session.close()
    if session.next_step >= steps:
        (path / DONE).write_text("ok\n")


def kill_point() -> Callable[[int, int], None]:
    """``maybe_die(t, phase)``: SIGKILL this process at the step and phase :data:`KILL_ENV` names."""
    kill_at = tuple(int(x) for x in os.environ.get(KILL_ENV, "-1:-1").split(":"))

    def maybe_die(t: int, phase: int) -> None:
        if (t, phase) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_die


def report_due(session: LiveSession, seed: int, t: int | None, journal: TextIO) -> None:
    """Report the outcomes due by step ``t`` of the steps waiting (also those begun before a
    restart), noting each in ``journal`` once ``report`` returned.

    ``t=None``: the agent shuts down; every outcome still to come arrives and the steps
    whose outcome never will are cancelled.
    """
    for s in session.pending:
        y, due = _outcome(seed, s)
        if due is not None and (t is None or due <= t):
            session.report(s, y)
            journal.write(f"{s} {y:g}\n")
            journal.flush()
        elif t is None:
            session.cancel(s, "no outcome at shutdown")


def _churn(session: LiveSession, seed: int, t: int, cfg: AgentConfig) -> None:
    r = _rng(seed, t, 2)
    alive = sorted(session.writer.alive_memories(t))
    if r.random() < cfg.p_add:
        n = len(session.writer.memory_records())
        session.add(f"m{n}", text=f"fact number {n}, learned at step {t}")
    if alive and r.random() < cfg.p_delete:
        session.delete(session.store_id(alive[int(r.integers(len(alive)))]))
    if alive and r.random() < cfg.p_update:
        lid = alive[int(r.integers(len(alive)))]
        if session.writer.memory_alive(lid, t):
            session.update(session.store_id(lid), text=f"edited at step {t}")


def soak(
    path: str | Path,
    steps: int,
    kills: int,
    seed: int = 0,
    timeout: float = 600.0,
    window: int = 0,
    pool_slots: int = 0,
    worker: str = "cmp_bayes.live.soak",
) -> dict[str, Any]:
    """Run the agent in a child process, ``SIGKILL`` it ``kills`` times, restart it, check the log.

    Kills alternate between two kinds: from outside, at a random moment after
    the agent is running (anywhere, a write included), and by the agent
    itself at a random step and point within it (between the lifecycle
    change, the step's opening and the outcome reports), so both the timing
    and the code path vary. ``worker`` is the module whose ``--worker`` entry
    runs the agent (``cmp_bayes.integrations.mem0_soak`` for the agent on an
    offline Mem0 store). Returns :func:`check_soak`'s summary plus ``kills``
    (kills delivered) and ``seconds``.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    cmd = [
        sys.executable, "-m", worker, str(path), "--steps", str(steps), "--seed", str(seed),
        "--window", str(window), "--pool-slots", str(pool_slots), "--worker",
    ]
    start = time.monotonic()
    delivered = attempts = 0
    span = max(20, steps // max(kills, 1))
    while not (path / DONE).is_file():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"soak did not finish in {timeout} s")
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        nxt = _next_step(path)
        args = list(cmd)
        outside = delivered < kills and attempts % 2 == 0
        if delivered < kills and not outside:
            env[KILL_ENV] = f"{int(rng.integers(nxt, min(steps, nxt + span)))}:{int(rng.integers(4))}"
        elif outside:
            # a kill from outside lands at a random moment; the agent stops cleanly at
            # a nearby step if it comes too late, so the kills are spread over the run
            args += ["--stop-at", str(min(steps, nxt + span))]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        attempts += 1
        if outside:
            assert proc.stdout is not None  # stdout=PIPE above
            proc.stdout.readline()  # "ready": the log is open
            try:
                proc.wait(timeout=float(rng.uniform(0.0, 0.3)))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - start)))
        if proc.returncode == -signal.SIGKILL:
            delivered += 1
        elif proc.returncode != 0:
            raise RuntimeError(f"soak agent failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    summary = check_soak(path)
    summary.update(kills=delivered, seconds=round(time.monotonic() - start, 1))
    return summary


def _next_step(path: Path) -> int:
    """The step the agent opens next: one past the highest written, cancelled or pending."""
    top = -1
    for name in ("steps.jsonl", "cancelled.jsonl"):
        f = path / name
        if f.is_file():
            # a torn last line is set aside by the agent's writer on reopening: ignore it here
            for line in f.read_bytes().splitlines()[-1:]:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    top = max(top, int(json.loads(line)["step"]))
    state = path / STATE_FILE
    if state.is_file():
        with contextlib.suppress(ValueError):
            top = max([top, *(int(s) for s in json.loads(state.read_text()).get("pending", {}))])
    return top + 1


def check_soak(path: str | Path) -> dict[str, Any]:
    """The four checks of the module docstring; raises AssertionError on the first broken one."""
    from cmp_bayes.design.scheduler import ExposureScheduler
    from cmp_bayes.log.design import design_rounds
    from cmp_bayes.log.read import read_log

    path = Path(path)
    log = read_log(path)  # 1. the strict reader accepts it
    steps = log.steps.set_index("step")["outcome"]
    journal = {}
    if (path / JOURNAL).is_file():
        for line in (path / JOURNAL).read_text().split("\n"):
            if line.strip():
                s, y = line.split()
                journal[int(s)] = float(y)
    lost = [s for s, y in journal.items() if s not in steps.index or float(steps.loc[s]) != y]
    assert not lost, f"reported outcomes missing or changed in steps.jsonl: {lost[:10]}"  # 2.
    cancelled = _jsonl(path / "cancelled.jsonl")
    state = json.loads((path / STATE_FILE).read_text())
    pending = {int(s): rec["line"] for s, rec in state.get("pending", {}).items()}
    seen = Counter(list(steps.index) + [int(c["step"]) for c in cancelled] + list(pending))
    top = max(seen) if seen else -1
    twice = [s for s, n in seen.items() if n > 1]
    gaps = [s for s in range(top + 1) if s not in seen]
    assert not twice and not gaps, f"steps twice: {twice[:10]}, steps nowhere: {gaps[:10]}"  # 3.
    # 4. exposures per round and memory against the plan
    contexts = [(int(s), slot) for s, slot in _all_slots(path, cancelled, pending)]
    design = json.loads((path / "design.json").read_text())
    rounds = design_rounds(design)
    k = int(design["exposure_slots"])
    sched = ExposureScheduler.from_state(state["extra"]["scheduler"])
    checked = exact = 0
    for r, rnd in enumerate(rounds):
        n = rnd.steps * (k if "window" not in design else int(design.get("pool_slots", 0))) / max(len(rnd.pool), 1)
        got = Counter(
            slot["memory_id"] for s, slot in contexts
            if rnd.start <= s < rnd.stop and slot["source"] == "exposure" and slot.get("arm") != "window"
        )
        finished = rnd.stop <= top + 1
        for m, p in rnd.pool.items():
            planned = round(p * rnd.steps)
            assert planned in (math.floor(n), math.ceil(n)), f"round {r}: {m} planned {planned}, not floor/ceil of {n}"
            acc = sched.accounts(r)
            short = acc["withdrawn"].get(m, 0) + acc["shortfall"].get(m, 0)
            if finished:
                assert planned - short <= got[m] <= planned, (
                    f"round {r}: {m} exposed {got[m]} times, planned {planned} (withdrawn or short {short})"
                )
                exact += got[m] == planned
            else:
                assert got[m] <= planned, f"round {r} (running): {m} exposed {got[m]} > planned {planned}"
            checked += 1
        stray = set(got) - set(rnd.pool)
        assert not stray, f"round {r}: exposed memories outside the round's pool: {sorted(stray)[:5]}"
    return {
        "steps": int(len(steps)),
        "cancelled": len(cancelled),
        "pending": len(pending),
        "reported": len(journal),
        "rounds": len(rounds),
        "memory_rounds_checked": checked,
        "memory_rounds_exact": exact,
        "memories": int(len(log.memories)) if log.memories is not None else 0,
    }


def _all_slots(
    path: Path, cancelled: list[dict[str, Any]], pending: dict[int, dict[str, Any]]
) -> Iterator[tuple[int, dict[str, Any]]]:
    for rec in _jsonl(path / "steps.jsonl"):
        for slot in rec["context"]:
            yield rec["step"], slot
    for rec in [*cancelled, *pending.values()]:
        for slot in rec["context"]:
            yield rec["step"], slot


def _jsonl(file: Path) -> list[dict[str, Any]]:
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cmp_bayes.live.soak", description=__doc__.split("\n")[0])
    p.add_argument("path", type=Path)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--window", type=int, default=0, help="a window design with this W (0: balanced)")
    p.add_argument("--pool-slots", type=int, default=0, help="j of a window design")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        run_agent(a.path, a.steps, a.seed, AgentConfig(window=a.window, pool_slots=a.pool_slots), a.stop_at)
        return 0
    print(json.dumps(soak(a.path, a.steps, a.kills, a.seed, window=a.window, pool_slots=a.pool_slots), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
