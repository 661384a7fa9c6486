"""Named simulation settings (``cmp-bayes simulate --preset NAME``).

* ``tiny``: 40 memories, 8 queries, 25 repeats (200 steps): tests, seconds.
* ``locomo-like``: one shared store of 600 dialogue turns, 200 questions asked
  10 times, 1-3 required turns each (LoCoMo's shape); the lexical gap is tuned
  so about two thirds of required memories are never retrieved (paper: 67%).
* ``longmemeval-like``: 250 questions, each with its own haystack of 40 memories
  that exists only while its question is asked (96 repeats); 8 retriever + 2
  exposure slots, so each of the 32 pool memories of a haystack gets 6
  exposures; about half the required memories are never retrieved (paper: 54%).
* ``locomo-window``: ``locomo-like`` under a window design (``window=20``,
  ``pool_slots=1``): per step one exposure slot dealt balanced over the whole
  store (positivity for every memory) and one drawn from the step's near
  misses (retriever ranks 8..27), for shared-store pair effects.
* ``locomo-nearmiss``: ``locomo-window`` with a retriever whose misses look
  like BM25's on LoCoMo (``near_miss=0.7``): of the required memories outside
  the retrieved slots, about 13/20/29/38% sit within ranks ``8 .. 8 + W - 1`` at
  W = 10/20/40/80, the rest hundreds of ranks down; ``locomo-window``'s misses
  are nearly all mid-list, out of any window's reach.
* ``churn``: a shared store whose memories are created and deleted over time.
* ``fractional``: ``tiny`` with Beta outcomes (token-F1-like scores) and noise.
"""

from __future__ import annotations

from typing import Any

#: Preset name -> the :class:`SimulationConfig` fields it sets (the rest keep their
#: defaults); the presets are described in the module docstring.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {},
    "locomo-like": {
        "memories": 600, "queries": 200, "repeats": 10, "slots": 10, "exposure_slots": 2,
        "required_per_query": 2, "lexical_gap": 0.62, "store": "shared", "groups": 4,
        "effect_size": 0.25, "harmful_share": 0.03, "ranking_depth": 50,
    },
    "locomo-window": {
        "memories": 600, "queries": 200, "repeats": 10, "slots": 10, "exposure_slots": 2,
        "required_per_query": 2, "lexical_gap": 0.62, "store": "shared", "groups": 4,
        "effect_size": 0.25, "harmful_share": 0.03, "ranking_depth": 50,
        "assignment": "window", "window": 20, "pool_slots": 1,
    },
    "locomo-nearmiss": {
        "memories": 600, "queries": 200, "repeats": 10, "slots": 10, "exposure_slots": 2,
        "required_per_query": 2, "lexical_gap": 0.62, "near_miss": 0.7, "store": "shared", "groups": 4,
        "effect_size": 0.25, "harmful_share": 0.03, "ranking_depth": 50,
        "assignment": "window", "window": 20, "pool_slots": 1,
    },
    "longmemeval-like": {
        "memories": 40, "queries": 250, "repeats": 96, "slots": 10, "exposure_slots": 2,
        "required_per_query": 2, "lexical_gap": 0.58, "store": "per-query", "groups": 5,
        "effect_size": 0.25, "harmful_share": 0.05, "ranking_depth": 0,
    },
    "churn": {
        "memories": 200, "queries": 40, "repeats": 20, "slots": 8, "exposure_slots": 2,
        "churn": 0.5, "store": "shared",
    },
    "fractional": {"outcomes": "fractional", "noise": 0.05},
}
