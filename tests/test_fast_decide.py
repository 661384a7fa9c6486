"""decide's path without per-memory Python loops gives what the loops gave.

``reason_texts`` is compared sentence by sentence with the row loop it replaced
(kept here verbatim as ``reference_reasons``), on posteriors that reach every
branch; ``MemoryDraws.numpy`` with xarray's stack-and-thin.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.decision import rule
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import DEFER, FORGET
from cmp_bayes.decision.preposterior import MAX_EXPOSURES
from cmp_bayes.decision.reasons import reason_texts, times
from cmp_bayes.decision.rule import decide
from cmp_bayes.posterior.health import SamplerHealth
from cmp_bayes.testing import synthetic_posterior
from cmp_bayes.testing.posterior import memory_table


def reference_reasons(
    frame: pd.DataFrame,
    costs: Costs,
    health: SamplerHealth,
    bayes_forget: np.ndarray,
    eligible: np.ndarray,
    rhat_bad: np.ndarray,
    variable: str,
) -> list[str]:
    """One sentence per memory (rows of ``frame``, in order) saying what was decided and why.

    ``bayes_forget``, ``eligible`` and ``rhat_bad`` are boolean arrays over the rows:
    the Bayes rule alone would forget, the guards allow a forget, the memory's own
    R-hat failed. ``variable`` names the estimand (``tau`` or ``utility``).
    """
    c = costs.forget_below
    out = []
    for i, row in enumerate(frame.itertuples(index=False)):
        p, n_exp, n_ret, steps = row.p_useful, row.exposed, row.retrieved, row.in_store
        need = row.exposures_needed
        expose = (
            f"more than {MAX_EXPOSURES} exposures would not settle it"
            if pd.isna(need)
            else f"expose it {int(need)} more {'time' if need == 1 else 'times'}"
        )
        if row.action == FORGET:
            if bayes_forget[i]:
                text = (
                    f"useless with P={1 - p:.3f} after {n_exp} exposures "
                    f"(P(useful)={p:.3f} < {c:.3f}): forget"
                )
            else:
                text = (
                    f"forgotten to meet capacity {costs.capacity}: keeping it is worth least "
                    f"among memories that may be forgotten (P(useful)={p:.3f})"
                )
        elif row.action == DEFER:
            if row.status == UNIDENTIFIED:
                text = (
                    f"never in any context in {steps} steps in the store: utility unidentified "
                    f"(the prior alone gives P(useful)={p:.3f}), so never forgotten; {expose}"
                )
            elif row.status == RETRIEVED_ONLY:
                text = (
                    f"retrieved {times(n_ret)} but never exposed: utility identified only if "
                    f"retrieval is ignorable, so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif n_exp < costs.min_exposures:
                text = (
                    f"exposed {times(n_exp)}, fewer than min_exposures={costs.min_exposures}, "
                    f"so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif not eligible[i]:
                text = (
                    f"data moved tau by only {row.mean_shift:.2f} prior sds "
                    f"(floor {costs.min_mean_shift}), so not forgotten (P(useful)={p:.3f}); {expose}"
                )
            elif not health.ok:
                text = (
                    f"the rule would forget (P(useful)={p:.3f}) but the sampler failed its checks "
                    f"({'; '.join(health.problems)}): refit before forgetting"
                )
            elif rhat_bad[i]:
                text = (
                    f"the rule would forget (P(useful)={p:.3f}) but R-hat of {variable} for this "
                    f"memory is {row.rhat:.3f} > {costs.max_rhat}: refit before forgetting"
                )
            else:  # pragma: no cover - every defer has one of the causes above
                text = f"not forgotten (P(useful)={p:.3f})"
        elif row.status == UNIDENTIFIED:
            text = (
                f"never in any context in {steps} steps: the posterior is the prior "
                f"(P(useful)={p:.3f} >= {c:.3f}): retain; expose it to learn its utility"
            )
        elif row.status == RETRIEVED_ONLY:
            text = (
                f"retrieved {n_ret} of {steps} times, never exposed: P(useful)={p:.3f} rests on "
                f"ignorable retrieval: retain"
            )
        elif n_ret == 0 and p >= 0.5:
            text = f"useful when read (P={p:.2f}) but retrieved 0 of {steps} times: fix retrieval"
        elif p >= 0.5:
            text = f"useful (P={p:.2f}; retrieved {n_ret} of {steps} times): retain"
        else:
            text = f"uncertain (P(useful)={p:.3f}, forget only below {c:.3f}): retain" + (
                f"; retrieved 0 of {steps} times" if n_ret == 0 else ""
            )
        out.append(text)
    return out




def mixed_memories(n: int, seed: int) -> pd.DataFrame:
    """memory_table plus rows for the rarer branches: retrieved 0 times, p >= 0.5, one time."""
    mem = memory_table(n, seed)
    mem.loc[mem.index[::7], "retrieved"] = np.where(
        mem.loc[mem.index[::7], "status"] == RETRIEVED_ONLY, 1, 0
    )
    mem.loc[mem.index[::11], "exposed"] = np.where(
        mem.loc[mem.index[::11], "status"] == IDENTIFIED, 1, 0
    )
    return mem


def broken_memory(post, memory: str):  # type: ignore[no-untyped-def]
    """Shift chain 0 of one memory's tau so its own R-hat fails."""
    tau = post["posterior"]["tau"].copy()
    tau.loc[{"chain": 0, "memory": memory}] = tau.sel(chain=0, memory=memory) - 0.3
    post["posterior"] = post["posterior"].to_dataset().assign(tau=tau)
    return post


CASES = [
    ("default", {}, Costs()),
    ("min_exposures", {}, Costs(min_exposures=4)),
    ("mean_shift floor", {}, Costs(min_mean_shift=1.5)),
    ("capacity", {}, Costs(capacity=40)),
    ("capacity 0", {}, Costs(capacity=0)),
    ("divergence", {"divergences": 1}, Costs()),
    ("stuck chain", {"stuck_chain": True}, Costs()),
    ("utility", {}, Costs(estimand="utility", threshold=0.002)),
    ("per query", {"per_query": True}, Costs()),
    ("costs 5:1", {}, Costs(forget_cost=5.0, retain_cost=1.0)),
]


@pytest.mark.parametrize(("name", "kwargs", "costs"), CASES, ids=[c[0] for c in CASES])
def test_reasons_equal_the_row_loop(name: str, kwargs: dict, costs: Costs, monkeypatch) -> None:
    post = synthetic_posterior(mixed_memories(120, seed=len(name)), draws=100, **kwargs)
    if name == "default":
        ident = post["identification"]["status"].to_numpy()
        forgettable = [
            str(m) for m, s, e in zip(
                post["identification"]["memory"].to_numpy(), ident,
                post["identification"]["exposed"].to_numpy(), strict=True,
            ) if s == IDENTIFIED and e >= 1
        ]
        post = broken_memory(post, forgettable[0])
    seen: list[int] = []

    def both(*args):  # type: ignore[no-untyped-def]
        got = reason_texts(*args)
        want = reference_reasons(*args)
        assert got == want
        seen.append(len(got))
        return got

    monkeypatch.setattr(rule, "reason_texts", both)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = decide(post, costs).table
    assert seen == [len(table)]
    assert table["reason"].str.len().min() > 10


def test_reasons_reach_every_branch() -> None:
    # the cases above between them write every kind of sentence
    seen: list[str] = []
    for name, kwargs, costs in CASES:
        post = synthetic_posterior(mixed_memories(120, seed=len(name)), draws=100, **kwargs)
        if name == "default":
            ids = post["identification"]["memory"].to_numpy()
            ok = post["identification"]["status"].to_numpy() == IDENTIFIED
            post = broken_memory(post, str(ids[ok][0]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seen += list(decide(post, costs).table["reason"])
    for text in (
        "useless with P=", "forgotten to meet capacity", "steps in the store: utility unidentified",
        "but never exposed: utility identified only", "fewer than min_exposures=",
        "data moved tau by only", "but the sampler failed its checks", "for this memory is",
        "steps: the posterior is the prior", "times, never exposed: P(useful)=",
        "but retrieved 0 of", "useful (P=", "uncertain (P(useful)=", "; retrieved 0 of",
        "expose it 1 more time;", "more times", "retrieved 1 time but",
    ):
        assert any(text in r for r in seen), text


def test_memory_draws_numpy_is_the_stacked_thinned_selection() -> None:
    # decide's preposterior input: a direct pick, the same numbers as xarray's stack + thin
    from cmp_bayes.decision.draws import MemoryDraws

    for chains, draws in [(2, 200), (3, 500), (1, 40)]:
        post = synthetic_posterior(n_memories=50, chains=chains, draws=draws)
        for estimand in ("tau", "utility"):
            d = MemoryDraws.from_posterior(post, estimand)
            idx = np.array([3, 0, 17, 49])
            for max_draws in (500, 37, 10_000):
                est = d.estimand.isel(memory=idx).stack(sample=("chain", "draw"))
                tau = d.tau.isel(memory=idx).stack(sample=("chain", "draw"))
                total = est.sizes["sample"]
                keep = np.unique(np.linspace(0, total - 1, min(total, max_draws)).round().astype(int))
                e, t = d.numpy(idx, max_draws)
                np.testing.assert_array_equal(e, est.transpose("memory", "sample").to_numpy()[:, keep])
                np.testing.assert_array_equal(t, tau.transpose("memory", "sample").to_numpy()[:, keep])
                assert e.dtype == np.float64 and e.flags.c_contiguous
