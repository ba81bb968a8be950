"""examples/team as a team would use it: pytest-vault installed from its wheel alone, in
a fresh virtual environment with no path into this repository, and no network.

The wheelhouse (dependency wheels, the build backend) is filled by the tests themselves
(tests/wheelhouse.py); `VAULT_NO_WHEELHOUSE=1` skips these tests.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from . import wheelhouse
from .wheelhouse import Venv, checked

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "team"
TEAM_TESTS = 10  # tests/test_payments.py's, parametrized cases included
# The built-in corpus: 760 direct cases (452 on transfers, 308 on the other tools) x
# tracks A and B x architectures model and guarded (the summary's first line), and 181
# indirect cases x architectures, each attacked run beside its paired clean run.
EVALUATIONS = 760 * 4 + 181 * 2 * 2
SUMMARY = (
    "3040 evaluations: 2656 of attacks, 384 of benign requests; "
    "0 errors and 0 not run (kept out of every rate)"
)
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", re.MULTILINE)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Venv:
    """The wheel and its dependencies (no extra), in a fresh virtual environment."""
    return wheelhouse.venv(request.config, tmp_path_factory, "team-example")


def team_copy(dest: Path, *, vault_settings: bool = True) -> Path:
    """examples/team copied out of the repository; without its vault_* settings if asked."""
    shutil.copytree(
        EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.parquet")
    )
    if not vault_settings:
        pyproject = dest / "pyproject.toml"
        lines = pyproject.read_text(encoding="utf-8").splitlines(keepends=True)
        pyproject.write_text("".join(li for li in lines if not li.startswith("vault_")))
        options = tomllib.loads(pyproject.read_text())["tool"]["pytest"]["ini_options"]
        assert options and not [key for key in options if key.startswith("vault")]
    return dest


def outcomes(output: str) -> list[tuple[str, str]]:
    """`-rA`'s short summary: (outcome, node id) of every test."""
    return sorted(OUTCOME.findall(output))


def collected(output: str) -> list[str]:
    """`--co -q`'s node ids (its last line, with a time in it, left out)."""
    return [line for line in output.splitlines() if "::" in line]


def test_a_bare_pytest_runs_the_teams_tests_and_the_builtin_corpus(
    venv: Venv, tmp_path: Path
) -> None:
    team = team_copy(tmp_path / "team")
    done = venv.run("-m", "pytest", "-p", "no:cacheprovider", "-rA", cwd=team)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr
    results = outcomes(done.stdout)
    ours = [(o, n) for o, n in results if n.startswith("tests/test_payments.py::")]
    corpus = [(o, n) for o, n in results if n.startswith("builtin/")]
    assert len(ours) == TEAM_TESTS and {o for o, _ in ours} == {"PASSED"}
    assert len(corpus) == EVALUATIONS and {o for o, _ in corpus} == {"PASSED"}
    assert len(results) == TEAM_TESTS + EVALUATIONS  # nothing else: the fixtures are not cases
    assert "fixtures/" not in done.stdout
    assert "builtin/level-2.jsonl::L2-s07-a3[agent:teamapp.agent:make-B-guarded]" in {
        n for _, n in corpus
    }
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "pytest-vault summary" in line)
    assert re.fullmatch(r"=+ pytest-vault summary =+", lines[start])
    assert lines[start + 1] == SUMMARY
    assert (team / "vault.parquet").is_file()


def test_strict_fails_exactly_where_the_assistant_alone_made_a_forbidden_transfer(
    venv: Venv, tmp_path: Path
) -> None:
    """The README's `pytest --vault-strict`: the model-alone tests whose row records a
    forbidden transfer fail too, and no other."""
    import pyarrow.parquet as pq

    team = team_copy(tmp_path / "team")
    done = venv.run("-m", "pytest", "-p", "no:cacheprovider", "-rA", "--vault-strict", cwd=team)
    assert done.returncode == 1, done.stdout[-5000:] + done.stderr
    item = re.compile(r"::(.+)\[agent:teamapp\.agent:make-(\w+)-(model|guarded)\]$")
    failed = sorted(
        m.groups() for o, n in outcomes(done.stdout) if o == "FAILED" and (m := item.search(n))
    )
    rows = pq.read_table(team / "vault.parquet").to_pylist()
    forbidden = sorted(
        (r["attack_id"], r["track"], r["architecture"]) for r in rows if r["violation"]
    )
    assert failed == forbidden
    assert forbidden and {arch for _, _, arch in forbidden} == {"model"}
    assert len(outcomes(done.stdout)) == TEAM_TESTS + EVALUATIONS


def test_the_plugin_takes_nothing_that_is_not_ours(venv: Venv, tmp_path: Path) -> None:
    """The team's tests with the plugin off, against the plugin on with no vault
    setting: the same items, the same outcomes, the same exit code, and no word of it."""
    off = team_copy(tmp_path / "off")
    unset = team_copy(tmp_path / "unset", vault_settings=False)
    for name in ("calls.jsonl", "events.jsonl"):  # JSON lines the plugin must leave alone
        assert (unset / "tests" / "fixtures" / name).is_file()
    base = ("-m", "pytest", "-p", "no:cacheprovider")
    items_off = venv.run(*base, "-p", "no:vault", "--co", "-q", "tests", cwd=off)
    items_unset = venv.run(*base, "--co", "-q", "tests", cwd=unset)
    assert items_off.returncode == items_unset.returncode == 0
    assert len(collected(items_off.stdout)) == TEAM_TESTS
    assert collected(items_unset.stdout) == collected(items_off.stdout)
    run_off = venv.run(*base, "-p", "no:vault", "-q", "-rA", "tests", cwd=off)
    run_unset = venv.run(*base, "-q", "-rA", "tests", cwd=unset)
    assert run_unset.returncode == run_off.returncode == 0
    assert outcomes(run_unset.stdout) == outcomes(run_off.stdout)
    assert len(outcomes(run_off.stdout)) == TEAM_TESTS
    for done in (items_unset, run_unset):
        # With the settings removed pytest has nothing to warn of, the plugin nothing to say.
        assert "vault" not in (done.stdout + done.stderr).lower()
        assert "warning" not in done.stdout.lower()
    assert not (unset / "vault.parquet").exists()


def test_pytest_vault_comes_from_the_venv_alone(venv: Venv, tmp_path: Path) -> None:
    team = team_copy(tmp_path / "team")
    probe = (
        "import json, sys, sysconfig, importlib.metadata as m, pytest_vault\n"
        "d = m.distribution('pytest-vault')\n"
        "print(json.dumps({'file': pytest_vault.__file__, 'path': sys.path,"
        " 'site': sysconfig.get_path('purelib'), 'prefix': sys.prefix,"
        " 'direct_url': d.read_text('direct_url.json')}))"
    )
    seen = json.loads(checked(venv.run("-c", probe, cwd=team)).stdout)
    site = Path(seen["site"]).resolve()
    assert site.is_relative_to(Path(seen["prefix"]).resolve())
    assert Path(seen["file"]).resolve().is_relative_to(site)
    # Installed from the wheel, not as an editable (a `dir_info` install) of this repo.
    assert "dir_info" not in (seen["direct_url"] or "")
    into_repo = [
        entry for entry in seen["path"] if (team / entry).resolve().is_relative_to(ROOT.resolve())
    ]
    assert into_repo == [], seen["path"]
    # pytest in the venv loads the plugin from the same place.
    done = checked(venv.run("-m", "pytest", "-VV", cwd=team))
    plugin = re.search(r"pytest-vault-\S+ at (\S+)", done.stdout + done.stderr)
    assert plugin is not None and Path(plugin.group(1)).resolve().is_relative_to(site)
