"""The deployed-system transfer: retrieval positivity and CMP inside a real Mem0 store.

Run (offline; LoCoMo is CC BY-NC: the store and the log go to temporary
folders, only aggregate numbers are printed)::

    .venv/bin/python benchmarks/mem0_transfer.py [--conversations conv-26 conv-30]
        [--slots 10 --exposure-slots 2 --exposures 6 --seed 0] [--no-fit] [--json out.json]

1. **Store.** Every LoCoMo conversation goes into one real Mem0 store
   (``mem0ai`` 2.2.1, Qdrant embedded on disk, all-MiniLM-L6-v2 int8 ONNX
   embedder), one memory per turn: ``add(messages, user_id=<conversation>,
   infer=False)`` with one message per turn (text ``"<speaker>: <text>"``
   plus the image caption, as :mod:`cmp_bayes.datasets.locomo` writes it),
   keeping the map turn ``dia_id`` -> Mem0 id.
2. **Positivity.** For every question Mem0's full ranking of its
   conversation (``search(top_k=<store size>, threshold=0.0)``); Mem0 drops
   memories with negative similarity even at threshold 0, so those are ranked
   after the rest by the same cosine similarity (their count is reported).
   Then :func:`cmp_bayes.replicate.positivity.positivity_table`: evidence
   pairs and memories never in the top ``B``, median 0-based rank of
   unretrieved evidence, median store size (the paper's 139 of 291).
3. **CMP run through** :class:`cmp_bayes.integrations.mem0.CMPMemory`.
   Conversations are consecutive blocks of steps (their memories "in the
   store" only during their block); each step asks one of the block's
   questions uniformly at random; Mem0 fills ``B - k`` slots, the balanced
   scheduler ``k``; the pool is every memory; ``T_s = ceil(exposures *
   pool_s / k)``. Outcomes come from the declared reader
   (:class:`cmp_bayes.replicate.reader.ReaderModel`: success probability
   rising with the share of the question's evidence in the context), so the
   results are **semi-synthetic**.
4. **AUC** of required vs non-required memories (``evaluate``, NaN ranked
   last) for the logged baselines, Hajek, per-query Hajek (pair level) and
   the posterior mean of ``tau`` (``cmp_bayes.model.fit.fit``).

Offline, Mem0's search is **vector-only**: its BM25 and entity boosts switch
themselves off without fastembed's hub download and spaCy's model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

os.environ.setdefault("MEM0_TELEMETRY", "False")  # before mem0 is imported

from cmp_bayes.atomic import write_text_atomic  # noqa: E402
from cmp_bayes.datasets.base import Dataset  # noqa: E402
from cmp_bayes.datasets.locomo import load_locomo  # noqa: E402
from cmp_bayes.replicate.positivity import positivity_table  # noqa: E402
from cmp_bayes.replicate.reader import ReaderModel  # noqa: E402

#: shared/data beside the clone, as in the tests and benchmarks/replication.py
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"
LABEL = "semi-synthetic"


def load_stores(work: Path, dataset: Dataset) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One Mem0 store per conversation, one memory per turn.

    Returns conversation -> ``mem0.Memory`` and conversation -> Mem0 ids in
    turn order. Every store shares one cached embedder. (One collection per
    conversation, not one collection filtered by ``user_id``: Qdrant's
    embedded mode evaluates payload filters in Python over every point, which
    made each search over the 5,882 turns ~10x slower.)
    """
    from cmp_bayes.integrations.mem0_offline import mem0_embedding, offline_memory
    from cmp_bayes.retrieval.dense import MiniLMEmbedder

    emb = mem0_embedding(MiniLMEmbedder())
    texts = [t for s in dataset.stores for t in s.memories["text"].tolist()]
    cache = work / "turn_embeddings.npz"  # derived from LoCoMo: lives in the work folder only
    if cache.is_file():
        saved = np.load(cache, allow_pickle=True)
        emb._cache.update(zip(saved["texts"].tolist(), saved["vectors"].tolist(), strict=True))
    emb.prime(texts)
    np.savez(cache, texts=np.array(texts, dtype=object), vectors=np.array(emb.embed_batch(texts)))
    memories, ids = {}, {}
    for s in dataset.stores:
        memory = offline_memory(work / "stores" / s.store_id, emb.embedder, collection_name="locomo")
        memory.embedding_model = emb
        msgs = [{"role": "user", "content": t} for t in s.memories["text"].tolist()]
        out = memory.add(msgs, user_id=s.store_id, infer=False)["results"]
        if len(out) != len(msgs):
            raise RuntimeError(f"{s.store_id}: Mem0 stored {len(out)} of {len(msgs)} turns")
        memories[s.store_id] = memory
        ids[s.store_id] = np.array([r["id"] for r in out], dtype=object)
    return memories, ids


def mem0_ranks(memory: Any, store: Any, ids: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """0-based rank of every memory (columns: turn order) for every question (rows).

    Returns the ranks and counts: memories Mem0 left out (negative
    similarity), and returned positions where Mem0's order disagrees with the
    embedder's cosine order (0 when search is vector-only).
    """
    emb = memory.embedding_model
    col = {m: i for i, m in enumerate(ids)}
    texts = store.memories["text"].tolist()
    mem_vec = np.asarray(emb.embed_batch(texts), dtype=np.float64)
    ranks = np.empty((len(store.queries), len(ids)), dtype=np.int64)
    missing = disagree = 0
    for qi, q in enumerate(store.queries["text"].tolist()):
        res = memory.search(q, filters={"user_id": store.store_id}, top_k=len(ids), threshold=0.0)["results"]
        got = [col[r["id"]] for r in res]
        cos = mem_vec @ np.asarray(emb.embed(q), dtype=np.float64)
        rest = np.setdiff1d(np.arange(len(ids)), got)
        rest = rest[np.argsort(-cos[rest], kind="stable")]
        order = np.r_[np.asarray(got, dtype=np.int64), rest]
        ranks[qi, order] = np.arange(len(ids))
        missing += len(rest)
        # vector-only check: returned scores must follow cosine (float32 ties aside)
        c = cos[np.asarray(got, dtype=np.int64)]
        disagree += int((np.diff(c) > 1e-5).sum())
    return ranks, {"left_out_negative_similarity": missing, "order_disagreements": disagree}


def positivity(
    dataset: Dataset, ranks: dict[str, np.ndarray], slots: list[int], context: int
) -> tuple[pd.DataFrame, dict]:
    """Evidence pairs / memories in the replication's schema, then its table (per conversation at ``B = context``)."""
    pair_rows, mem_rows = [], []
    for s in dataset.stores:
        r = ranks[s.store_id]
        qrow = {q: i for i, q in enumerate(s.queries["query_id"])}
        mcol = {m: i for i, m in enumerate(s.memories["memory_id"])}
        groups = dict(zip(s.queries["query_id"], s.queries["group"], strict=True))
        ev = s.evidence
        for q, m in ev[["query_id", "memory_id"]].itertuples(index=False):
            pair_rows.append((s.store_id, q, groups[q], m, int(r[qrow[q], mcol[m]]), s.size))
        best = r.min(axis=0)
        for q, m in ev.drop_duplicates("memory_id")[["query_id", "memory_id"]].itertuples(index=False):
            mem_rows.append((s.store_id, m, int(best[mcol[m]]), s.size, groups[q]))
    pairs = pd.DataFrame(pair_rows, columns=["store_id", "query_id", "group", "memory_id", "rank", "store_size"])
    mems = pd.DataFrame(mem_rows, columns=["store_id", "memory_id", "best_rank", "store_size", "group"])
    table = positivity_table(pairs, mems, slots)
    per_conv = {}
    for sid, sub in pairs.groupby("store_id"):
        b = context
        miss = sub["rank"] >= b
        per_conv[sid] = {
            "store_size": int(sub["store_size"].iloc[0]),
            "pairs": len(sub),
            f"pairs_not_in_top{b}_share": float(miss.mean()),
            "median_rank_unretrieved": float(sub.loc[miss, "rank"].median()) if miss.any() else None,
        }
    return table, per_conv


def cmp_run(
    memories: dict[str, Any],
    dataset: Dataset,
    ids: dict[str, np.ndarray],
    ranks: dict[str, np.ndarray],
    log_dir: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The CMP exposure run through the wrapper; writes the log (with labels) to ``log_dir``."""
    from cmp_bayes.design.scheduler import ExposureScheduler
    from cmp_bayes.integrations.mem0 import CMPMemory
    from cmp_bayes.log.append import LogWriter

    rng = np.random.default_rng([args.seed, 1])
    reader = ReaderModel()
    k, nret = args.exposure_slots, args.slots - args.exposure_slots
    blocks, start = [], 0
    for s in dataset.stores:
        if s.queries.empty:
            continue
        steps = math.ceil(args.exposures * s.size / k)
        step_q = rng.integers(len(s.queries), size=steps)
        top = np.argsort(ranks[s.store_id], axis=1, kind="stable")[:, :nret]
        always = set(top[step_q[0]].tolist()).intersection(*(set(top[q].tolist()) for q in np.unique(step_q)))
        pool = [m for i, m in enumerate(ids[s.store_id]) if i not in always]
        blocks.append((s, start, steps, step_q, pool, reader.base_rates(len(s.queries), rng)))
        start += steps
    total = start
    pool_ids = [m for b in blocks for m in b[4]]
    lifetimes = {m: (b[1], b[1] + b[2]) for b in blocks for m in b[4]}
    window = {"window": args.window, "pool_slots": args.pool_slots} if args.assignment == "window" else {}
    sched = ExposureScheduler(args.slots, k, pool_ids, total, args.assignment, seed=args.seed, lifetimes=lifetimes,
                              **window)
    store_rows = pd.DataFrame(
        [
            {"memory_id": m, "created_step": b[1], "deleted_step": b[1] + b[2],
             "meta": {"conversation": b[0].store_id, "dia_id": dia.split("/", 1)[1]}}
            for b in blocks for m, dia in zip(ids[b[0].store_id], b[0].memories["memory_id"], strict=True)
        ]
    )
    writer = LogWriter(log_dir, design=sched.design(), memories=store_rows)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s, _start, steps, step_q, _, base in blocks:
            # the conversation's own store; scheduler and log run on across conversations
            cmp = CMPMemory(memories[s.store_id], sched, writer, slots=args.slots, track_store=False,
                            ranking_depth=s.size)
            mid = {m: i for i, m in enumerate(ids[s.store_id])}
            ev = np.zeros((len(s.queries), s.size), dtype=bool)
            qrow = {q: i for i, q in enumerate(s.queries["query_id"])}
            mcol = {m: i for i, m in enumerate(s.memories["memory_id"])}
            for q, m in s.evidence[["query_id", "memory_id"]].itertuples(index=False):
                ev[qrow[q], mcol[m]] = True
            n_ev = ev.sum(axis=1)
            qtext = s.queries["text"].tolist()
            qid = s.queries["query_id"].tolist()
            grp = s.queries["group"].tolist()
            for t in range(steps):
                q = int(step_q[t])
                res = cmp.search(qtext[q], filters={"user_id": s.store_id}, query_id=qid[q], group=grp[q])
                seen = sum(ev[q, mid[r["id"]]] for r in res["results"])
                share = seen / n_ev[q] if n_ev[q] else 0.0
                y = float(reader.outcomes(np.array([base[q]]), np.array([share]), rng)[0])
                cmp.report_outcome(res["cmp"]["step"], y)
            print(f"  {s.store_id}: {steps} steps done ({time.perf_counter() - t0:.0f} s)", flush=True)
    writer.close()
    run_s = time.perf_counter() - t0
    labels = [
        json.dumps({"query_id": q, "memory_id": str(ids[s.store_id][s.memories["memory_id"].tolist().index(m)]), "required": True})
        for s, *_ in blocks for q, m in s.evidence[["query_id", "memory_id"]].itertuples(index=False)
    ]
    write_text_atomic(log_dir / "labels.jsonl", "".join(line + "\n" for line in labels))
    shortfall = sum(sched.shortfall.values())
    return {
        "steps": total,
        "pool": len(pool_ids),
        "seconds": run_s,
        "ms_per_step": 1000 * run_s / total,
        "exposures_planned": int(sched.counts.sum()),
        "exposures_not_delivered": int(shortfall),
        "warnings": len(caught),
    }


def compare(log_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Identification counts and the AUC table (same methods as the replication)."""
    from cmp_bayes.diagnostics.positivity import identification_status
    from cmp_bayes.estimators import estimate
    from cmp_bayes.evaluation import evaluate
    from cmp_bayes.log.read import read_log
    from cmp_bayes.statistics import exposure_stats

    log = read_log(log_dir)
    stats = exposure_stats(log)
    status = pd.Series(identification_status(stats).to_numpy(), index=stats["memory"].to_numpy())
    required = set(log.labels.loc[log.labels["required"], "memory_id"].astype(str))
    retrieved = stats["retrieved"].to_series()
    out: dict[str, Any] = {
        "memories": int(stats.sizes["memory"]),
        "required_memories": len(required),
        "status_counts": {k: int(v) for k, v in status.value_counts().items()},
        "required_never_retrieved_share": float((retrieved.reindex(sorted(required)) == 0).mean()),
        "exposures_per_pool_memory": float(stats["exposed"].to_numpy()[stats["in_pool"].to_numpy()].mean()),
    }
    rows = []

    def row(method: str, level: str, ev: dict[str, Any]) -> None:
        ident = (ev.get("by_status") or {}).get("identified", {})
        rows.append({"method": method, "level": level, "auc": ev["auc"], "ci_low": ev["ci_low"],
                     "ci_high": ev["ci_high"], "n": ev["n"], "n_required": ev["n_required"],
                     "n_nan": ev["n_nan"], "auc_identified": ident.get("auc")})

    t0 = time.perf_counter()
    for m in ("logged-success", "logged-diff", "hajek"):
        row(m, "memory", evaluate(log, estimate(log, method=m), level="memory", n_boot=args.n_boot, seed=args.seed))
    # the best rank any question gave the memory (never ranked: last), a score without CMP
    best = pd.DataFrame({"memory_id": stats["memory"].values.astype(str), "estimate": -stats["rank_best"].values})
    row("best rank", "memory", evaluate(log, best, level="memory", n_boot=args.n_boot, seed=args.seed))
    per_query = estimate(log, by="query", method="hajek")
    # a window design adds window-arm rows per pair: each arm is scored on its own
    arms = per_query.get("arm")
    pool_rows = per_query if arms is None else per_query[arms == "pool"]
    row("hajek per query", "pair", evaluate(log, pool_rows, level="pair", n_boot=args.n_boot, seed=args.seed))
    if arms is not None and bool((arms == "window").any()):
        row("window SNIPW per pair", "pair",
            evaluate(log, per_query[arms == "window"], level="pair", n_boot=args.n_boot, seed=args.seed))
    del per_query, pool_rows
    pairs = exposure_stats(log, by="pair")
    keys = pd.DataFrame({"memory_id": pairs["memory_id"].values.astype(str),
                         "query_id": pairs["query_id"].values.astype(str)})
    # the retriever's rank alone (the gate's covariate): best rank first, never-ranked last
    row("best rank per pair", "pair", evaluate(log, keys.assign(estimate=-pairs["rank_best"].values),
                                                level="pair", n_boot=args.n_boot, seed=args.seed))
    out["pairs"] = int(pairs.sizes["pair"])
    del pairs, keys
    out["estimate_seconds"] = time.perf_counter() - t0
    if args.fit and args.pair_model == "gated":
        out.update(_gated(log, args, row))
    if args.fit:
        from cmp_bayes.model.config import ModelConfig
        from cmp_bayes.model.fit import fit

        t0 = time.perf_counter()
        model = ModelConfig(rank_summary=args.rank_summary)
        dt = fit(log, model, draws=args.draws, tune=args.tune, chains=args.chains, seed=args.seed, progressbar=False)
        out["fit_seconds"] = time.perf_counter() - t0
        out["rank_summary"] = args.rank_summary
        row("posterior mean tau", "memory", evaluate(log, dt, level="memory", n_boot=args.n_boot, seed=args.seed))
        ss = dt["sample_stats"]
        out["fit_divergences"] = int(ss["diverging"].sum()) if "diverging" in ss else None
        try:
            import arviz_stats

            post = dt["posterior"].to_dataset()
            hyper = [v for v in post.data_vars if "memory" not in post[v].dims]
            r = arviz_stats.rhat(post[hyper])
            out["fit_max_rhat_hyper"] = float(max(float(r[v].max()) for v in r.data_vars))
        except Exception as exc:  # health is reported, never fatal
            out["fit_health_error"] = str(exc)
    out["auc"] = rows
    return out


def _gated(log: Any, args: argparse.Namespace, row: Any) -> dict[str, Any]:
    """The relevance-gated pair model (``fit(log, by="query")``): its fit and its AUC rows."""
    from cmp_bayes.model.config import ModelConfig
    from cmp_bayes.model.fit import fit
    from cmp_bayes.posterior.health import sampler_health

    t0 = time.perf_counter()
    model = ModelConfig(pair_model="gated", gate_rank_monotone=args.gate_rank_monotone)
    dt = fit(log, model, by="query", draws=args.draws, tune=args.tune, chains=args.chains, seed=args.seed,
             max_attempts=args.max_attempts, progressbar=False)
    out: dict[str, Any] = {"gated_fit_seconds": time.perf_counter() - t0,
                           "gate_rank_monotone": args.gate_rank_monotone}
    if args.save_posterior is not None:
        from cmp_bayes.posterior.io import save_posterior

        save_posterior(dt, args.save_posterior)
    health = sampler_health(dt)
    out["gated_health"] = {"ok": health.ok, "divergences": health.divergences, "max_rhat": health.max_rhat,
                           "worst_variable": health.worst_variable, "stored_draws": health.draws,
                           "thin_step": dt.attrs.get("thin_step"), "attempts": dt.attrs.get("fit_attempts")}
    post, status = dt["posterior"], dt["identification"]["status"].values.astype(str)
    for var in ("tau_relevant", "p_relevant_any", "tau_memory", "utility_memory"):
        frame = pd.DataFrame({"memory_id": post["memory"].values.astype(str),
                              "estimate": post[var].mean(("chain", "draw")).values, "status": status})
        row(f"gated posterior mean {var}", "memory",
            evaluate_frame(log, frame, "memory", args))
    frame = pd.DataFrame({"memory_id": post["memory"].values.astype(str),
                          "estimate": dt["identification"]["p_relevant_max"].values, "status": status})
    row("gated p_relevant_max", "memory", evaluate_frame(log, frame, "memory", args))
    pid = dt["pair_identification"]
    keys = pd.DataFrame({"memory_id": pid["memory_id"].values.astype(str),
                         "query_id": pid["query_id"].values.astype(str),
                         "status": pid["status"].values.astype(str)})
    for var in ("tau_mean", "p_relevant_mean"):
        row(f"gated pair {var}", "pair", evaluate_frame(log, keys.assign(estimate=pid[var].values), "pair", args))
    return out


def evaluate_frame(log: Any, frame: pd.DataFrame, level: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`cmp_bayes.evaluation.evaluate` of a score table at ``level``."""
    from cmp_bayes.evaluation import evaluate

    return evaluate(log, frame, level=level, n_boot=args.n_boot, seed=args.seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DATA, help="locomo10.json (default: ../shared/data beside the clone)")
    p.add_argument("--conversations", nargs="*", default=None)
    p.add_argument("--slots", type=int, default=10)
    p.add_argument("--exposure-slots", type=int, default=2)
    p.add_argument("--exposures", type=float, default=6.0, help="target exposures per pool memory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-boot", type=int, default=200)
    p.add_argument("--fit", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--tune", type=int, default=500)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--rank-summary", choices=("median", "best"), default="median",
                   help="the model's rank covariate (ModelConfig.rank_summary)")
    p.add_argument("--work", type=Path, default=None, help="folder for the store and log (default: a temp dir, removed)")
    p.add_argument("--json", type=Path, default=None, help="write the results here (aggregates only)")
    p.add_argument("--compare-only", action="store_true", help="only step 4, on the log under --work")
    p.add_argument("--assignment", choices=("balanced", "window"), default="balanced",
                   help="exposure design: uniform over the pool, or the window design (spec: Targeted exposure)")
    p.add_argument("--window", type=int, default=20, help="window design: W, ranks below Mem0's cut")
    p.add_argument("--pool-slots", type=int, default=1, help="window design: j slots dealt over the whole pool")
    p.add_argument("--pair-model", choices=("none", "gated"), default="none",
                   help="also fit the relevance-gated pair model (fit(log, by='query'))")
    p.add_argument("--gate-rank-monotone", action=argparse.BooleanOptionalAction, default=True,
                   help="the gated model's rank slope constrained negative (ModelConfig.gate_rank_monotone)")
    p.add_argument("--max-attempts", type=int, default=3,
                   help="the gated fit's attempts (SamplerConfig.max_attempts; each retry costs a whole fit)")
    p.add_argument("--save-posterior", type=Path, default=None,
                   help="write the gated posterior here (NetCDF; derived from LoCoMo: keep it out of the repo)")
    args = p.parse_args(argv)
    if args.compare_only:
        if args.work is None:
            p.error("--compare-only needs --work")
        text = json.dumps(compare(args.work / "log", args), indent=1, default=float)
        print(text)
        if args.json:
            write_text_atomic(args.json, text + "\n")
        return 0

    tmp = tempfile.TemporaryDirectory(prefix="cmp-mem0-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    work = args.work or Path(tmp.name)
    os.environ.setdefault("MEM0_DIR", str(work / "mem0_home"))
    res: dict[str, Any] = {"label": LABEL, "search": "Mem0 offline search is vector-only (no BM25, no entity boost)"}
    import mem0

    res["versions"] = {"mem0ai": mem0.__version__, "python": platform.python_version()}
    res["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    res["reader"] = ReaderModel().describe()
    timings: dict[str, float] = {}

    dataset = load_locomo(args.data, conversations=args.conversations)
    t0 = time.perf_counter()
    memories, ids = load_stores(work, dataset)
    timings["add_all_turns"] = time.perf_counter() - t0
    res["store"] = {"conversations": len(dataset.stores), "turns": int(sum(len(v) for v in ids.values()))}
    print(f"added {res['store']['turns']} turns in {timings['add_all_turns']:.0f} s", flush=True)

    t0 = time.perf_counter()
    ranks, checks = {}, {"left_out_negative_similarity": 0, "order_disagreements": 0}
    for s in dataset.stores:
        ranks[s.store_id], c = mem0_ranks(memories[s.store_id], s, ids[s.store_id])
        for key in checks:
            checks[key] += c[key]
    timings["rank_all_questions"] = time.perf_counter() - t0
    n_q = sum(len(s.queries) for s in dataset.stores)
    timings["ms_per_full_search"] = 1000 * timings["rank_all_questions"] / max(n_q, 1)
    table, per_conv = positivity(
        dataset, ranks, sorted({5, args.slots - args.exposure_slots, args.slots, 20}), args.slots
    )
    res["positivity"] = {"table": json.loads(table.to_json(orient="records")), "per_conversation": per_conv,
                         "checks": checks, "questions": n_q}
    print(table.to_string(index=False), flush=True)

    t0 = time.perf_counter()
    res["cmp_run"] = cmp_run(memories, dataset, ids, ranks, work / "log", args)
    timings["cmp_run"] = time.perf_counter() - t0
    print(json.dumps(res["cmp_run"]), flush=True)
    t0 = time.perf_counter()
    res["comparison"] = compare(work / "log", args)
    timings["compare"] = time.perf_counter() - t0
    res["timings_s"] = timings
    for memory in memories.values():
        memory.close()
    text = json.dumps(res, indent=1, default=float)
    print(text)
    if args.json:
        write_text_atomic(args.json, text + "\n")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
