"""The plugin at its edges: options and price tables that would switch the spend cap
off, --collect-only, terminal and JUnit output of hostile corpus text, the passports
recorded as enforced, and URLs that carry secrets."""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.report.results import read_results

from ..fakeprovider import FakeProvider
from .test_plugin import REPLAY, line, pay

pytest_plugins = ["pytester"]


def errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.errlines if line.strip()]


PRICES = '["openai:gpt-fake"]\ninput_per_mtok = 1\noutput_per_mtok = 2\n'


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    cases = [line(f"c{i}", 2 + i % 3, [pay("evil@x.test", 5)], session=f"s{i}") for i in range(4)]
    return pytester.makefile(".jsonl", attacks="\n".join(cases))


# -- numbers that would switch a cap off ------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--vault-budget-usd=nan", "--vault-budget-usd nan: must be a finite number at least 0"),
        ("--vault-budget-usd=inf", "--vault-budget-usd inf: must be a finite number at least 0"),
        ("--vault-budget-usd=-1", "--vault-budget-usd -1.0: must be a finite number at least 0"),
        ("--vault-rpm=nan", "--vault-rpm nan: must be a finite number above 0"),
        ("--vault-rpm=0", "--vault-rpm 0.0: must be a finite number above 0"),
        ("--vault-rpm=-inf", "--vault-rpm -inf: must be a finite number above 0"),
        ("--vault-tpm=nan", "--vault-tpm nan: must be a finite number above 0"),
        ("--vault-tpm=-5", "--vault-tpm -5.0: must be a finite number above 0"),
        ("--vault-timeout=nan", "--vault-timeout nan: must be a finite number above 0"),
        ("--vault-timeout=0", "--vault-timeout 0.0: must be a finite number above 0"),
        ("--vault-agent-timeout=0", "--vault-agent-timeout 0.0: must be a finite number above 0"),
        ("--vault-agent-timeout=inf", "--vault-agent-timeout inf: must be a finite number above 0"),
        ("--vault-progress=nan", "--vault-progress nan: must be a finite number at least 0"),
        ("--vault-progress=-1", "--vault-progress -1.0: must be a finite number at least 0"),
    ],
)
def test_every_number_option_must_be_finite_and_in_range(
    pytester: pytest.Pytester, corpus: Path, option: str, message: str
) -> None:
    prices = pytester.makefile(".toml", prices=PRICES)
    result = pytester.runpytest(*REPLAY, f"--vault-prices={prices}", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {message}"]


@pytest.mark.parametrize(
    ("entry", "problem", "line"),
    [
        (
            "input_per_mtok = nan\noutput_per_mtok = 1",
            "input_per_mtok: expected a finite number",
            2,
        ),
        (
            "input_per_mtok = inf\noutput_per_mtok = 1",
            "input_per_mtok: expected a finite number",
            2,
        ),
        (
            "input_per_mtok = 1\noutput_per_mtok = -0.5",
            "output_per_mtok: expected a finite number",
            3,
        ),
        (
            "input_per_mtok = true\noutput_per_mtok = 1",
            "input_per_mtok: expected a finite number",
            2,
        ),
        (
            'input_per_mtok = "1"\noutput_per_mtok = 1',
            "input_per_mtok: expected a finite number",
            2,
        ),
        (
            "input_per_mtok = [1]\noutput_per_mtok = 1",
            "input_per_mtok: expected a finite number",
            2,
        ),
        ("input_per_mtok = 1", "output_per_mtok: Field required", 1),  # the table that lacks it
        (
            "input_per_mtok = 1\noutput_per_mtok = 1\noutptu_per_mtok = 9",
            "outptu_per_mtok: unknown",
            4,
        ),
    ],
)
def test_every_price_table_field_is_checked(
    pytester: pytest.Pytester, corpus: Path, entry: str, problem: str, line: int
) -> None:
    prices = pytester.makefile(".toml", prices=f'["openai:gpt-fake"]\n{entry}\n')
    # Checked whenever a table is given, with or without a budget.
    for budget in ([], ["--vault-budget-usd=1"]):
        result = pytester.runpytest(*REPLAY, f"--vault-prices={prices}", *budget)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        [error] = errors(result)
        assert error.startswith(f"ERROR: {prices}:{line}: openai:gpt-fake.{problem}")


def test_a_cache_path_that_is_a_file_is_one_usage_error(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    # Else every test failed on its own, once the run had started.
    cache = pytester.makefile(".txt", cache="not a folder")
    result = pytester.runpytest(*REPLAY, f"--vault-cache={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: --vault-cache {cache}: not a folder"]


def test_a_cache_folder_that_cannot_be_written_is_one_usage_error(
    pytester: pytest.Pytester, corpus: Path, fake: FakeProvider
) -> None:
    # A file in the folder's path (or no write permission, a read-only mount): every
    # evaluation of a provider model failed on its own, an error row each.
    blocker = pytester.makefile(".txt", blocker="a file")
    cache = blocker / "cache"
    result = pytester.runpytest("--vault-model=openai:gpt-fake", f"--vault-cache={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: --vault-cache {cache}: cannot write there: Not a directory"]
    assert fake.requests == []
    # The control models ask no provider: they use no cache, and need none.
    result = pytester.runpytest(*REPLAY, f"--vault-cache={cache}")
    assert result.ret == pytest.ExitCode.OK
    # A folder the run can make is made, and holds nothing until an answer is stored; not
    # by --collect-only, which asks nothing.
    fresh = pytester.path / "new" / "cache"
    result = pytester.runpytest(
        "--vault-model=openai:gpt-fake", f"--vault-cache={fresh}", "--collect-only"
    )
    assert result.ret == pytest.ExitCode.OK and not (pytester.path / "new").exists()
    result = pytester.runpytest("--vault-model=openai:gpt-fake", f"--vault-cache={fresh}")
    assert result.ret == pytest.ExitCode.OK
    assert fresh.is_dir() and sorted(p.name for p in fresh.iterdir()) == ["responses"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[x\ninput_per_mtok = 1", ":1: invalid TOML: "),
        ("a = " + "[" * 5000 + "]" * 5000, ": invalid TOML: nested too deeply"),
        # More digits than `int` reads from text: was a traceback.
        ("a = " + "9" * 5000, ": invalid TOML: number out of range"),
        (b"\n# caf\xe9\n", ":2: not valid UTF-8: byte 0xe9 at column 6"),
        ('\n"openai:gpt-fake" = 3', ":2: openai:gpt-fake: Input should be a valid dictionary"),
    ],
    ids=["syntax", "deep", "digits", "utf8", "not-a-table"],
)
def test_an_unreadable_price_table_is_one_line(
    pytester: pytest.Pytester, corpus: Path, text: str | bytes, problem: str
) -> None:
    prices = pytester.path / "pri\x1bces.toml"  # the name is escaped in the message too
    prices.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = pytester.runpytest(*REPLAY, f"--vault-prices={prices}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [error] = errors(result)
    assert error.startswith(f"ERROR: {pytester.path}/pri\\x1bces.toml{problem}")


# -- --collect-only ---------------------------------------------------------------------------

THREADS = """
import threading

started = []
_start = threading.Thread.start


def start(self):
    started.append(self.name)
    _start(self)


threading.Thread.start = start


def pytest_unconfigure(config):
    with open("threads.txt", "w") as f:
        f.write("\\n".join(started))
"""


def test_collect_only_evaluates_nothing(
    pytester: pytest.Pytester, fake: FakeProvider, corpus: Path
) -> None:
    pytester.makeconftest(THREADS)
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--vault-model=openai:gpt-fake",
        "--vault-model=scripted:obedient",
        "--vault-cache=cache",
        "--vault-results=out.parquet",
        "--collect-only",
        "-q",
    )
    assert result.ret == pytest.ExitCode.OK
    assert "32 tests collected" in result.stdout.str()
    # No request, no evaluation thread, no cache write, no results.
    assert fake.requests == []
    assert "pytest-vault-runner" not in (pytester.path / "threads.txt").read_text()
    assert not (pytester.path / "cache").exists()
    assert not (pytester.path / "out.parquet").exists()


# -- hostile corpus text in the terminal and JUnit ------------------------------------------

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\u202e"


def test_corpus_text_never_reaches_the_terminal_raw(pytester: pytest.Pytester) -> None:
    hostile = json.loads(line("c", 2, [pay("evil@x.test", 5)]))
    hostile["id"] = f"id{ESCAPES}"
    hostile["category"] = f"cat{ESCAPES}"
    # Lone surrogates where a corpus can carry them (pydantic refuses them in its str
    # fields): inside call arguments, as values and as keys.
    odd = json.loads(line("odd", 3, [pay("x\ud800@x.test", 5, memo="m\udfff")], session="s9"))
    odd["calls"] += [
        pay("savings@aport-vault.com", 1, **{"k\ud800": 2}),
        {"name": "get_balance", "arguments": {"\ud800": "\ud800"}},
    ]
    pytester.makefile(".jsonl", attacks=json.dumps(hostile) + "\n" + json.dumps(odd))
    result = pytester.runpytest(
        *REPLAY,
        "--vault-strict",
        "-v",
        "--junitxml=junit.xml",
        "--vault-results=out.parquet",
        "--vault-report=report.html",
    )
    # The hostile id pays evil@x.test at Level 2; the odd calls are denied or unreadable.
    result.assert_outcomes(failed=2, passed=6)
    assert (pytester.path / "report.html").read_bytes().decode("utf-8")
    output = "\n".join(result.outlines + result.errlines)
    for char in "\x1b\x07\u202e\ud800":
        assert char not in output
    shown_id = r"id\x1b]0;pwned\x07\x1b[2J\u202e"
    assert f"attacks.jsonl::{shown_id}[scripted:replay-A-model] FAILED" in output
    # JUnit: the same escaped name, and the file is valid XML.
    names = {
        c.get("name") for c in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    }
    assert f"{shown_id}[scripted:replay-B-guarded]" in names
    # The results keep the text itself.
    rows, _ = read_results(pytester.path / "out.parquet")
    assert {r["attack_id"] for r in rows} == {f"id{ESCAPES}", "odd"}
    assert {r["category"] for r in rows} == {f"cat{ESCAPES}", "direct_transfer"}
    [odd_row] = [
        r
        for r in rows
        if (r["attack_id"], r["architecture"], r["track"]) == ("odd", "guarded", "A")
    ]
    # The log keeps what was sent, exactly: its JSON reads back to the surrogates.
    calls = json.loads(odd_row["tool_calls"])
    assert [c["arguments"] for c in calls] == [c["arguments"] for c in odd["calls"]]
    assert odd_row["deny_codes"] == ["oap.invalid_context", "oap.invalid_context"]


# -- the passports recorded are those enforced --------------------------------------------


def test_metadata_records_the_passport_files_loaded(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    folder = pytester.mkdir("passports")
    for f in SHIPPED.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    custom = (SHIPPED / "level-3.json").read_bytes().replace(b'"1.0.0"', b'"1.0.9"')
    assert custom != (SHIPPED / "level-3.json").read_bytes()
    (folder / "custom.json").write_bytes(custom)
    toml = (folder / "levels.toml").read_text()
    (folder / "levels.toml").write_text(toml.replace('"level-3.json"', '"custom.json"'))
    pytester.runpytest(*REPLAY, "--vault-passports=passports", "--vault-results=out.parquet")
    _, meta = read_results(pytester.path / "out.parquet")

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    want: dict[str, object] = {
        str(n): {
            "file": f"level-{n}.json",
            "sha256": digest((SHIPPED / f"level-{n}.json").read_bytes()),
        }
        for n in (1, 2, 4, 5)
    }
    want["3"] = {"file": "custom.json", "sha256": digest(custom)}
    want["levels.toml"] = digest((folder / "levels.toml").read_bytes())
    assert meta["passports"] == want


# -- secrets in URLs ------------------------------------------------------------------------


def test_no_url_secret_reaches_a_file_or_the_terminal(
    pytester: pytest.Pytester, fake: FakeProvider, corpus: Path
) -> None:
    base = fake.url.replace("http://", "http://vault-user:pw-0123456789@") + "/v1"
    url = f"{base}?api-version=q-0123456789&sig=s-0123456789#f-0123456789"
    fake.fail(*["500"] * 12)  # error rows too: their messages must not carry it
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--vault-model=openai:gpt-fake",
        f"--vault-base-url={url}",
        "--vault-tries=2",
        "--vault-cache=cache",
        "--vault-results=out.parquet",
        "--vault-report=report.html",
        "--junitxml=junit.xml",
        "--vault-progress=0.000001",
        "-rA",
    )
    texts = [*result.outlines, *result.errlines]
    texts += [
        p.read_bytes().decode("utf-8", "replace") for p in pytester.path.rglob("*") if p.is_file()
    ]
    for secret in ("vault-user", "pw-0123456789", "q-0123456789", "s-0123456789", "f-0123456789"):
        assert not any(secret in text for text in texts), secret
    _, meta = read_results(pytester.path / "out.parquet")
    assert meta["base_url"] == fake.url + "/v1"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--vault-concurrency=100000000", "--vault-concurrency must be from 1 to 4096"),
        ("--vault-concurrency=0", "--vault-concurrency must be from 1 to 4096"),
        ("--vault-tries=1000", "--vault-tries must be from 1 to 100"),
        ("--vault-max-steps=100000", "--vault-max-steps must be from 1 to 1000"),
    ],
)
def test_counts_that_would_exhaust_the_machine_are_usage_errors(
    pytester: pytest.Pytester, corpus: Path, option: str, message: str
) -> None:
    result = pytester.runpytest(*REPLAY, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {message}"]


def test_a_spec_in_a_usage_error_is_shown_escaped(
    pytester: pytest.Pytester, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest("--vault-model=openai:x\x1b]0;pwn\x07")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [
        "ERROR: --vault-model openai:x\\x1b]0;pwn\\x07: OPENAI_API_KEY is not set"
    ]
