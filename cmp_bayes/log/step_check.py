"""The live writer's checks of one step before it is logged (``shared/spec/exposure-log.md``).

The same rules the readers apply, on one step at a time, so a running system
learns at once that it is writing a log nobody can read: slot fields, a
memory twice in one context, exposure propensities against the pool of the
round the step falls in (:func:`~cmp_bayes.log.design.pool_at`), the cap of
``k`` exposure slots, and a window design's ``arm`` fields and window slots.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from cmp_bayes.constants import EXPOSURE, SOURCES
from cmp_bayes.errors import LogError
from cmp_bayes.log.design import design_rounds, has_rounds, is_window, round_index
from cmp_bayes.log.lifecycle import MemoryBook

#: the arms an exposure slot may name (spec: "arm")
ARMS: tuple[str, ...] = ("pool", "window")


def check_step(rec: dict[str, Any], design: dict[str, Any] | None, book: MemoryBook, file: Path) -> None:
    """Refuse a step object that breaks the spec (LogError naming ``file`` and the field).

    Normalises ``memory_id`` to ``str`` in place. The outcome is checked by the caller.

    Window slots (``arm: "window"``) need a propensity in (0, 1]. Their window
    ``W_t`` (spec, rule 3) can only be rebuilt from the step's ``ranking``:
    when the step has one, each window slot must be in ``W_t`` with propensity
    ``min(1, (k - j) / |W_t|)`` (relative 1e-9), and the ranking must cover
    ranks ``0 .. B - k + W - 1`` when the store (``memories.jsonl``) is known
    to hold more memories. Without a ranking those checks are skipped here;
    the readers still reject such a step, since the spec requires a ranking at
    every step of a window design.
    """
    ctx = rec.get("context")
    if not isinstance(ctx, list):
        raise LogError(file, "context must be an array of slot objects", field="context")
    step = int(rec["step"])
    r = -1
    if design is not None:
        # design.round_index fails on a rounds design with no round yet: none holds the step
        r = int(round_index(design, np.array([step]))[0]) if design_rounds(design) else -1
        if r < 0:
            rounds = design_rounds(design)
            where = f"the last one ends before step {rounds[-1].stop}" if rounds else "it has none yet"
            raise LogError(
                file,
                f"step {step} falls in no round of design.json ({where}); "
                "append the next round (write_design) before logging its steps",
                field="step",
            )
    pool = design_rounds(design)[r].pool if design is not None else {}
    window = is_window(design)
    seen: set[str] = set()
    kept: set[str] = set()  # retriever and pool slots: what W_t excludes
    window_slots: list[tuple[int, str, float]] = []
    n_pool = 0
    for i, s in enumerate(ctx):
        where = f"context[{i}]"
        if not isinstance(s, dict) or "memory_id" not in s:
            raise LogError(file, "missing required field", field=f"{where}.memory_id")
        m = s["memory_id"] = str(s["memory_id"])
        if m in seen:
            raise LogError(file, f"memory {m!r} twice in one context", field=f"{where}.memory_id")
        seen.add(m)
        src = s.get("source")
        if src not in SOURCES:
            raise LogError(file, f"source must be one of {SOURCES}, got {src!r}", field=f"{where}.source")
        arm = s.get("arm")
        if src != EXPOSURE:
            if arm is not None:
                raise LogError(file, f"'arm' is for exposure slots, not {src!r} slots", field=f"{where}.arm")
            kept.add(m)
            continue
        p = s.get("propensity")
        if isinstance(p, bool) or not isinstance(p, int | float) or not (0 < p <= 1):
            raise LogError(file, f"exposure slot needs a propensity in (0, 1], got {p!r}", field=f"{where}.propensity")
        if design is None:
            raise LogError(file, "exposure slot without a design (pass design=...)", field=f"{where}.source")
        if arm is not None and arm not in ARMS:
            raise LogError(file, f"arm must be one of {ARMS}, got {arm!r}", field=f"{where}.arm")
        if window and arm is None:
            raise LogError(file, "in a window design every exposure slot needs 'arm' ('pool' or 'window')", field=f"{where}.arm")
        if arm == "window":
            if not window:
                raise LogError(file, "a window slot needs a window design (assignment 'window')", field=f"{where}.arm")
            window_slots.append((i, m, float(p)))
            continue
        n_pool += 1
        kept.add(m)
        if m not in pool or not math.isclose(float(pool[m]), float(p), rel_tol=1e-9):
            which = f"round {r}'s pool" if has_rounds(design) else "the design's pool"
            have = "not in it" if m not in pool else f"{pool[m]!r} there"
            raise LogError(
                file, f"propensity {p!r} of {m!r} disagrees with {which} ({have})", field=f"{where}.propensity"
            )
    if design is None:
        return
    k = int(design.get("exposure_slots", 0))
    if n_pool + len(window_slots) > k:
        raise LogError(file, f"{n_pool + len(window_slots)} exposure slots, design allows {k}", field="context")
    if window:
        _check_window(rec, design, book, file, step, n_pool, window_slots, kept)


def _check_window(
    rec: dict[str, Any],
    design: dict[str, Any],
    book: MemoryBook,
    file: Path,
    step: int,
    n_pool: int,
    window_slots: list[tuple[int, str, float]],
    kept: set[str],
) -> None:
    B, k, W = int(design["slots"]), int(design["exposure_slots"]), int(design["window"])
    j = int(design.get("pool_slots", 0))
    if n_pool > j:
        raise LogError(file, f"{n_pool} pool slots, the window design allows pool_slots = {j}", field="context")
    if len(window_slots) > k - j:
        raise LogError(file, f"{len(window_slots)} window slots, the window design allows k - j = {k - j}", field="context")
    ranking = rec.get("ranking")
    if ranking is None:
        return  # W_t needs the ranking: left to the readers, which require it
    cut = B - k
    size = book.size_at(step)
    if len(ranking) < cut + W and size is not None and size > len(ranking):
        raise LogError(
            file,
            f"ranking has {len(ranking)} memories; a window design needs ranks 0 .. {cut + W - 1} "
            f"(the store holds {size})",
            field="ranking",
        )
    w_t = [m for m in ranking[cut : cut + W] if m not in kept and book.in_store(m, step)]
    members = set(w_t)
    want = min(1.0, (k - j) / len(w_t)) if w_t else math.nan
    for i, m, p in window_slots:
        where = f"context[{i}]"
        if m not in members:
            raise LogError(
                file, f"window slot {m!r} is not in this step's window (ranks {cut} .. {cut + W - 1}, in the store, "
                "not already in the context)", field=f"{where}.memory_id"
            )
        if not math.isclose(p, want, rel_tol=1e-9):
            raise LogError(
                file, f"window slot propensity {p!r} must be min(1, (k - j) / |W_t|) = {want!r} (|W_t| = {len(w_t)})",
                field=f"{where}.propensity",
            )
