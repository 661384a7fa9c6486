"""The rank-normalized split R-hat in numpy, vectorised over many memories at once.

The same computation as ``arviz_stats.rhat(method="rank")`` (the larger of the
bulk and folded rank-normalized split R-hat, Vehtari et al. 2021), step for
step, for draws shaped (..., chain, draw); tests/test_rhat.py holds the two
equal to 1e-10. :func:`cmp_bayes.posterior.sampling_checks.memory_rhat` uses it
for the memories decide is about to forget.
"""

from __future__ import annotations

import numpy as np

#: Memories per block of :func:`rank_rhat`: its temporaries (about 10 arrays of
#: ``block * chains * draws`` 8-byte numbers) stay in cache; with the flat-index
#: gathers 64-128 were the fastest of 64-1024 at 2 x 500 draws (about 5% ahead
#: of 256, 20% ahead of 1024; measured on 2 shared cores).
_RHAT_BLOCK: int = 128


#: Blom's offset in the rank back-transformation (as arviz_stats).
_BLOM_C: float = 3 / 8


def rank_rhat(values: np.ndarray) -> np.ndarray:
    """:func:`rhat` of many elements at once, in numpy: ``arviz_stats.rhat(method="rank")``.

    The same computation as arviz_stats' ``_rhat_rank`` (Vehtari et al. 2021):
    split each chain in halves (the middle draw of an odd chain dropped),
    rank-normalize all split draws of an element together (average ranks for
    ties, Blom's back-transformation, the normal quantile), take the
    between/within-chain R-hat of those z-scores, and again of the z-scores of
    the draws folded about their median; the result is the larger of the two,
    with Python's ``max`` semantics (the bulk value unless the folded one is
    greater). arviz_stats calls its kernel once per element from Python; here
    one sort per block of elements serves them all, and since a rank's
    normal quantile depends only on the rank, each distinct quantile is
    computed once.

    Parameters
    ----------
    values : numpy.ndarray
        Draws, shape ``(..., chain, draw)`` (any units).

    Returns
    -------
    numpy.ndarray
        float64, shape ``values.shape[:-2]`` (dimensionless). NaN where an
        element's draws are constant or contain a NaN, or where there are
        fewer than 2 chains or 4 draws (as arviz_stats).
    """
    values = np.asarray(values, dtype="float64")
    if values.ndim < 2:
        raise ValueError(f"rank_rhat needs (..., chain, draw) draws, got shape {values.shape}")
    lead, (chains, n_draw) = values.shape[:-2], values.shape[-2:]
    flat = values.reshape(-1, chains, n_draw)
    out = np.full(flat.shape[0], np.nan)
    if chains < 2 or n_draw < 4 or flat.shape[0] == 0:
        return out.reshape(lead)
    half = n_draw // 2
    size = 2 * chains * half
    # z-score of every possible average rank r = k / 2, k = 2..2 * size, as
    # arviz_stats' _backtransform_ranks + norm.ppf compute it for a rank array
    from scipy import stats

    ranks = np.arange(2 * size + 1) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        z_table = stats.norm.ppf((ranks - _BLOM_C) / (size - 2 * _BLOM_C + 1))
    # sorted position j <- folded-order position: the draws below the median,
    # folded, run in reverse sorted order, those above it in sorted order
    fold_map = np.concatenate([np.arange(size // 2)[::-1], np.arange(size // 2, size)])
    for lo in range(0, flat.shape[0], _RHAT_BLOCK):
        x = flat[lo : lo + _RHAT_BLOCK]
        rows = x.shape[0]
        # row offsets into the flattened block: gathers and scatters by flat index
        # are several times faster than take_along_axis / put_along_axis
        offsets = (np.arange(rows) * size)[:, None]
        split = np.concatenate([x[:, :, :half], x[:, :, n_draw - half :]], axis=1)
        split = split.reshape(rows, size)
        order = np.argsort(split, axis=1)
        ordered = split.ravel()[order + offsets]
        bulk = _split_rhat(_z_scores(order, ordered, z_table, offsets), 2 * chains, half)
        median = 0.5 * (ordered[:, size // 2 - 1] + ordered[:, size // 2])
        # |x - median| of the sorted draws is two sorted runs (falling, then
        # rising): a stable sort merges them in linear time instead of sorting
        # np.take keeps rows C-contiguous (x[:, idx] comes out column-major)
        folded = np.take(np.abs(ordered - median[:, None]), fold_map, axis=1)
        merge = np.argsort(folded, axis=1, kind="stable") + offsets
        order_f = np.take(order, fold_map, axis=1).ravel()[merge]
        ordered_f = folded.ravel()[merge]
        tail = _split_rhat(_z_scores(order_f, ordered_f, z_table, offsets), 2 * chains, half)
        block = np.where(tail > bulk, tail, bulk)
        # a NaN draw makes the element's R-hat NaN (as arviz_stats), whatever it sorted to
        block[np.isnan(split).any(axis=1)] = np.nan
        out[lo : lo + rows] = block
    return out.reshape(lead)


def _z_scores(
    order: np.ndarray, ordered: np.ndarray, z_table: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """Rank z-score of every draw (rows of ``order``/``ordered``: a row's argsort and its
    sorted draws), in the original positions; ``offsets`` (rows, 1): row * size."""
    n_rows, size = ordered.shape
    starts = np.ones((n_rows, size), dtype=bool)  # sorted draw j starts a group of equal draws
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=starts[:, 1:])
    if not starts.all():
        # a tie group spanning sorted positions first..last shares the average
        # 1-based rank (first + last + 2) / 2, i.e. k = 2 * first + length + 1
        # indexes z_table; groups never span rows, as each row's draw 0 starts one
        first = np.flatnonzero(starts)
        length = np.diff(first, append=n_rows * size)
        z_sorted = z_table[np.repeat(2 * (first % size) + length + 1, length)]
    else:
        # without ties a draw's 1-based rank is its sorted position + 1: k = 2 * pos + 2
        z_sorted = z_table[2 * np.arange(size) + 2]  # broadcast over the rows
    z = np.empty(n_rows * size)
    z[order + offsets] = z_sorted.reshape(-1, size)
    return z.reshape(n_rows, size)


def _split_rhat(z: np.ndarray, chains: int, draws: int) -> np.ndarray:
    """arviz_stats' ``_rhat`` of each row of ``z`` (``chains * draws`` values, chain-major)."""
    z = z.reshape(z.shape[0], chains, draws)
    with np.errstate(divide="ignore", invalid="ignore"):
        # constant draws: 0 / 0, the NaN is the answer (as arviz_stats)
        means = z.mean(axis=2)
        between = draws * np.var(means, axis=1, ddof=1)
        # np.var(z, axis=2, ddof=1) in two passes instead of its four
        dev = z - means[:, :, None]
        within = np.einsum("ijk,ijk->ij", dev, dev).mean(axis=1) / (draws - 1)
        return np.sqrt((between / within + draws - 1) / draws)
