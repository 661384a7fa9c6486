"""Each memory's rank R-hat of tau and utility, computed once at fit time and stored.

``decide`` checks the R-hat of every memory it is about to forget; at 100k
memories that check was most of its time (about 60 us per memory of 1,000
draws, two sorts each). ``fit`` computes it once for every memory with the
same kernel (:func:`~cmp_bayes.posterior.sampling_checks.memory_rhat`, i.e.
:func:`~cmp_bayes.posterior.rhat_kernel.rank_rhat`) over the draws the
posterior keeps, and writes the optional group ``memory_diagnostics``:

* ``rhat_tau``, ``rhat_utility`` (float64, over ``memory``): the R-hat of the
  memory-level tau and utility draws (``tau`` / ``utility``, or ``tau_memory`` /
  ``utility_memory`` in per-query and gated posteriors; each variable's
  ``variable`` attribute names it);
* ``split_mean_tau``, ``split_mean_utility`` (float64, over (``memory``,
  ``split_chain``)): the mean of those draws in each half-chain that split
  R-hat uses (chain c's first half is split_chain 2c, its second 2c + 1; an odd
  chain's middle draw left out, as split R-hat leaves it out);
* group attributes ``chains`` and ``draws``: the (chain, draw) sizes the values
  were computed on.

A gated fit on a shared store stores fewer draws than it sampled (20 per chain of
1,000 on LoCoMo's 1.19M pairs), and R-hat on 20 draws per chain is noise: 3,198
forgets on LoCoMo were refused at a memory R-hat of 1.125 from a fit whose
hyperparameters passed. There the group is :func:`judged_memory_diagnostics`:
the R-hat of each memory's **conditional mean** given the hyperparameters
(E[tau_m | theta_s, data], from the recovery) over every draw the fit judged.
Given theta the recovery draws exactly and independently, so the chains can
disagree on a memory only through theta, and the conditional mean carries all of
that disagreement. ``split_mean_<e>`` still holds the stored draws' half-chain
means (what :class:`StoredRhat` checks), ``chains`` and ``draws`` the stored sizes,
and the attributes ``fit_draws`` (draws per chain the R-hat saw) and ``statistic``
(``"conditional_mean"``) say so. It also carries ``rhat_tau_relevant`` and
``split_mean_tau_relevant`` (the gated model's delta, ``decide(estimand="relevant")``).

:class:`StoredRhat` reads them back for one posterior variable, and says for
which memories they still describe the draws: the posterior has the recorded
(chain, draw) sizes, and the memory's half-chain means equal the recorded ones
(to 1e-10 relative; draws thinned, subset or edited after the fit fail this, and
those memories' R-hat is computed as before). Rank R-hat does not change when
draws move within a half-chain, but it does when a half-chain's values change,
and a change that leaves every half-chain mean of a memory as it was (to 1e-10)
is not one a fit or a save makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np
import xarray as xr

from cmp_bayes.posterior.contract import (
    MEMORY_DIAGNOSTICS,
    MEMORY_DIAGNOSTICS_ESTIMANDS,
    MEMORY_SUFFIX,
    SPLIT_DIM,
)
from cmp_bayes.posterior.rhat_kernel import rank_rhat
from cmp_bayes.posterior.sampling_checks import memory_rhat

#: Name of the optional group, and the estimands it stores (``rhat_<e>``, ``split_mean_<e>``).
GROUP: Final[str] = MEMORY_DIAGNOSTICS
ESTIMANDS: Final[tuple[str, ...]] = MEMORY_DIAGNOSTICS_ESTIMANDS
#: ``statistic`` attribute of a group whose R-hats are of conditional means over the fit's draws.
CONDITIONAL_MEAN: Final[str] = "conditional_mean"
#: Memories per R-hat call (a (chunk, chain, draw) float64 copy at most ~100 MB at 2 x 1,000 draws).
_CHUNK: Final[int] = 4096
#: Tolerance of the half-chain means' comparison: summation order only (float64 sums).
_RTOL: Final[float] = 1e-10
_ATOL: Final[float] = 1e-12


def split_means(values: np.ndarray) -> np.ndarray:
    """Mean of each half-chain's draws, per memory.

    Parameters
    ----------
    values : numpy.ndarray
        Draws over (chain, draw, memory), any units; at least 2 draws.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(memory, 2 * chain)`` (the draws' units): column 2c is
        chain c's first ``draw // 2`` draws, 2c + 1 its last ``draw // 2``.
    """
    chains, n_draw, n_mem = values.shape
    half = n_draw // 2
    out = np.empty((chains, 2, n_mem))
    # a float64 accumulator streams over float32 draws without a float64 copy of them all
    np.add.reduce(values[:, :half], axis=1, dtype=np.float64, out=out[:, 0])
    np.add.reduce(values[:, n_draw - half :], axis=1, dtype=np.float64, out=out[:, 1])
    out /= half
    return out.reshape(2 * chains, n_mem).T


def memory_variable(post: xr.Dataset, estimand: str) -> str:
    """The posterior variable of ``estimand``'s memory-level draws (``tau`` or ``tau_memory``)."""
    suffixed = estimand + MEMORY_SUFFIX
    return suffixed if suffixed in post else estimand


def memory_diagnostics(post: xr.Dataset) -> xr.Dataset | None:
    """The ``memory_diagnostics`` group of a ``posterior`` group (None when it cannot have one).

    Parameters
    ----------
    post : xarray.Dataset
        The ``posterior`` group as it is saved (after thinning to ``keep_draws``):
        ``tau`` and ``utility`` (or their ``_memory`` forms) over (chain, draw, memory).

    Returns
    -------
    xarray.Dataset or None
        The group described in this module's docstring; None with fewer than 2
        chains or 4 draws (R-hat is not defined: decide skips it anyway) or when
        a variable is missing or not over exactly (chain, draw, memory).
    """
    chains, n_draw = int(post.sizes.get("chain", 0)), int(post.sizes.get("draw", 0))
    if chains < 2 or n_draw < 4:
        return None
    data: dict[str, xr.DataArray] = {}
    means: dict[str, xr.DataArray] = {}
    for estimand in ESTIMANDS:
        name = memory_variable(post, estimand)
        if name not in post or set(post[name].dims) != {"chain", "draw", "memory"}:
            return None
        da = post[name].transpose("chain", "draw", "memory")
        ids = da["memory"].to_numpy()
        attrs = {"variable": name}
        data[f"rhat_{estimand}"] = xr.DataArray(
            memory_rhat(da, ids), dims="memory",
            attrs={**attrs, "description": f"rank-normalized split R-hat of {name} (max of bulk and folded)"},
        )
        means[f"split_mean_{estimand}"] = xr.DataArray(
            split_means(da.to_numpy()), dims=("memory", SPLIT_DIM),
            attrs={**attrs, "description": f"mean of {name} in each half-chain R-hat splits"},
        )
    ds = xr.Dataset({**data, **means}, coords={"memory": post["memory"].to_numpy()})
    ds.attrs.update(chains=chains, draws=n_draw, method="rank")
    return ds


def judged_memory_diagnostics(stored: xr.Dataset, judged: Mapping[str, np.ndarray]) -> xr.Dataset | None:
    """The ``memory_diagnostics`` group of a posterior stored thinner than the fit (module docstring).

    Parameters
    ----------
    stored : xarray.Dataset
        The ``posterior`` group as saved: each variable of ``judged`` over (chain,
        draw, memory), ``draw`` the stored draws.
    judged : mapping of str to numpy.ndarray
        Posterior variable name (``tau_memory``, ``utility_memory``, ``tau_relevant``)
        to its conditional means given each judged draw's hyperparameters, shape
        ``(chain, fit_draw, memory)`` in ``stored``'s memory order (the variable's units).

    Returns
    -------
    xarray.Dataset or None
        ``rhat_<e>`` (R-hat over the judged draws) and ``split_mean_<e>`` (the
        stored draws' half-chain means) for each estimand ``e`` (the variable name
        less ``_memory``); None with fewer than 2 chains or 4 stored draws.
    """
    chains, n_draw = int(stored.sizes.get("chain", 0)), int(stored.sizes.get("draw", 0))
    if chains < 2 or n_draw < 4 or not judged:
        return None
    data: dict[str, xr.DataArray] = {}
    fit_draws = 0
    for name, values in judged.items():
        if values.shape[0] != chains or values.shape[2] != stored.sizes["memory"]:
            raise ValueError(f"{name}: judged draws of shape {values.shape} for {chains} chains and "
                             f"{stored.sizes['memory']} memories")
        fit_draws = int(values.shape[1])
        estimand = name.removesuffix(MEMORY_SUFFIX)
        attrs = {"variable": name}
        out = np.empty(values.shape[2])
        for lo in range(0, out.size, _CHUNK):
            out[lo : lo + _CHUNK] = rank_rhat(np.moveaxis(values[:, :, lo : lo + _CHUNK], 2, 0))
        data[f"rhat_{estimand}"] = xr.DataArray(out, dims="memory", attrs={
            **attrs, "description": (
                f"rank-normalized split R-hat (max of bulk and folded) of E[{name} | hyperparameters, data] "
                "over every draw the fit judged"),
        })
        da = stored[name].transpose("chain", "draw", "memory")
        data[f"split_mean_{estimand}"] = xr.DataArray(
            split_means(da.to_numpy()), dims=("memory", SPLIT_DIM),
            attrs={**attrs, "description": f"mean of the stored {name} in each half-chain R-hat splits"},
        )
    ds = xr.Dataset(data, coords={"memory": stored["memory"].to_numpy()})
    ds.attrs.update(chains=chains, draws=n_draw, method="rank", fit_draws=fit_draws,
                    statistic=CONDITIONAL_MEAN)
    return ds


def with_memory_diagnostics(tree: xr.DataTree) -> xr.DataTree:
    """``tree`` with its ``memory_diagnostics`` group (re)computed from its ``posterior`` (in place).

    A posterior without a memory-level tau and utility over (chain, draw,
    memory), or with fewer than 2 chains or 4 draws, gets none (an old one is
    removed).
    """
    group = memory_diagnostics(tree["posterior"].to_dataset())
    if group is not None:
        tree[GROUP] = xr.DataTree(group)
    elif GROUP in tree.children:
        del tree[GROUP]
    return tree


class StoredRhat:
    """The stored R-hat of one posterior variable, aligned to a draws array's memories.

    Attributes
    ----------
    values : numpy.ndarray
        float64 ``(M,)`` in the order of the draws' ``memory`` (NaN where none was stored).
    """

    def __init__(self, values: np.ndarray, means: np.ndarray, draws: xr.DataArray) -> None:
        self.values = values
        self._means = means
        self._draws = draws
        self._usable: np.ndarray | None = None

    @classmethod
    def read(cls, tree: xr.DataTree, variable: str, draws: xr.DataArray) -> StoredRhat | None:
        """The stored R-hat of ``variable`` for ``draws`` (over chain, draw, memory), or None.

        None when the tree has no ``memory_diagnostics`` group, the group stores
        nothing for ``variable`` (``tau_relevant``, ``workload``), or its recorded
        (chain, draw) sizes are not those of ``draws``.
        """
        if GROUP not in tree.children:
            return None
        group = tree[GROUP].to_dataset()
        estimand = variable.removesuffix(MEMORY_SUFFIX)
        rhat_name, mean_name = f"rhat_{estimand}", f"split_mean_{estimand}"
        if rhat_name not in group or mean_name not in group:
            return None
        if group[rhat_name].attrs.get("variable", variable) != variable:
            return None
        draws = draws.transpose("chain", "draw", "memory")
        chains, n_draw, _ = draws.shape
        recorded = (group.attrs.get("chains"), group.attrs.get("draws"))
        if recorded != (chains, n_draw) or group.sizes.get(SPLIT_DIM) != 2 * chains:
            return None
        index = group.indexes["memory"].get_indexer(draws.indexes["memory"])
        found = index >= 0
        values = np.full(index.size, np.nan)
        means = np.full((index.size, 2 * chains), np.nan)
        values[found] = group[rhat_name].to_numpy()[index[found]]
        means[found] = group[mean_name].transpose("memory", SPLIT_DIM).to_numpy()[index[found]]
        stored = cls(values, means, draws)
        if not found.all():
            stored._usable = np.zeros(index.size, dtype=bool)
            stored._usable[found] = stored._matching()[found]
        return stored

    def _matching(self) -> np.ndarray:
        """Per memory: its draws' half-chain means are the recorded ones."""
        now = split_means(self._draws.to_numpy())
        close = np.isclose(now, self._means, rtol=_RTOL, atol=_ATOL, equal_nan=True)
        return close.all(axis=1)

    def usable(self) -> np.ndarray:
        """bool ``(M,)``: the stored value describes the memory's draws (computed once: one
        pass over every draw, about 0.05 s at 100k memories x 1,000 draws)."""
        if self._usable is None:
            self._usable = self._matching()
        return self._usable

    def lookup(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored R-hat of memories ``index`` (positions in the draws' ``memory``), float64,
        and whether each one describes the memory's draws (bool), both ``(len(index),)``."""
        return self.values[index], self.usable()[index]

    def every_memory(self) -> np.ndarray:
        """float64 ``(M,)``: the R-hat of every memory, stored where usable, else computed
        (:func:`~cmp_bayes.posterior.sampling_checks.memory_rhat`)."""
        out = self.values.copy()
        redo = ~self.usable()
        if redo.any():
            ids = self._draws["memory"].to_numpy()
            out[redo] = memory_rhat(self._draws, ids[redo])
        return out


def stored_tau_rhat(tree: xr.DataTree) -> np.ndarray | None:
    """Every memory's R-hat of its memory-level tau, from the stored group (None without one).

    In the order of the ``posterior`` group's ``memory``; what the group no longer
    describes (:class:`StoredRhat`) is computed.
    """
    post = tree["posterior"].to_dataset()
    name = memory_variable(post, "tau")
    if name not in post or set(post[name].dims) != {"chain", "draw", "memory"}:
        return None
    stored = StoredRhat.read(tree, name, post[name])
    return None if stored is None else stored.every_memory()
