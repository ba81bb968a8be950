"""Fresh virtual environments with pytest-vault installed from its wheel alone, offline.

    python tests/wheelhouse.py [DIR]    # fill DIR ($VAULT_WHEELHOUSE, else <repo>/.wheelhouse)

The tests that need one (`test_team_example.py`, `test_light_install.py`,
`test_neighbours.py`) fill the wheelhouse themselves, once per set of requirements and
under a lock (xdist workers share it): `pip download` of the build backend, the
project's dependencies, the extras asked for and any more packages, with theirs. Where
no registry can be reached and the wheelhouse lacks them, the test is skipped, saying
so. The environments themselves install with `--no-index`: nothing else is fetched.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
DEAD_PROXY = "http://127.0.0.1:9"  # anything that tries the network fails at once


def _project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirements(extras: Sequence[str] = (), more: Sequence[str] = ()) -> list[str]:
    """What a fresh environment needs to build the wheel and run with these extras."""
    project = _project()
    build: list[str] = project["build-system"]["requires"]  # type: ignore[index]
    meta: dict[str, object] = project["project"]  # type: ignore[assignment]
    optional: dict[str, list[str]] = meta["optional-dependencies"]  # type: ignore[assignment]
    wanted: list[str] = [*build, *meta["dependencies"], "pytest"]  # type: ignore[misc]
    todo = list(extras)
    while todo:  # an extra may name others: pytest-vault[a,b]
        for requirement in optional[todo.pop()]:
            inner = re.fullmatch(r"pytest-vault\[(.+)\]", requirement)
            if inner:
                todo.extend(inner.group(1).split(","))
            else:
                wanted.append(requirement)
    return list(dict.fromkeys([*wanted, *more]))


def default_dir() -> Path:
    return Path(os.environ.get("VAULT_WHEELHOUSE") or ROOT / ".wheelhouse")


def download(dest: Path, wanted: Sequence[str]) -> subprocess.CompletedProcess[str]:
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        *(sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"),
        # Wheels only: an offline install must never fall back to building an sdist.
        *("--only-binary=:all:", "--dest", str(dest), *wanted),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=1200)


def filled(extras: Sequence[str] = (), more: Sequence[str] = ()) -> Path:
    """The wheelhouse, holding the wheels these requirements need (downloaded once; a
    stamp names each set done), or the test is skipped when they cannot be had."""
    if os.environ.get("VAULT_NO_WHEELHOUSE") == "1":
        pytest.skip("VAULT_NO_WHEELHOUSE=1: installs from the built wheel are not tested")
    dest = default_dir()
    wanted = requirements(extras, more)
    stamp = dest / f".filled-{hashlib.sha256(repr(wanted).encode()).hexdigest()[:16]}"
    dest.mkdir(parents=True, exist_ok=True)
    with FileLock(dest / ".lock"):
        if not stamp.exists():
            done = download(dest, wanted)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                pytest.skip(f"no wheelhouse at {dest}: pip could not download {wanted}: {last}")
            stamp.touch()
    return dest


def offline_env() -> dict[str, str]:
    """This environment less what could point pip or Python back at this repository (the
    editable install, pip's config and indexes) or make a run an xdist worker's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "PYTEST_", "PYTHON", "VIRTUAL_ENV", "VAULT_"))
        and key not in ("CI", "BUILD_NUMBER")
    }
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONDONTWRITEBYTECODE="1",
        HTTP_PROXY=DEAD_PROXY,
        HTTPS_PROXY=DEAD_PROXY,
        http_proxy=DEAD_PROXY,
        https_proxy=DEAD_PROXY,
    )
    return env


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args}\n{done.stdout}\n{done.stderr}"
    return done


@dataclass(frozen=True)
class Venv:
    python: Path
    env: dict[str, str]

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return run([str(self.python), *args], self.env, cwd)


def venv(
    config: pytest.Config,
    base: pytest.TempPathFactory,
    name: str,
    extras: Sequence[str] = (),
    more: Sequence[str] = (),
) -> Venv:
    """A fresh virtual environment with the wheel (built offline) and these extras and
    packages, made once for the run (every xdist worker's too) under a lock in the run's
    temporary folder, with no path into this repository."""
    wheels = filled(extras, more)
    run_temp = base.getbasetemp()
    if hasattr(config, "workerinput"):
        run_temp = run_temp.parent  # a worker's is popen-gwN inside the run's
    shared = run_temp / name
    shared.mkdir(exist_ok=True)
    env = offline_env()
    made = Venv(shared / "venv" / "bin" / "python", env)
    with FileLock(shared / "lock"):
        if (shared / "ready").exists():
            return made
        dist = shared / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        shutil.rmtree(shared / "venv", ignore_errors=True)
        # The build backend comes from the wheelhouse too: build isolation, offline.
        pip = [sys.executable, "-m", "pip", "--quiet"]
        offline = ["--no-index", "--find-links", str(wheels)]
        checked(
            run([*pip, "wheel", "--no-deps", *offline, "-w", str(dist), str(ROOT)], env, shared)
        )
        (wheel,) = dist.glob("pytest_vault-*.whl")
        target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        checked(run([sys.executable, "-m", "venv", str(shared / "venv")], env, shared))
        checked(made.run("-m", "pip", "install", "--quiet", *offline, target, *more, cwd=shared))
        (shared / "ready").touch()
    return made


def main(argv: list[str]) -> int:
    done = download(Path(argv[0]) if argv else default_dir(), requirements())
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
