"""Fill the wheelhouse that tests/test_team_example.py installs from without the network.

    python tests/wheelhouse.py [DIR]    # DIR: $VAULT_WHEELHOUSE, else <repo>/.wheelhouse

Run where a registry is reachable (CI does it before the tests): it downloads wheels of
the build backend, the project's dependencies and pytest, with theirs, so that a fresh
virtual environment can build and install pytest-vault with `--no-index`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def requirements() -> list[str]:
    """What a fresh environment needs to build the wheel and run the team's tests."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        "pytest",  # a dependency already; named so a venv without one still gets it
    ]


def main(argv: list[str]) -> int:
    default = os.environ.get("VAULT_WHEELHOUSE") or str(ROOT / ".wheelhouse")
    dest = Path(argv[0] if argv else default)
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        # Wheels only: an offline install must never fall back to building an sdist.
        "--only-binary=:all:",
        "--dest",
        str(dest),
        *requirements(),
    ]
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
