"""The vectorised rank R-hat (rank_rhat / memory_rhat) is arviz_stats' R-hat, element by element."""

from __future__ import annotations

import warnings

import arviz_stats
import numpy as np
import pytest
import xarray as xr

from cmp_bayes.posterior import rhat_kernel
from cmp_bayes.posterior.sampling_checks import memory_rhat, rank_rhat, rhat
from cmp_bayes.testing import synthetic_posterior


def arviz_rank_rhat(values: np.ndarray) -> np.ndarray:
    """arviz_stats.rhat(method="rank") called once per element, as decide did before."""
    flat = values.reshape(-1, *values.shape[-2:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = [
            float(arviz_stats.rhat(x, chain_axis=0, draw_axis=1, method="rank")) for x in flat
        ]
    return np.asarray(out).reshape(values.shape[:-2])


def awkward_draws(shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """Draws with every case the kernel must match: disagreeing chains, ties, constants, NaN."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    x[1] = 0.3  # constant: NaN
    x[2] = np.round(x[2] * 2) / 2  # heavy ties
    x[3, 0] += 1.0  # chains disagree
    x[4, 0, 0] = np.nan  # a NaN draw: NaN
    x[5, 0], x[5, -1] = 1.0, 2.0  # each chain constant, chains differ
    x[6] = rng.integers(0, 2, size=shape[1:])  # binary draws
    x[7] = np.abs(rng.standard_cauchy(size=shape[1:]))  # heavy tail
    pairs = shape[2] // 2
    x[8, :, 0 : 2 * pairs : 2] = x[8, :, 1 : 2 * pairs : 2]  # every draw tied with a neighbour
    return x


@pytest.mark.parametrize(
    "shape", [(12, 2, 500), (12, 4, 101), (12, 3, 7), (12, 2, 4), (12, 2, 1000), (12, 8, 50)]
)
def test_rank_rhat_equals_arviz_stats(shape: tuple[int, int, int]) -> None:
    x = awkward_draws(shape, seed=shape[1] * 1000 + shape[2])
    got, want = rank_rhat(x), arviz_rank_rhat(x)
    assert got.shape == (shape[0],)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10, equal_nan=True)
    assert np.isnan(got[1]) and np.isnan(got[4])
    assert got[3] > 1.01
    assert np.isfinite(got[[0, 2, 3, 6, 7]]).all()


def test_rank_rhat_random_draws_many_seeds() -> None:
    for seed in range(5):
        rng = np.random.default_rng(seed)
        chains, draws = int(rng.integers(2, 6)), int(rng.integers(4, 300))
        x = rng.normal(size=(40, chains, draws)) * rng.uniform(0.1, 3, size=(40, 1, 1))
        x[:, 0] += rng.normal(0, 0.2, size=(40, 1))
        np.testing.assert_allclose(rank_rhat(x), arviz_rank_rhat(x), rtol=0, atol=1e-10)


def test_rank_rhat_blocks_and_shapes() -> None:
    # more elements than one block, and leading dims kept
    rng = np.random.default_rng(7)
    x = rng.normal(size=(rhat_kernel._RHAT_BLOCK + 5, 2, 20))
    x[-1, 1] += 2.0
    got = rank_rhat(x)
    np.testing.assert_allclose(got[-10:], arviz_rank_rhat(x[-10:]), rtol=0, atol=1e-10)
    assert rank_rhat(x[:6].reshape(2, 3, 2, 20)).shape == (2, 3)


def test_too_few_chains_or_draws_give_nan() -> None:
    rng = np.random.default_rng(0)
    assert np.isnan(rank_rhat(rng.normal(size=(3, 1, 100)))).all()
    assert np.isnan(rank_rhat(rng.normal(size=(3, 2, 3)))).all()
    assert rank_rhat(rng.normal(size=(0, 2, 100))).shape == (0,)
    with pytest.raises(ValueError, match="chain, draw"):
        rank_rhat(np.zeros(5))


def test_one_definition_hyperparameters_and_memories() -> None:
    # the Dataset R-hat (hyperparameters, tau of every memory) and the kernel agree
    post = synthetic_posterior(n_memories=40, chains=3, draws=120, stuck_chain=True)
    ds = post["posterior"].to_dataset()
    for name in ("tau_helps_mean", "tau_null_sd", "weight_intercept", "tau"):
        da = ds[name]
        rest = [d for d in da.dims if d not in ("chain", "draw")]
        want = rhat(xr.Dataset({name: da}))[name].transpose(*rest).to_numpy()
        got = rank_rhat(da.transpose(*rest, "chain", "draw").to_numpy())
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10, equal_nan=True)
    assert rank_rhat(ds["tau_helps_mean"].to_numpy()) > 1.01  # the stuck chain shows


def test_memory_rhat_selects_by_id_in_the_given_order() -> None:
    post = synthetic_posterior(n_memories=20, chains=2, draws=100)
    tau = post["posterior"]["tau"].transpose("chain", "draw", "memory")
    ids = np.asarray(tau["memory"].to_numpy())[[7, 2, 11]]
    want = rhat(xr.Dataset({"x": tau.sel(memory=list(ids))}))["x"].to_numpy()
    np.testing.assert_allclose(memory_rhat(tau, ids), want, rtol=0, atol=1e-10, equal_nan=True)
    # the draws' dim order does not matter
    np.testing.assert_allclose(
        memory_rhat(tau.transpose("memory", "draw", "chain"), ids), want, rtol=0, atol=1e-10
    )
    assert memory_rhat(tau, ids[:0]).shape == (0,)
    assert np.isnan(memory_rhat(tau.isel(chain=[0]), ids)).all()
    with pytest.raises(KeyError, match="nope"):
        memory_rhat(tau, np.array(["nope"], dtype=object))

