"""How well a set of scores separates required from non-required memories (AUC).

Scores come from an estimates table (``cmp_bayes.estimate`` / ``cmp-bayes
estimate`` CSV) or a posterior (a DataTree whose ``posterior`` group has
``tau``; scored by its posterior mean). Labels come from the log's
``labels.jsonl``: evaluation only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from cmp_bayes.constants import CI_KIND, CI_PROB
from cmp_bayes.errors import ConfigError, LogError

if TYPE_CHECKING:
    import xarray as xr

    from cmp_bayes.log.schema import ExposureLog

Level = Literal["memory", "pair"]
NanRule = Literal["last", "exclude"]


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties count 1/2.

    ``scores`` may hold -inf (ranked below every finite score); NaN is not
    allowed. Returns NaN when either class is empty.
    """
    lv, pos, neg = _levels(scores, labels)
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    k = int(lv.max()) + 1
    return _auc_counts(np.bincount(pos, minlength=k), np.bincount(neg, minlength=k))


def _levels(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _, lv = np.unique(scores, return_inverse=True)
    lv = lv.ravel()
    labels = labels.astype(bool)
    return lv, lv[labels], lv[~labels]


def _auc_counts(cp: np.ndarray, cn: np.ndarray) -> float:
    """AUC from per-score-level counts of positives ``cp`` and negatives ``cn`` (levels ascending)."""
    below = np.cumsum(cn) - cn
    return float((cp * (below + 0.5 * cn)).sum() / (cp.sum() * cn.sum()))


def auc_interval(
    scores: np.ndarray, labels: np.ndarray, n_boot: int = 1000, seed: int = 0
) -> tuple[float, float, float]:
    """AUC and its stratified-bootstrap equal-tailed interval at ``CI_PROB``.

    Positives and negatives are resampled separately (their counts fixed),
    ``n_boot`` times; the interval is the percentile interval. Returns
    ``(auc, low, high)``; NaN when a class is empty.
    """
    lv, pos, neg = _levels(scores, labels)
    if len(pos) == 0 or len(neg) == 0:
        return (float("nan"),) * 3
    k = int(lv.max()) + 1
    point = _auc_counts(np.bincount(pos, minlength=k), np.bincount(neg, minlength=k))
    if n_boot <= 0:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    for b in range(n_boot):  # each draw is O(n) bincounts
        cp = np.bincount(pos[rng.integers(0, len(pos), len(pos))], minlength=k)
        cn = np.bincount(neg[rng.integers(0, len(neg), len(neg))], minlength=k)
        boots[b] = _auc_counts(cp, cn)
    tail = (1.0 - CI_PROB) / 2.0
    low, high = np.quantile(boots, [tail, 1.0 - tail])
    return point, float(low), float(high)


def load_result(result: str | Path | pd.DataFrame | xr.DataTree) -> pd.DataFrame:
    """Scores as a table: ``memory_id`` [``query_id``], ``score``, optional ``status``, ``method``.

    Accepts an estimates DataFrame, a path to an estimates CSV, a path to a
    posterior NetCDF, or a DataTree. A posterior scores each memory (or each
    memory x query when ``tau`` has a ``query`` dim) by the posterior mean of
    ``tau``; its ``identification`` group, when present, gives ``status``. A
    gated pair posterior (``tau`` over ``pair``) scores each (memory, query)
    pair by its exact posterior mean (``pair_identification.tau_mean``, over every
    sampled draw; the stored draws' mean where a file lacks it), with the status of
    its ``pair_identification`` group.
    """
    if isinstance(result, pd.DataFrame):
        if "score" in result.columns and "estimate" not in result.columns:
            return result  # already a scores table (this function's own output)
        return _from_table(result, "<DataFrame>")
    if isinstance(result, (str, Path)):
        path = Path(result)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file")
        if path.suffix.lower() in (".nc", ".nc4", ".netcdf", ".h5"):
            from cmp_bayes.posterior.io import load_posterior

            return _from_tree(load_posterior(path), str(path))
        try:
            table = pd.read_csv(path, dtype={"memory_id": str, "query_id": str, "group": str})
        except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
            raise ConfigError(f"{path}: not an estimates CSV ({exc})") from exc
        return _from_table(table, str(path))
    return _from_tree(result, "<DataTree>")


def _from_table(table: pd.DataFrame, name: str) -> pd.DataFrame:
    for col in ("memory_id", "estimate"):
        if col not in table.columns:
            raise ConfigError(f"{name}: estimates table has no column '{col}'")
    out = pd.DataFrame(
        {
            "memory_id": table["memory_id"].astype(str).to_numpy(),
            "score": pd.to_numeric(table["estimate"], errors="coerce").to_numpy(np.float64),
        }
    )
    if "query_id" in table.columns:
        out.insert(1, "query_id", table["query_id"].astype(str).to_numpy())
    if "status" in table.columns:
        out["status"] = table["status"].astype(str).to_numpy()
    out.attrs["method"] = str(table["method"].iloc[0]) if "method" in table.columns and len(table) else ""
    return out


def _from_tree(tree: xr.DataTree, name: str) -> pd.DataFrame:
    from cmp_bayes.errors import PosteriorError

    if "posterior" not in tree.children or "tau" not in tree["posterior"].data_vars:
        raise PosteriorError(f"{name}: no posterior group with a 'tau' variable")
    tau = tree["posterior"]["tau"].mean(("chain", "draw"))
    if "pair" in tau.dims:
        # the gated pair model: one score per (memory, query) pair, status from the design per pair
        frame = pd.DataFrame({
            "memory_id": tau["memory_id"].to_numpy().astype(str),
            "query_id": tau["query_id"].to_numpy().astype(str),
            "score": tau.to_numpy(),
        })
        from cmp_bayes.posterior.contract import PAIR_IDENTIFICATION

        pid = tree[PAIR_IDENTIFICATION] if PAIR_IDENTIFICATION in tree.children else None
        if pid is not None and "tau_mean" in pid.data_vars:
            frame["score"] = pid["tau_mean"].to_numpy().astype(np.float64)
        if pid is not None and "status" in pid.data_vars:
            frame["status"] = pid["status"].to_numpy().astype(str)
        frame.attrs["method"] = "posterior-mean"
        return frame
    if "query" in tau.dims:
        frame = tau.transpose("memory", "query").to_series().rename("score").reset_index()
        frame = frame.rename(columns={"memory": "memory_id", "query": "query_id"})
    else:
        frame = pd.DataFrame({"memory_id": tau["memory"].to_numpy(), "score": tau.to_numpy()})
    frame["memory_id"] = frame["memory_id"].astype(str)
    if "identification" in tree.children and "status" in tree["identification"].data_vars:
        st = tree["identification"]["status"].to_series()
        st.index = st.index.astype(str)
        frame["status"] = frame["memory_id"].map(st).astype(str).to_numpy()
    frame.attrs["method"] = "posterior-mean"
    return frame


def evaluate(
    log: ExposureLog,
    result: str | Path | pd.DataFrame | xr.DataTree,
    level: Level = "memory",
    n_boot: int = 1000,
    seed: int = 0,
    nan: NanRule = "last",
) -> dict[str, Any]:
    """AUC of required vs non-required memories (or memory-query pairs), with a bootstrap interval.

    Parameters
    ----------
    log : ExposureLog
        The log whose ``labels`` say what is required.
    result : DataFrame, path or DataTree
        Estimates (table or CSV: ``memory_id`` [``query_id``] ``estimate``) or
        a posterior (NetCDF path or DataTree with ``posterior.tau``); see
        :func:`load_result`.
    level : {"memory", "pair"}
        ``memory``: one unit per memory of the store (``log.memory_ids()``),
        required if any label says so. A per-query result is turned into a
        memory score by its largest finite estimate over queries (a memory
        matters if it matters for some query). ``pair``: one unit per
        (memory, query) with the memory in the store at some step of the query,
        required if that pair's label says so (unlabelled: not required). A
        memory-level result gives every pair of the memory its score.
    n_boot : int
        Bootstrap draws (stratified: required and non-required resampled
        separately) for the interval at ``cmp_bayes.constants.CI_PROB``.
    seed : int
        Seed of the bootstrap.
    nan : {"last", "exclude"}
        Units without an estimate (NaN, e.g. never exposed, or never retrieved
        for the logged baselines): ``last`` ranks them below every scored
        unit, all tied (what a system that cannot score a memory does with
        it); ``exclude`` drops them. Their number is reported either way.

    Returns
    -------
    dict
        ``level``, ``method``, ``auc``, ``ci_low``, ``ci_high``, ``ci_prob``,
        ``ci_kind``, ``n`` (units scored, after the NaN rule), ``n_required``,
        ``n_not_required``, ``n_nan``, ``nan_rule``, ``n_boot``, ``seed``,
        and ``by_status`` (point AUC, ``n``, ``n_required`` within each
        identification status) when the result carries statuses. NaN AUCs
        are returned as None.
    """
    if level not in ("memory", "pair"):
        raise ConfigError(f"level must be 'memory' or 'pair', not {level!r}")
    if nan not in ("last", "exclude"):
        raise ConfigError(f"nan must be 'last' or 'exclude', not {nan!r}")
    labels = log.labels
    if labels is None:
        raise LogError(log.source or "<log>", "the log has no labels.jsonl: nothing to evaluate against")
    scores = load_result(result)
    units = _memory_units(log, labels, scores) if level == "memory" else _pair_units(log, labels, scores)
    n_nan = int(units["score"].isna().sum())
    if nan == "exclude":
        units = units[units["score"].notna()]
    s = units["score"].fillna(-np.inf).to_numpy(np.float64)
    y = units["required"].to_numpy(bool)
    point, low, high = auc_interval(s, y, n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {
        "level": level,
        "method": scores.attrs.get("method", ""),
        "auc": _none(point),
        "ci_low": _none(low),
        "ci_high": _none(high),
        "ci_prob": CI_PROB,
        "ci_kind": CI_KIND,
        "n": len(units),
        "n_required": int(y.sum()),
        "n_not_required": int((~y).sum()),
        "n_nan": n_nan,
        "nan_rule": nan,
        "n_boot": n_boot,
        "seed": seed,
    }
    if "status" in units.columns:
        out["by_status"] = {
            str(st): {
                "auc": _none(auc(s[mask], y[mask])),
                "n": int(mask.sum()),
                "n_required": int(y[mask].sum()),
            }
            for st in sorted(units["status"].dropna().unique())
            for mask in [(units["status"] == st).to_numpy()]
        }
    return out


def _memory_units(log: ExposureLog, labels: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    memory = pd.Index(log.memory_ids().astype(str))
    lab = labels.astype({"memory_id": str})
    required = lab.groupby("memory_id")["required"].any().reindex(memory, fill_value=False)
    if "query_id" in scores.columns:
        per = scores.groupby("memory_id")["score"].max()  # NaN only when every query is NaN
        status = None
        if "status" in scores.columns:
            # a memory's status is its best over queries: identified > retrieved-only > unidentified
            from cmp_bayes.constants import STATUSES

            rank = scores["status"].map({s: i for i, s in enumerate(STATUSES)})
            best = rank.groupby(scores["memory_id"]).min()
            status = best.map(dict(enumerate(STATUSES)))
    else:
        per = scores.drop_duplicates("memory_id").set_index("memory_id")["score"]
        status = (
            scores.drop_duplicates("memory_id").set_index("memory_id")["status"]
            if "status" in scores.columns
            else None
        )
    units = pd.DataFrame(
        {
            "memory_id": memory,
            "score": per.reindex(memory).to_numpy(np.float64),
            "required": required.to_numpy(bool),
        }
    )
    if status is not None:
        units["status"] = status.reindex(memory).to_numpy(dtype=object)
    return units


def _pair_units(log: ExposureLog, labels: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    # The units are the log's (memory, query) pairs with the memory in the store at
    # some step of the query, whatever the result holds: a per-query posterior has a
    # cell (NaN) for every pair of its grid, a per-query table one row per pair.
    from cmp_bayes.statistics import exposure_stats

    ds = exposure_stats(log, by="query")
    mi, qi = np.nonzero(ds["in_store"].to_numpy() > 0)
    units = pd.DataFrame(
        {
            "memory_id": ds["memory"].to_numpy()[mi].astype(str),
            "query_id": ds["query"].to_numpy()[qi].astype(str),
        }
    )
    if "query_id" in scores.columns:
        table = scores.astype({"memory_id": str, "query_id": str})[["memory_id", "query_id", "score"]]
        units = units.merge(table.drop_duplicates(["memory_id", "query_id"]), how="left", on=["memory_id", "query_id"])
    else:
        mem = scores.drop_duplicates("memory_id").set_index("memory_id")
        units["score"] = units["memory_id"].map(mem["score"]).to_numpy(np.float64)
    if "status" in scores.columns:
        # a pair's status is the log's, whatever level the result's statuses are at
        # (a per-query posterior repeats its memory's status over the memory's queries)
        from cmp_bayes.diagnostics.positivity import identification_status

        units["status"] = identification_status(ds).to_numpy()[mi, qi]
    lab = labels.astype({"memory_id": str, "query_id": str})
    req = lab.loc[lab["required"].astype(bool), ["memory_id", "query_id"]].drop_duplicates()
    key = pd.MultiIndex.from_frame(units[["memory_id", "query_id"]])
    units["required"] = key.isin(pd.MultiIndex.from_frame(req))
    return units.reset_index(drop=True)


def _none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)
