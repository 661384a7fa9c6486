"""CMP in a live Mem0 store, from the first search to applying the decisions.

The script behind docs/tutorials/live-mem0.md (read that first; this file is
what it walks through, and tests/test_tutorial_live.py runs it). Fully
offline: Mem0 with an embedded Qdrant store and the torch-free MiniLM
embedder of the ``dense`` extra.

    python docs/tutorials/live_mem0.py WORKDIR [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MEM0_TELEMETRY", "False")  # before mem0 is imported: telemetry uses the network

USER = {"user_id": "alice"}

# -- the store: 30 memories about one user. Four are standing preferences that
# make almost any plan better; the retriever rarely ranks them near questions
# about plans (their words do not match), which is exactly what CMP's exposure
# slots are for: without them those memories could never show their worth.
PREFERENCES = [
    "Alice is vegetarian and never eats meat or fish.",
    "Alice is afraid of flying and travels by train.",
    "Alice keeps every trip under a small budget.",
    "Alice loves live jazz more than any other music.",
]
PEOPLE = ["Caroline", "Melanie", "Jon"]
PLACES = ["Boston", "Lisbon", "Osaka", "Quito", "Tromso", "Accra", "Perth", "Tallinn", "Cusco"]
FACTS = PREFERENCES + [f"{p} spent a week in {c} last spring." for p in PEOPLE for c in PLACES][:26]
QUESTIONS = [
    "Plan a weekend away for me.",
    "Which restaurant should I book on Friday?",
    "Suggest something to do on Saturday evening.",
    "Find me a holiday for the first week of May.",
    "What should I get Caroline for her birthday?",
    "Help me plan a day out with Jon.",
]


def answer(results: list[dict[str, Any]], rng: np.random.Generator) -> float:
    """A toy reader: each preference in its context makes a good plan likelier."""
    seen = sum(r.get("memory") in PREFERENCES for r in results)
    return float(rng.random() < 0.1 + 0.25 * seen)


def main(workdir: str | Path, steps: int = 800, draws: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Run the whole loop in ``workdir``; returns what a test checks."""
    import cmp_bayes as cb
    from cmp_bayes.integrations.mem0 import CMPMemory
    from cmp_bayes.integrations.mem0_offline import offline_memory

    workdir = Path(workdir)
    rng = np.random.default_rng(seed)
    memory = offline_memory(workdir / "mem0")
    memory.add([{"role": "user", "content": f} for f in FACTS], infer=False, **USER)

    # 1. open the live log: B = 5 context slots, k = 2 for randomized exposure,
    #    open-ended rounds; a step whose outcome never comes expires after 20 steps
    def open_log() -> CMPMemory:
        return CMPMemory.open(
            memory, workdir / "log", filters=USER, slots=5, exposure_slots=2,
            expire_after_steps=20, positions="random", seed=seed,
        )

    cmp = open_log()
    text_to_id = {m["memory"]: m["id"] for m in memory.get_all(filters=USER, top_k=100)["results"]}
    missing = None
    for t in range(steps):
        if t == steps // 2:
            # 2. a restart: the process could as well have been killed here
            cmp.close()
            cmp = open_log()
        if t == 40:  # 3. the store changes while the design runs
            cmp.add([{"role": "user", "content": "Caroline adopted a cat named Oscar."}], infer=False, **USER)
        if t == 60:
            cmp.delete(text_to_id[FACTS[-1]])
        i = int(rng.integers(len(QUESTIONS)))
        hits = cmp.search(QUESTIONS[i], query_id=f"q{i}")
        y = answer(hits["results"], rng)
        if t == 10:
            missing = hits["cmp"]["step"]  # 4. this outcome never arrives: it expires
            continue
        cmp.report_outcome(hits["cmp"]["step"], y)
    cmp.close()

    # 5. diagnose, fit, decide: the store may keep at most 24 memories
    log = cb.read_log(workdir / "log")
    print(cb.diagnose(log).to_text())
    # 31 memories are too few to learn how the retriever's rank shifts the mixture weights
    # (that coefficient's R-hat was 1.012 in one of our runs, and decide then refuses every forget)
    posterior = cb.fit(log, model=cb.ModelConfig(use_rank=False), draws=draws, tune=draws, seed=seed, progressbar=False)
    cb.save_posterior(posterior, workdir / "posterior.nc")
    decisions = cb.decide(posterior, cb.Costs(forget_cost=20, retain_cost=1, capacity=24))
    print(decisions.summary())
    decisions.to_csv(workdir / "decisions.csv")

    # 6. apply: a dry run first, then for real; both print what they do
    cmp = open_log()
    cmp.apply(decisions, dry_run=True)
    applied = cmp.apply(workdir / "decisions.csv", dry_run=False)
    cmp.close()
    left = {m["id"] for m in memory.get_all(filters=USER, top_k=100)["results"]}
    memory.close()
    return {"log": log, "missing_step": missing, "decisions": decisions, "applied": applied, "left": left}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workdir", nargs="?", type=Path, default=None)
    p.add_argument("--steps", type=int, default=800)
    a = p.parse_args()
    main(a.workdir or tempfile.mkdtemp(prefix="cmp-live-"), steps=a.steps)
