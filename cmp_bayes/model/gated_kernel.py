"""The gated model's marginal likelihood as one fused PyTensor Op (value and gradient in one pass).

The graph form (a (pairs x G) log per pair, a scatter to memories, a log-sum over
the grid) made about a dozen passes over a (pairs x G) array per gradient: 0.055 s
a leapfrog step on all ten LoCoMo conversations (31,434 pairs x 121 grid points),
nearly all of a fit's time. This Op computes, for every memory m with pairs i,

    value = sum_m log sum_g prior_g prod_i A_ig,
    A_ig  = p_i L_ig + (1 - p_i) n_i,      n_i = sum_h L_ih q_h / sum_h F_ih q_h,

(``L`` the pairs' grid likelihoods, row maximum 1; ``F`` their feasibility rows, the
share of baseline nodes with b + tau_h in [0, 1], all ones when the likelihood clips;
``q`` the null pmf; ``prior`` the pmf of delta) and its gradient with respect to
``p``, ``q`` and ``prior`` in the same call. An irrelevant pair's null effect is
the null restricted to the effects its baseline allows (renormalised), as the
memory-level model's prior is: unrenormalised, the null's mass beyond 1 - b at a
question whose controls always succeed counted as evidence against any null width,
and on LoCoMo's 7,206 such randomized pairs that pressed the null's sd from its
prior's 0.015 to 0.0003 (1,057 nats between the two) and took the gate with it. The
relevant branch ``p L_ig`` is not renormalised: a question with no room for an
effect of delta is evidence against relevance there. All of it in the
same call, in probability space: a product per memory instead of a log per pair
(rescaled when it nears underflow), and the distinct likelihood rows stored once
(pairs with the same arms share a row: 1,083 rows for those 31,434 pairs).

Registered for PyTensor's numba backend (what nutpie compiles), so sampling
chains run it without Python's lock; the C backend calls the same kernel from
``perform``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op
from pytensor.tensor.variable import TensorVariable

#: Floor of a pair's term A (a likelihood row whose every value underflows).
FLOOR: float = 1e-300
#: A memory's running product is rescaled when its largest value falls below this.
_RESCALE: float = 1e-150


@numba.njit(cache=False, nogil=True)
def memory_product(
    prod: np.ndarray, lik: np.ndarray, null: np.ndarray, unit: np.ndarray, p: np.ndarray, a: int, b: int,
) -> float:
    """Multiply ``prod`` (G,) by ``max(p_i L_ig + (1 - p_i) n_i, FLOOR)`` for pairs a..b-1.

    Rescaled whenever its largest value falls below ``_RESCALE``; returns the log of
    what the rescaling divided out (``prod`` times its exponential is the product).
    Shared by the marginal likelihood here and the recovery's
    (:mod:`cmp_bayes.model.gated_recover_kernel`).
    """
    n_grid = prod.size
    log_scale = 0.0
    for i in range(a, b):
        u, pi = unit[i], p[i]
        base = (1.0 - pi) * null[u]
        top = 0.0
        for g in range(n_grid):
            term = max(pi * lik[u, g] + base, FLOOR)
            prod[g] *= term
            top = max(top, prod[g])
        if top < _RESCALE:
            # every term is at most 1, so the product only falls: scale it back up
            for g in range(n_grid):
                prod[g] /= top
            log_scale += np.log(top)
    return log_scale


@numba.njit(cache=False, nogil=True)
def gated_marginal_kernel(
    lik: np.ndarray, feas: np.ndarray, unit: np.ndarray, starts: np.ndarray, p: np.ndarray, q: np.ndarray,
    prior: np.ndarray,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Value and gradient of the gated marginal log-likelihood.

    Parameters
    ----------
    lik : ndarray, shape (U, G)
        Distinct pair likelihood rows on the grid (each row's maximum 1).
    feas : ndarray, shape (U, G)
        Each row's feasibility on the grid (in [0, 1]; ones for a clipped likelihood).
    unit : ndarray of int64, shape (N,)
        Each pair's row of ``lik``; pairs grouped by memory.
    starts : ndarray of int64, shape (S + 1,)
        Start of each memory's pairs in ``unit`` and ``p``, and N at the end.
    p : ndarray, shape (N,)
        Each pair's gate probability.
    q, prior : ndarray, shape (G,)
        The null pmf and delta's pmf.

    Returns
    -------
    (value, d value / d p (N,), d value / d q (G,), d value / d prior (G,))
    """
    n_units, n_grid = lik.shape
    null = np.empty(n_units)
    norm = np.empty(n_units)
    for u in range(n_units):
        s, f = 0.0, 0.0
        for g in range(n_grid):
            s += lik[u, g] * q[g]
            f += feas[u, g] * q[g]
        norm[u] = max(f, FLOOR)
        null[u] = s / norm[u]
    dp = np.zeros(p.size)
    d_null = np.zeros(n_units)
    d_prior = np.zeros(n_grid)
    prod = np.empty(n_grid)
    weight = np.empty(n_grid)
    total = 0.0
    for s in range(starts.size - 1):
        a, b = starts[s], starts[s + 1]
        prod[:] = 1.0
        log_scale = memory_product(prod, lik, null, unit, p, a, b)
        z = 0.0
        for g in range(n_grid):
            z += prior[g] * prod[g]
        if z <= FLOOR:
            # the floor binds: the value is constant there, and so has no gradient
            total += np.log(FLOOR) + log_scale
            continue
        total += np.log(z) + log_scale
        for g in range(n_grid):
            weight[g] = prior[g] * prod[g] / z
            d_prior[g] += prod[g] / z
        for i in range(a, b):
            u, pi = unit[i], p[i]
            nu = null[u]
            base = (1.0 - pi) * nu
            sp, sn = 0.0, 0.0
            for g in range(n_grid):
                term = pi * lik[u, g] + base
                if term > FLOOR:
                    r = weight[g] / term
                    sp += r * (lik[u, g] - nu)
                    sn += r
            dp[i] = sp
            d_null[u] += sn * (1.0 - pi)
    d_q = np.zeros(n_grid)
    for u in range(n_units):
        if d_null[u] != 0.0:
            # d n_u / d q_g = (L_ug - n_u F_ug) / sum_h F_uh q_h
            for g in range(n_grid):
                d_q[g] += d_null[u] * (lik[u, g] - null[u] * feas[u, g]) / norm[u]
    return total, dp, d_q, d_prior


class GatedMarginal(Op):
    """``GatedMarginal()(lik, feas, unit, starts, p, q, prior)`` -> (value, dp, dq, dprior).

    Only the first output is meant for graphs; the other three are its gradient,
    which ``pullback`` reads back (no second derivatives).
    """

    __props__ = ()

    def make_node(self, *inputs: Any) -> Apply:
        lik, feas, unit, starts, p, q, prior = (pt.as_tensor_variable(x) for x in inputs)
        outputs = [pt.dscalar(), pt.dvector(), pt.dvector(), pt.dvector()]
        return Apply(self, [lik, feas, unit, starts, p, q, prior], outputs)

    def perform(self, node: Apply, inputs: Sequence[Any], output_storage: list) -> None:
        value, dp, dq, dprior = gated_marginal_kernel(*inputs)
        output_storage[0][0] = np.asarray(value)
        output_storage[1][0] = dp
        output_storage[2][0] = dq
        output_storage[3][0] = dprior

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        data = [[False] * 4 for _ in range(4)]
        return [*data, *([[True] * 4] * 3)]

    def pullback(
        self, inputs: Sequence[Variable], outputs: Sequence[Variable], cotangents: Sequence[Variable],
    ) -> list[Variable]:
        if any(not isinstance(g.type, DisconnectedType) for g in cotangents[1:]):
            raise NotImplementedError("GatedMarginal has no second derivatives")
        g = cast(TensorVariable, cotangents[0])
        grads = [g * cast(TensorVariable, o) for o in outputs[1:]]
        return [*(disconnected_type() for _ in range(4)), *grads]


def gated_marginal(
    lik: np.ndarray, feas: np.ndarray, unit: np.ndarray, starts: np.ndarray,
    p: TensorVariable, q: TensorVariable, prior: TensorVariable,
) -> TensorVariable:
    """The summed log marginal likelihood over memories (symbolic scalar); see the module docstring."""
    outputs = cast(list[TensorVariable], GatedMarginal()(
        np.ascontiguousarray(lik, dtype=np.float64), np.ascontiguousarray(feas, dtype=np.float64),
        np.asarray(unit, dtype=np.int64), np.asarray(starts, dtype=np.int64), p, q, prior,
    ))
    return outputs[0]


def distinct_rows(lik: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``lik`` (U, G) and each row's index into them (N,)."""
    rows, unit = np.unique(lik, axis=0, return_inverse=True)
    return np.ascontiguousarray(rows), unit.reshape(-1).astype(np.int64)


def _register_numba() -> None:
    """Give PyTensor's numba backend a direct implementation (else it runs ``perform`` in object mode)."""
    try:
        from pytensor.link.numba.dispatch.basic import (
            numba_njit,
            register_funcify_default_op_cache_key,
        )
    except ImportError:  # another PyTensor layout: object mode still works, only slower
        return

    @register_funcify_default_op_cache_key(GatedMarginal)
    def _numba_gated(op: GatedMarginal, node: Apply | None = None, **kwargs: object) -> object:
        kernel = gated_marginal_kernel

        @numba_njit
        def gated(lik, feas, unit, starts, p, q, prior):  # type: ignore[no-untyped-def]
            value, dp, dq, dprior = kernel(lik, feas, unit, starts, p, q, prior)
            return np.asarray(value), dp, dq, dprior

        return gated


_register_numba()
