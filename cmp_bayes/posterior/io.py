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

#: Groups every posterior must have.
REQUIRED_GROUPS: tuple[str, ...] = ("posterior", "identification")
#: Variables the posterior group must hold, each over at least (chain, draw, memory).
REQUIRED_VARS: tuple[str, ...] = ("rho", "tau", "utility")
#: Variables the identification group must hold, over memory.
REQUIRED_IDENTIFICATION: tuple[str, ...] = (
    "status", "exposed", "retrieved", "in_store", "contraction", "mean_shift", "propensity",
)
#: Root attributes every posterior must carry.
REQUIRED_ATTRS: tuple[str, ...] = (
    "cmp_bayes_version", "model_config", "sampler_config", "log_checksum", "log_path",
    "outcome_kind", "created_at",
)
#: Groups with (chain, draw) dims that ``thin`` applies to (sample_stats is kept whole
#: so that no divergence is lost).
THINNED_GROUPS: tuple[str, ...] = ("posterior", "prior", "posterior_predictive", "prior_predictive")
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
        Keep every ``thin``-th draw of the groups in ``THINNED_GROUPS``.
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
    for node in dt.children.values():
        name = node.name
        if name in drop:
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
        The file is not NetCDF/HDF5, or lacks a required group, variable or
        root attribute (the message names the file and what is missing).
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
    check_posterior(dt, str(path))
    return dt


def check_posterior(dt: xr.DataTree, where: str = "posterior") -> None:
    """Raise :class:`PosteriorError` unless ``dt`` follows the posterior contract."""
    if not isinstance(dt, xr.DataTree):
        raise PosteriorError(f"{where}: expected an xarray.DataTree, got {type(dt).__name__}")
    missing = [g for g in REQUIRED_GROUPS if g not in dt.children]
    if missing:
        raise PosteriorError(f"{where}: not a cmp_bayes posterior: missing group(s) {missing}")
    post = dt["posterior"].to_dataset()
    missing = [v for v in REQUIRED_VARS if v not in post.data_vars]
    if missing:
        raise PosteriorError(f"{where}: group 'posterior' lacks variable(s) {missing}")
    for v in REQUIRED_VARS:
        dims = set(post[v].dims)
        if not {"chain", "draw", "memory"} <= dims:
            raise PosteriorError(
                f"{where}: posterior variable '{v}' has dims {post[v].dims}, "
                "expected at least (chain, draw, memory)"
            )
    ident = dt["identification"].to_dataset()
    missing = [v for v in REQUIRED_IDENTIFICATION if v not in ident.data_vars]
    if missing:
        raise PosteriorError(f"{where}: group 'identification' lacks variable(s) {missing}")
    if not np.array_equal(
        np.asarray(ident["memory"].values).astype(str), np.asarray(post["memory"].values).astype(str)
    ):
        raise PosteriorError(f"{where}: 'identification' and 'posterior' disagree on the memory ids")
    missing = [a for a in REQUIRED_ATTRS if a not in dt.attrs]
    if missing:
        raise PosteriorError(f"{where}: root attribute(s) {missing} missing")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
