"""Each memory's R-hat stored at fit time (``memory_diagnostics``), and decide reading it.

The stored values are the ones decide would compute (the same kernel over the
same draws), so a posterior decides to the same table with and without them;
a stored value that is deliberately wrong changes that memory's verdict (it is
read), while draws that changed since the fit (edited, thinned) are not
described by it any more, and decide computes their R-hat as before.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from _model_fixtures import simulated_fit

from cmp_bayes.constants import IDENTIFIED
from cmp_bayes.decision import draws as draws_mod
from cmp_bayes.decision import rule
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.rule import DecisionWarning, decide
from cmp_bayes.errors import PosteriorError
from cmp_bayes.posterior.contract import MEMORY_DIAGNOSTICS as GROUP
from cmp_bayes.posterior.health import sampler_health
from cmp_bayes.posterior.io import check_posterior, load_posterior, save_posterior
from cmp_bayes.posterior.memory_diagnostics import (
    StoredRhat,
    split_means,
    with_memory_diagnostics,
)
from cmp_bayes.posterior.sampling_checks import memory_rhat
from cmp_bayes.testing import memory_table, synthetic_posterior


def quiet_decide(post: xr.DataTree, costs: Costs | None = None) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionWarning)
        return decide(post, costs).table


def without_group(post: xr.DataTree) -> xr.DataTree:
    out = post.copy()
    del out[GROUP]
    return out


def forgettable(n: int) -> pd.DataFrame:
    """Identified, well exposed, useless memories: decide forgets every one."""
    return pd.DataFrame(
        {
            "memory_id": [f"m{i}" for i in range(n)],
            "status": IDENTIFIED, "exposed": 8, "retrieved": 3, "in_store": 400,
            "p_useful": 0.0, "rho_mean": 0.05,
        }
    )


@pytest.fixture(scope="module")
def post() -> xr.DataTree:
    return synthetic_posterior(memory_table(120, seed=4), draws=200, seed=4)


# ----------------------------------------------------------------- what is stored


@pytest.mark.parametrize("per_query", [False, True], ids=["memory", "query"])
def test_stored_values_are_the_kernel_on_the_kept_draws(per_query: bool) -> None:
    tree = synthetic_posterior(memory_table(25, seed=1), draws=60, seed=1, per_query=per_query)
    group = tree[GROUP].to_dataset()
    assert group.attrs["chains"] == 2 and group.attrs["draws"] == 60
    assert group.sizes == {"memory": 25, "split_chain": 4}
    suffix = "_memory" if per_query else ""
    for estimand in ("tau", "utility"):
        da = tree["posterior"][estimand + suffix]
        ids = da["memory"].to_numpy()
        assert group[f"rhat_{estimand}"].attrs["variable"] == estimand + suffix
        np.testing.assert_array_equal(group[f"rhat_{estimand}"].to_numpy(), memory_rhat(da, ids))
        halves = da.transpose("memory", "chain", "draw").to_numpy().reshape(25, 4, 30).mean(axis=2)
        np.testing.assert_allclose(group[f"split_mean_{estimand}"].to_numpy(), halves, rtol=1e-12)


def test_split_means_drop_an_odd_chains_middle_draw() -> None:
    x = np.arange(2 * 5 * 1, dtype="float32").reshape(2, 5, 1)  # chain 0: 0..4, chain 1: 5..9
    np.testing.assert_array_equal(split_means(x), [[0.5, 3.5, 5.5, 8.5]])


def test_contract_accepts_with_and_without_and_checks_the_group(post: xr.DataTree) -> None:
    check_posterior(post, "with")
    check_posterior(without_group(post), "without")  # posteriors saved before the group
    assert synthetic_posterior(n_memories=4, draws=20, memory_diagnostics=False).children.keys() == (
        without_group(synthetic_posterior(n_memories=4, draws=20)).children.keys()
    )
    assert GROUP not in synthetic_posterior(n_memories=4, draws=20, chains=1).children
    bad = post.copy()
    bad[GROUP] = xr.DataTree(post[GROUP].to_dataset().isel(memory=slice(1, None)))
    with pytest.raises(PosteriorError, match="'memory_diagnostics' and 'posterior' disagree"):
        check_posterior(bad, "here.nc")
    bad = post.copy()
    bad[GROUP] = xr.DataTree(post[GROUP].to_dataset().drop_attrs())
    with pytest.raises(PosteriorError, match=r"lacks attribute\(s\) \['chains', 'draws'\]"):
        check_posterior(bad, "here.nc")


def test_survives_save_and_load_and_a_thinned_save_leaves_it_out(post, tmp_path) -> None:
    back = load_posterior(save_posterior(post, tmp_path / "p.nc"))
    xr.testing.assert_identical(back[GROUP].to_dataset(), post[GROUP].to_dataset())
    assert StoredRhat.read(back, "tau", back["posterior"]["tau"]).usable().all()
    thinned = load_posterior(save_posterior(post, tmp_path / "thin.nc", thin=2))
    assert GROUP not in thinned.children


def test_a_real_fit_stores_them(tmp_path) -> None:
    tree = simulated_fit()[1]  # the session's shared fit
    group = tree[GROUP].to_dataset()
    tau = tree["posterior"]["tau"]
    assert (group.attrs["chains"], group.attrs["draws"]) == (tau.sizes["chain"], tau.sizes["draw"])
    for estimand in ("tau", "utility"):
        da = tree["posterior"][estimand]
        np.testing.assert_array_equal(
            group[f"rhat_{estimand}"].to_numpy(), memory_rhat(da, da["memory"].to_numpy())
        )
    for costs in (Costs(), Costs(estimand="utility", threshold=0.002), Costs(max_divergence_share=1.0)):
        pd.testing.assert_frame_equal(quiet_decide(tree, costs), quiet_decide(without_group(tree), costs))


# ----------------------------------------------------------------- decide reads them


@pytest.mark.parametrize(
    ("kwargs", "costs"),
    [
        ({}, Costs()),
        ({}, Costs(estimand="utility", threshold=0.002)),
        ({"per_query": True}, Costs()),
        ({}, Costs(capacity=30)),
        ({"pair_model": "gated"}, Costs(estimand="utility", threshold=0.002, store_average="allow")),
    ],
    ids=["tau", "utility", "per-query", "capacity", "gated"],
)
def test_same_table_with_and_without_the_stored_group(kwargs: dict, costs: Costs) -> None:
    tree = synthetic_posterior(memory_table(150, seed=6), draws=100, seed=6, **kwargs)
    if "pair_model" in kwargs:  # the gated form stores the R-hat of its memory-level draws
        assert tree[GROUP]["rhat_utility"].attrs["variable"] == "utility_memory"
    with_it = quiet_decide(tree, costs)
    assert np.isfinite(with_it["rhat"]).sum() > 10  # R-hats were needed
    pd.testing.assert_frame_equal(with_it, quiet_decide(without_group(tree), costs))


def test_a_wrong_stored_value_changes_that_memorys_verdict() -> None:
    tree = synthetic_posterior(forgettable(5), draws=200, seed=3)
    assert (quiet_decide(tree)["action"] == "forget").all()
    group = tree[GROUP].to_dataset()
    group["rhat_tau"][2] = 1.5  # the draws are fine: only the stored number says otherwise
    tree[GROUP] = xr.DataTree(group)
    table = quiet_decide(tree).set_index("memory_id")
    assert list(table["action"]) == ["forget", "forget", "defer", "forget", "forget"]
    assert table.loc["m2", "rhat"] == 1.5
    assert "R-hat of tau for this memory" in table.loc["m2", "reason"]
    # the report's advisory row reads the same stored values
    row = next(c for c in sampler_health(tree).checks if c.name == "R-hat (tau, every memory)")
    assert row.value == "max 1.500; 1 of 5 above"
    # utility has its own stored value: its decisions are unaffected
    costs = Costs(estimand="utility", threshold=0.002)
    assert (quiet_decide(tree, costs)["action"] == "forget").all()


def test_draws_edited_after_the_fit_are_recomputed() -> None:
    tree = synthetic_posterior(forgettable(4), draws=200, seed=5)
    tau = tree["posterior"]["tau"].copy()
    tau.loc[{"chain": 0, "memory": "m1"}] = tau.sel(chain=0, memory="m1") - 0.3  # chains disagree
    tree["posterior"] = tree["posterior"].to_dataset().assign(tau=tau)
    stored = StoredRhat.read(tree, "tau", tree["posterior"]["tau"])
    assert stored is not None and list(stored.usable()) == [True, False, True, True]
    table = quiet_decide(tree).set_index("memory_id")
    assert list(table["action"]) == ["forget", "defer", "forget", "forget"]
    assert table.loc["m1", "rhat"] > 1.01
    pd.testing.assert_frame_equal(quiet_decide(tree), quiet_decide(without_group(tree)))


def test_other_draw_sizes_are_not_described(post: xr.DataTree) -> None:
    thinned = post.copy()
    thinned["posterior"] = xr.DataTree(post["posterior"].to_dataset().isel(draw=slice(None, None, 2)))
    assert StoredRhat.read(thinned, "tau", thinned["posterior"]["tau"]) is None
    pd.testing.assert_frame_equal(quiet_decide(thinned), quiet_decide(without_group(thinned)))
    # and a variable it does not store (the gated model's tau_relevant) is not looked up
    assert StoredRhat.read(post, "tau_relevant", post["posterior"]["tau"]) is None


def test_memories_in_another_order_are_aligned_by_id(post: xr.DataTree) -> None:
    shuffled = post.copy()
    order = np.random.default_rng(0).permutation(post[GROUP].sizes["memory"])
    shuffled[GROUP] = xr.DataTree(post[GROUP].to_dataset().isel(memory=order))
    tau = post["posterior"]["tau"]
    got = StoredRhat.read(shuffled, "tau", tau)
    np.testing.assert_array_equal(got.values, post[GROUP]["rhat_tau"].to_numpy())
    assert got.usable().all()
    assert with_memory_diagnostics(shuffled.copy())[GROUP].identical(post[GROUP])


# ----------------------------------------------------------------- the faster path, same numbers


def test_chunked_preposterior_and_blocked_summaries_give_the_same_table(monkeypatch) -> None:
    from cmp_bayes.decision import preposterior

    tree = synthetic_posterior(memory_table(200, seed=9), draws=100, seed=9)
    want = quiet_decide(tree)
    assert want["exposures_needed"].notna().sum() > 20
    monkeypatch.setattr(rule, "_PREPOSTERIOR_CHUNK", 7)
    monkeypatch.setattr(preposterior, "_SCREEN_BLOCK", 5)
    monkeypatch.setattr(draws_mod, "_SUMMARY_CELLS", 3 * 200 + 1)  # 3 draws a block, one short one
    pd.testing.assert_frame_equal(quiet_decide(tree), want)


def test_identification_in_another_order_gives_the_same_table(post: xr.DataTree) -> None:
    shuffled = post.copy()
    order = np.random.default_rng(1).permutation(post["identification"].sizes["memory"])
    shuffled["identification"] = xr.DataTree(post["identification"].to_dataset().isel(memory=order))
    pd.testing.assert_frame_equal(quiet_decide(shuffled), quiet_decide(post))
    broken = post.copy()
    ident = post["identification"].to_dataset()
    broken["identification"] = xr.DataTree(ident.assign(status=ident["status"].where(ident.memory != "m003", "odd")))
    with pytest.raises(PosteriorError, match="unknown value 'odd'"):
        quiet_decide(broken)
