"""Paths no file can be at, for the tests of every path a command or option takes: a name
too long for the file system, a path through a file, a loop of links."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def unreachable(name: str) -> dict[str, tuple[str, str]]:
    """Each way, as a path ending in `name` (relative to `make_unreachable`'s folder), with
    the system's words for it."""
    return {
        "too-long": ("n" * 300 + name, os.strerror(errno.ENAMETOOLONG)),
        "through-a-file": (f"a_file.txt/{name}", os.strerror(errno.ENOTDIR)),
        "link-loop": (f"loop/{name}", os.strerror(errno.ELOOP)),
    }


def make_unreachable(folder: Path) -> None:
    """The file and the link those paths go through, in `folder`."""
    (folder / "a_file.txt").write_text("not a folder")
    (folder / "loop").symlink_to("loop")  # a link to itself
