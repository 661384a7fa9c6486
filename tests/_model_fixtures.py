"""The model tests' shared real fit and their AUC.

Synthetic statistics with a known truth (``synthetic_stats``) ship in the
package: :mod:`cmp_bayes.testing`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd


@functools.cache
def simulated_fit() -> tuple[Any, Any, pd.DataFrame]:
    """One real fit shared by the model and posterior-I/O tests (cached per session).

    A longmemeval-like simulation cut to 20 queries (800 memories: 20 haystacks
    of 40, 6 exposures per pool memory) with pool_share 0.8, so that some
    memories are never exposed nor retrieved; nutpie, 2 chains x 250 draws.

    Returns
    -------
    (ExposureLog, posterior DataTree, truth DataFrame indexed like the posterior's memory)
    """
    from cmp_bayes.model.fit import fit
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate
    from cmp_bayes.simulation.truth import memory_truth

    log = simulate(SimulationConfig.preset("longmemeval-like", queries=SIM_QUERIES, pool_share=0.8), seed=3)
    tree = fit(log, draws=250, tune=300, chains=2, seed=3, progressbar=False)
    truth = memory_truth(log).set_index("memory_id").loc[
        np.asarray(tree["posterior"]["memory"].values).astype(str)
    ]
    return log, tree, truth


#: Queries of the shared test simulation (40 memories each).
SIM_QUERIES: int = 20


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Mann-Whitney AUC of ``score`` for boolean ``label`` (ties count one half)."""
    from scipy.stats import rankdata

    r = rankdata(score)
    n1 = int(label.sum())
    n0 = label.size - n1
    return float((r[label].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))
