"""What an optional feature needs and which extra brings it: the one wording of "install
this", said before anything runs (an import error mid-run would be a traceback)."""

from __future__ import annotations

from importlib.util import find_spec


def needs(module: str, extra: str, what: str) -> str | None:
    """None when `module` can be imported; else why `what` cannot run, and the install
    line that brings it."""
    if find_spec(module) is not None:
        return None
    return f"{what}: needs the {module} package: pip install 'pytest-vault[{extra}]'"
