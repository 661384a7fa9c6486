"""Budget curves: estimator AUCs and a forgettable share against steps per question (issue 16, item 7).

For the simulator's ``locomo-like`` preset cut to :data:`SIZE` (the preset has
600 memories and 200 questions; this runs on a shared 2-core machine in a few
minutes), at steps per question ``repeats * m`` for ``m`` in a ladder
(:data:`LADDER`, times the preset's 10), and for designs at the same number of
exposure slots per step (the preset's ``k = 2``): uniform (``balanced``) and
window designs ``W`` in 10, 20, 40 with ``j = pool_slots`` in 0, 1. Per cell
and seed, estimators only (no fit):

* pair AUC, required pairs against the rest, over the pairs with an estimate
  (``evaluate(..., level="pair", nan="exclude")``), of the design's pair
  estimator: the pool arm's per-query Hajek for uniform; for window designs
  the window arm's SNIPW, falling back to the pool row where the pair has no
  window row or its SNIPW is undefined. The share of pairs (and of required
  pairs) that have an estimate is reported beside it: the AUC says nothing
  about the pairs without one;
* memory AUC of that pair estimator's maximum over a memory's pairs, and of
  the memory-level Hajek, beside logged success and best rank (memories
  without a score ranked last, ``evaluate``'s default);
* a forgettable share: of the useless memories (simulator truth, see
  :func:`useless_memories`), the share whose memory-level status is
  ``identified`` and whose pool Hajek upper 90% bound (estimate + z * se,
  the upper end of the equal-tailed 90% interval) is below the 0.05
  threshold. This is a frequentist stand-in for ``decide``, not ``decide``.
  The same rule's share among required memories (wrong forgets) is beside it.

Then, where LoCoMo is found (``--locomo``, default ``shared/data`` beside the
checkout), the same measures on one conversation (``conv-42``) under the log
``replicate experiment`` builds, without a fit: uniform against window W = 20,
j = 1, at today's exposures per pool memory and at 2x and 4x the steps
(:func:`locomo_curves`).

Writes ``reports/simulation/budget_curves.md`` and ``budget_curves.json``
(rows and provenance: commit, command, machine, load), atomically.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/budget_curves.py --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: the preset's 600 memories x 200 questions cut to what the shared machine runs in minutes
SIZE: dict[str, int] = {"memories": 200, "queries": 60}
#: steps per question, as multiples of the preset's ``repeats``
LADDER: tuple[int, ...] = (1, 2, 5, 10, 20)
#: the forgetting threshold of the stand-in rule (outcome units), decide's default
THRESHOLD = 0.05
#: the report's closing section, written by hand from the run at seeds 0 1 (commit 3911c6e): re-check it
#: against the tables when the numbers move
READING = """\
Written by hand from the run at seeds 0 and 1 (commit 3911c6e); the tables above are regenerated, this
section is not.

* **Memory level: no design and no budget here beats the logged counts.** Up to 200 steps per question
  (20x the preset's), the memory-level Hajek (0.48-0.57 on average over the seeds) and the best pair
  estimate per memory (0.46-0.54) stay at chance under every design, while logged success (0.58-0.60) and
  best rank (0.58) stay above them. On LoCoMo conv-42 the same: 0.46-0.54 against logged success 0.65-0.66
  and best rank 0.67, at 1x, 2x and 4x today's steps. A memory matters to one or two of the questions;
  more randomized exposure, spread over every question, does not find it.
* **Pair level: the window estimates well what it reaches, and its reach is set by W, not by the
  budget.** The window SNIPW, over the pairs it scores, reaches 0.90 (W = 40, j = 0) and 0.85 (W = 40,
  j = 1) at 200 steps per question, against 0.68 for the uniform design's per-query Hajek. But the window
  scores only the pairs in retriever ranks 8..8+W-1: 5%, 10%, 20% of the pairs at W = 10, 20, 40, and
  1, 5 and 10 of the 120 required pairs at most (the preset's lexical gap puts a required memory either in
  the top 8 or far below the window); once those pairs are scored (about 20 steps per question at W = 10,
  100 at W = 40) more steps add nothing. With j = 1 the pool fallback scores more pairs (up to 69%) and
  the pair AUC over all of them (0.64-0.69 at 100-200 steps) is about the uniform design's
  (0.61-0.68). On LoCoMo conv-42
  the window design W = 20, j = 1 scores 14-42 required pairs at 0.72-0.79 pair AUC against 5-15 at
  0.47-0.65 for uniform, at the same exposure slots: there the window reaches more of the evidence.
* **Forgetting: a memory-level rule cannot tell useless from required memories on a shared store.** The
  stand-in rule (identified, Hajek upper 90% bound below 0.05) forgets 8% of the useless memories at 10
  steps per question and 31% at 200 (uniform), and required memories at a similar rate (7% to 26%);
  j = 1 windows 12-24% against 11-25%, LoCoMo conv-42 7-15% against 6-16%. That
  is the estimand, not noise: a required memory's effect averaged over 60 questions is below the
  threshold, so "below 0.05 on average" is true of it. With j = 0 nothing is forgettable at any budget:
  window slots are not in the memory-level exposed arm, so no memory is identified. Forgetting on a
  shared store needs a per-pair or workload estimand (`decide(estimand="relevant" | "workload")`), and
  a design with j >= 1 so that every memory keeps positivity.
* Not measured here: the gated model's posterior along these curves (a fit per cell is too slow for the
  shared machine; reports/simulation/gated.md has it at 10 steps per question), `decide` itself, the full
  preset size, and LoCoMo beyond conv-42.
"""

#: LoCoMo as the developers lay it out: ``shared/data`` beside the checkout
LOCOMO_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"
#: the stand-in's one-sided level: the upper end of the equal-tailed 90% interval
Z_UPPER = 1.6448536269514722


@dataclass(frozen=True)
class Design:
    """One exposure design at the preset's exposure slots: uniform, or a window ``W`` with ``j`` pool slots."""

    name: str
    window: int | None = None
    pool_slots: int = 0

    def overrides(self) -> dict[str, Any]:
        """``SimulationConfig`` fields that make this design."""
        if self.window is None:
            return {"assignment": "balanced"}
        return {"assignment": "window", "window": self.window, "pool_slots": self.pool_slots}


DESIGNS: tuple[Design, ...] = (
    Design("uniform"),
    *(Design(f"window W={w} j={j}", w, j) for w in (10, 20, 40) for j in (0, 1)),
)

COLUMNS: tuple[str, ...] = (
    "design", "multiple", "steps_per_question", "seed", "pairs_scored", "required_pairs_scored",
    "required_pairs_n", "auc_pair", "pairs_window", "auc_pair_window_only", "auc_memory_pair_max", "auc_memory_hajek", "auc_logged_success",
    "auc_best_rank", "useless", "forgettable_share", "required_forgotten_share", "seconds",
)


def useless_memories(labels: pd.DataFrame, threshold: float = THRESHOLD) -> pd.Index:
    """Memory ids the simulator makes useless: required by no query, ``|utility| < threshold`` for every query.

    ``labels`` is a simulated log's labels (``utility`` per pair).

    The simulator gives every memory a small continuous effect
    (``Normal(0, null_sd)``) and a displacement effect, so no memory has
    utility exactly 0 for every query; "useless" here is "no query gains or
    loses the forgetting threshold from it": what a correct ``decide`` may
    forget.
    """
    lab = labels.assign(memory_id=labels["memory_id"].astype(str),
                        u=labels["utility"].astype("Float64").to_numpy(dtype=float, na_value=np.nan))
    lab = lab.assign(u=np.abs(lab["u"]))
    # a pair without a truth (NaN) cannot vouch for the memory: it counts as not below the threshold
    per = lab.groupby("memory_id").agg(req=("required", "any"), mx=("u", lambda x: float(x.max(skipna=False))))
    return per.index[(~per["req"].astype(bool)) & (per["mx"] < threshold)]


def pair_table(per_query: pd.DataFrame) -> pd.DataFrame:
    """One row per pair: the window arm's SNIPW where it is finite, else the pool arm's Hajek.

    ``arm`` says which row scored the pair. Without window rows (uniform) it
    is the pool table itself.
    """
    t = per_query.assign(memory_id=per_query["memory_id"].astype(str), query_id=per_query["query_id"].astype(str))
    t = t[["memory_id", "query_id", "arm", "status", "estimate"]]
    # window rows first where defined, so drop_duplicates keeps them over the pool row
    finite = np.isfinite(t["estimate"].to_numpy(dtype=float, na_value=np.nan))
    rank = np.where((t["arm"] == "window").to_numpy() & finite, 0, 1)
    t = t.assign(_r=rank).sort_values(["memory_id", "query_id", "_r"], kind="mergesort")
    return t.drop_duplicates(["memory_id", "query_id"]).drop(columns="_r").reset_index(drop=True)


def run_cell(base: str, size: dict[str, int], design: Design, multiple: int, seed: int) -> dict[str, Any]:
    """Simulate one design at ``multiple`` times the preset's steps per question and score its estimators.

    Returns
    -------
    dict
        The keys of :data:`COLUMNS` (AUCs in [0, 1] or NaN; shares in [0, 1]).
    """
    from cmp_bayes.simulation.config import SimulationConfig
    from cmp_bayes.simulation.presets import PRESETS
    from cmp_bayes.simulation.simulator import simulate

    t0 = time.perf_counter()
    repeats = int({**PRESETS[base], **size}.get("repeats", SimulationConfig().repeats)) * multiple
    cfg = SimulationConfig.preset(base, **{**size, "repeats": repeats, **design.overrides()})
    log = simulate(cfg, seed=seed)

    # truth from the uniform log of the same world: a window design's labels average over its own
    # control steps, so its useless set would move with the design; the world (seeded) does not
    ref = log if design.window is None else simulate(
        SimulationConfig.preset(base, **{**size, "repeats": repeats, "assignment": "balanced"}), seed=seed)
    ref_req = ref.labels.astype({"memory_id": str}).groupby("memory_id")["required"].any()
    if not ref_req.astype(bool).equals(log.labels.astype({"memory_id": str}).groupby("memory_id")["required"]
                                         .any().astype(bool)):
        raise RuntimeError(f"seed {seed}: the uniform and {design.name} logs are not the same world")
    row = score_log(log, useless_memories(ref.labels))
    return {"design": design.name, "multiple": multiple, "steps_per_question": repeats, "seed": seed, **row,
            "seconds": time.perf_counter() - t0}


def score_log(log: Any, useless_ids: pd.Index | None = None) -> dict[str, Any]:
    """Every estimator measure of one log (the keys of :data:`COLUMNS` from ``pairs_scored`` to
    ``required_forgotten_share``; ``useless`` and ``forgettable_share`` NaN without ``useless_ids``).

    Parameters
    ----------
    log : ExposureLog
        A labelled log (``labels.required``).
    useless_ids : pandas.Index, optional
        Memory ids that are useless (:func:`useless_memories`), for the forgettable share.
    """
    from cmp_bayes import estimate
    from cmp_bayes.constants import IDENTIFIED
    from cmp_bayes.evaluation import auc, evaluate
    from cmp_bayes.statistics import exposure_stats

    pairs = pair_table(estimate(log, by="query"))
    rp = evaluate(log, pairs, level="pair", n_boot=0, nan="exclude")
    rp_all = evaluate(log, pairs, level="pair", n_boot=0, nan="last")
    window_rows = pairs[pairs["arm"] == "window"]
    rw = evaluate(log, window_rows, level="pair", n_boot=0, nan="exclude") if len(window_rows) else None
    rm = evaluate(log, pairs, level="memory", n_boot=0)
    hajek = estimate(log)
    rh = evaluate(log, hajek, level="memory", n_boot=0)
    rl = evaluate(log, estimate(log, method="logged-success"), level="memory", n_boot=0)

    stats = exposure_stats(log)
    ids = stats["memory"].to_numpy().astype(str)
    lab = log.labels.astype({"memory_id": str})
    required = lab.groupby("memory_id")["required"].any().reindex(ids, fill_value=False).to_numpy(bool)
    best_rank = -stats["rank_best"].to_numpy().astype(np.float64)
    best_rank = np.where(np.isfinite(best_rank), best_rank, -np.inf)  # never ranked: below every ranked one

    h = hajek.assign(memory_id=hajek["memory_id"].astype(str)).set_index("memory_id").reindex(ids)
    upper = h["estimate"].to_numpy(dtype=float, na_value=np.nan) + Z_UPPER * h["std_error"].to_numpy(
        dtype=float, na_value=np.nan)
    forget = (h["status"] == IDENTIFIED).to_numpy(dtype=bool, na_value=False) & (upper < THRESHOLD)
    useless = np.isin(ids, useless_ids if useless_ids is not None else [])

    def share(mask: np.ndarray) -> float:
        return float(forget[mask].mean()) if mask.any() else float("nan")

    n_pairs = rp_all["n"]
    req_scored = rp["n_required"] / rp_all["n_required"] if rp_all["n_required"] else float("nan")
    return {
        "pairs_scored": rp["n"] / n_pairs if n_pairs else float("nan"),
        "required_pairs_scored": req_scored,
        "required_pairs_n": int(rp["n_required"]),
        "auc_pair": _nan(rp["auc"]),
        "pairs_window": float((pairs["arm"] == "window").mean()),
        # the window SNIPW on the pairs it scores, without the pool fallback
        "auc_pair_window_only": float("nan") if rw is None else _nan(rw["auc"]),
        "auc_memory_pair_max": _nan(rm["auc"]), "auc_memory_hajek": _nan(rh["auc"]),
        "auc_logged_success": _nan(rl["auc"]), "auc_best_rank": auc(best_rank, required),
        "useless": int(useless.sum()) if useless_ids is not None else float("nan"),
        "forgettable_share": share(useless) if useless_ids is not None else float("nan"),
        "required_forgotten_share": share(required),
    }


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def budget_curves(
    base: str = "locomo-like",
    size: dict[str, int] | None = None,
    ladder: tuple[int, ...] = LADDER,
    designs: tuple[Design, ...] = DESIGNS,
    seeds: tuple[int, ...] = (0, 1),
    progress: bool = False,
) -> pd.DataFrame:
    """The budget-curve table: one row per (design, multiple, seed), columns :data:`COLUMNS`.

    Parameters
    ----------
    base : str
        Simulation preset (its ``exposure_slots`` is every design's).
    size : dict, optional
        ``SimulationConfig`` overrides of the preset's size (default :data:`SIZE`).
    ladder : tuple of int
        Steps per question as multiples of the preset's ``repeats``.
    designs : tuple of Design
        The designs (default :data:`DESIGNS`).
    seeds : tuple of int
        Simulation seeds.
    progress : bool
        Print each row as it is done.
    """
    rows = []
    for design in designs:
        for m in ladder:
            for seed in seeds:
                rows.append(run_cell(base, SIZE if size is None else size, design, m, seed))
                if progress:
                    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    return pd.DataFrame(rows, columns=list(COLUMNS))


#: the LoCoMo part: uniform vs the locomo-window preset's design, at 1x, 2x and 4x today's steps
LOCOMO_DESIGNS: tuple[Design, ...] = (Design("uniform"), Design("window W=20 j=1", 20, 1))
LOCOMO_LADDER: tuple[int, ...] = (1, 2, 4)


def locomo_curves(
    path: str | os.PathLike[str],
    conversation: str = "conv-42",
    ladder: tuple[int, ...] = LOCOMO_LADDER,
    designs: tuple[Design, ...] = LOCOMO_DESIGNS,
    seed: int = 0,
) -> pd.DataFrame:
    """The same measures on one LoCoMo conversation, logs laid out as ``replicate experiment`` lays them out.

    The log is :func:`cmp_bayes.replicate.layout.build_log`'s (the
    experiment's own log builder, BM25, the semi-synthetic reader, no fit) at
    ``ExperimentConfig``'s defaults with ``exposures_per_memory`` times each
    multiple. Useless memories: the non-required ones (the reader model gives
    every memory outside a question's evidence no effect of its own).
    ``steps_per_question`` is the log's steps over its questions.
    """
    from dataclasses import replace

    from cmp_bayes.datasets.locomo import load_locomo
    from cmp_bayes.replicate.config import ExperimentConfig
    from cmp_bayes.replicate.layout import build_log
    from cmp_bayes.retrieval.base import get_retriever

    ds = load_locomo(path, conversations=[conversation])
    retriever = get_retriever("bm25")
    base = ExperimentConfig(fit=False, seed=seed)
    rows = []
    for design in designs:
        for m in ladder:
            t0 = time.perf_counter()
            over = design.overrides()
            cfg = replace(base, exposures_per_memory=base.exposures_per_memory * m, assignment=over["assignment"],
                          window=over.get("window"), pool_slots=over.get("pool_slots", 0))
            log, _ = build_log(ds, retriever, cfg)
            lab = log.labels.astype({"memory_id": str})
            req = lab.groupby("memory_id")["required"].any()
            ids = pd.Index(log.memory_ids().astype(str))
            useless = ids[~req.reindex(ids, fill_value=False).to_numpy(bool)]
            n_q = int(log.steps["query_id"].nunique())
            row = score_log(log, useless)
            rows.append({"design": design.name, "multiple": m, "steps_per_question": round(log.n_steps / n_q, 1),
                         "seed": seed, **row, "seconds": time.perf_counter() - t0})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _fmt(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.3f}"


def _cell(vals: pd.Series, pct: bool = False) -> str:
    """Every seed's value, then the mean: ``a / b (mean m)``."""
    f = (lambda v: "-" if not np.isfinite(v) else f"{100 * v:.0f}%") if pct else _fmt
    xs = [f(float(v)) for v in vals]
    if len(xs) == 1:
        return xs[0]
    return " / ".join(xs) + f" ({f(float(np.nanmean(vals)) if np.isfinite(vals).any() else np.nan)})"


def _tables(table: pd.DataFrame, useless_label: str) -> list[str]:
    """One markdown table per measure family, rows design x steps per question."""
    out: list[str] = []
    groups = [
        ("Pair level", [("pairs scored", "pairs_scored", True), ("required scored", "required_pairs_scored", True),
                        ("required scored (n)", "required_pairs_n", None), ("pair AUC", "auc_pair", False),
                        ("window rows", "pairs_window", True),
                        ("pair AUC, window rows only", "auc_pair_window_only", False)]),
        ("Memory level (AUC)", [("max over pairs", "auc_memory_pair_max", False),
                                ("memory Hajek", "auc_memory_hajek", False),
                                ("logged success", "auc_logged_success", False),
                                ("best rank", "auc_best_rank", False)]),
        ("Forgetting (stand-in rule)", [(useless_label, "useless", None),
                                        (f"forgettable share of {useless_label}", "forgettable_share", True),
                                        ("required forgotten", "required_forgotten_share", True)]),
    ]
    for title, cols in groups:
        out += [f"### {title}", "", "| design | steps / question | " + " | ".join(c[0] for c in cols) + " |",
                "| --- | --- | " + " | ".join("---" for _ in cols) + " |"]
        for (design, steps), g in table.groupby(["design", "steps_per_question"], sort=False):
            cells = []
            for _, col, pct in cols:
                if pct is None:
                    cells.append(" / ".join(str(int(v)) for v in g[col]))
                else:
                    cells.append(_cell(g[col], pct))
            out.append(f"| {design} | {steps} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def markdown(table: pd.DataFrame, meta: dict[str, Any], locomo: pd.DataFrame | None = None) -> str:
    """The report: the simulator's tables, then LoCoMo's when given, then the reading."""
    seeds = sorted(int(x) for x in table["seed"].unique())
    head = (
        "# Budget curves: the simulator's shared store and LoCoMo conv-42 (estimators only)\n\n"
        f"`{meta['command']}` at commit `{meta['commit']}`; preset `{meta['base']}` cut to {meta['size']} "
        f"(the preset has 600 memories, 200 questions, 10 steps per question); every design at the preset's "
        f"{meta['exposure_slots']} exposure slots per step of {meta['slots']} context slots. Seeds {seeds}: each "
        "cell is `seed " + " / seed ".join(map(str, seeds)) + " (mean)`. Machine: "
        f"{meta['machine']}; load average before {meta['load_before']}, after {meta['load_after']}; "
        f"wall time {meta['seconds']:.0f} s. No fit: every number is an estimator's.\n\n"
        "Pair estimator: pool-arm Hajek per query (uniform); window-arm SNIPW, falling back to the pool row "
        "where a pair has no window row or its SNIPW is undefined (window designs; `window rows` is the share "
        "of all pairs scored by the window arm, and the last column is the window SNIPW's AUC over those pairs "
        "alone). Pair AUC is over the pairs with an estimate only; "
        "`pairs scored` / `required scored` say how many that is. Memory AUCs rank every memory of the store "
        "(no score: last). Useless memories: required by no question and |utility| < 0.05 for every question "
        "(simulator truth, from the uniform log of the same seed and steps, so every design of a seed has "
        "the same useless set; no memory has utility exactly 0 there). Forgettable: memory-level status "
        "`identified` and pool Hajek estimate + 1.645 se < 0.05: **a frequentist stand-in for `decide`, not "
        "`decide`**; `required forgotten` is the same rule's share among required memories.\n"
    )
    out = [head, "## Simulator: `locomo-like`", ""] + _tables(table, "useless memories")
    if locomo is not None:
        out += [
            f"## LoCoMo {meta['locomo']['conversation']} (semi-synthetic)", "",
            "The log `replicate experiment` builds (`cmp_bayes.replicate.layout.build_log`: BM25, the "
            "semi-synthetic reader model, `ExperimentConfig` defaults, no fit), seed "
            f"{meta['locomo']['seed']}, at today's exposures per pool memory "
            f"({meta['locomo']['exposures_per_memory']:g}) and at "
            + ", ".join(f"{m}x" for m in meta["locomo"]["ladder"] if m != 1)
            + " the steps; both designs spend the same exposure slots. Useless memories here: the "
            "non-required ones (the reader model gives a memory outside a question's evidence no effect of its "
            "own); the forgetting rule is the same stand-in. One seed: no interval, read the differences as "
            "indicative.", "",
        ] + _tables(locomo, "non-required memories")
    out += ["## Reading", "", READING]
    return "\n".join(out)


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - platform without getloadavg
        return "n/a"


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        # uncommitted changes to the code that made the numbers: say so
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "cmp_bayes", "benchmarks"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):  # pragma: no cover - not a checkout
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--ladder", type=int, nargs="+", default=list(LADDER))
    ap.add_argument("--out", default="reports/simulation/budget_curves.md")
    ap.add_argument("--locomo", default=str(LOCOMO_FILE), help="locomo10.json (the LoCoMo part; '' skips it)")
    ap.add_argument("--conversation", default="conv-42")
    args = ap.parse_args()
    from cmp_bayes.atomic import write_text_atomic
    from cmp_bayes.simulation.config import SimulationConfig

    load_before = _load()
    t0 = time.perf_counter()
    table = budget_curves(ladder=tuple(args.ladder), seeds=tuple(args.seeds), progress=True)
    locomo = None
    if args.locomo and os.path.isfile(args.locomo):
        locomo = locomo_curves(args.locomo, args.conversation, seed=args.seeds[0])
        print(locomo.to_string(index=False), flush=True)
    cfg = SimulationConfig.preset("locomo-like", **SIZE)
    meta = {
        "command": "benchmarks/budget_curves.py --seeds " + " ".join(map(str, args.seeds))
        + " --ladder " + " ".join(map(str, args.ladder)),
        "commit": _commit(), "base": "locomo-like", "size": SIZE, "exposure_slots": cfg.exposure_slots,
        "slots": cfg.slots, "threshold": THRESHOLD,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "load_before": load_before, "load_after": _load(), "seconds": time.perf_counter() - t0,
    }
    if locomo is not None:
        from cmp_bayes.replicate.config import ExperimentConfig

        meta["command"] += f" --locomo {args.locomo} --conversation {args.conversation}"
        meta["locomo"] = {"conversation": args.conversation, "seed": args.seeds[0], "ladder": list(LOCOMO_LADDER),
                          "exposures_per_memory": ExperimentConfig().exposures_per_memory, "retriever": "bm25"}
    print(table.to_string(index=False))
    write_text_atomic(args.out, markdown(table, meta, locomo))
    doc = {"meta": meta, "rows": json.loads(table.to_json(orient="records"))}
    if locomo is not None:
        doc["locomo_rows"] = json.loads(locomo.to_json(orient="records"))
    write_text_atomic(os.path.splitext(args.out)[0] + ".json", json.dumps(doc, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
