"""`pip install pytest-vault` with no extra: the built-in corpus runs on the controls, the
plugin loads no provider SDK, and a spec or option whose extra is missing says which
extra to install, in one line, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import wheelhouse
from .wheelhouse import Venv, checked

pytestmark = pytest.mark.slow

# What only an extra brings: none may be installed, let alone loaded.
EXTRA_ONLY = ("openai", "anthropic", "aiohttp", "syrupy", "xdist", "mcp", "agentdojo")


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Venv:
    return wheelhouse.venv(request.config, tmp_path_factory, "light-install")


def test_no_extra_installs_nothing_an_extra_brings(light: Venv, tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "import pytest_vault.plugin\n"
        "print(*[m for m in sys.argv[1:] if importlib.util.find_spec(m)])\n"
        "print(*sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))\n"
    )
    done = checked(light.run("-c", code, *EXTRA_ONLY, cwd=tmp_path))
    assert done.stdout.splitlines() == ["", ""]


def test_the_builtin_corpus_runs_on_the_controls(light: Venv, tmp_path: Path) -> None:
    done = light.run(
        *("-m", "pytest", "--vault-corpus", "builtin", "-q", "-p", "no:cacheprovider"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    lines = done.stdout.splitlines()
    assert (
        "15200 evaluations: 13280 of attacks, 1920 of benign requests; 0 errors and 0 not "
        "run (kept out of every rate)"
    ) in lines
    assert lines[-1].startswith("18820 passed in ")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--vault-model", "openai:gpt-4.1-mini"),
            "--vault-model openai:gpt-4.1-mini: needs the openai package: "
            "pip install 'pytest-vault[providers]'",
        ),
        (
            ("--vault-decisions",),
            "--vault-decisions: needs the syrupy package: pip install 'pytest-vault[snapshots]'",
        ),
    ],
)
def test_a_missing_extra_is_named(
    light: Venv, tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    done = light.run(
        *("-m", "pytest", "--vault-corpus", "builtin:level-2", "-p", "no:cacheprovider", *args),
        cwd=tmp_path,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [f"ERROR: {said}"]
    assert "passed" not in done.stdout
