"""Small window-design and rounds logs written as "someone else's script" would: straight from the spec.

Plain dicts and numpy, no cmp_bayes code: the readers are tested against the
spec's text, not against our own writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SLOTS, K, J, W = 4, 2, 1, 5  # B, k, j, W of the window log
N_STEPS = 40
MEMORIES = [f"m{i}" for i in range(20)]
POOL = MEMORIES[10:]  # 10 pool memories, 4 pool exposures each over 40 steps
DELETED = {"m3": 20}  # m3 leaves the store at step 20: never in a window after it


def _deal(steps: int, pool: list[str], per_step: int, rng: np.random.Generator) -> list[str]:
    """A balanced deck: each pool memory floor or ceil of steps * per_step / len(pool) times."""
    total = steps * per_step
    base, extra = divmod(total, len(pool))
    counts = {m: base + (i < extra) for i, m in enumerate(pool)}
    deck = [m for m, c in counts.items() for _ in range(c)]
    rng.shuffle(deck)
    return deck


def window_steps(seed: int = 0) -> tuple[dict, list[dict], list[dict]]:
    """(design, steps, memories) of a window design: B=4, k=2, j=1 (one pool, one window slot), W=5."""
    rng = np.random.default_rng(seed)
    deck = _deal(N_STEPS, POOL, J, rng)
    rankings = []
    for t in range(N_STEPS):
        in_store = [m for m in MEMORIES if not (m in DELETED and t >= DELETED[m])]
        rankings.append([in_store[i] for i in rng.permutation(len(in_store))][: SLOTS - K + W])
    # repair: a memory retrieved at a step is not exposed there (swap with a later deck entry)
    for t in range(N_STEPS):
        top = rankings[t][: SLOTS - K]
        if deck[t] in top:
            u = next(u for u in range(N_STEPS) if u != t and deck[u] not in top and deck[t] not in rankings[u][: SLOTS - K])
            deck[t], deck[u] = deck[u], deck[t]
    pool = {m: deck.count(m) / N_STEPS for m in POOL}
    design = {"slots": SLOTS, "exposure_slots": K, "assignment": "window", "window": W, "pool_slots": J,
              "steps": N_STEPS, "seed": seed, "pool": pool}
    steps = []
    for t in range(N_STEPS):
        rk = rankings[t]
        ctx = [{"memory_id": m, "source": "retriever", "rank": r} for r, m in enumerate(rk[: SLOTS - K])]
        ctx.append({"memory_id": deck[t], "source": "exposure", "propensity": pool[deck[t]], "arm": "pool"})
        in_ctx = {s["memory_id"] for s in ctx}
        window = [m for m in rk[SLOTS - K : SLOTS - K + W] if m not in in_ctx]
        pick = list(rng.choice(window, size=min(K - J, len(window)), replace=False))
        p = min(1.0, (K - J) / len(window))
        ctx += [{"memory_id": str(m), "source": "exposure", "propensity": p, "arm": "window"} for m in pick]
        steps.append({"step": t, "query_id": f"q{t % 4}", "outcome": int(rng.random() < 0.5),
                      "group": "g0" if t % 4 < 2 else "g1", "context": ctx, "ranking": rk})
    memories = [{"memory_id": m, "created_step": 0, "deleted_step": DELETED.get(m), "text": f"memory {m}"}
                for m in MEMORIES]
    return design, steps, memories


def rounds_steps(seed: int = 0) -> tuple[dict, list[dict], list[dict]]:
    """(design, steps, memories) of a balanced design in two rounds of 20 steps, B=3, k=1.

    ``m15`` is created at step 10 (during round 0), so it joins round 1's pool;
    round 1 deals 20 exposures over 6 memories (3 or 4 each), so its
    propensities differ from round 0's (4 each over 5 memories, 0.2).
    """
    rng = np.random.default_rng(seed)
    mems = [f"m{i}" for i in range(16)]
    created = {m: 0 for m in mems} | {"m15": 10}
    pools, decks, rounds = [], [], []
    for r, members in enumerate([mems[10:15], mems[10:16]]):
        deck = _deal(20, members, 1, rng)
        pool = {m: deck.count(m) / 20 for m in members}
        rounds.append({"start": 20 * r, "steps": 20, "seed": seed + r, "pool": pool})
        pools.append(pool)
        decks += deck
    design = {"slots": 3, "exposure_slots": 1, "assignment": "balanced", "rounds": rounds}
    steps = []
    for t in range(40):
        retr = [m for m in mems[:10]]  # retriever picks among the non-pool memories only
        top = [retr[i] for i in rng.permutation(10)[:2]]
        ctx = [{"memory_id": m, "source": "retriever", "rank": i} for i, m in enumerate(top)]
        m = decks[t]
        ctx.append({"memory_id": m, "source": "exposure", "propensity": pools[t // 20][m]})
        steps.append({"step": t, "query_id": f"q{t % 3}", "outcome": round(float(rng.random()) * 64) / 64,
                      "context": ctx})
    memories = [{"memory_id": m, "created_step": created[m], "deleted_step": None} for m in mems]
    return design, steps, memories


def write_jsonl(root: Path, design: dict | None, steps: list[dict], memories: list[dict] | None) -> Path:
    """A JSONL-form log directory with these contents."""
    root.mkdir(parents=True, exist_ok=True)
    if design is not None:
        (root / "design.json").write_text(json.dumps(design))
    (root / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    if memories is not None:
        (root / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in memories))
    return root


def write_parquet(root: Path, design: dict | None, steps: list[dict], memories: list[dict] | None,
                  parts: int = 2) -> Path:
    """The Parquet form of the same contents, steps and contexts each cut into ``parts`` part files
    by step range (``contexts.parquet`` holds the optional ``arm`` column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    if design is not None:
        (root / "design.json").write_text(json.dumps(design))
    (root / "steps").mkdir()
    (root / "contexts").mkdir()
    cuts = np.linspace(0, len(steps), parts + 1).astype(int)
    for i in range(parts):
        chunk = steps[cuts[i] : cuts[i + 1]]
        cols = {
            "step": pa.array([s["step"] for s in chunk], pa.int64()),
            "query_id": pa.array([s["query_id"] for s in chunk], pa.string()),
            "outcome": pa.array([float(s["outcome"]) for s in chunk], pa.float64()),
            "group": pa.array([s.get("group") for s in chunk], pa.string()),
        }
        if any("ranking" in s for s in chunk):
            cols["ranking"] = pa.array([s.get("ranking") for s in chunk], pa.list_(pa.string()))
        pq.write_table(pa.table(cols), root / "steps" / f"part-{i:03d}.parquet")
        slots = [(s["step"], c) for s in chunk for c in s["context"]]
        ccols = {
            "step": pa.array([t for t, _ in slots], pa.int64()),
            "memory_id": pa.array([c["memory_id"] for _, c in slots], pa.string()),
            "source": pa.array([c["source"] for _, c in slots], pa.string()),
            "rank": pa.array([c.get("rank") for _, c in slots], pa.int64()),
            "propensity": pa.array([c.get("propensity") for _, c in slots], pa.float64()),
        }
        if any("arm" in c for _, c in slots):
            ccols["arm"] = pa.array([c.get("arm") for _, c in slots], pa.string())
        pq.write_table(pa.table(ccols), root / "contexts" / f"part-{i:03d}.parquet")
    if memories is not None:
        pq.write_table(pa.table({
            "memory_id": pa.array([m["memory_id"] for m in memories], pa.string()),
            "created_step": pa.array([m["created_step"] for m in memories], pa.int64()),
            "deleted_step": pa.array([m.get("deleted_step") for m in memories], pa.int64()),
        }), root / "memories.parquet")
    return root


def slot_row(steps: list[dict], step: int, slot: int) -> int:
    """The 0-based row of a slot in its contexts part file (two parts of 20 steps each)."""
    start = 0 if step < len(steps) // 2 else len(steps) // 2
    return sum(len(s["context"]) for s in steps[start:step]) + slot
