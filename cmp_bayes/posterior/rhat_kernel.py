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
#: ``block * chains * draws`` 8-byte numbers) stay in cache; 256 was the fastest
#: of 128-4096 at 2 x 500 draws (20% faster than 2048).
_RHAT_BLOCK: int = 256


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
    valid = ~np.isnan(flat).any(axis=(1, 2))
    rows = np.flatnonzero(valid)
    # sorted position j <- folded-order position: the draws below the median,
    # folded, run in reverse sorted order, those above it in sorted order
    fold_map = np.concatenate([np.arange(size // 2)[::-1], np.arange(size // 2, size)])
    for lo in range(0, rows.size, _RHAT_BLOCK):
        block = rows[lo : lo + _RHAT_BLOCK]
        x = flat[block]
        split = np.concatenate([x[:, :, :half], x[:, :, n_draw - half :]], axis=1)
        split = split.reshape(block.size, size)
        order = np.argsort(split, axis=1)
        ordered = np.take_along_axis(split, order, axis=1)
        bulk = _split_rhat(_z_scores(order, ordered, z_table), 2 * chains, half)
        median = 0.5 * (ordered[:, size // 2 - 1] + ordered[:, size // 2])
        # |x - median| of the sorted draws is two sorted runs (falling, then
        # rising): a stable sort merges them in linear time instead of sorting
        folded = np.abs(ordered - median[:, None])[:, fold_map]
        merge = np.argsort(folded, axis=1, kind="stable")
        order_f = np.take_along_axis(order[:, fold_map], merge, axis=1)
        ordered_f = np.take_along_axis(folded, merge, axis=1)
        tail = _split_rhat(_z_scores(order_f, ordered_f, z_table), 2 * chains, half)
        out[block] = np.where(tail > bulk, tail, bulk)
    return out.reshape(lead)


def _z_scores(order: np.ndarray, ordered: np.ndarray, z_table: np.ndarray) -> np.ndarray:
    """Rank z-score of every draw (rows of ``order``/``ordered``: a row's argsort and its
    sorted draws), in the original positions."""
    n_rows, size = ordered.shape
    # without ties a draw's 1-based rank is its sorted position + 1, i.e. k = 2 * rank
    # = 2 * pos + 2 indexes z_table; a tie group spanning sorted positions
    # first..last shares the average rank (first + last + 2) / 2
    k = np.broadcast_to(2 * np.arange(size) + 2, ordered.shape)
    tie = np.zeros((n_rows, size + 1), dtype=np.int8)
    tie[:, 1:size] = ordered[:, 1:] == ordered[:, :-1]  # tie[:, j]: draw j equals draw j - 1
    edges = np.diff(tie.ravel())
    if edges.any():
        # ties are few: rows never join, as tie[:, 0] and tie[:, size] are 0
        first = np.flatnonzero(edges == 1)  # flat index (row * (size + 1) + j) of a group's first
        last = np.flatnonzero(edges == -1)  # ... and of its last draw
        length = last - first + 1
        k_group = (first % (size + 1)) + (last % (size + 1)) + 2
        members = np.repeat(first - np.cumsum(length) + length, length) + np.arange(length.sum())
        row, col = np.divmod(members, size + 1)
        k = k.copy()
        k[row, col] = np.repeat(k_group, length)
    z = np.empty(ordered.shape)
    np.put_along_axis(z, order, z_table[k], axis=1)
    return z


def _split_rhat(z: np.ndarray, chains: int, draws: int) -> np.ndarray:
    """arviz_stats' ``_rhat`` of each row of ``z`` (``chains * draws`` values, chain-major)."""
    z = z.reshape(z.shape[0], chains, draws)
    with np.errstate(divide="ignore", invalid="ignore"):
        # constant draws: 0 / 0, the NaN is the answer (as arviz_stats)
        between = draws * np.var(z.mean(axis=2), axis=1, ddof=1)
        within = np.var(z, axis=2, ddof=1).mean(axis=1)
        return np.sqrt((between / within + draws - 1) / draws)
