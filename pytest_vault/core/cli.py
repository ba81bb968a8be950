"""What every command line of pytest-vault shares (`vault-guard`, `vault-report`): output
that leaves whole, and a quiet end when the reader goes away."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import BinaryIO

CLOSED_PIPE = 1  # the reader went away (`| head`): not everything written reached it


def write_all(out: BinaryIO, data: bytes) -> None:
    """All of `data`, then a flush. An unbuffered stream (PYTHONUNBUFFERED, `-u`) is a
    raw file whose `write` may take only part of it, as it does when the reader goes
    away: the text layer would drop the rest without a word."""
    view = memoryview(data)
    while view:
        written = out.write(view)
        if written is None:  # a non-blocking stream that is full: nothing was taken
            raise BlockingIOError("stdout would block")
        view = view[written:]
    out.flush()


def write_out(text: str) -> None:
    """`text` on stdout, whole, as UTF-8 whatever the locale."""
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text-only stream (one put in place of stdout)
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    write_all(out, text.encode())


def quiet_on_closed_pipe(main: Callable[[], int]) -> int:
    """`main()`'s exit status; a reader that closed stdout first ends the command quietly
    with `CLOSED_PIPE`, never a `BrokenPipeError` traceback."""
    try:
        status = main()
        sys.stdout.flush()  # inside: what is still buffered may meet the closed pipe too
    except BrokenPipeError:
        # Python's own recipe: stdout to devnull, so the flush at exit raises nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
    return status
