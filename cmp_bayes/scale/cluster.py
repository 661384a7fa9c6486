"""Where Dask work runs: the local threaded scheduler or a ``dask.distributed`` cluster.

One function turns the user's ``scheduler`` setting into the ``scheduler=``
argument of ``dask.compute``. A cluster given by address is connected for the
duration of one computation and disconnected afterwards (the cluster itself
keeps running: it is the user's). Workers must be able to import
``cmp_bayes`` and read the log's files at the same path as the client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from cmp_bayes.errors import ConfigError

#: names of dask's single-machine schedulers
LOCAL_SCHEDULERS: tuple[str, ...] = ("threads", "synchronous", "processes")


def is_address(scheduler: str) -> bool:
    """Whether ``scheduler`` names a ``dask.distributed`` scheduler (``tcp://host:port``, ...)."""
    return "://" in scheduler or (":" in scheduler and scheduler.rsplit(":", 1)[1].isdigit())


@contextlib.contextmanager
def dask_scheduler(scheduler: object | None = None, timeout: float = 30.0) -> Iterator[Any]:
    """Yield the ``scheduler=`` argument for ``dask.compute``.

    Parameters
    ----------
    scheduler : None, str or distributed.Client
        ``None`` or ``"threads"``: dask's local threaded scheduler (one thread
        per core); ``"synchronous"`` (one thread, for debugging);
        ``"processes"``; an address such as ``"tcp://10.0.0.5:8786"``: connect a
        ``distributed.Client`` to that scheduler for the duration of the block;
        a ``distributed.Client``: used as is (not closed).
    timeout : float
        Seconds to wait when connecting to an address.

    Raises
    ------
    ConfigError
        For an unknown setting, or an address nobody answers at.
    """
    if scheduler is None:
        yield _local_get("threads")
        return
    if isinstance(scheduler, str):
        if scheduler in LOCAL_SCHEDULERS:
            yield _local_get(scheduler)
            return
        if scheduler in ("sync", "single-threaded"):
            yield _local_get("synchronous")
            return
        if not is_address(scheduler):
            raise ConfigError(
                f"scheduler must be one of {LOCAL_SCHEDULERS} or a dask.distributed address "
                f"such as 'tcp://host:8786', not {scheduler!r}"
            )
        client = _connect(scheduler, timeout)
        try:
            yield client
        finally:
            client.close()
        return
    if _is_client(scheduler):
        yield scheduler
        return
    raise ConfigError(f"scheduler must be None, a name, an address or a Client, not {type(scheduler).__name__}")


def _local_get(name: str) -> Any:
    """The ``get`` function of one of dask's local schedulers.

    Handing ``dask.compute`` the function rather than its name skips dask's
    check for a default ``distributed`` client, whose first use imports
    ``distributed`` (about half a second per process).
    """
    if name == "threads":
        from dask.threaded import get

        return get
    if name == "synchronous":
        from dask.local import get_sync

        return get_sync
    from dask.multiprocessing import get as get_processes

    return get_processes


def _connect(address: str, timeout: float) -> Any:
    try:
        from distributed import Client
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "a scheduler address needs dask.distributed: pip install 'cmp-bayes[scale]'"
        ) from exc
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"cannot connect to the dask scheduler at {address}: {exc}") from None


def _is_client(obj: object) -> bool:
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, Client)
