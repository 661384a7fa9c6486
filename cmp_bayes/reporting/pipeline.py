"""The whole loop on one log: diagnose -> fit -> save -> decide -> report.

One function per stage so each can be called (or replaced) on its own;
:func:`run_pipeline` chains them and is what ``cmp-bayes demo`` runs. Outputs:

* ``<models>/<name>.nc``: the posterior (``save_posterior``);
* ``<reports>/<name>/index.html`` and ``summary.md``: the report;
* ``<reports>/<name>/decisions.csv``: one row per memory (``decide``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xarray as xr

from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.model.config import SamplerConfig

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions

#: Sampler settings: the default run, and --quick (half the draws; compiling the model
#: dominates the time of a small log, so it saves little; 200 draws failed R-hat here).
DEFAULT_SAMPLING: SamplerConfig = SamplerConfig(draws=1000, tune=1000, chains=2)
QUICK_SAMPLING: SamplerConfig = SamplerConfig(draws=500, tune=500, chains=2)
DECISIONS_CSV: str = "decisions.csv"


@dataclass
class PipelineResult:
    """Where everything went, and what it said.

    Attributes
    ----------
    name : str
        Name of the posterior and report.
    log_path : Path
    posterior_path, report_path, summary_path, decisions_path : Path
    decisions : Decisions
        What ``decide`` returned (its ``table`` is what was written to CSV).
    positivity : Any
        The :class:`~cmp_bayes.diagnostics.positivity.PositivityReport`.
    timings : dict of str to float
        Seconds per stage.
    """

    name: str
    log_path: Path
    posterior_path: Path
    report_path: Path
    summary_path: Path
    decisions_path: Path
    decisions: Decisions
    positivity: Any
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """A few lines: where each output is, the action counts, the health line."""
        acts = self.decisions.counts()
        lines = [
            f"log:        {self.log_path}",
            f"posterior:  {self.posterior_path}",
            f"report:     {self.report_path}",
            f"summary:    {self.summary_path}",
            f"decisions:  {self.decisions_path}",
            "decisions:  "
            + ", ".join(f"{int(acts.get(a, 0))} {a}" for a in ("retain", "forget", "defer"))
            + f" (of {len(self.decisions)} memories)",
        ]
        health = self.decisions.health
        if health.problems:
            lines.append("sampler:    forgets refused: " + "; ".join(health.problems))
        lines.append("time:       " + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items()))
        return "\n".join(lines)


def log_name(path: Path) -> str:
    """Name of a log's outputs: its directory's name (a bare steps.jsonl: its folder's)."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    return path.resolve().name or "log"


def load_stage(path: str | Path) -> ExposureLog:
    """Read and validate the log (:func:`cmp_bayes.log.read.read_log`)."""
    from cmp_bayes.log.read import read_log

    return read_log(path)


def diagnose_stage(log: ExposureLog) -> Any:
    """Retrieval positivity of every memory (:func:`cmp_bayes.diagnostics.positivity.diagnose`)."""
    from cmp_bayes.diagnostics.positivity import diagnose

    return diagnose(log)


def fit_stage(
    log: ExposureLog, *, quick: bool = False, seed: int = 0, progressbar: bool = True
) -> xr.DataTree:
    """Fit the hierarchical model (:func:`cmp_bayes.model.fit.fit`, nutpie)."""
    from cmp_bayes.model.fit import fit

    sampling = QUICK_SAMPLING if quick else DEFAULT_SAMPLING
    return fit(log, sampler=replace(sampling, seed=seed, progressbar=progressbar))


def save_stage(posterior: xr.DataTree, models_dir: str | Path, name: str) -> Path:
    """Write the posterior to ``<models_dir>/<name>.nc`` (atomic NetCDF)."""
    from cmp_bayes.posterior.io import save_posterior

    return Path(save_posterior(posterior, Path(models_dir) / f"{name}.nc"))


def decide_stage(posterior: xr.DataTree, costs: Any = None) -> Decisions:
    """Retain / forget / defer per memory (:func:`cmp_bayes.decision.rule.decide`)."""
    from cmp_bayes.decision.rule import decide

    return decide(posterior, costs)


def write_decisions(decisions: Decisions, path: str | Path) -> Path:
    """Write the decision table as CSV, atomically."""
    return decisions.to_csv(path)


def report_stage(
    posterior: xr.DataTree, out_dir: str | Path, decisions: Decisions, log: ExposureLog
) -> Path:
    """Write ``index.html`` and ``summary.md`` (:func:`cmp_bayes.reporting.html.report`)."""
    from cmp_bayes.reporting.html import report

    return report(posterior, out_dir, decisions=decisions, log=log)


def run_pipeline(
    log_path: str | Path,
    *,
    models_dir: str | Path = "models",
    reports_dir: str | Path = "reports",
    name: str | None = None,
    quick: bool = False,
    seed: int = 0,
    costs: Any = None,
    progressbar: bool = True,
    echo: Callable[[str], None] = print,
) -> PipelineResult:
    """Diagnose, fit, save, decide and report one log.

    Parameters
    ----------
    log_path : path
        A log directory (JSONL or Parquet) or a bare ``steps.jsonl``.
    models_dir, reports_dir : path
        Output roots: the posterior goes to ``<models_dir>/<name>.nc``, the
        report and ``decisions.csv`` to ``<reports_dir>/<name>/``.
    name : str, optional
        Default: the log directory's name.
    quick : bool
        Fewer draws (:data:`QUICK_SAMPLING`): a smoke run.
    seed : int
    costs : Costs, optional
        Default ``Costs()``.
    progressbar : bool
        The sampler's progress bar.
    echo : callable
        Where progress lines go (``print``; tests pass a no-op).

    Returns
    -------
    PipelineResult
    """
    log_path = Path(log_path)
    name = name or log_name(log_path)
    timings: dict[str, float] = {}

    def timed(stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        timings[stage] = time.perf_counter() - t0
        return out

    echo(f"[1/5] reading and diagnosing {log_path}")
    log = timed("read", lambda: load_stage(log_path))
    positivity = timed("diagnose", lambda: diagnose_stage(log))
    echo(positivity.to_text())
    sampling = QUICK_SAMPLING if quick else DEFAULT_SAMPLING
    echo(
        f"[2/5] fitting {log.memory_ids().size} memories "
        f"({sampling.chains} chains x {sampling.draws} draws, {sampling.sampler})"
    )
    posterior = timed(
        "fit", lambda: fit_stage(log, quick=quick, seed=seed, progressbar=progressbar)
    )
    echo(f"[3/5] saving the posterior under {models_dir}/")
    posterior_path = timed("save", lambda: save_stage(posterior, models_dir, name))
    echo("[4/5] deciding (default costs unless given)")
    decisions = timed("decide", lambda: decide_stage(posterior, costs))
    out_dir = Path(reports_dir) / name
    decisions_path = write_decisions(decisions, out_dir / DECISIONS_CSV)
    echo(f"[5/5] writing the report under {out_dir}/")
    report_path = timed("report", lambda: report_stage(posterior, out_dir, decisions, log))
    return PipelineResult(
        name=name,
        log_path=log_path,
        posterior_path=posterior_path,
        report_path=report_path,
        summary_path=out_dir / "summary.md",
        decisions_path=decisions_path,
        decisions=decisions,
        positivity=positivity,
        timings=timings,
    )
