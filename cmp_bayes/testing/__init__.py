"""Synthetic inputs for tests and benchmarks, shipped as ``pymc.testing`` ships PyMC's.

* :func:`synthetic_posterior` (:mod:`cmp_bayes.testing.posterior`): a DataTree
  that follows the posterior contract, to test what reads a posterior without
  fitting; :func:`memory_table` gives it a varied set of memories.
* :func:`synthetic_stats` (:mod:`cmp_bayes.testing.stats`): memory-level
  statistics drawn from a stated truth, to test and benchmark the model.
"""

from __future__ import annotations

from cmp_bayes.testing.posterior import memory_table, synthetic_posterior, tau_draws
from cmp_bayes.testing.stats import synthetic_stats

__all__ = ["memory_table", "synthetic_posterior", "synthetic_stats", "tau_draws"]
