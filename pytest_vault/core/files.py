"""The one way pytest-vault writes a file: whole, or not at all.

The content goes to a partial file beside the target (the same folder, so the same file
system, where `os.replace` is atomic), which takes the target's place only once complete.
A write that fails (a full disk, an exception from whatever makes the content, Ctrl-C)
leaves the previous file as it was and no partial file behind. Errors are the system's
`OSError`, for the caller to say in one line with the option or file it was writing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, *, fsync: bool = False) -> Iterator[Path]:
    """A partial file beside `path` to write, put in its place once the block ends without
    an error (`path`'s missing folders made). With `fsync`, its bytes reach the disk
    before it takes the place (a cache entry another process may read after a crash)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per process and per call: two threads, or two workers, writing one path each
    # write their own partial file; the last replace wins, whole.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.partial")
    try:
        yield partial
        if fsync:
            fd = os.open(partial, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(partial, path)
    except OSError as exc:
        # The system's words name the user's file, never the partial one beside it.
        if exc.filename is not None and os.fspath(exc.filename) == os.fspath(partial):
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
        raise
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def write_text(path: Path, text: str, *, newline: str | None = None) -> None:
    """`text` as UTF-8 in `path`, atomically."""
    with replacing(path) as partial:
        partial.write_text(text, encoding="utf-8", newline=newline)


def write_bytes(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """`data` in `path`, atomically."""
    with replacing(path, fsync=fsync) as partial:
        partial.write_bytes(data)
