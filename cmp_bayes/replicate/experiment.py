"""The CMP experiment on real stores (semi-synthetic outcomes).

Real memories, queries, evidence and retrieval; answers from the stated
:class:`~cmp_bayes.replicate.reader.ReaderModel`. Results are labelled
**semi-synthetic** everywhere.

Design of the log (:func:`build_log`):

* Stores are laid out one after another: store ``s`` occupies a block of
  ``T_s`` consecutive steps; its memories are created at the block's first
  step and deleted after its last (``memories.jsonl``), so a LongMemEval
  haystack is in the store only while its question is asked.
* Each step asks one of the store's queries (the only one for LongMemEval /
  HotpotQA / MuSiQue; uniformly at random for a LoCoMo conversation). The
  context has ``B`` slots: the retriever's top ``B - k`` for that query and
  ``k`` exposure slots dealt by :class:`cmp_bayes.design.scheduler.ExposureScheduler`
  (balanced assignment over the whole log, per-memory lifetimes).
* The exposure pool of a store is every memory except those the retriever puts
  in the context at every step of the block (they could never be exposed or
  have a control arm). ``T_s = ceil(exposures * |pool_s| / k)`` so each pool
  memory gets about ``exposures`` exposures.
* ``ranking``: the full ranking of the store is logged at the first step each
  query is asked in its block (it is deterministic, so repeating it adds
  nothing); the model's rank covariate reads it.
* ``labels.jsonl``: the benchmark's evidence (required pairs only; every
  other pair is not required).

Comparisons (:func:`run_experiment`): AUC of required vs non-required memories
(``cmp_bayes.evaluation.evaluate``, NaN estimates ranked last) for the logged
baselines (``logged-success``, ``logged-diff``), Hajek, the posterior mean of
``tau`` (``cmp_bayes.model.fit.fit``, with its retriever-rank covariate) and
per-query Hajek (pair level); and store-level randomization figures
(:func:`block_store_randomization`).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.datasets.base import Dataset
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
)
from cmp_bayes.replicate.reader import ReaderModel
from cmp_bayes.retrieval.base import Retriever, rank_store

LABEL = "semi-synthetic"


@dataclass(frozen=True)
class ExperimentConfig:
    """Settings of the CMP experiment on real stores.

    Attributes
    ----------
    slots, exposure_slots : int
        ``B`` and ``k``.
    exposures_per_memory : float
        Target exposures per pool memory (sets each store's steps).
    reader_gain, reader_noise : float
        :class:`ReaderModel` ``gain`` and ``noise``.
    seed : int
        Seed of everything random (query order, exposures, reader, bootstrap).
    fit : bool
        Fit the Bayesian model (the slow part).
    draws, tune, chains : int
        Sampler settings of the fit.
    n_boot : int
        Bootstrap draws of the AUC intervals.
    delete_fraction, evict_fraction : float
        Store randomization settings (:func:`block_store_randomization`).
    n_perturbations : int
        Random deletions per store.
    rank_summary : {"median", "best"}
        The model's rank covariate (``ModelConfig.rank_summary``): "best" for
        stores asked many questions (LoCoMo).
    per_query_fit : bool
        Also fit the per-query variant (``fit(log, by="query")``) and score its
        posterior mean of tau per (memory, question) pair (needs ``fit``).
    """

    slots: int = 10
    exposure_slots: int = 2
    exposures_per_memory: float = 6.0
    reader_gain: float = 0.6
    reader_noise: float = 0.05
    seed: int = 0
    fit: bool = True
    draws: int = 500
    tune: int = 500
    chains: int = 2
    n_boot: int = 200
    delete_fraction: float = 0.1
    evict_fraction: float = 0.1
    n_perturbations: int = 20
    rank_summary: str = "median"
    per_query_fit: bool = False

    def __post_init__(self) -> None:
        if not (1 <= self.exposure_slots < self.slots):
            raise ConfigError(f"need 1 <= exposure_slots < slots, got k={self.exposure_slots}, B={self.slots}")
        if not self.exposures_per_memory > 0:
            raise ConfigError("exposures_per_memory must be > 0")
        if self.per_query_fit and not self.fit:
            raise ConfigError("per_query_fit needs fit (the per-query model is a second fit)")

    @property
    def reader(self) -> ReaderModel:
        """The reader model these settings describe."""
        return ReaderModel(gain=self.reader_gain, noise=self.reader_noise)


@dataclass
class _Block:
    """One store's part of the log (local memory indices are store order)."""

    store_id: str
    start: int
    steps: int
    memory_ids: np.ndarray  # (M,) object
    query_ids: np.ndarray  # (Q,) object
    groups: np.ndarray  # (Q,) object
    order: np.ndarray  # (Q, M) local memory indices, best first
    ranks: np.ndarray  # (Q, M) rank of each memory
    evidence: np.ndarray  # (Q, M) bool
    step_query: np.ndarray  # (steps,) local query index
    pool: np.ndarray  # local indices of pool memories
    base: np.ndarray  # (Q,) reader base rates


def build_log(dataset: Dataset, retriever: Retriever, config: ExperimentConfig) -> tuple[ExposureLog, list[_Block]]:
    """Lay out the CMP exposure log over the dataset's real stores (module docstring).

    Returns
    -------
    log : ExposureLog
        In memory (not yet written); ``attrs`` hold the settings and the label
        ``semi-synthetic``.
    blocks : list
        Per-store layout, used by :func:`block_store_randomization`.
    """
    from cmp_bayes.design.scheduler import ExposureScheduler

    rng = np.random.default_rng([config.seed, 1])
    reader = config.reader
    nret = config.slots - config.exposure_slots
    blocks: list[_Block] = []
    start = 0
    for store in dataset.stores:
        if store.size == 0 or store.queries.empty:
            continue
        ranks_da = rank_store(store, retriever)
        ranks = ranks_da.to_numpy()
        order = np.argsort(ranks, axis=1, kind="stable")
        mids = ranks_da["memory"].to_numpy()
        qids = ranks_da["query"].to_numpy()
        col = {m: i for i, m in enumerate(mids)}
        row = {q: i for i, q in enumerate(qids)}
        ev = np.zeros(ranks.shape, dtype=bool)
        for q, m in store.evidence[["query_id", "memory_id"]].itertuples(index=False):
            ev[row[q], col[m]] = True
        top = order[:, :nret]
        n_q = len(qids)
        # pool size first from the first draft of queries: memories retrieved for every query asked
        pool_guess = store.size - (top.shape[1] if n_q == 1 else 0)
        steps = max(1, math.ceil(config.exposures_per_memory * max(pool_guess, 1) / config.exposure_slots))
        step_query = np.zeros(steps, dtype=np.int64) if n_q == 1 else rng.integers(n_q, size=steps)
        always = set(top[step_query[0]].tolist())
        for q in np.unique(step_query):
            always &= set(top[q].tolist())
        pool = np.array(sorted(set(range(store.size)) - always), dtype=np.int64)
        groups = store.queries.set_index("query_id").loc[qids, "group"].to_numpy(dtype=object)
        blocks.append(
            _Block(store.store_id, start, steps, mids, qids, groups, order, ranks, ev, step_query, pool,
                   reader.base_rates(n_q, rng))
        )
        start += steps
    if not blocks:
        raise ConfigError(f"{dataset.name}: no store with memories and queries")
    total = start
    pool_ids = np.concatenate([b.memory_ids[b.pool] for b in blocks])
    lifetimes = {m: (b.start, b.start + b.steps) for b in blocks for m in b.memory_ids[b.pool]}
    sched = ExposureScheduler(config.slots, config.exposure_slots, list(pool_ids), total, "balanced",
                              seed=config.seed, lifetimes=lifetimes)
    pool_index = {m: i for i, m in enumerate(pool_ids)}
    retrieved = np.full((total, nret), -1, dtype=np.int64)
    for b in blocks:
        local_to_pool = np.array([pool_index.get(m, -1) for m in b.memory_ids], dtype=np.int64)
        top = b.order[b.step_query, :nret]
        retrieved[b.start : b.start + b.steps, : top.shape[1]] = local_to_pool[top]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exp_steps, exp_mem = sched.deal(retrieved)
    shortfall = len(caught)
    propensity = sched.propensity
    design = sched.design()
    log = _assemble(blocks, exp_steps, exp_mem, pool_ids, propensity, design, config, rng, dataset)
    log.attrs.update(
        {
            "label": LABEL,
            "dataset": dataset.name,
            "granularity": dataset.granularity,
            "retriever": retriever.name,
            "reader": reader.to_dict(),
            "experiment": asdict(config),
            "exposure_shortfall_warnings": shortfall,
        }
    )
    return log, blocks


def _assemble(
    blocks: list[_Block],
    exp_steps: np.ndarray,
    exp_mem: np.ndarray,
    pool_ids: np.ndarray,
    propensity: np.ndarray,
    design: dict[str, Any],
    config: ExperimentConfig,
    rng: np.random.Generator,
    dataset: Dataset,
) -> ExposureLog:
    nret = config.slots - config.exposure_slots
    reader = config.reader
    step_tab, ctx_tab, rank_tab, mem_tab, lab_tab = [], [], [], [], []
    for b in blocks:
        t = np.arange(b.start, b.start + b.steps)
        q = b.step_query
        r = min(nret, len(b.memory_ids))
        top = b.order[q, :r]  # (steps, r) local indices
        # exposures of this block, local indices
        sel = (exp_steps >= b.start) & (exp_steps < b.start + b.steps)
        local = {m: i for i, m in enumerate(b.memory_ids)}
        e_step = exp_steps[sel]
        e_loc = np.array([local[m] for m in pool_ids[exp_mem[sel]]], dtype=np.int64)
        e_prop = propensity[exp_mem[sel]]
        # evidence share seen at each step (retrieved + exposed)
        n_ev = b.evidence.sum(axis=1)
        seen = b.evidence[q[:, None], top].sum(axis=1).astype(np.float64)
        np.add.at(seen, e_step - b.start, b.evidence[q[e_step - b.start], e_loc])
        share = np.where(n_ev[q] > 0, seen / np.maximum(n_ev[q], 1), 0.0)
        outcome = reader.outcomes(b.base[q], share, rng)
        step_tab.append(pd.DataFrame({"step": t, "query_id": b.query_ids[q], "outcome": outcome, "group": b.groups[q]}))
        ctx_tab.append(
            pd.DataFrame(
                {
                    "step": np.repeat(t, r),
                    "slot": np.tile(np.arange(r), b.steps),
                    "memory_id": b.memory_ids[top.ravel()],
                    "source": "retriever",
                    "rank": np.tile(np.arange(r), b.steps),
                    "propensity": np.nan,
                }
            )
        )
        if len(e_step):
            order = np.lexsort((e_loc, e_step))
            e_step, e_loc, e_prop = e_step[order], e_loc[order], e_prop[order]
            first = np.r_[0, np.flatnonzero(np.diff(e_step)) + 1]
            slot = np.arange(len(e_step)) - np.repeat(first, np.diff(np.r_[first, len(e_step)])) + r
            ctx_tab.append(
                pd.DataFrame(
                    {"step": e_step, "slot": slot, "memory_id": b.memory_ids[e_loc], "source": "exposure",
                     "rank": pd.NA, "propensity": e_prop}
                )
            )
        # full ranking at the first step each query is asked
        for qi in np.unique(q):
            s0 = b.start + int(np.flatnonzero(q == qi)[0])
            rank_tab.append(pd.DataFrame({"step": s0, "rank": np.arange(len(b.memory_ids)), "memory_id": b.memory_ids[b.order[qi]]}))
        mem_tab.append(pd.DataFrame({"memory_id": b.memory_ids, "created_step": b.start, "deleted_step": b.start + b.steps}))
        qi, mi = np.nonzero(b.evidence)
        lab_tab.append(pd.DataFrame({"query_id": b.query_ids[qi], "memory_id": b.memory_ids[mi], "required": True}))
    steps = coerce(pd.concat(step_tab, ignore_index=True), STEP_COLUMNS)
    contexts = pd.concat(ctx_tab, ignore_index=True)
    contexts["rank"] = contexts["rank"].astype("Int64")
    contexts = coerce(contexts.sort_values(["step", "slot"], kind="stable"), CONTEXT_COLUMNS)
    rankings = coerce(pd.concat(rank_tab, ignore_index=True).sort_values(["step", "rank"], kind="stable"), RANKING_COLUMNS)
    memories = coerce(pd.concat(mem_tab, ignore_index=True), MEMORY_COLUMNS)
    labels = coerce(pd.concat(lab_tab, ignore_index=True), LABEL_COLUMNS)
    return ExposureLog(steps, contexts, rankings, memories, design, labels)


def write_and_check(log: ExposureLog, path: str | Path, format: str = "jsonl") -> ExposureLog:
    """Write the log with ``write_log`` and read it back with ``read_log`` (validates it)."""
    from cmp_bayes.log.export import write_log
    from cmp_bayes.log.read import read_log

    out = write_log(log, path, format=format)  # type: ignore[arg-type]
    back = read_log(out)
    back.attrs.update(log.attrs)
    return back


# ------------------------------------------------------------------ store randomization
def block_store_randomization(
    log: ExposureLog,
    blocks: list[_Block],
    config: ExperimentConfig,
    scores: dict[str, pd.DataFrame] | None = None,
) -> dict[str, Any]:
    """Store-level randomization on the real stores, with the simulator's definitions.

    ``unchanged_share``: each perturbation deletes every memory of a store
    independently with probability ``delete_fraction``; per query the top
    ``B - k`` of what is left (retriever scores of the full store, i.e. BM25
    document frequencies are not recomputed) is compared with the full
    store's; the share of (perturbation, query) pairs whose retrieved set is
    unchanged.

    ``lift``: evict ``evict_fraction`` of each store, then deploy the retriever
    on what is left (all ``B`` slots retrieved). Utility-based eviction removes
    the memories with the fewest logged successes while retrieved (ties at
    random); random eviction a uniform set of the same size (mean of 20 draws).
    Quality = expected reader success (no noise) averaged over the log's steps.
    ``lift = quality(utility-based) / quality(random)``. ``scores`` may add
    other eviction rules (method -> table with ``memory_id`` and ``estimate``:
    lowest evicted first; memories without an estimate are kept, as CMP never
    forgets what it cannot identify).
    """
    rng = np.random.default_rng([config.seed, 7])
    nret = config.slots - config.exposure_slots
    reader = config.reader
    unchanged, total = 0, 0
    # logged successes while retrieved
    ctx = log.contexts[log.contexts["source"] == "retriever"][["step", "memory_id"]]
    out = log.steps.set_index("step")["outcome"]
    succ = pd.Series(out.reindex(ctx["step"]).to_numpy(), index=ctx["memory_id"].to_numpy()).groupby(level=0).sum()
    rules: dict[str, pd.Series] = {"logged-successes": succ}
    for name, table in (scores or {}).items():
        rules[name] = table.drop_duplicates("memory_id").set_index("memory_id")["estimate"]
    quality = {name: 0.0 for name in ["full", "random", *rules]}
    n_steps = 0
    for b in blocks:
        m = len(b.memory_ids)
        qs = np.unique(b.step_query)
        weight = np.bincount(b.step_query, minlength=len(b.query_ids)).astype(float)
        for _ in range(config.n_perturbations):
            keep = rng.random(m) >= config.delete_fraction
            for q in qs:
                full = b.order[q, :nret]
                rest = b.order[q][keep[b.order[q]]][:nret]
                unchanged += int(set(full.tolist()) == set(rest.tolist()))
                total += 1
        n_evict = int(round(config.evict_fraction * m))

        def q_of(keep_mask: np.ndarray, b: _Block = b, weight: np.ndarray = weight) -> float:
            tot = 0.0
            for q in np.flatnonzero(weight):
                ctx_q = b.order[q][keep_mask[b.order[q]]][: config.slots]
                n_ev = b.evidence[q].sum()
                share = b.evidence[q, ctx_q].sum() / n_ev if n_ev else 0.0
                tot += weight[q] * float(reader.probability(np.array(b.base[q]), np.array(share)))
            return tot

        quality["full"] += q_of(np.ones(m, dtype=bool))
        rand = 0.0
        for _ in range(20):
            k = np.ones(m, dtype=bool)
            k[rng.choice(m, size=n_evict, replace=False)] = False
            rand += q_of(k) / 20
        quality["random"] += rand
        for name, s in rules.items():
            val = s.reindex(b.memory_ids).to_numpy(np.float64)
            if name == "logged-successes":
                val = np.nan_to_num(val, nan=0.0)
            finite = np.flatnonzero(np.isfinite(val))
            tie = rng.random(len(finite))
            order = finite[np.lexsort((tie, val[finite]))][:n_evict]
            k = np.ones(m, dtype=bool)
            k[order] = False
            quality[name] += q_of(k)
        n_steps += b.steps
    quality = {k: v / n_steps for k, v in quality.items()}
    res: dict[str, Any] = {
        "unchanged_share": unchanged / total if total else float("nan"),
        "perturbations": total,
        "delete_fraction": config.delete_fraction,
        "evict_fraction": config.evict_fraction,
        "quality": quality,
        "lift": quality["logged-successes"] / quality["random"],
    }
    res["lift_by_rule"] = {k: quality[k] / quality["random"] for k in rules}
    return res


# ------------------------------------------------------------------ the experiment
@dataclass
class ExperimentResult:
    """Everything the experiment measured (semi-synthetic).

    Attributes
    ----------
    dataset, retriever, granularity : str
    config : ExperimentConfig
    log_summary : dict
        Steps, memories, pool, exposures per pool memory, statuses.
    auc : pandas.DataFrame
        One row per method: ``method``, ``level``, ``auc``, ``ci_low``,
        ``ci_high``, ``n``, ``n_required``, ``n_nan`` and the AUC among
        identified memories (``auc_identified``).
    randomization : dict
        :func:`block_store_randomization`.
    timings : dict
        Seconds per phase.
    fit_health : dict
        Max R-hat and divergences of the fit (empty without a fit).
    auc_diff : list of dict
        Paired bootstrap of AUC differences between methods
        (:func:`paired_auc_difference`), all memories and identified only.
    scores : pandas.DataFrame
        One row per memory: ``memory_id``, ``required``, ``status``,
        ``rank_median``, ``rank_best``, ``retrieved``, ``exposed`` and one score column per
        memory-level method (NaN = no estimate). Not written to JSON (memory
        ids of licensed data); for diagnostics in Python.
    posterior : xarray.DataTree or None
        The fitted posterior (None without a fit); not written to JSON.
    """

    dataset: str
    retriever: str
    granularity: str
    config: ExperimentConfig
    log_summary: dict[str, Any]
    auc: pd.DataFrame
    randomization: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    fit_health: dict[str, Any] = field(default_factory=dict)
    auc_diff: list[dict[str, Any]] = field(default_factory=list)
    scores: pd.DataFrame | None = None
    posterior: Any = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (label ``semi-synthetic``)."""
        return {
            "label": LABEL,
            "dataset": self.dataset,
            "retriever": self.retriever,
            "granularity": self.granularity,
            "config": asdict(self.config),
            "reader": self.config.reader.describe(),
            "log": self.log_summary,
            "auc": json.loads(self.auc.to_json(orient="records")),
            "store_randomization": self.randomization,
            "fit_health": self.fit_health,
            "auc_difference": self.auc_diff,
            "timings_s": self.timings,
        }

    def to_json(self) -> str:
        """One JSON object."""
        return json.dumps(self.to_dict(), indent=1, default=float)

    def to_text(self) -> str:
        """A readable summary table."""
        s = self.log_summary
        lines = [
            f"[{LABEL}] {self.dataset} ({self.granularity}), retriever {self.retriever}, "
            f"B={self.config.slots}, k={self.config.exposure_slots}, seed {self.config.seed}",
            f"  {self.config.reader.describe()}",
            f"  log: {s['steps']} steps, {s['memories']} memories, {s['required_memories']} required; "
            f"statuses {s['status_counts']}; required unidentified {100 * s['required_unidentified_share']:.1f}%",
            f"  {'method':<24}{'level':<8}{'AUC':>7}  {'interval':<15}{'AUC identified':>15}{'n_nan':>7}",
        ]
        for r in self.auc.itertuples(index=False):
            lines.append(
                f"  {r.method:<24}{r.level:<8}{_f(r.auc):>7}  [{_f(r.ci_low)}, {_f(r.ci_high)}]  "
                f"{_f(r.auc_identified):>12}{r.n_nan:>7}"
            )
        rz = self.randomization
        if rz:
            lifts = ", ".join(f"{k} {v:.3f}" for k, v in rz["lift_by_rule"].items())
            lines.append(
                f"  store randomization: unchanged {100 * rz['unchanged_share']:.1f}% of {rz['perturbations']} "
                f"(delete {rz['delete_fraction']}); eviction lift ({rz['evict_fraction']} evicted): {lifts}"
            )
        for d in self.auc_diff:
            lines.append(
                f"  AUC {d['method']} - {d['baseline']} ({d['subset']}, n={d['n']}): {_f(d['diff'])} "
                f"[{_f(d['ci_low'])}, {_f(d['ci_high'])}], P(diff <= 0) = {_f(d['p_le_0'])}"
            )
        if self.fit_health:
            lines.append(f"  fit: {self.fit_health}")
        return "\n".join(lines)


def _f(x: Any) -> str:
    return "  n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{float(x):.3f}"


def run_experiment(
    dataset: Dataset,
    retriever: Retriever,
    config: ExperimentConfig | None = None,
    log_out: str | Path | None = None,
) -> ExperimentResult:
    """Build the log, write and re-read it, estimate, fit, evaluate and randomize.

    Parameters
    ----------
    dataset : Dataset
    retriever : Retriever
    config : ExperimentConfig, optional
    log_out : path, optional
        Where to write the exposure log (JSONL); a temporary Parquet log is
        used (and removed) otherwise.
    """
    from cmp_bayes.estimators import estimate
    from cmp_bayes.evaluation import evaluate
    from cmp_bayes.statistics import exposure_stats

    config = config or ExperimentConfig()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    log, blocks = build_log(dataset, retriever, config)
    timings["build_log"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(log_out) if log_out else Path(tmp) / "log"
        log = write_and_check(log, target, "jsonl" if log_out else "parquet")
    timings["write_read_log"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    stats = exposure_stats(log)
    from cmp_bayes.diagnostics.positivity import identification_status

    status = pd.Series(identification_status(stats).to_numpy(), index=stats["memory"].to_numpy())
    required = set(log.labels.loc[log.labels["required"], "memory_id"].astype(str))
    req_status = status[status.index.isin(required)]
    exposed = stats["exposed"].to_numpy()[stats["in_pool"].to_numpy()]
    summary = {
        "steps": int(log.n_steps),
        "memories": int(stats.sizes["memory"]),
        "pool": int(stats["in_pool"].sum()),
        "exposures_per_pool_memory": float(exposed.mean()) if exposed.size else 0.0,
        "required_memories": len(required),
        "status_counts": {k: int(v) for k, v in status.value_counts().items()},
        "required_status_counts": {k: int(v) for k, v in req_status.value_counts().items()},
        "required_unidentified_share": float((stats["retrieved"].to_series().reindex(sorted(required)) == 0).mean()),
        "exposure_shortfall_warnings": int(log.attrs.get("exposure_shortfall_warnings", 0)),
    }
    tables = {m: estimate(log, method=m) for m in ("logged-success", "logged-diff", "hajek")}
    per_query = estimate(log, by="query", method="hajek")
    timings["estimate"] = time.perf_counter() - t0
    rows = []
    for name, table in tables.items():
        rows.append(_auc_row(name, "memory", evaluate(log, table, level="memory", n_boot=config.n_boot, seed=config.seed)))
    rows.append(_auc_row("hajek per query", "pair", evaluate(log, per_query, level="pair", n_boot=config.n_boot, seed=config.seed)))
    fit_health: dict[str, Any] = {}
    scores = {"hajek": tables["hajek"]}
    dt = None
    if config.fit:
        from cmp_bayes.model.config import ModelConfig
        from cmp_bayes.model.fit import fit

        t0 = time.perf_counter()
        model = ModelConfig(rank_summary=config.rank_summary)
        dt = fit(log, model, draws=config.draws, tune=config.tune, chains=config.chains, seed=config.seed, progressbar=False)
        timings["fit"] = time.perf_counter() - t0
        rows.append(_auc_row("posterior mean tau", "memory", evaluate(log, dt, level="memory", n_boot=config.n_boot, seed=config.seed)))
        fit_health = _health(dt)
        if config.per_query_fit:
            t0 = time.perf_counter()
            dq = fit(log, model, by="query", draws=config.draws, tune=config.tune, chains=config.chains,
                     seed=config.seed, progressbar=False)
            timings["fit_per_query"] = time.perf_counter() - t0
            ev = evaluate(log, dq, level="pair", n_boot=config.n_boot, seed=config.seed)
            rows.append(_auc_row("posterior mean tau per query", "pair", ev))
            fit_health["per_query"] = _health(dq)
            del dq
        post = dt["posterior"]["tau"].mean(("chain", "draw"))
        scores["posterior"] = pd.DataFrame({"memory_id": post["memory"].to_numpy().astype(str), "estimate": post.to_numpy()})
    auc = pd.DataFrame(rows)
    per_memory = pd.DataFrame(
        {
            "memory_id": stats["memory"].to_numpy().astype(str),
            "status": status.to_numpy(dtype=object),
            "rank_median": stats["rank_median"].to_numpy(),
            "rank_best": stats["rank_best"].to_numpy(),
            "retrieved": stats["retrieved"].to_numpy(),
            "exposed": stats["exposed"].to_numpy(),
        }
    )
    per_memory["required"] = per_memory["memory_id"].isin(required)
    for name, table in {"logged-success": tables["logged-success"], **scores}.items():
        t = table.drop_duplicates("memory_id")
        est = pd.Series(t["estimate"].to_numpy(np.float64), index=t["memory_id"].astype(str).to_numpy())
        per_memory[name] = est.reindex(per_memory["memory_id"].to_numpy()).to_numpy(np.float64)
    diffs: list[dict[str, Any]] = []
    if "posterior" in per_memory:
        ident = (per_memory["status"] == "identified").to_numpy()
        for base in ("hajek", "logged-success"):
            for subset, mask in (("all", np.ones(len(per_memory), dtype=bool)), ("identified", ident)):
                diffs.append(
                    {"method": "posterior", "baseline": base, "subset": subset}
                    | paired_auc_difference(
                        per_memory.loc[mask, "posterior"].to_numpy(),
                        per_memory.loc[mask, base].to_numpy(),
                        per_memory.loc[mask, "required"].to_numpy(bool),
                        n_boot=max(config.n_boot, 1000),
                        seed=config.seed,
                    )
                )
    t0 = time.perf_counter()
    rz = block_store_randomization(log, blocks, config, scores)
    timings["store_randomization"] = time.perf_counter() - t0
    return ExperimentResult(dataset.name, retriever.name, dataset.granularity, config, summary, auc, rz, timings,
                            fit_health, diffs, per_memory, dt)


def paired_auc_difference(
    a: np.ndarray, b: np.ndarray, required: np.ndarray, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """AUC(a) - AUC(b) on the same memories, with a paired stratified bootstrap interval.

    Parameters
    ----------
    a, b : numpy.ndarray
        Scores of two methods, shape ``(n,)``, one per memory (NaN = no
        estimate, ranked last as in ``cmp_bayes.evaluation.evaluate``).
    required : numpy.ndarray
        Labels, shape ``(n,)`` bool.
    n_boot : int
        Bootstrap draws; each resamples required and non-required memories
        separately (class sizes fixed, as ``evaluation.auc_interval`` does) and
        scores both methods on the *same* resample, so the interval of the
        difference accounts for their correlation.
    seed : int

    Returns
    -------
    dict
        ``diff``, ``ci_low``, ``ci_high`` (equal-tailed at
        ``cmp_bayes.constants.CI_PROB``), ``p_le_0`` (share of draws with a
        difference <= 0), ``n``, ``n_required``; NaN (None) entries when a
        class is empty.
    """
    from cmp_bayes.constants import CI_PROB
    from cmp_bayes.evaluation import auc

    sa = np.where(np.isnan(a), -np.inf, a)
    sb = np.where(np.isnan(b), -np.inf, b)
    y = np.asarray(required, dtype=bool)
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    out: dict[str, Any] = {"n": int(y.size), "n_required": int(y.sum())}
    if len(pos) == 0 or len(neg) == 0:
        return out | {"diff": None, "ci_low": None, "ci_high": None, "p_le_0": None}
    point = auc(sa, y) - auc(sb, y)
    rng = np.random.default_rng([seed, 11])
    boots = np.empty(n_boot)
    lab = np.r_[np.ones(len(pos), dtype=bool), np.zeros(len(neg), dtype=bool)]
    for i in range(n_boot):
        idx = np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))]
        boots[i] = auc(sa[idx], lab) - auc(sb[idx], lab)
    tail = (1.0 - CI_PROB) / 2.0
    low, high = np.quantile(boots, [tail, 1.0 - tail])
    return out | {"diff": float(point), "ci_low": float(low), "ci_high": float(high), "p_le_0": float((boots <= 0).mean())}


def _auc_row(method: str, level: str, ev: dict[str, Any]) -> dict[str, Any]:
    ident = (ev.get("by_status") or {}).get("identified", {})
    return {
        "method": method,
        "level": level,
        "auc": ev["auc"],
        "ci_low": ev["ci_low"],
        "ci_high": ev["ci_high"],
        "n": ev["n"],
        "n_required": ev["n_required"],
        "n_nan": ev["n_nan"],
        "auc_identified": ident.get("auc"),
    }


def _health(dt: Any) -> dict[str, Any]:
    """Divergences and the largest hyperparameter R-hat, from the one health check."""
    from cmp_bayes.posterior.health import sampler_health

    health = sampler_health(dt, advisory=False)
    return {
        "divergences": health.divergences,
        "max_rhat_hyper": health.max_rhat,
        "ok": health.ok,
    }
