"""Save and load posterior DataTrees (NetCDF via h5netcdf), checking the contract.

``save_posterior`` writes atomically (temporary file beside the target, then
rename), with zlib compression, optionally thinned and without some groups.
``load_posterior`` reads the whole file into memory (``xr.load_datatree``, so
the file may be overwritten afterwards) and refuses, with a
:class:`~cmp_bayes.errors.PosteriorError` naming the file and what is missing,
anything that does not follow the posterior contract (docs/model.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import xarray as xr

from cmp_bayes.atomic import write_with
from cmp_bayes.errors import PosteriorError
from cmp_bayes.posterior.contract import (
    BY_QUERY,
    GATED_DIMS,
    GATED_HYPER_VARS,
    GATED_MEMORY_VARS,
    GATED_PAIR_VARS,
    GROUPS,
    HYPER_DIAGNOSTICS,
    MEMORY_DIAGNOSTICS,
    MEMORY_DIAGNOSTICS_ATTRS,
    MEMORY_TEXT,
    PAIR_COORDS,
    PAIR_IDENTIFICATION,
    REQUIRED_ATTRS,
    REQUIRED_GROUPS,
    SAMPLE_DIMS,
    TAU_RELEVANT_GRID,
    compatible,
    fit_attempts,
    is_gated,
    memory_level_vars,
)

#: Groups with (chain, draw) dims that ``thin`` applies to (sample_stats is kept whole
#: so that no divergence is lost).
THINNED_GROUPS: tuple[str, ...] = (
    "posterior", "prior", "posterior_predictive", "prior_predictive", "log_likelihood",
)
#: Groups ``drop_groups`` may not remove.
KEPT_GROUPS: tuple[str, ...] = REQUIRED_GROUPS


def save_posterior(
    dt: xr.DataTree, path: str | Path, thin: int = 1, drop_groups: Iterable[str] = ()
) -> Path:
    """Write ``dt`` to ``path`` (NetCDF4, h5netcdf, zlib level 4) atomically.

    Parameters
    ----------
    dt : xarray.DataTree
        A posterior following the contract (checked before writing).
    path : str or Path
        Target file; its folder is created.
    thin : int
        Keep every ``thin``-th draw of the groups in ``THINNED_GROUPS``. A thinned
        file leaves out the ``memory_diagnostics`` and ``hyper_diagnostics`` groups:
        their R-hats describe the draws before thinning (decide recomputes them from
        the kept draws).
    drop_groups : iterable of str
        Groups to leave out (e.g. ``("prior_predictive", "posterior_predictive")``);
        ``posterior`` and ``identification`` cannot be dropped.

    Returns
    -------
    Path
    """
    path = Path(path)
    drop = set(drop_groups)
    if drop & set(KEPT_GROUPS):
        raise PosteriorError(f"cannot drop required group(s) {sorted(drop & set(KEPT_GROUPS))}")
    if int(thin) < 1:
        raise PosteriorError(f"thin must be >= 1, got {thin}")
    check_posterior(dt, str(path))
    groups: dict[str, xr.Dataset] = {}
    for name, node in dt.children.items():  # a child's key is its name (node.name is str | None)
        if name in drop or (thin > 1 and name in (MEMORY_DIAGNOSTICS, HYPER_DIAGNOSTICS)):
            continue
        ds = node.to_dataset()
        if thin > 1 and name in THINNED_GROUPS and "draw" in ds.dims:
            ds = ds.isel(draw=slice(None, None, int(thin)))
        groups[name] = ds
    out = xr.DataTree.from_dict({"/": xr.Dataset(attrs=dict(dt.attrs)), **groups})
    if thin > 1:
        out.attrs["saved_thin"] = int(thin) * int(dt.attrs.get("saved_thin", 1))
    encoding = {
        f"/{name}": {
            v: {"zlib": True, "complevel": 4}
            for v in ds.data_vars
            if ds[v].dtype.kind in "fiub" and ds[v].ndim > 0
        }
        for name, ds in groups.items()
    }
    return write_with(path, lambda tmp: out.to_netcdf(tmp, engine="h5netcdf", encoding=encoding))


def load_posterior(path: str | Path) -> xr.DataTree:
    """Load a posterior saved by :func:`save_posterior` (fully into memory).

    Raises
    ------
    PosteriorError
        The file is not NetCDF/HDF5, was written by an incompatible cmp_bayes
        version (:func:`check_version`), or lacks a group, variable or root
        attribute of the contract (the message names the file and what is missing).
    FileNotFoundError
        No such file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such posterior file")
    try:
        dt = xr.load_datatree(path, engine="h5netcdf")
    except (OSError, ValueError, TypeError) as exc:
        raise PosteriorError(f"{path}: not a readable NetCDF posterior ({_short(exc)})") from exc
    # the version first: a file from another version is refused for that reason, not
    # for whatever part of the contract changed since
    check_version(dt, str(path))
    check_posterior(dt, str(path))
    return dt


def as_posterior(posterior: xr.DataTree | str | Path) -> xr.DataTree:
    """A DataTree as given, or the posterior :func:`load_posterior` reads from a path.

    The one loader behind every function that takes "a posterior or its file"
    (decide, recommend_exposures, report, evaluate). A DataTree is not checked
    here: each reader checks the groups it reads, with its own message.
    """
    if isinstance(posterior, xr.DataTree):
        return posterior
    return load_posterior(posterior)


def check_posterior(dt: xr.DataTree, where: str = "posterior") -> None:
    """Raise :class:`PosteriorError` unless ``dt`` follows the posterior contract.

    Checks every group of :data:`cmp_bayes.posterior.contract.GROUPS` (the
    required ones must exist; the others, when present, must hold their
    variables), each variable's dims in the memory-level or per-query form
    (``by`` root attribute, else a ``query`` dim on ``posterior.tau``), the
    memory ids of ``identification`` and ``memory_diagnostics`` against ``posterior``
    (the latter with its ``chains``, ``draws`` attributes), the optional
    ``memory_text`` coordinate (along ``memory`` only), and the root
    attributes. The message names ``where`` (the file) and everything missing.
    """
    if not isinstance(dt, xr.DataTree):
        raise PosteriorError(f"{where}: expected an xarray.DataTree, got {type(dt).__name__}")
    missing = [g for g in REQUIRED_GROUPS if g not in dt.children]
    if missing:
        raise PosteriorError(f"{where}: not a cmp_bayes posterior: missing group(s) {missing}")
    post = dt["posterior"].to_dataset()
    by = str(dt.attrs.get("by") or ("query" if "query" in getattr(post.get("tau"), "dims", ()) else "memory"))
    problems: list[str] = []
    if is_gated(dt.attrs):
        problems = _gated_problems(dt, post)
    for group in GROUPS if not is_gated(dt.attrs) else ():
        if group.name not in dt.children:
            continue
        ds = dt[group.name].to_dataset()
        lacking = [v for v in group.variables if v not in ds.data_vars]
        if group.name == "posterior" and by == BY_QUERY:
            lacking += [v for v in memory_level_vars(by) if v not in ds.data_vars]
        if lacking:
            problems.append(f"group '{group.name}' lacks variable(s) {lacking}")
            continue
        want = set(group.query_dims if by == BY_QUERY else group.dims)
        for v in group.variables:
            if not want <= set(ds[v].dims):
                problems.append(
                    f"{group.name} variable '{v}' has dims {ds[v].dims}, expected at least {tuple(sorted(want))}"
                )
    if problems:
        raise PosteriorError(f"{where}: " + "; ".join(problems))
    ident = dt["identification"].to_dataset()
    if not np.array_equal(
        np.asarray(ident["memory"].values).astype(str), np.asarray(post["memory"].values).astype(str)
    ):
        raise PosteriorError(f"{where}: 'identification' and 'posterior' disagree on the memory ids")
    if "log_likelihood" in dt.children:
        _check_log_likelihood(dt, post, where)
    if MEMORY_DIAGNOSTICS in dt.children:
        _check_memory_diagnostics(dt, post, where)
    if MEMORY_TEXT in post.coords and post[MEMORY_TEXT].dims != ("memory",):
        raise PosteriorError(
            f"{where}: posterior coordinate '{MEMORY_TEXT}' must be along ('memory',), "
            f"has {post[MEMORY_TEXT].dims}"
        )
    missing = [a for a in REQUIRED_ATTRS if a not in dt.attrs]
    if missing:
        lead = "not a cmp_bayes posterior: " if "cmp_bayes_version" in missing else ""
        raise PosteriorError(f"{where}: {lead}root attribute(s) {missing} missing")
    fit_attempts(dt.attrs, where)  # optional, but when present it must parse


def _gated_problems(dt: xr.DataTree, post: xr.Dataset) -> list[str]:
    """What a gated pair-model posterior lacks (root attribute ``pair_model = "gated"``)."""
    problems: list[str] = []
    pair_dims = set(GATED_DIMS["posterior"])
    mem_dims = {*SAMPLE_DIMS, "memory"}
    lacking = [v for v in (*GATED_PAIR_VARS, *GATED_MEMORY_VARS, *GATED_HYPER_VARS) if v not in post.data_vars]
    if lacking:
        problems.append(f"gated posterior lacks variable(s) {lacking}")
    for v in GATED_PAIR_VARS:
        if v in post and set(post[v].dims) != pair_dims:
            problems.append(f"posterior variable '{v}' has dims {post[v].dims}, expected {tuple(sorted(pair_dims))}")
    for v in GATED_MEMORY_VARS:
        if v in post and set(post[v].dims) != mem_dims:
            problems.append(f"posterior variable '{v}' has dims {post[v].dims}, expected {tuple(sorted(mem_dims))}")
    for c in PAIR_COORDS:
        if c not in post.coords or post[c].dims != ("pair",):
            problems.append(f"posterior lacks coordinate '{c}' along ('pair',)")
    for group in GROUPS:
        if group.name == "posterior" or group.name not in dt.children:
            continue
        ds = dt[group.name].to_dataset()
        want = set(GATED_DIMS.get(group.name, group.dims))
        variables = GATED_PAIR_VARS if group.name == "prior" else group.variables
        for v in variables:
            if v not in ds.data_vars:
                problems.append(f"group '{group.name}' lacks variable '{v}'")
            elif not want <= set(ds[v].dims):
                problems.append(
                    f"{group.name} variable '{v}' has dims {ds[v].dims}, expected at least {tuple(sorted(want))}"
                )
    if PAIR_IDENTIFICATION in dt.children:
        pid = dt[PAIR_IDENTIFICATION].to_dataset()
        if "status" not in pid.data_vars or pid["status"].dims != ("pair",):
            problems.append(f"group '{PAIR_IDENTIFICATION}' lacks variable 'status' over ('pair',)")
    if TAU_RELEVANT_GRID in dt.children:
        grid = dt[TAU_RELEVANT_GRID].to_dataset()
        if "pmf" not in grid.data_vars or grid["pmf"].dims != ("memory", "tau_cell"):
            problems.append(f"group '{TAU_RELEVANT_GRID}' lacks variable 'pmf' over ('memory', 'tau_cell')")
        elif not np.array_equal(np.asarray(grid["memory"].values).astype(str),
                                np.asarray(post["memory"].values).astype(str)):
            problems.append(f"group '{TAU_RELEVANT_GRID}' and 'posterior' disagree on the memory ids")
        missing = [c for c in ("tau_cell_lower", "tau_cell_upper", "tau_cell_point") if c not in grid.coords]
        if missing:
            problems.append(f"group '{TAU_RELEVANT_GRID}' lacks coordinate(s) {', '.join(missing)}")
        if grid.attrs.get("within_cell") not in ("uniform", "point"):
            problems.append(
                f"group '{TAU_RELEVANT_GRID}' has within_cell={grid.attrs.get('within_cell')!r}, "
                "not 'uniform' or 'point'"
            )
    return problems


def _check_log_likelihood(dt: xr.DataTree, post: xr.Dataset, where: str) -> None:
    """The pointwise group's memories are posterior memories, its draws the posterior's."""
    ll = dt["log_likelihood"].to_dataset()
    known = set(np.asarray(post["memory"].values).astype(str))
    stray = [m for m in np.asarray(ll["memory"].values).astype(str) if m not in known]
    if stray:
        raise PosteriorError(
            f"{where}: 'log_likelihood' has memory id(s) the posterior lacks, e.g. {stray[0]!r}"
        )
    shape = {d: ll.sizes[d] for d in SAMPLE_DIMS}
    if shape != {d: post.sizes[d] for d in SAMPLE_DIMS}:
        raise PosteriorError(
            f"{where}: 'log_likelihood' has {shape} draws, the posterior "
            f"{ {d: post.sizes[d] for d in SAMPLE_DIMS} }"
        )


def _check_memory_diagnostics(dt: xr.DataTree, post: xr.Dataset, where: str) -> None:
    """The stored per-memory diagnostics cover the posterior's memories and say what draws
    they were computed on (sizes other than the posterior's are allowed: readers ignore them)."""
    group = dt[MEMORY_DIAGNOSTICS]
    if not np.array_equal(
        np.asarray(group["memory"].values).astype(str), np.asarray(post["memory"].values).astype(str)
    ):
        raise PosteriorError(f"{where}: '{MEMORY_DIAGNOSTICS}' and 'posterior' disagree on the memory ids")
    lacking = [a for a in MEMORY_DIAGNOSTICS_ATTRS if a not in group.attrs]
    if lacking:
        raise PosteriorError(f"{where}: group '{MEMORY_DIAGNOSTICS}' lacks attribute(s) {lacking}")


def check_version(dt: xr.DataTree, where: str = "posterior") -> None:
    """Refuse a posterior written by a cmp_bayes version this one cannot read.

    Compatibility is :func:`cmp_bayes.posterior.contract.compatible` (same
    major; before 1.0 the same minor). A tree without the attribute is left to
    :func:`check_posterior` (it is not a cmp_bayes posterior at all).
    """
    from cmp_bayes.version import __version__

    if "cmp_bayes_version" not in dt.attrs:
        return
    written, running = str(dt.attrs["cmp_bayes_version"]), str(__version__)
    if not compatible(written, running):
        raise PosteriorError(
            f"{where}: written by cmp_bayes {written}, which this cmp_bayes {running} cannot read "
            "(the posterior contract may differ); refit the log with this version (cmp-bayes fit LOG)"
        )


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
