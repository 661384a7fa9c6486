"""Progress bars on long work: completed / total, rate and time left, on stderr.

The bars are drawn with `rich <https://rich.readthedocs.io>`_: PyMC already
depends on it and draws its own sampling bar with it, so the package needs no
new dependency and its bars look like the ones beside them. rich is imported
only when a bar is actually drawn, so ``import cmp_bayes`` stays cheap.

When a bar draws. Only when stderr is a terminal (``rich.console.Console(
stderr=True).is_terminal``: a TTY, or ``FORCE_COLOR`` / ``TTY_COMPATIBLE=1``)
and nothing asked for quiet. Piped or redirected stderr, a notebook, a test's
captured stream or ``--quiet`` write nothing at all, so a log of a batch job
holds only its warnings and errors. Quiet comes from an explicit argument
(``quiet=True``), else from the process-wide setting that the command line's
``--quiet`` holds for the duration of a verb (:func:`quiet_mode`).

Usage::

    from cmp_bayes.progress import Progress, track

    for store in track(stores, "ranking stores", unit="stores"):
        ...

    progress = Progress(quiet=args.quiet)      # handed down to library code
    with progress.bar("store randomization", total=len(blocks), unit="stores") as bar:
        for block in blocks:
            ...
            bar.advance()

``delay`` (seconds) holds a bar back until the work has run that long, so
work that is usually quick (a report's figures, a small fit's recovery) draws
nothing unless it turns out slow. A bar opened while another one draws joins
its display as a second row instead of fighting it for the terminal.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from types import TracebackType
from typing import Any

#: The process-wide quiet setting (``--quiet``); an explicit ``quiet=`` wins over it.
_QUIET: bool = False

#: The display bars draw on now (a ``rich.progress.Progress``) and how many bars use it.
_SHARED: dict[str, Any] = {"display": None, "users": 0}
_SHARED_LOCK = threading.Lock()


def set_quiet(quiet: bool) -> bool:
    """Set the process-wide quiet setting; returns the previous one."""
    global _QUIET
    before, _QUIET = _QUIET, bool(quiet)
    return before


def is_quiet() -> bool:
    """The process-wide quiet setting (``--quiet`` while a command-line verb runs)."""
    return _QUIET


@contextmanager
def quiet_mode(quiet: bool = True) -> Iterator[None]:
    """Hold the process-wide quiet setting at ``quiet`` inside the block, then restore it."""
    before = set_quiet(quiet)
    try:
        yield
    finally:
        set_quiet(before)


def _resolve_quiet(quiet: bool | None) -> bool:
    return _QUIET if quiet is None else bool(quiet)


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal, as rich judges it (a TTY, ``FORCE_COLOR``, ``TTY_COMPATIBLE``)."""
    isatty = getattr(sys.stderr, "isatty", None)
    # the cheap answer first: rich is imported only when a terminal might be there
    try:
        if isatty is not None and not isatty() and not _terminal_forced_by_env():
            return False
    except ValueError:  # a closed stream
        return False
    from rich.console import Console

    return bool(Console(stderr=True).is_terminal)


def _terminal_forced_by_env() -> bool:
    return os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR", "") != ""


def show_progress(quiet: bool | None = None, console: Any = None) -> bool:
    """Whether a bar draws: not quiet, and stderr (or ``console``) is a terminal.

    Parameters
    ----------
    quiet : bool, optional
        True never draws; None follows the process-wide setting (:func:`quiet_mode`).
    console : rich.console.Console, optional
        Draw on this console instead of stderr (tests force a terminal this way).
    """
    if _resolve_quiet(quiet):
        return False
    if console is not None:
        return bool(console.is_terminal)
    return stderr_is_terminal()


def sampler_progress(wanted: bool, quiet: bool | None = None) -> bool:
    """Whether a sampler's own bar (nutpie, PyMC, ADVI) should draw.

    ``wanted`` (``SamplerConfig.progressbar``) and not quiet, and stderr a
    terminal or a notebook (the samplers draw their notebook bar as HTML, which
    writes nothing to stderr): off when stderr is a file or a pipe.
    """
    if not wanted or _resolve_quiet(quiet):
        return False
    if stderr_is_terminal():
        return True
    # a notebook kernel has imported IPython already; importing it here would only cost time
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class Bar:
    """One bar: a context manager whose :meth:`advance` counts work done.

    Made by :meth:`Progress.bar`; silent (every method a no-op) when the
    progress it came from does not draw. :meth:`advance` may be called from
    several threads at once.
    """

    def __init__(
        self, description: str, total: float | None, unit: str, *, draw: bool, console: Any, delay: float
    ) -> None:
        self.description = description
        self.total = total
        self.unit = unit
        self._draw = draw
        self._console = console
        self._delay = max(0.0, float(delay))
        self._display: Any = None
        self._owner = False
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @property
    def drawing(self) -> bool:
        """Whether this bar draws (a terminal, not quiet)."""
        return self._draw

    def __enter__(self) -> Bar:
        if not self._draw:
            return self
        self._display, self._owner = _acquire_display(self._console)
        self._task = self._display.add_task(
            self.description, total=self.total, unit=self.unit, start=True
        )
        if self._owner:
            if self._delay > 0:
                self._timer = threading.Timer(self._delay, self._start_display)
                self._timer.daemon = True
                self._timer.start()
            else:
                self._start_display()
        return self

    def _start_display(self) -> None:
        with self._lock:
            if self._display is not None and not self._display.live.is_started:
                self._display.start()

    def advance(self, n: float = 1) -> None:
        """Count ``n`` more units of work done."""
        if not self._draw:
            return
        if self._task is not None:
            self._display.advance(self._task, n)

    def update(
        self, *, total: float | None = None, completed: float | None = None, description: str | None = None
    ) -> None:
        """Change the bar's total, work done so far or description while it runs."""
        if total is not None:
            self.total = total
        if description is not None:
            self.description = description
        if self._task is not None:
            self._display.update(self._task, total=total, completed=completed, description=description)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._draw or self._display is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            display, self._display = self._display, None
        # the finished bar stays on screen (as PyMC's does): its total time is worth reading
        if self._owner and display.live.is_started:
            display.refresh()
            display.stop()
        _release_display(display)


def _acquire_display(console: Any) -> tuple[Any, bool]:
    """The display a new bar draws on: the one drawing now, else a new one (then the bar owns it)."""
    with _SHARED_LOCK:
        if _SHARED["display"] is not None:
            _SHARED["users"] += 1
            return _SHARED["display"], False
        display = _new_display(console)
        _SHARED["display"], _SHARED["users"] = display, 1
        return display, True


def _release_display(display: Any) -> None:
    with _SHARED_LOCK:
        if _SHARED["display"] is display:
            _SHARED["users"] -= 1
            if _SHARED["users"] <= 0:
                _SHARED["display"], _SHARED["users"] = None, 0


def _default_console() -> Any:
    """The console bars draw on unless given one: stderr (tests swap in a forced terminal)."""
    from rich.console import Console

    return Console(stderr=True)


def _new_display(console: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _rate_column(),
        _left_column(),
        TimeElapsedColumn(),
        console=console if console is not None else _default_console(),
        # stdout carries the verb's results: it must never be routed into the bar's stream
        redirect_stdout=False,
        redirect_stderr=True,
        refresh_per_second=4,
    )


def _average_rate(task: Any) -> float | None:
    """Units per second over the whole run so far (steady for slow, uneven steps)."""
    elapsed = task.elapsed
    if not elapsed or task.completed <= 0:
        return None
    return float(task.completed) / float(elapsed)


def _rate_text(task: Any) -> str:
    unit = task.fields.get("unit", "steps")
    rate = _average_rate(task)
    if rate is None:
        return f"? {unit}/s"
    if rate >= 1.0:
        return f"{rate:,.1f} {unit}/s"
    # slow work reads better as seconds per unit (a store's fit, a seed)
    return f"{1.0 / rate:,.1f} s/{unit.rstrip('s') or unit}"


def _left_text(task: Any) -> str:
    if task.total is None:
        return ""
    if task.finished:
        return "0:00:00 left"
    rate = _average_rate(task)
    if rate is None:
        return "-:--:-- left"
    seconds = int(max(0.0, float(task.total) - float(task.completed)) / rate + 0.5)
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d} left"


def _rate_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Units per second (or seconds per unit when slower than one a second)."""

        def render(self, task: Any) -> Text:
            return Text(_rate_text(task), style="progress.data.speed")

    return RateColumn()


def _left_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class LeftColumn(ProgressColumn):
        """Time left at the average rate so far."""

        max_refresh = 0.5  # as rich's own remaining-time column: no jitter

        def render(self, task: Any) -> Text:
            return Text(_left_text(task), style="progress.remaining")

    return LeftColumn()


class Progress:
    """Where long work reports progress: bars on stderr, or nothing.

    Library functions that run long take one (``progress=``) and open bars on
    it; they never print. The default everywhere is silent.

    Parameters
    ----------
    quiet : bool, optional
        True: never draw. None (default): follow the process-wide setting
        (the command line's ``--quiet``, :func:`quiet_mode`).
    console : rich.console.Console, optional
        Draw here instead of on stderr; a console made with
        ``force_terminal=True`` draws into any file (tests).
    delay : float
        Seconds a bar waits before it draws (0: at once).
    """

    def __init__(self, quiet: bool | None = None, *, console: Any = None, delay: float = 0.0) -> None:
        self.quiet = quiet
        self.console = console
        self.delay = delay

    @classmethod
    def silent(cls) -> Progress:
        """A progress that never draws."""
        return cls(quiet=True)

    @property
    def enabled(self) -> bool:
        """Whether bars opened on it draw (checked now: quiet, then the terminal)."""
        return show_progress(self.quiet, self.console)

    def bar(self, description: str, total: float | None, unit: str = "steps") -> Bar:
        """A bar over ``total`` units of work (a context manager; :meth:`Bar.advance` counts).

        Parameters
        ----------
        description : str
            What the work is ("ranking stores").
        total : float or None
            Units of work in all (None: unknown; no time left is shown).
        unit : str
            What one unit is, plural ("stores", "draws"), shown in the rate.
        """
        return Bar(description, total, unit, draw=self.enabled, console=self.console, delay=self.delay)

    def track[T](
        self, items: Iterable[T], description: str, total: float | None = None, unit: str = "steps"
    ) -> Iterator[T]:
        """Iterate over ``items``, advancing a bar by one per item (``total`` from ``len`` if unset)."""
        if total is None and isinstance(items, Sized):
            total = len(items)
        with self.bar(description, total, unit) as bar:
            for item in items:
                yield item
                bar.advance()


def track[T](
    items: Iterable[T],
    description: str,
    *,
    total: float | None = None,
    unit: str = "steps",
    quiet: bool | None = None,
    console: Any = None,
    delay: float = 0.0,
) -> Iterator[T]:
    """Iterate over ``items`` with a bar (see :class:`Progress` for the arguments)."""
    return Progress(quiet, console=console, delay=delay).track(items, description, total, unit)
