"""The CMP experiment on real stores: run it and hold its result (semi-synthetic or real-reader).

:func:`run_experiment` builds the log (:mod:`cmp_bayes.replicate.layout`),
writes and re-reads it, and compares: AUC of required vs non-required memories
(``cmp_bayes.evaluation.evaluate``, NaN estimates ranked last) for the logged
baselines (``logged-success``, ``logged-diff``), Hajek, the posterior mean of
``tau`` (``cmp_bayes.model.fit.fit``, with its retriever-rank covariate) and
per-query Hajek (pair level); and store-level randomization figures
(:func:`~cmp_bayes.replicate.randomization.block_store_randomization`).
Settings: :class:`~cmp_bayes.replicate.config.ExperimentConfig`; the
outcomes come from its semi-synthetic reader model, or from a text reader
passed to :func:`run_experiment` (``reader=``, e.g.
:class:`~cmp_bayes.replicate.llm_reader.LLMReader`).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.datasets.base import Dataset
from cmp_bayes.progress import Progress
from cmp_bayes.replicate.config import LABEL, REAL_LABEL, ExperimentConfig
from cmp_bayes.replicate.layout import build_log, write_and_check
from cmp_bayes.replicate.randomization import block_store_randomization
from cmp_bayes.replicate.reader import Reader
from cmp_bayes.retrieval.base import Retriever


@dataclass
class ExperimentResult:
    """Everything the experiment measured (semi-synthetic, or real-reader with a text reader).

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
    holdout : dict
        With ``config.holdout > 0``: the held-out questions' counts and each
        method's AUC against their evidence, with paired differences
        (:func:`~cmp_bayes.replicate.holdout.score_holdout`); empty otherwise
        (and then absent from the JSON, which stays today's).
    reader_name, reader_outcome : str or None
        The text reader's name (``"llm:<model>"``) and outcome form
        ("fractional" / "binary"); None for the semi-synthetic reader model.
    reader_calls : dict
        The text reader's calls (:class:`~cmp_bayes.replicate.reading.ReadingSummary`); empty otherwise.
    localization : dict
        The paper's localization check (:func:`localization_check`): AUCs on
        memories both retrieved at some step and exposed at others.
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
    holdout: dict[str, Any] = field(default_factory=dict)
    reader_name: str | None = None
    reader_outcome: str | None = None
    reader_calls: dict[str, Any] = field(default_factory=dict)
    localization: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``semi-synthetic``, or ``real-reader`` when a text reader gave the outcomes."""
        return LABEL if self.reader_name is None else REAL_LABEL

    def reader_text(self) -> str:
        """The reader, in one line: the semi-synthetic model's formula, or the text reader's name and outcome form."""
        if self.reader_name is None:
            return self.config.reader.describe()
        return f"reader {self.reader_name}, {self.reader_outcome} outcomes"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (label ``semi-synthetic``; ``real-reader`` with ``reader_outcome`` and ``reader_calls``
        where a text reader gave the outcomes, ``reader`` then its name)."""
        out = {
            "label": self.label,
            "dataset": self.dataset,
            "retriever": self.retriever,
            "granularity": self.granularity,
            "config": self.config.to_dict(),
            "reader": self.config.reader.describe() if self.reader_name is None else self.reader_name,
            "log": self.log_summary,
            "auc": json.loads(self.auc.to_json(orient="records")),
            "store_randomization": self.randomization,
            "fit_health": self.fit_health,
            "auc_difference": self.auc_diff,
            "timings_s": self.timings,
        }
        if self.holdout:
            out["holdout"] = self.holdout
        if self.localization:
            out["localization"] = self.localization
        if self.reader_name is not None:
            out["reader_outcome"] = self.reader_outcome
            out["reader_calls"] = self.reader_calls
        return out

    def to_json(self) -> str:
        """One JSON object."""
        return json.dumps(self.to_dict(), indent=1, default=float)

    def to_text(self) -> str:
        """A readable summary table."""
        s = self.log_summary
        lines = [
            f"[{self.label}] {self.dataset} ({self.granularity}), retriever {self.retriever}, "
            f"B={self.config.slots}, k={self.config.exposure_slots}{_design_text(self.config)}, seed {self.config.seed}",
            f"  {self.reader_text()}{_calls_text(self.reader_calls)}",
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
        loc = self.localization
        if loc and loc["auc"]:
            aucs = ", ".join(f"{k} {_f(v)}" for k, v in loc["auc"].items())
            lines.append(f"  localization (retrieved and exposed: {loc['memories']} memories, {loc['required']} required): {aucs}")
            for d in loc["auc_difference"]:
                lines.append(f"    {d['method']} - {d['baseline']}: {_f(d['diff'])} [{_f(d['ci_low'])}, {_f(d['ci_high'])}]")
        if self.fit_health:
            lines.append(f"  fit: {self.fit_health}")
        lines += _holdout_text(self.holdout)
        return "\n".join(lines)


def _calls_text(calls: dict[str, Any]) -> str:
    """``"; 120 steps from 30 calls in 80 s (0.37 calls/s)"`` for a text reader, nothing otherwise."""
    if not calls:
        return ""
    rate = calls.get("calls_per_s")
    text = f"; {calls['steps']} steps from {calls['calls']} distinct calls in {calls['seconds']:.1f} s"
    if rate is not None:
        text += f" ({rate:.2f} calls/s)"
    if calls.get("cache_hits") is not None:
        text += f", cache hits {calls['cache_hits']}"
    return text


def _holdout_text(h: dict[str, Any]) -> list[str]:
    """The held-out AUC lines (none without held-out questions)."""
    if not h:
        return []
    lines = [f"  held-out questions: {h['questions']} of {h['questions'] + h['asked']}; "
             f"{h['required']} of {h['memories']} memories required by them"]
    for r in h["auc"]:
        lines.append(f"    {r['method']:<32}AUC {_f(r['auc'])} [{_f(r['ci_low'])}, {_f(r['ci_high'])}]")
    for d in h["auc_difference"]:
        lines.append(f"    {d['method']} - {d['baseline']}: {_f(d['diff'])} [{_f(d['ci_low'])}, {_f(d['ci_high'])}]")
    return lines


def _design_text(config: ExperimentConfig) -> str:
    """``", window W=.., j=.."`` for a window design, nothing for the balanced one."""
    if config.assignment != "window":
        return ""
    return f", window design W={config.window}, j={config.pool_slots}"


def _f(x: Any) -> str:
    return "  n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{float(x):.3f}"


def run_experiment(
    dataset: Dataset,
    retriever: Retriever,
    config: ExperimentConfig | None = None,
    log_out: str | Path | None = None,
    progress: Progress | None = None,
    reader: Reader | None = None,
    reader_outcome: str = "fractional",
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
    progress : cmp_bayes.progress.Progress, optional
        Where the long phases show progress (default: nowhere). When its bars
        draw (a terminal, not quiet): a bar over the stores as they are ranked,
        the sampler's own bar and the recovery's bar during the fit(s) (even
        where ``config.sampler.progressbar`` is off, as it is by default for
        batches of experiments), and a bar over the stores' randomization. The
        result does not depend on it.
    reader : Reader, optional
        A text reader (:class:`~cmp_bayes.replicate.llm_reader.LLMReader`,
        :class:`~cmp_bayes.replicate.reader.CallableReader`, either wrapped in
        a :class:`~cmp_bayes.replicate.reader_cache.CachedReader`): each step's
        outcome is its score of the step's question over the step's context
        texts in slot order (:mod:`cmp_bayes.replicate.reading`); a bar over
        its calls. None (default): the config's semi-synthetic reader model.
    reader_outcome : {"fractional", "binary"}
        The text reader's score as the outcome, or its thresholded form (>= 0.5 -> 1).
    """
    from cmp_bayes.estimators import estimate
    from cmp_bayes.evaluation import evaluate
    from cmp_bayes.statistics import exposure_stats

    config = config or ExperimentConfig()
    progress = progress or Progress.silent()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    log, blocks = build_log(dataset, retriever, config, progress, reader=reader, reader_outcome=reader_outcome)
    reader_calls = dict(log.attrs.get("reader_calls", {}))
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
    # the experiment's own log always carries labels (build_log writes them)
    assert log.labels is not None
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
    # a window design adds window-arm rows per pair: score each arm on its own
    arms = per_query.get("arm")
    pool_rows = per_query if arms is None else per_query[arms == "pool"]
    rows.append(_auc_row("hajek per query", "pair", evaluate(log, pool_rows, level="pair", n_boot=config.n_boot, seed=config.seed)))
    if arms is not None and bool((arms == "window").any()):
        rows.append(_auc_row(
            "window SNIPW per pair", "pair",
            evaluate(log, per_query[arms == "window"], level="pair", n_boot=config.n_boot, seed=config.seed),
        ))
    fit_health: dict[str, Any] = {}
    scores = {"hajek": tables["hajek"]}
    dt = None
    fits: dict[str, Any] = {}
    if config.fit:
        from dataclasses import replace

        from cmp_bayes.model.fit import fit

        # the fit is the long phase: where bars draw, it shows the sampler's (the seed and
        # every setting that moves the draws are config.sampler's, so the result is the same)
        sampler = replace(config.sampler, progressbar=True) if progress.enabled else config.sampler
        t0 = time.perf_counter()
        dt = fit(log, config.model, sampler)
        timings["fit"] = time.perf_counter() - t0
        rows.append(_auc_row("posterior mean tau", "memory", evaluate(log, dt, level="memory", n_boot=config.n_boot, seed=config.seed)))
        fit_health = _health(dt)
        if config.per_query_fit:
            t0 = time.perf_counter()
            dq = fit(log, replace(config.model, pair_model=config.pair_model), sampler, by="query")
            timings["fit_per_query"] = time.perf_counter() - t0
            ev = evaluate(log, dq, level="pair", n_boot=config.n_boot, seed=config.seed)
            rows.append(_auc_row("posterior mean tau per query", "pair", ev))
            if config.pair_model == "gated":
                for var, label in (("tau_relevant", "posterior mean tau_relevant"),
                                   ("p_relevant_any", "posterior p_relevant_any"),
                                   ("p_relevant_max", "posterior p_relevant_max")):
                    table = _posterior_mean_table(dq, var)
                    ev = evaluate(log, table, level="memory", n_boot=config.n_boot, seed=config.seed)
                    rows.append(_auc_row(label, "memory", ev))
                    scores[label] = table
            fit_health["per_query"] = _health(dq)
            if config.holdout > 0:
                fits["query"] = dq  # scored on the held-out questions below
            del dq
        scores["posterior"] = _posterior_mean_table(dt, "tau")
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
    ident = (per_memory["status"] == "identified").to_numpy()
    for method in ("posterior", "posterior mean tau_relevant", "posterior p_relevant_any", "posterior p_relevant_max"):
        if method not in per_memory:
            continue
        for base in ("hajek", "logged-success"):
            for subset, mask in (("all", np.ones(len(per_memory), dtype=bool)), ("identified", ident)):
                diffs.append(
                    {"method": method, "baseline": base, "subset": subset}
                    | paired_auc_difference(
                        per_memory.loc[mask, method].to_numpy(),
                        per_memory.loc[mask, base].to_numpy(),
                        per_memory.loc[mask, "required"].to_numpy(bool),
                        n_boot=max(config.n_boot, 1000),
                        seed=config.seed,
                    )
                )
    local = localization_check(per_memory, max(config.n_boot, 1000), config.seed)
    held: dict[str, Any] = {}
    if config.holdout > 0:
        from cmp_bayes.replicate.holdout import held_out_labels, memory_scores, score_holdout

        if dt is not None:
            fits["memory"] = dt
        labels = held_out_labels(blocks)
        held = {"questions": int(sum(len(b.held_out) for b in blocks)),
                "asked": int(sum(len(b.query_ids) - len(b.held_out) for b in blocks)),
                **score_holdout(labels, memory_scores(stats, tables, per_query, fits), config.n_boot,
                                 config.seed, paired_auc_difference)}
        fits.clear()
    t0 = time.perf_counter()
    rz = block_store_randomization(log, blocks, config, scores, progress)
    if reader is not None:
        # the eviction quality needs a reader's success on contexts never logged: it stays the model's
        rz["quality_reader"] = f"eviction quality from the semi-synthetic model: {config.reader.describe()}"
    timings["store_randomization"] = time.perf_counter() - t0
    return ExperimentResult(dataset.name, retriever.name, dataset.granularity, config, summary, auc, rz, timings,
                            fit_health, diffs, per_memory, dt, held, localization=local,
                            reader_name=None if reader is None else reader.name,
                            reader_outcome=None if reader is None else reader_outcome,
                            reader_calls=reader_calls)


def localization_check(per_memory: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The paper's localization check: the methods on memories that have both kinds of data.

    Restricted to memories the retriever put in some context (``retrieved > 0``)
    and that were also exposed at random at other steps (``exposed > 0``),
    logged successes have what they need, so if they still disagree with CMP
    the failure elsewhere is not positivity; if they agree here (the paper:
    0.655 vs 0.658 AUC) while disagreeing over all memories, the failure is
    placed in positivity.

    Parameters
    ----------
    per_memory : pandas.DataFrame
        :attr:`ExperimentResult.scores`.

    Returns
    -------
    dict
        ``memories``, ``required`` (counts in the subset), ``auc`` (method ->
        AUC, NaN estimates ranked last) and ``auc_difference`` (each method
        minus ``logged-success``, :func:`paired_auc_difference`); ``auc``
        empty when the subset lacks a class.
    """
    from cmp_bayes.evaluation import auc

    mask = (per_memory["retrieved"].to_numpy() > 0) & (per_memory["exposed"].to_numpy() > 0)
    sub = per_memory.loc[mask]
    y = sub["required"].to_numpy(bool)
    out: dict[str, Any] = {"memories": int(mask.sum()), "required": int(y.sum()), "auc": {}, "auc_difference": []}
    if y.all() or not y.any():
        return out
    methods = [m for m in ("logged-success", "hajek", "posterior") if m in sub]
    for m in methods:
        v = sub[m].to_numpy(np.float64)
        out["auc"][m] = float(auc(np.where(np.isnan(v), -np.inf, v), y))
    for m in methods[1:]:
        out["auc_difference"].append({"method": m, "baseline": "logged-success"} | paired_auc_difference(
            sub[m].to_numpy(np.float64), sub["logged-success"].to_numpy(np.float64), y, n_boot=n_boot, seed=seed))
    return out


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


def _posterior_mean_table(dt: Any, name: str) -> pd.DataFrame:
    """A memory-level variable's posterior mean as an estimates table (``memory_id``, ``estimate``)."""
    from cmp_bayes.replicate.holdout import _posterior_mean

    mean = _posterior_mean(dt, name)
    return pd.DataFrame({"memory_id": mean.index.to_numpy(), "estimate": mean.to_numpy()})


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
