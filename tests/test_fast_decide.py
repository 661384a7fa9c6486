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
from cmp_bayes.decision.preposterior import MAX_EXPOSURES, plain_scan
from cmp_bayes.decision.reasons import reason_texts, times
from cmp_bayes.decision.rule import decide
from cmp_bayes.posterior.health import SamplerHealth
from cmp_bayes.posterior.sampling_checks import rank_rhat
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
    chain_max: np.ndarray | None = None,
    store_averaged: np.ndarray | None = None,
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
            if bayes_forget[i] and chain_max is not None:
                text = (
                    f"useless with P={1 - p:.3f} after {n_exp} exposures "
                    f"(P(useful)={p:.3f} < {c:.3f}) in every chain (largest {chain_max[i]:.3f}), "
                    f"although the chains have not mixed ({'; '.join(health.problems)}): forget"
                )
            elif bayes_forget[i]:
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
            elif store_averaged is not None and store_averaged[i]:
                text = (
                    f"the rule would forget (P(useful)={p:.3f}) but {variable} is a shared-store "
                    "average over the log's questions, which does not tell a memory that serves one "
                    "question from the rest: decide on estimand='relevant' (or set store_average='allow')"
                )
            elif chain_max is not None and rhat_bad[i]:
                text = (
                    f"the rule would forget (P(useful)={p:.3f}) but in one chain P(useful) is "
                    f"{chain_max[i]:.3f} >= {c:.3f}, and the chains have not mixed "
                    f"({'; '.join(health.problems)}): refit before forgetting"
                )
            elif not health.ok and chain_max is None:
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
    ("stuck chain, chainwise", {"stuck_chain": True}, Costs(max_rhat_chainwise=1e6)),
    ("utility", {}, Costs(estimand="utility", threshold=0.002)),
    ("per query", {"per_query": True}, Costs()),
    ("gated, store average", {"pair_model": "gated"}, Costs()),
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

    def both(*args, **kwargs):  # type: ignore[no-untyped-def]
        got = reason_texts(*args, **kwargs)
        want = reference_reasons(*args, **kwargs)
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
        "expose it 1 more time;", "more times", "retrieved 1 time but", "is a shared-store average",
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


# --- issue 15, decide at 100k: the screened preposterior scan, the R-hat kernel's
# --- tie ranks and gathers, and P(useful) / means without xarray's copy


def preposterior_draws(m: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimand and tau draws of every kind the scan meets, and starts (1 to 400)."""
    rng = np.random.default_rng(seed)
    share = rng.uniform(0, 0.3, size=(m, 1))  # share of useful-looking draws per memory
    tau = np.where(
        rng.random((m, d)) < share,
        rng.normal(0.15, 0.08, size=(m, d)),
        rng.normal(0.0, rng.uniform(0.003, 0.05, size=(m, 1)), size=(m, d)),
    )
    tau[0] = rng.normal(0.0, 0.001, size=d)  # no useful draw
    tau[1] = rng.normal(0.5, 0.01, size=d)  # every draw useful
    tau[2] = np.where(np.arange(d) < 3, 0.3, 0.0)  # two-point, far apart
    tau[3] = np.where(np.arange(d) < d // 2, 0.051, 0.049)  # straddles the threshold closely
    tau[4] = np.round(tau[4], 2)  # heavy ties
    tau[5] = np.where(np.arange(d) < 2, 0.06, 0.0)  # barely useful: hundreds of exposures
    rho = rng.beta(2, 2, size=(m, d))
    start = rng.choice([1, 1, 1, 2, 5, 29, 30, 31, 100, 400], size=m)
    return tau, rho * tau, start


@pytest.mark.parametrize("seed", range(4))
# not 1.0: there "P(useful) >= 1" holds or fails by the last bit of a sum (in the
# plain scan too), and reweighting one tau_hat rounds differently from two
@pytest.mark.parametrize("forget_below", [1 / 21, 1 / 6, 0.5, 0.9, 1e-3, 0.0])
def test_exposures_to_resolve_equals_the_plain_scan(seed: int, forget_below: float) -> None:
    from cmp_bayes.decision.preposterior import exposures_to_resolve

    tau, utility, start = preposterior_draws(60, 200, seed)
    for estimand, threshold in ((tau, 0.05), (utility, 0.02)):
        with np.errstate(divide="ignore", invalid="ignore"):
            want = plain_scan(estimand, tau, threshold, forget_below, start)
            got = exposures_to_resolve(estimand, tau, threshold, forget_below, start)
        np.testing.assert_array_equal(got, want)
    if 0 < forget_below < 1:  # at the edges nothing ever resolves: c = 0 or 1 is never crossed
        assert np.isfinite(want).any()


def test_exposures_to_resolve_reaches_nan_and_large_counts() -> None:
    # the scan's far end: resolved only after hundreds of exposures, or never
    from cmp_bayes.decision.preposterior import MAX_EXPOSURES, exposures_to_resolve

    tau, _, start = preposterior_draws(40, 300, seed=9)
    start[:] = 1
    got = exposures_to_resolve(tau, tau, 0.05, 1 / 21, start)
    np.testing.assert_array_equal(got, plain_scan(tau, tau, 0.05, 1 / 21, start))
    # every draw useful: no useless-like outcome exists to forget on; draws at 0.049
    # and 0.051: MAX_EXPOSURES cannot tell them apart
    assert np.isnan(got[[1, 3]]).all()
    assert np.nanmax(got) > 30 and np.nanmax(got) <= MAX_EXPOSURES


def test_surely_below_never_contradicts_reweighted_p() -> None:
    # the bound may only say "below" where reweighted_p computes below
    from cmp_bayes.decision.preposterior import _screening, _surely_below, reweighted_p

    rng = np.random.default_rng(3)
    tau, utility, _ = preposterior_draws(80, 250, seed=3)
    for estimand, threshold in ((tau, 0.05), (utility, 0.02)):
        tau_hat, bounds = _screening(estimand, tau, threshold)
        idx = np.arange(tau.shape[0])
        proved = 0
        for n in (1, 2, 7, 30, 31, 400, 10_000):
            ns = np.full(idx.size, float(n)) * rng.uniform(1, 1.5, size=idx.size).round(0)
            p = reweighted_p(estimand, tau, tau_hat, ns, threshold)
            for h in (0, 1):
                for c in (1 / 21, 0.3, 0.99):
                    surely = _surely_below(bounds[h], idx, ns, c)
                    assert (p[surely, h] < c).all()
                    proved += int(surely.sum())
        assert proved > 1000  # and it does prove most of them


def test_rank_rhat_balanced_duplicate_draws_and_views() -> None:
    # synthetic posteriors repeat each value once per half-chain (every draw
    # tied 2 * chains times); and memory_rhat hands rank_rhat strided views
    from tests.test_rhat import arviz_rank_rhat

    rng = np.random.default_rng(11)
    for chains, half in ((2, 50), (3, 17)):
        base = rng.normal(size=(30, half))
        x = np.stack([base[:, rng.permutation(half)] for _ in range(2 * chains)], axis=1)
        x = x.reshape(30, chains, 2 * half)
        x[:5, 0] += 0.5
        np.testing.assert_allclose(rank_rhat(x), arviz_rank_rhat(x), rtol=0, atol=1e-10)
        view = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 0, 2)), 2, 0)
        assert not view.flags.c_contiguous
        np.testing.assert_array_equal(rank_rhat(view), rank_rhat(x))


def test_memory_rhat_across_gather_chunks(monkeypatch) -> None:
    from cmp_bayes.posterior import sampling_checks
    from tests.test_rhat import arviz_rank_rhat

    post = synthetic_posterior(n_memories=23, draws=40, seed=2)
    tau = post["posterior"]["tau"]
    ids = np.asarray(tau["memory"].to_numpy())[[5, 0, 22, 7, 7, 13, 1]]
    want = arviz_rank_rhat(tau.transpose("memory", "chain", "draw").sel(memory=ids).to_numpy())
    monkeypatch.setattr(sampling_checks, "_GATHER_CHUNK", 3)
    np.testing.assert_allclose(sampling_checks.memory_rhat(tau, ids), want, rtol=0, atol=1e-10)


def test_memory_draws_summaries_are_xarray_means() -> None:
    from cmp_bayes.decision.draws import MemoryDraws

    post = synthetic_posterior(n_memories=40, draws=60, seed=5)
    tau = post["posterior"]["tau"].copy()
    tau[0, 3, 2] = np.nan  # one NaN draw: skipped by the mean, not useful
    tau[:, :, 5] = np.nan  # all NaN: NaN mean, P = 0
    for values in (tau, tau.astype("float32")):
        est = values.transpose("chain", "draw", "memory")
        draws = MemoryDraws("tau", est, est, pd.DataFrame())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want_mean = est.mean(("chain", "draw")).to_numpy().astype("float64")
            p, mean = draws.summaries(0.05)
        want_p = (est > 0.05).mean(("chain", "draw")).to_numpy().astype("float64")
        np.testing.assert_array_equal(p, want_p)
        np.testing.assert_array_equal(mean, want_mean)
        assert p.dtype == mean.dtype == np.float64
        assert np.isfinite(mean[2]) and np.isnan(mean[5]) and p[5] == 0


def test_exposures_to_resolve_with_capped_useful_table(monkeypatch) -> None:
    # memories with more useful draws than the bound sums keep only its cheap form
    from cmp_bayes.decision import preposterior

    monkeypatch.setattr(preposterior, "_BOUND_USEFUL", 4)
    tau, utility, start = preposterior_draws(60, 200, seed=21)
    got = preposterior.exposures_to_resolve(tau, tau, 0.05, 1 / 21, start)
    np.testing.assert_array_equal(got, plain_scan(tau, tau, 0.05, 1 / 21, start))
    _, bounds = preposterior._screening(tau, tau, 0.05)
    assert bounds[1].log_w_useful.shape[1] == 4 and not bounds[1].summed.all()


def test_memory_draws_numpy_shares_the_array_when_the_estimand_is_tau() -> None:
    from cmp_bayes.decision.draws import MemoryDraws

    for per_query in (False, True):
        post = synthetic_posterior(n_memories=30, draws=40, per_query=per_query)
        e, t = MemoryDraws.from_posterior(post, "tau").numpy(np.array([4, 1]), 50)
        assert e is t
        e, t = MemoryDraws.from_posterior(post, "utility").numpy(np.array([4, 1]), 50)
        assert e is not t and not np.array_equal(e, t)
