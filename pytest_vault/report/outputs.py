"""Files a run reads and writes, checked before anything runs, creating nothing.

Every writer of pytest-vault makes an output's missing folders, so an output can be
written when the nearest folder of its path that exists is a folder this process may
write in, and the path itself is not a folder (or, for a folder of outputs, is not a
file). A check cannot promise the write (the disk may fill during the run): a write
that fails at the end is still one line, from the writer (`core.files`, which leaves
the previous file as it was).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pytest_vault.core.errors import reason, unreachable


def _nearest(path: Path) -> Path:
    """The nearest of `path`'s folders that exists (a file in the way ends the walk)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def cannot_write(path: Path, *, folder: bool = False) -> str | None:
    """Why `path` (a file; with `folder`, a folder of files) cannot be written, in the
    system's words, or None. Nothing is created."""
    problem = unreachable(path)  # a loop of links: else its nearest folder looks writable
    if problem is not None:
        return problem
    try:
        if path.exists() and path.is_dir() != folder:
            return os.strerror(errno.ENOTDIR if folder else errno.EISDIR)
        # The folder the output's files go in, or the nearest one to be made in.
        where = path if folder and path.is_dir() else _nearest(path)
        if not where.is_dir():
            return os.strerror(errno.ENOTDIR)
        # A file there already is replaced or written over: its folder needs write and
        # search permission, and the file itself write permission.
        if not os.access(where, os.W_OK | os.X_OK) or (
            path.is_file() and not os.access(path, os.W_OK)
        ):
            return os.strerror(errno.EROFS if _read_only(where) else errno.EACCES)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return reason(exc)
    return None


def _read_only(where: Path) -> bool:
    return bool(os.statvfs(where).f_flag & os.ST_RDONLY)


def cannot_read(path: Path, *, folder: bool = False) -> str | None:
    """Why `path` (a file; with `folder`, a folder) cannot be read, or None."""
    kind = "folder" if folder else "file"
    problem = unreachable(path)  # else "no such file" for a path through a file
    if problem is not None:
        return problem
    try:
        if not path.exists():
            return f"no such {kind}"
        if path.is_dir() != folder:
            return f"not a {kind}"
        if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
            return os.strerror(errno.EACCES)
    except (OSError, ValueError) as exc:
        return reason(exc)
    return None
