"""`vault-guard` as a command: its usage line, the diff's folder messages, and a reader
that goes away early (`| head -1`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.policy.__main__ import main

GUARD = [sys.executable, "-m", "pytest_vault.policy"]  # vault-guard


def first_line_then_close(argv: list[str], stdin: Path | None = None) -> tuple[bytes, int, bytes]:
    """Run a command whose reader takes one line of its stdout, then closes the pipe
    (as `| head -1` does): that line, the exit status and all of stderr. The commands
    given here write far more than a pipe holds, so they meet the closed pipe."""
    with (
        open(stdin or "/dev/null", "rb") as source,
        subprocess.Popen(argv, stdin=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as run,
    ):
        assert run.stdout is not None and run.stderr is not None
        line = run.stdout.readline()
        run.stdout.close()
        err = run.stderr.read()
        return line, run.wait(timeout=120), err


def test_plain_vault_guard_names_every_command_in_its_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was "usage: python -m pytest_vault.guard [-h] --passport PASSPORT": no lint, no diff.
    with pytest.raises(SystemExit) as exit:
        main([])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "usage: vault-guard --passport FILE < lines.jsonl",
        "       vault-guard diff OLD NEW [--format text|json|sarif] [--fail-on-widen] [-v]",
        "                        [--witnesses FILE.jsonl [--level N]]",
        "       vault-guard lint PATH... [--format text|json|sarif]",
        "vault-guard: error: the following arguments are required: --passport",
    ]


def test_a_diff_against_a_folder_that_is_not_there_says_no_such_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was "not a folder like passports".
    missing = tmp_path / "my-pasports"
    for argv in ([str(SHIPPED), str(missing)], [str(missing), str(SHIPPED)]):
        assert main(["diff", *argv]) == 2
        assert capsys.readouterr().err == f"error: {missing}: no such folder\n"
    # A file where a folder is expected still says what it is.
    passport = SHIPPED / "level-3.json"
    assert main(["diff", str(SHIPPED), str(passport)]) == 2
    assert capsys.readouterr().err == (
        f"error: {passport}: not a folder like {SHIPPED}: compare two files or two folders\n"
    )


def _wide(tmp_path: Path, name: str, payees: list[str]) -> Path:
    """Level 3's passport with more payees, indented (a finding per line)."""
    data = json.loads((SHIPPED / "level-3.json").read_text())
    data["limits"]["payments.charge"]["allowed_merchant_ids"] += payees
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=1))
    return path


@pytest.mark.parametrize("command", ["judge", "diff", "lint"])
def test_every_command_stops_quietly_when_its_reader_goes_away(
    tmp_path: Path, command: str
) -> None:
    stdin = None
    if command == "judge":
        call = {"tool": "transfer_funds", "arguments": {"recipient": "x@y.z", "amount": 1}}
        stdin = tmp_path / "lines.jsonl"
        stdin.write_text((json.dumps(call) + "\n") * 20_000)  # 3 MB of answers
        argv = ["--passport", str(SHIPPED / "level-3.json")]
    elif command == "diff":  # 20,000 changes, 1.8 MB
        wide = _wide(tmp_path, "wide.json", [f"payee-{i:05d}@x.test" for i in range(20_000)])
        argv = ["diff", str(SHIPPED / "level-3.json"), str(wide)]
    else:  # 1,000 findings, 210 kB
        bad = _wide(tmp_path, "bad.json", [f" payee-{i:05d}@x.test" for i in range(1_000)])
        argv = ["lint", str(bad)]
    line, status, err = first_line_then_close([*GUARD, *argv], stdin)
    assert line.endswith(b"\n") and len(line) > 40
    assert (status, err) == (1, b"")  # no BrokenPipeError traceback, no "Exception ignored"
