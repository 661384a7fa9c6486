"""Store-level randomization on the tiny world."""

from __future__ import annotations

import numpy as np

from cmp_bayes.simulation.simulator import simulate
from cmp_bayes.simulation.store_randomization import store_randomization


def test_unchanged_share_matches_retrieved_set_probability() -> None:
    """With no churn a deletion set leaves query q's top B-k unchanged iff none of
    those B-k = 4 memories is deleted: probability 0.9^4 = 0.656 per pair. Over 400
    perturbations x 8 queries (pairs within a perturbation are correlated, so count
    only 400 independent units) the sd is at most sqrt(.656 * .344 / 400) = 0.024;
    3 sd = 0.071."""
    log = simulate("tiny", seed=0)
    r = store_randomization(log, n_perturbations=400, seed=1)
    assert abs(r["unchanged_share"] - 0.9**4) < 0.071
    assert r["n_evicted"] == 4
    assert np.isfinite(r["lift"]) and r["quality_random"] > 0
    # evicting the memories of lowest true utility beats random eviction
    assert r["quality_oracle"] > r["quality_random"]
