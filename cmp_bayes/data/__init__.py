"""Data shipped with cmp_bayes: the example exposure log the demo runs on.

``example/`` is a complete JSONL log (steps, design, memories, labels) made by
the simulator with :data:`EXAMPLE_CONFIG` at :data:`EXAMPLE_SEED`. Regenerate
it with ``.venv/bin/python benchmarks/make_example.py`` (which calls
:func:`make_example`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Final

#: Simulator settings of the bundled example: a shared store of 150 memories,
#: 20 queries asked 25 times (500 steps), 6 retriever + 2 exposure slots. With
#: 70% of the exposable memories in the pool, the log has all three statuses
#: (identified, retrieved-only, unidentified); each pool memory gets about 9
#: exposures. Small enough that the demo's fit takes well under 2 minutes.
EXAMPLE_CONFIG: Final[dict[str, Any]] = {
    "memories": 150,
    "queries": 20,
    "repeats": 25,
    "slots": 8,
    "exposure_slots": 2,
    "pool_share": 0.7,
    "ranking_depth": 30,
}
EXAMPLE_SEED: Final[int] = 7
#: Name the demo gives the example's posterior and report: models/demo.nc, reports/demo/
#: (both git-ignored: they are outputs of a run, not sources).
EXAMPLE_NAME: Final[str] = "demo"


def example_log_path() -> Path:
    """Path of the bundled example log directory (inside the installed package)."""
    return Path(str(resources.files("cmp_bayes.data").joinpath("example")))


def make_example(out: str | Path | None = None) -> Path:
    """(Re)generate the example log with the simulator; returns its directory.

    Parameters
    ----------
    out : path, optional
        Target directory (default: the package's ``data/example``). Written
        atomically as a whole (``write_log``).
    """
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate

    target = Path(out) if out is not None else example_log_path()
    cfg = SimulationConfig.preset("tiny", **EXAMPLE_CONFIG)
    simulate(cfg, out=target, seed=EXAMPLE_SEED)
    return target
