"""cmp_bayes: Bayesian analysis of Causal Memory Policy exposure logs.

Pipeline: log -> statistics -> diagnostics -> estimators -> model -> posterior
-> report / decide. Every public name is importable from here; the modules
behind them are imported on first use, so ``import cmp_bayes`` (and the CLI's
``--help``) does not pay for PyMC.
"""

from __future__ import annotations

import importlib
from typing import Any

from cmp_bayes.constants import CI_KIND, CI_PROB
from cmp_bayes.errors import CmpBayesError, ConfigError, LogError, PosteriorError
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.version import __version__

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    # log
    "read_log": "cmp_bayes.log.read",
    "log_checksum": "cmp_bayes.log.read",
    "write_log": "cmp_bayes.log.export",
    "LogWriter": "cmp_bayes.log.append",
    # statistics and diagnostics
    "exposure_stats": "cmp_bayes.statistics",
    "diagnose": "cmp_bayes.diagnostics.positivity",
    "PositivityReport": "cmp_bayes.diagnostics.positivity",
    # design and simulation
    "ExposureScheduler": "cmp_bayes.design.scheduler",
    "LiveSession": "cmp_bayes.live.session",
    "apply_decisions": "cmp_bayes.live.apply",
    "simulate": "cmp_bayes.simulation.simulator",
    "SimulationConfig": "cmp_bayes.simulation.config",
    "PRESETS": "cmp_bayes.simulation.presets",
    "store_randomization": "cmp_bayes.simulation.store_randomization",
    "memory_truth": "cmp_bayes.simulation.truth",
    "load_world": "cmp_bayes.simulation.simulator",
    # estimators and evaluation
    "estimate": "cmp_bayes.estimators",
    "evaluate": "cmp_bayes.evaluation",
    # model and posterior
    "ModelConfig": "cmp_bayes.model.config",
    "SamplerConfig": "cmp_bayes.model.config",
    "fit": "cmp_bayes.model.fit",
    "save_posterior": "cmp_bayes.posterior.io",
    "load_posterior": "cmp_bayes.posterior.io",
    # decisions
    "Costs": "cmp_bayes.decision.costs",
    "decide": "cmp_bayes.decision.rule",
    "Decisions": "cmp_bayes.decision.decisions",
    "read_decisions_csv": "cmp_bayes.decision.decisions",
    "recommend_exposures": "cmp_bayes.decision.recommend",
    # report
    "report": "cmp_bayes.reporting.html",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cmp_bayes' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CI_KIND",
    "CI_PROB",
    "CmpBayesError",
    "ConfigError",
    "ExposureLog",
    "LogError",
    "PosteriorError",
    "__version__",
    *_LAZY,
]
