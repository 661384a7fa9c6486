"""The sentence behind each decision: why a memory is kept, forgotten or deferred."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import DEFER, FORGET
from cmp_bayes.decision.preposterior import MAX_EXPOSURES
from cmp_bayes.posterior.health import SamplerHealth


def reason_texts(
    frame: pd.DataFrame,
    costs: Costs,
    health: SamplerHealth,
    bayes_forget: np.ndarray,
    eligible: np.ndarray,
    rhat_bad: np.ndarray,
    variable: str,
    chain_max: np.ndarray | None = None,
    store_averaged: np.ndarray | None = None,
) -> list[str]:
    """One sentence per memory (rows of ``frame``, in order) saying what was decided and why.

    ``bayes_forget``, ``eligible`` and ``rhat_bad`` are boolean arrays over the rows:
    the Bayes rule alone would forget, the guards allow a forget, the memory's own
    R-hat failed (in chainwise mode: its chains disagree). ``variable`` names the
    estimand (``tau`` or ``utility``). ``chain_max``: in chainwise mode (a fit whose
    hyperparameter R-hat failed, within ``costs.max_rhat_chainwise``), each checked
    memory's largest per-chain P(useful); None otherwise. ``store_averaged``: the rows
    whose forget waits because the estimand is a gated posterior's store average
    (``Costs.store_average = "defer"``); None when none does.

    Built case by case over whole columns (no per-row Python loop: at 100k
    memories a loop over rows dominated ``decide``); each number is formatted
    once per distinct value, since P(useful) takes at most draws + 1 values
    and the counts few.
    """
    n = len(frame)
    c = costs.forget_below
    action = frame["action"].to_numpy(dtype=object)
    status = frame["status"].to_numpy(dtype=object)
    p = frame["p_useful"].to_numpy(dtype="float64")
    n_exp = frame["exposed"].to_numpy(dtype="int64")
    n_ret = frame["retrieved"].to_numpy(dtype="int64")
    steps = frame["in_store"].to_numpy(dtype="int64")
    bayes_forget = np.asarray(bayes_forget, dtype=bool)
    eligible = np.asarray(eligible, dtype=bool)
    rhat_bad = np.asarray(rhat_bad, dtype=bool)
    out = np.full(n, "", dtype=object)

    def put(mask: np.ndarray, *parts: str | _Column) -> None:
        """Rows ``mask`` get the concatenation of ``parts`` (constants or per-row columns)."""
        rows = np.flatnonzero(mask)
        if rows.size:
            text = np.full(rows.size, "", dtype=object)
            for part in parts:
                text = text + (part if isinstance(part, str) else part.at(rows))
            out[rows] = text

    p3, p2 = _Column(p, ".3f"), _Column(p, ".2f")
    forget, defer = action == FORGET, action == DEFER
    if chain_max is None:
        put(
            forget & bayes_forget,
            "useless with P=", _Column(1 - p, ".3f"), " after ", _Column(n_exp, ""), " exposures ",
            "(P(useful)=", p3, f" < {c:.3f}): forget",
        )
    else:
        put(
            forget & bayes_forget,
            "useless with P=", _Column(1 - p, ".3f"), " after ", _Column(n_exp, ""), " exposures ",
            "(P(useful)=", p3, f" < {c:.3f}) in every chain (largest ", _Column(chain_max, ".3f"),
            f"), although the chains have not mixed ({'; '.join(health.problems)}): forget",
        )
    put(
        forget & ~bayes_forget,
        f"forgotten to meet capacity {costs.capacity}: keeping it is worth least "
        "among memories that may be forgotten (P(useful)=", p3, ")",
    )
    todo = defer.copy()

    def take(mask: np.ndarray) -> np.ndarray:
        """The rows of ``todo`` in ``mask``, removed from ``todo`` (first match wins)."""
        hit = todo & mask
        todo[hit] = False
        return hit

    if defer.any():
        expose = _expose_phrases(frame["exposures_needed"])
        put(
            take(status == UNIDENTIFIED),
            "never in any context in ", _Column(steps, ""), " steps in the store: utility "
            "unidentified (the prior alone gives P(useful)=", p3, "), so never forgotten; ", expose,
        )
        put(
            take(status == RETRIEVED_ONLY),
            "retrieved ", _Times(n_ret), " but never exposed: utility identified only if "
            "retrieval is ignorable, so not forgotten (P(useful)=", p3, "); ", expose,
        )
        put(
            take(n_exp < costs.min_exposures),
            "exposed ", _Times(n_exp), f", fewer than min_exposures={costs.min_exposures}, "
            "so not forgotten (P(useful)=", p3, "); ", expose,
        )
        put(
            take(~eligible),
            "data moved tau by only ", _Column(frame["mean_shift"].to_numpy(dtype="float64"), ".2f"),
            f" prior sds (floor {costs.min_mean_shift}), so not forgotten (P(useful)=", p3, "); ",
            expose,
        )
        if store_averaged is not None:
            put(
                take(np.asarray(store_averaged, dtype=bool)),
                "the rule would forget (P(useful)=", p3, f") but {variable} is a shared-store "
                "average over the log's questions, which does not tell a memory that serves one "
                "question from the rest: decide on estimand='relevant' "
                "(or set store_average='allow')",
            )
        if chain_max is not None:
            put(
                take(rhat_bad),
                "the rule would forget (P(useful)=", p3, ") but in one chain P(useful) is ",
                _Column(chain_max, ".3f"), f" >= {c:.3f}, and the chains have not mixed "
                f"({'; '.join(health.problems)}): refit before forgetting",
            )
        if not health.ok and chain_max is None:
            put(
                take(np.ones(n, dtype=bool)),
                "the rule would forget (P(useful)=", p3, ") but the sampler failed its checks "
                f"({'; '.join(health.problems)}): refit before forgetting",
            )
        put(
            take(rhat_bad),
            "the rule would forget (P(useful)=", p3, f") but R-hat of {variable} for this "
            "memory is ", _Column(frame["rhat"].to_numpy(dtype="float64"), ".3f"),
            f" > {costs.max_rhat}: refit before forgetting",
        )
        # every defer has one of the causes above
        put(take(np.ones(n, dtype=bool)), "not forgotten (P(useful)=", p3, ")")  # pragma: no cover
    rest = ~forget & ~defer
    unid, ret_only = rest & (status == UNIDENTIFIED), rest & (status == RETRIEVED_ONLY)
    put(
        unid,
        "never in any context in ", _Column(steps, ""), " steps: the posterior is the prior "
        "(P(useful)=", p3, f" >= {c:.3f}): retain; expose it to learn its utility",
    )
    put(
        ret_only,
        "retrieved ", _Column(n_ret, ""), " of ", _Column(steps, ""), " times, never exposed: "
        "P(useful)=", p3, " rests on ignorable retrieval: retain",
    )
    rest &= ~unid & ~ret_only
    sure = p >= 0.5
    put(
        rest & sure & (n_ret == 0),
        "useful when read (P=", p2, ") but retrieved 0 of ", _Column(steps, ""),
        " times: fix retrieval",
    )
    put(
        rest & sure & (n_ret != 0),
        "useful (P=", p2, "; retrieved ", _Column(n_ret, ""), " of ", _Column(steps, ""),
        " times): retain",
    )
    put(
        rest & ~sure & (n_ret != 0),
        "uncertain (P(useful)=", p3, f", forget only below {c:.3f}): retain",
    )
    put(
        rest & ~sure & (n_ret == 0),
        "uncertain (P(useful)=", p3, f", forget only below {c:.3f}): retain",
        "; retrieved 0 of ", _Column(steps, ""), " times",
    )
    return out.tolist()


class _Column:
    """A per-row number formatted with ``spec``, each distinct value formatted once."""

    def __init__(self, values: np.ndarray, spec: str) -> None:
        self.values = np.asarray(values)
        self.spec = spec

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The formatted values of ``rows`` (object array of str)."""
        uniq, inverse = np.unique(self.values[rows], return_inverse=True)
        # float() / int(): the str of a numpy scalar may differ from the Python one
        cast = float if uniq.dtype.kind == "f" else int
        text = np.array([format(cast(v), self.spec) for v in uniq], dtype=object)
        return text[inverse.reshape(-1)]


class _Times(_Column):
    """A per-row count as :func:`times` writes it ("1 time", "2 times")."""

    def __init__(self, values: np.ndarray) -> None:
        super().__init__(values, "")

    def at(self, rows: np.ndarray) -> np.ndarray:
        """:func:`times` of ``rows``' counts (object array of str)."""
        uniq, inverse = np.unique(self.values[rows], return_inverse=True)
        text = np.array([times(int(v)) for v in uniq], dtype=object)
        return text[inverse.reshape(-1)]


class _Phrases(_Column):
    """Per-row text given in full (object array of str)."""

    def __init__(self, text: np.ndarray) -> None:
        super().__init__(text, "")

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The text of ``rows``."""
        return self.values[rows]


def _expose_phrases(needed: pd.Series) -> _Phrases:
    """"expose it k more time(s)", or that more than ``MAX_EXPOSURES`` would not settle it."""
    missing = needed.isna().to_numpy()
    values = needed.fillna(0).to_numpy(dtype="int64")
    text = np.full(len(values), f"more than {MAX_EXPOSURES} exposures would not settle it", dtype=object)
    uniq, inverse = np.unique(values[~missing], return_inverse=True)
    words = np.array(
        [f"expose it {int(k)} more {'time' if k == 1 else 'times'}" for k in uniq], dtype=object
    )
    text[~missing] = words[inverse.reshape(-1)]
    return _Phrases(text)


def why_not_allowed(
    frame: pd.DataFrame,
    costs: Costs,
    eligible: np.ndarray,
    health: SamplerHealth,
    rhat_bad: np.ndarray,
    chainwise: bool = False,
    store_averaged: bool = False,
) -> np.ndarray:
    """Per memory, a short phrase saying why it may not be forgotten ("" if it may)."""
    why = np.full(len(frame), "", dtype=object)
    if store_averaged:
        why[:] = "a shared-store average (store_average='defer')"
    status = frame["status"].to_numpy()
    exposed = frame["exposed"].to_numpy()
    if chainwise:
        why[rhat_bad] = "its chains disagree (the sampler's R-hat failed)"
    else:
        why[rhat_bad] = f"R-hat above {costs.max_rhat}"
        if not health.ok:
            why[:] = "the sampler failed its checks"
    why[~eligible] = "evidence below min_mean_shift"
    few = (status == IDENTIFIED) & (exposed < costs.min_exposures)
    why[few] = f"fewer than {costs.min_exposures} exposures"
    why[status == RETRIEVED_ONLY] = RETRIEVED_ONLY
    why[status == UNIDENTIFIED] = UNIDENTIFIED
    return why


def note_shortfall(
    frame: pd.DataFrame, rank_key: np.ndarray, costs: Costs, shortfall: int, why: np.ndarray
) -> None:
    """Add the unmet-capacity sentence to the kept memories capacity would have taken next."""
    kept = frame["action"].to_numpy() != FORGET
    order = rank_key[kept[rank_key]][:shortfall]
    n_kept = int(kept.sum())
    col = frame.columns.get_loc("reason")
    for i in order:
        frame.iat[i, col] = (
            f"{frame.iat[i, col]}; capacity {costs.capacity} not met ({n_kept} kept): "
            f"not forgettable ({why[i]})"
        )


def times(k: int) -> str:
    """"1 time", "2 times"."""
    return f"{k} time" if k == 1 else f"{k} times"
