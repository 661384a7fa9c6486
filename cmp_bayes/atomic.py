"""Atomic file output: write to a temporary file beside the target, then rename.

A crash mid-write leaves the previous file (or none), never half a file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from cmp_bayes.errors import ConfigError


@contextlib.contextmanager
def atomic_path(target: str | Path, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success.

    The temporary file is removed if the body raises. The rename is atomic on
    POSIX file systems because both paths share a directory.
    """
    target = Path(target)
    _make_parent(target)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=suffix or ".tmp", dir=target.parent
    )
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600; give the file the mode a plain open() would have
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def write_text_atomic(target: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``target`` atomically and return the path."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


def write_with(target: str | Path, writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` and move the result onto ``target`` atomically."""
    with atomic_path(target, suffix=Path(target).suffix + ".tmp") as tmp:
        writer(tmp)
    return Path(target)


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a temporary directory beside ``target``; swap it into place on success.

    An existing ``target`` is replaced only after the new one is complete.
    """
    target = Path(target)
    _make_parent(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            old.rmdir()
            os.replace(target, old)
            os.replace(tmp, target)
            _rmtree(old)
        else:
            os.replace(tmp, target)
    except BaseException:
        _rmtree(tmp)
        raise


def _make_parent(target: Path) -> None:
    """Create ``target``'s folder; a file standing where a folder must be is the user's to fix."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (target.parent, *target.parent.parents) if p.is_file()), None)
        raise ConfigError(
            f"cannot write {target}: {blocker or target.parent} is a file, not a folder"
        ) from None


def _umask() -> int:
    # os.umask can only be read by setting it; restore at once
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
