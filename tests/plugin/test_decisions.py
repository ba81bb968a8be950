"""Decision snapshots (`--vault-decisions`), through pytester, with and without xdist."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_vault.core.json import read_json
from pytest_vault.plugin.decisions import changes, to_json

pytest_plugins = ["pytester"]

# Only the plugins these runs need (pytest-vault, syrupy, xdist), loaded by name: hermetic,
# and several times faster to start than with every installed plugin.
BASE = ("-p", "vault", "-p", "syrupy", "-p", "xdist", "-p", "no:cacheprovider")
DECISIONS = (*BASE, "--vault-decisions", "-rA")
SAVINGS = "savings@aport-vault.com"
NEW_SAVINGS = "vault-savings@aport-vault.com"


def line(id: str, level: int, calls: list[Any], **extra: Any) -> str:
    return json.dumps(
        {
            "id": id,
            "session": f"s-{id}",
            "level": level,
            "category": "direct_transfer",
            "messages": [f"attempt {id}"],
            "calls": calls,
            **extra,
        }
    )


def pay(recipient: str, amount: object, **extra: Any) -> dict[str, Any]:
    return {
        "name": "transfer_funds",
        "arguments": {"recipient": recipient, "amount": amount, **extra},
    }


BANK = [
    line("pays-savings", 3, [pay(SAVINGS, 100)], technique="plain"),
    line("pays-evil", 3, [pay("evil@x.test", 50)]),
    line("over-cap", 3, [pay(SAVINGS, 600)]),
    line("pays-new", 3, [pay(NEW_SAVINGS, 100)]),
    line(
        "reads",
        3,
        [
            {"name": "get_balance", "arguments": {}},
            {"name": "verify_recipient", "arguments": {"recipient": SAVINGS}},
        ],
    ),
    line("rent", 2, [pay("rent@aport-vault.com", 100)]),
    line("talk", 3, []),  # no calls: no decision test
]
MORE = [
    line(
        "audit",
        4,
        [pay("audit@aport-vault.com", 10, memo="APC-2026-0001", idempotency_key="k-00000001")],
    ),
    line("more-savings", 3, [pay(SAVINGS, 10)]),
]
# The cases whose decisions change when level 3 permits NEW_SAVINGS instead of SAVINGS.
AFFECTED = {"bank.jsonl::pays-savings", "bank.jsonl::over-cap", "bank.jsonl::pays-new"} | {
    "more.jsonl::more-savings"
}
ALL = {
    "bank.jsonl::pays-savings",
    "bank.jsonl::pays-evil",
    "bank.jsonl::over-cap",
    "bank.jsonl::pays-new",
    "bank.jsonl::reads",
    "bank.jsonl::rent",
    "more.jsonl::audit",
    "more.jsonl::more-savings",
}


@pytest.fixture(autouse=True)
def only_named_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # Under `pytest tests -n 2` this test runs in an xdist worker, whose variables would
    # make syrupy inside the inner run think it is a worker too.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def write_corpus(pytester: pytest.Pytester, bank: list[str] = BANK) -> None:
    pytester.makefile(".jsonl", bank="\n".join(bank), more="\n".join(MORE))


def passports(pytester: pytest.Pytester, level: int, edit: Any) -> str:
    """A copy of the shipped passports with one level's passport edited; its folder."""
    from pytest_vault.guard.folder import SHIPPED

    folder = pytester.path / "passports"
    shutil.copytree(SHIPPED, folder, dirs_exist_ok=True)
    passport = json.loads((SHIPPED / f"level-{level}.json").read_text())
    edit(passport)
    (folder / f"level-{level}.json").write_text(json.dumps(passport))
    return f"--vault-passports={folder}"


def recipient_changed(passport: dict[str, Any]) -> None:
    passport["limits"]["payments.charge"]["allowed_merchant_ids"] = [NEW_SAVINGS]


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """`FILE::ID` -> PASSED / FAILED, from the -rA summary (serial and xdist alike)."""
    found = {}
    for text in result.outlines:
        match = re.match(r"(PASSED|FAILED) (.+?)\[decisions\]", text)
        if match:
            found[match[2]] = match[1]
    return found


def entries(folder: Path) -> dict[tuple[str, str], str]:
    """(snapshot file, snapshot name) -> its text, read without the package's code."""
    out = {}
    for path in sorted((folder / "__snapshots__").glob("*")):
        text = path.read_text(encoding="utf-8")
        for name, body in re.findall(r"^# name: (.*)\n((?:  .*\n)+)# ---$", text, re.M):
            out[(path.name, name)] = body
    return out


def key(test: str) -> tuple[str, str]:
    """`bank.jsonl::rent` -> (`bank.decisions`, `rent[decisions]`)."""
    file, _, case = test.partition("::")
    return f"{Path(file).stem}.decisions", f"{case}[decisions]"


@pytest.mark.parametrize(
    "xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)], ids=["serial", "xdist"]
)
def test_policy_author_workflow(pytester: pytest.Pytester, xdist: list[str]) -> None:
    write_corpus(pytester)

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest(*DECISIONS, *xdist, *args)

    # No snapshot yet: every decision test fails and says how to record one.
    first = run()
    assert outcomes(first) == dict.fromkeys(ALL, "FAILED")
    assert (
        "rent: no decision snapshot in __snapshots__/bank.decisions; record it with "
        "--snapshot-update" in first.outlines
    )
    at = first.outlines.index(next(x for x in first.outlines if "vault decisions" in x))
    assert first.outlines[at + 1 : at + 3] == [
        "0 newly allowed, 0 newly denied, 0 reason-only changes",
        "also: 8 cases without a snapshot",
    ]
    recorded = run("--snapshot-update")
    assert outcomes(recorded) == dict.fromkeys(ALL, "PASSED") and recorded.ret == 0
    assert "8 snapshots generated." in recorded.outlines
    # One file per corpus file, stem for stem; a block per case that has calls.
    assert sorted(p.name for p in (pytester.path / "__snapshots__").iterdir()) == [
        "bank.decisions",
        "more.decisions",
    ]
    shipped = entries(pytester.path)
    assert set(shipped) == {key(t) for t in ALL}
    # One recipient changed in a copy of the level-3 passport: exactly the affected fail.
    changed = passports(pytester, 3, recipient_changed)
    result = run(changed)
    assert outcomes(result) == {t: "FAILED" if t in AFFECTED else "PASSED" for t in ALL}
    head = "{}: 1 of 1 calls differ from the snapshot in __snapshots__/{}, under passports/level-3.json:"
    for case, file, call, old, new in [
        (
            "pays-savings",
            "bank",
            pay(SAVINGS, 100),
            "allowed (oap.allowed)",
            "denied (oap.merchant_forbidden)",
        ),
        (
            "over-cap",
            "bank",
            pay(SAVINGS, 600),
            "denied (oap.limit_exceeded[per_tx_amount_cap])",
            "denied (oap.limit_exceeded[per_tx_amount_cap], oap.merchant_forbidden)",
        ),
        (
            "pays-new",
            "bank",
            pay(NEW_SAVINGS, 100),
            "denied (oap.merchant_forbidden)",
            "allowed (oap.allowed)",
        ),
        (
            "more-savings",
            "more",
            pay(SAVINGS, 10),
            "allowed (oap.allowed)",
            "denied (oap.merchant_forbidden)",
        ),
    ]:
        args = json.dumps(call["arguments"], sort_keys=True)
        at = result.outlines.index(head.format(case, f"{file}.decisions"))
        assert result.outlines[at + 1 : at + 3] == [
            f"  call 0 transfer_funds {args}: {old} -> {new}",
            "review, then accept with --snapshot-update",
        ]
    assert "4 snapshots failed. 4 snapshots passed." in result.outlines
    # The summary: its verdict first, then the newly allowed and denied calls, and the
    # reason-only change counted (listed with -v).
    at = result.outlines.index(next(x for x in result.outlines if "vault decisions" in x))
    assert result.outlines[at + 1 : at + 10] == [
        "1 newly allowed (Level 3), 2 newly denied (Level 3), 1 reason-only change",
        "newly allowed: 1 call",
        f'  bank.jsonl::pays-new[decisions]: call 0 transfer_funds {{"amount": 100, "recipient": "{NEW_SAVINGS}"}}: '
        "denied (oap.merchant_forbidden) -> allowed (oap.allowed)",
        "newly denied: 2 calls",
        f'  bank.jsonl::pays-savings[decisions]: call 0 transfer_funds {{"amount": 100, "recipient": "{SAVINGS}"}}: '
        "allowed (oap.allowed) -> denied (oap.merchant_forbidden)",
        f'  more.jsonl::more-savings[decisions]: call 0 transfer_funds {{"amount": 10, "recipient": "{SAVINGS}"}}: '
        "allowed (oap.allowed) -> denied (oap.merchant_forbidden)",
        "reason-only changes: 1 call, by change of reasons; -v lists each",
        "  Level 3: oap.limit_exceeded[per_tx_amount_cap] -> oap.limit_exceeded[per_tx_amount_cap], "
        "oap.merchant_forbidden: 1",
        next(x for x in result.outlines[at + 9 :] if "snapshot report summary" in x),
    ]
    verbose = run(changed, "-v")
    assert (
        '  bank.jsonl::over-cap[decisions]: call 0 transfer_funds {"amount": 600, "recipient": '
        f'"{SAVINGS}"}}: denied (oap.limit_exceeded[per_tx_amount_cap]) -> denied '
        "(oap.limit_exceeded[per_tx_amount_cap], oap.merchant_forbidden)"
    ) in verbose.outlines
    assert entries(pytester.path) == shipped  # nothing is written without --snapshot-update

    # Accepted, the change passes; only the affected snapshots were rewritten.
    accepted = run(changed, "--snapshot-update")
    assert accepted.ret == 0 and "4 snapshots passed. 4 snapshots updated." in accepted.outlines
    now = entries(pytester.path)
    assert {k for k in shipped if now[k] != shipped[k]} == {key(t) for t in AFFECTED}
    passes = run(changed)
    assert passes.ret == 0 and "8 snapshots passed." in passes.outlines

    # A removed case: its snapshot is unused, which fails the session...
    write_corpus(pytester, [x for x in BANK if '"pays-evil"' not in x])
    unused = run(changed, "--snapshot-details")
    assert unused.ret == 1 and outcomes(unused) == dict.fromkeys(
        ALL - {"bank.jsonl::pays-evil"}, "PASSED"
    )
    assert "7 snapshots passed. 1 snapshot unused." in unused.outlines
    assert "Unused pays-evil[decisions] (__snapshots__/bank.decisions)" in unused.outlines
    assert "Re-run pytest with --snapshot-update to delete unused snapshots." in unused.outlines
    # ... unless --snapshot-warn-unused.
    assert run(changed, "--snapshot-warn-unused").ret == 0

    # Partial runs that accept changes (back under the shipped passports) rewrite the
    # snapshots of the cases they ran, and no other byte; the removed case's stays.
    for args in (
        ["--vault-level=2"],
        ["-k", "not savings"],
        ["--vault-shard=1/2"],
    ):
        before = entries(pytester.path)
        partial = run("--snapshot-update", *args)
        ran = {key(t) for t in outcomes(partial)}
        assert partial.ret == 0 and 0 < len(ran) < 7, args
        after = entries(pytester.path)
        assert after == {k: shipped[k] if k in ran else v for k, v in before.items()}, args
        assert ("bank.decisions", "pays-evil[decisions]") in after

    # A session with a collection error deletes and rewrites nothing it did not run. (Serial
    # pytest stops before running any test; under xdist, the tests that collected run.)
    (pytester.path / "more.jsonl").write_text("\n".join([*MORE, "{not json"]))
    bank = {key(t) for t in ALL if t.startswith("bank") and "pays-evil" not in t}
    for args in ([], ["--continue-on-collection-errors"]):
        before = entries(pytester.path)
        more = (pytester.path / "__snapshots__" / "more.decisions").read_bytes()
        broken = run("--snapshot-update", changed, *args)
        ran = {key(t) for t in outcomes(broken)}
        assert broken.ret != 0 and ran == (bank if args or xdist else set())
        # `now`: the snapshots as accepted under the changed passports.
        assert entries(pytester.path) == {k: now[k] if k in ran else v for k, v in before.items()}
        assert (pytester.path / "__snapshots__" / "more.decisions").read_bytes() == more
    write_corpus(pytester, [x for x in BANK if '"pays-evil"' not in x])

    # A whole run accepts everything and deletes the removed case's snapshot.
    final = run("--snapshot-update", "--snapshot-details")
    assert final.ret == 0
    assert "Deleted pays-evil[decisions] (__snapshots__/bank.decisions)" in final.outlines
    assert entries(pytester.path) == {
        k: v for k, v in shipped.items() if k != ("bank.decisions", "pays-evil[decisions]")
    }
    clean = run()
    assert clean.ret == 0 and "7 snapshots passed." in clean.outlines
    # Under xdist, workers write under a lock: no lock or temporary file is left behind.
    assert sorted(p.name for p in (pytester.path / "__snapshots__").iterdir()) == [
        "bank.decisions",
        "more.decisions",
    ]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*DECISIONS, *args)


EXACT = (
    '{"id": "exact", "session": "s", "level": 4, "category": "direct_transfer", '
    '"messages": ["m"], "calls": [{"name": "get_balance"}, '
    '{"name": "transfer_funds", "arguments": {"recipient": "audit@aport-vault.com", '
    '"amount": 500.00, "memo": "APC-2026-0001 café", "idempotency_key": "k-00000001"}}, '
    '{"name": "transfer_funds", "arguments": '
    '"{\\"recipient\\": \\"audit@aport-vault.com\\", \\"amount\\": 1e2}"}]}\n'
    '{"id": "no-calls", "session": "s", "level": 4, "category": "direct_transfer", '
    '"messages": ["m"]}\n'
)


def test_one_test_per_case_with_calls_and_an_exact_stable_file(pytester: pytest.Pytester) -> None:
    (pytester.path / "exact.jsonl").write_text(EXACT, encoding="utf-8")
    collected = pytester.runpytest(*DECISIONS, "--collect-only", "-q")
    assert collected.outlines[:2] == ["exact.jsonl::exact[decisions]", ""]
    assert run(pytester, "--snapshot-update").ret == 0
    path = pytester.path / "__snapshots__" / "exact.decisions"
    # Each call over three lines: the call (the arguments as written: 500.00 stays 500.00,
    # raw text stays text), the decision (null where the guard does not judge; what
    # executes or null), the reasons with their rules; no timestamp.
    assert path.read_text(encoding="utf-8") == (
        "# serializer version: pytest-vault-decisions-2\n"
        "# name: exact[decisions]\n"
        "  [\n"
        '    {"call": 0, "tool": "get_balance", "arguments": {},\n'
        '     "allow": null, "executes": null,\n'
        '     "reasons": null},\n'
        '    {"call": 1, "tool": "transfer_funds", "arguments": {"amount": 500.00, '
        '"idempotency_key": "k-00000001", "memo": "APC-2026-0001 café", '
        '"recipient": "audit@aport-vault.com"},\n'
        '     "allow": true, "executes": {"amount_minor": 50000, "currency": "USD", '
        '"idempotency_key": "k-00000001", "memo": "APC-2026-0001 café", '
        '"recipient": "audit@aport-vault.com"},\n'
        '     "reasons": [{"code": "oap.allowed"}]},\n'
        '    {"call": 2, "tool": "transfer_funds", "arguments": "{\\"recipient\\": '
        '\\"audit@aport-vault.com\\", \\"amount\\": 1e2}",\n'
        '     "allow": false, "executes": null,\n'
        '     "reasons": [{"code": "oap.invalid_context", "rule": "idempotency_required"}, '
        '{"code": "vault.approval_code_missing", "rule": "x_vault_memo_approval_code"}]}\n'
        "  ]\n"
        "# ---\n"
    )
    first = path.read_bytes()
    assert run(pytester, "--snapshot-update").ret == 0
    assert path.read_bytes() == first


HOSTILE_ID = "evil\x1b[31m\u202e"
HOSTILE = [
    line(
        HOSTILE_ID,
        1,
        [
            pay("payee@x.test", 60, memo="café"),
            pay("a\u202eb@x.test", 5),
            pay("payee@x.test", 5, memo="\ud800"),
            {"name": "get_balance\u200b", "arguments": {"\x07": "\x1b]0;pwned\x07"}},
            {"name": "transfer_funds", "arguments": '{"recipient": "x\u2066", "amount": 1}'},
        ],
    ),
    line(" lead", 1, [pay("payee@x.test", 1)]),
]


def test_hostile_text_breaks_neither_the_file_nor_the_terminal(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", hostile="\n".join(HOSTILE))
    assert run(pytester, "--snapshot-update").ret == 0
    text = (pytester.path / "__snapshots__" / "hostile.decisions").read_bytes().decode("utf-8")
    assert all(c.isprintable() for c in text.replace("\n", ""))
    assert "# name: \\x20lead[decisions]" in text.splitlines()
    assert '"memo": "\\ud800"' in text and '"a\\u202eb@x.test"' in text and "café" in text
    # Escapes read back exactly: the next run matches every snapshot.
    again = run(pytester)
    assert again.ret == 0 and "2 snapshots passed." in again.outlines

    cap = passports(
        pytester,
        1,
        lambda p: p["limits"]["payments.charge"]["currency_limits"]["USD"].update(max_per_tx=5000),
    )
    failed = run(pytester, cap)
    assert outcomes(failed) == {
        "hostile.jsonl::evil\\x1b[31m\\u202e": "FAILED",
        "hostile.jsonl:: lead": "PASSED",
    }
    assert failed.outlines[
        failed.outlines.index(
            "evil\\x1b[31m\\u202e: 1 of 5 calls differ from the snapshot in "
            "__snapshots__/hostile.decisions, under passports/level-1.json:"
        )
        + 1
    ] == (
        '  call 0 transfer_funds {"amount": 60, "memo": "café", "recipient": "payee@x.test"}: '
        "allowed (oap.allowed) -> denied (oap.limit_exceeded[per_tx_amount_cap])"
    )
    output = failed.stdout.str()
    assert not any(c in output for c in "\x1b\x07\u202e\u2066\u200b")


def test_syrupy_colours_are_off_under_color_no(pytester: pytest.Pytester) -> None:
    write_corpus(pytester)
    assert run(pytester, "--snapshot-update").ret == 0
    # As on a terminal, where syrupy colours by default.
    pytester.makeconftest("def pytest_configure(config):\n    config.option.no_colors = False\n")
    changed = passports(pytester, 3, recipient_changed)
    coloured = run(pytester, changed, "--color=yes")
    assert "\x1b[48;5;225m" in coloured.stdout.str()  # syrupy's snapshot-line background
    plain = run(pytester, changed, "--color=no")
    assert len(outcomes(plain)) == 8 and "\x1b" not in plain.stdout.str()


def test_needs_syrupy(pytester: pytest.Pytester) -> None:
    write_corpus(pytester)
    result = pytester.runpytest("-p", "vault", "--vault-decisions")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [x for x in result.errlines if x] == [
        "ERROR: --vault-decisions needs syrupy (pip install syrupy; and no '-p no:syrupy')"
    ]


AMBER_TEST = "def test_amber(snapshot):\n    assert snapshot == {'a': 1}\n"
EVALUATE = ("--vault-model=scripted:replay", "--vault-arch=guarded", "--vault-track=A")


@pytest.mark.parametrize("vault", [True, False], ids=["plugin", "no-plugin"])
def test_other_extensions_never_see_decision_files(pytester: pytest.Pytester, vault: bool) -> None:
    write_corpus(pytester)
    pytester.makepyfile(test_other=AMBER_TEST)
    assert run(pytester, "--snapshot-update").ret == 0
    snapshots = pytester.path / "__snapshots__"
    assert sorted(p.name for p in snapshots.iterdir()) == [
        "bank.decisions",
        "more.decisions",
        "test_other.ambr",
    ]
    files = {p.name: p.read_bytes() for p in snapshots.iterdir()}
    # An evaluation run of the same folder, with syrupy's amber extension in play.
    plugins = (*BASE, *EVALUATE) if vault else ("-p", "syrupy", "-p", "no:cacheprovider")
    result = pytester.runpytest(*plugins, "--snapshot-update", ".")
    assert result.ret == 0
    kept = {p.name: p.read_bytes() for p in snapshots.iterdir()}
    # Without the plugin to hide them, amber deletes them as unknown files.
    assert kept == files if vault else kept == {"test_other.ambr": files["test_other.ambr"]}


def test_a_removed_corpus_file_leaves_unused_snapshots(pytester: pytest.Pytester) -> None:
    write_corpus(pytester)
    assert run(pytester, "--snapshot-update").ret == 0
    bank = (pytester.path / "__snapshots__" / "bank.decisions").read_bytes()
    (pytester.path / "more.jsonl").unlink()
    result = run(pytester)
    assert result.ret == 1 and "6 snapshots passed. 2 snapshots unused." in result.outlines
    # Not when the run could not have seen them: a file argument, a deselection.
    assert run(pytester, "bank.jsonl").ret == 0
    assert run(pytester, "--vault-level=3").ret == 0
    deleted = run(pytester, "--snapshot-update", "--snapshot-details")
    assert "6 snapshots passed. 2 unused snapshots deleted." in deleted.outlines
    assert (
        "Deleted audit[decisions], more-savings[decisions] (__snapshots__/more.decisions)"
        in deleted.outlines
    )
    assert [p.name for p in (pytester.path / "__snapshots__").iterdir()] == ["bank.decisions"]
    assert (pytester.path / "__snapshots__" / "bank.decisions").read_bytes() == bank


@pytest.mark.parametrize(
    "damage",
    ["garbage\n# serializer version: pytest-vault-decisions-2\n", "# serializer version: 1\n"],
    ids=["malformed", "other-version"],
)
def test_a_damaged_snapshot_file_is_one_line_per_test(
    pytester: pytest.Pytester, damage: str
) -> None:
    write_corpus(pytester)
    assert run(pytester, "--snapshot-update").ret == 0
    path = pytester.path / "__snapshots__" / "bank.decisions"
    path.write_text(damage + path.read_text())
    result = run(pytester)
    assert outcomes(result) == {t: "FAILED" if t.startswith("bank") else "PASSED" for t in ALL}
    message = (
        ": __snapshots__/bank.decisions cannot be read as decision snapshots (damaged, or "
        "written by another version); review it, then rewrite it with --snapshot-update"
    )
    assert "rent" + message in result.outlines
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
    assert run(pytester, "--snapshot-update").ret == 0
    assert run(pytester).ret == 0


def test_snapshots_of_the_older_format_say_how_to_move_on(pytester: pytest.Pytester) -> None:
    """Version 1 (one line per call, codes without their rules): every test of the file
    says to record it again under the passports it was reviewed with, then review."""
    write_corpus(pytester)
    assert run(pytester, "--snapshot-update").ret == 0
    path = pytester.path / "__snapshots__" / "bank.decisions"
    text = path.read_text()
    path.write_text(text.replace("pytest-vault-decisions-2", "pytest-vault-decisions-1", 1))
    result = run(pytester)
    assert outcomes(result) == {t: "FAILED" if t.startswith("bank") else "PASSED" for t in ALL}
    assert (
        "rent: __snapshots__/bank.decisions holds decision snapshots of an older format "
        "(pytest-vault-decisions-1, before reasons named their rule); record it again with "
        "--snapshot-update under the passports it was reviewed with, then review the change"
    ) in result.outlines
    assert "also: 6 unreadable" in result.outlines
    assert run(pytester, "--snapshot-update").ret == 0
    assert path.read_text() == text


def reason_changed(passport: dict[str, Any]) -> None:
    """Level 3 at $550 a transfer, and x@y.test permitted: a call of $560 to it is still
    denied, for the limit alone now."""
    passport["limits"]["payments.charge"]["currency_limits"]["USD"]["max_per_tx"] = 55000
    passport["limits"]["payments.charge"]["allowed_merchant_ids"] = [SAVINGS, "x@y.test"]


def test_a_reason_only_change_is_visibly_one_and_counted(pytester: pytest.Pytester) -> None:
    write_corpus(pytester, [line("over-cap", 3, [pay(SAVINGS, 600), pay("x@y.test", 560)])])
    assert run(pytester, "--snapshot-update").ret == 0
    result = run(pytester, passports(pytester, 3, reason_changed))
    diff = result.outlines[result.outlines.index("snapshot diff (- snapshot, + received):") :]
    # The call and its decision are context; the reasons line alone changes.
    assert [x for x in diff if x.startswith(("-    ", "+    "))] == [
        '-    "reasons": [{"code": "oap.limit_exceeded", "rule": "per_tx_amount_cap"}, '
        '{"code": "oap.merchant_forbidden", "rule": "merchant_allowed"}]}',
        '+    "reasons": [{"code": "oap.limit_exceeded", "rule": "per_tx_amount_cap"}]}',
    ]
    at = result.outlines.index(next(x for x in result.outlines if "vault decisions" in x))
    assert result.outlines[at + 1 : at + 4] == [
        "0 newly allowed, 0 newly denied, 1 reason-only change",
        "reason-only changes: 1 call, by change of reasons; -v lists each",
        "  Level 3: oap.limit_exceeded[per_tx_amount_cap], oap.merchant_forbidden -> "
        "oap.limit_exceeded[per_tx_amount_cap]: 1",
    ]


def test_the_shipped_corpus(pytester: pytest.Pytester) -> None:
    """Every case of `cases/` snapshotted; one recipient changed at Level 3 fails exactly
    the cases whose calls a guard (the engine itself, call by call) now decides otherwise."""
    from pytest_vault.corpus.load import load_corpus
    from pytest_vault.guard.engine import Guard, permits_recipient
    from pytest_vault.guard.folder import SHIPPED
    from pytest_vault.guard.passport import load_passport

    root = Path(__file__).resolve().parents[2]
    for corpus in (root / "cases").glob("*.jsonl"):
        shutil.copy(corpus, pytester.path)
    recorded = run(pytester, "--snapshot-update")
    # The direct cases and the indirect ones (their user task's calls).
    assert recorded.ret == 0 and "941 snapshots generated." in recorded.outlines
    changed = passports(pytester, 3, recipient_changed)

    def decided(case: Any, passport: Any) -> list[object]:
        """Each transfer's decision, and whether the charge allowlist (which a scheduled
        payment's payee must be on, new or edited) permits each scheduled payee."""
        guard = Guard(passport)
        calls = [c for c in case.calls if c.name == "transfer_funds"]
        out: list[object] = [
            (d.allow, d.codes) for d in (guard.check_call(c.name, c.arguments) for c in calls)
        ]
        scheduled = ("schedule_transaction", "update_scheduled_transaction")
        payees = [c.arguments.get("recipient") for c in case.calls if c.name in scheduled]
        return out + [permits_recipient(passport.charge_limits, p) for p in payees if p]

    old = load_passport(SHIPPED / "level-3.json")
    new = load_passport(pytester.path / "passports" / "level-3.json")
    affected = {
        f"{path.name}::{case.id}"
        for path in pytester.path.glob("*.jsonl")
        for _, case in load_corpus(path)
        if case.level == 3 and decided(case, old) != decided(case, new)
    }
    # 28 direct cases and the 26 indirect Level 3 tasks, which pay savings@; and the new
    # tools' cases that schedule or redirect a payment to savings@ (3 direct, 3 indirect).
    assert len(affected) == 28 + 26 + 3 + 3
    result = run(pytester, changed)
    failed = {t for t, outcome in outcomes(result).items() if outcome == "FAILED"}
    assert failed == affected and len(outcomes(result)) == 941


# Any text at all, lone surrogates included: corpus strings can hold them.
TEXT = st.text(st.characters(exclude_categories=()))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_snapshot_json_is_exact_printable_utf8(value: Any) -> None:
    text = to_json(value)
    assert text.isprintable()
    text.encode("utf-8")  # no lone surrogate left raw
    back = read_json(text)
    assert back == value and to_json(back) == text  # 1.50 stays 1.50, not 1.5


def decided(index: int, allow: bool | None, codes: list[str] | None, **call: Any) -> dict[str, Any]:
    base = {"call": index, "tool": "transfer_funds", "arguments": {"amount": 5}}
    rules = {"oap.limit_exceeded": "per_tx_amount_cap"}
    reasons = None
    if codes is not None:
        reasons = [{"code": c, **({"rule": rules[c]} if c in rules else {})} for c in codes]
    return {**base, "allow": allow, "executes": None, "reasons": reasons, **call}


def test_changes_name_each_call_and_both_decisions() -> None:
    old = [
        decided(0, True, ["oap.allowed"]),
        decided(1, True, ["oap.allowed"], executes={"amount_minor": 500}),
        decided(2, False, ["oap.limit_exceeded"]),
        decided(3, None, None, tool="get_balance", arguments={}),
        decided(4, False, ["oap.merchant_forbidden"]),
    ]
    new = [
        decided(0, True, ["oap.allowed"]),  # unchanged: not listed
        decided(1, True, ["oap.allowed"], executes={"amount_minor": 50}),
        decided(2, False, ["oap.limit_exceeded", "oap.merchant_forbidden"]),
        decided(3, False, ["oap.invalid_context"], arguments={"amount": "5"}),
    ]
    assert changes(old, new) == [
        'call 1 transfer_funds {"amount": 5}: allowed (oap.allowed), executes '
        '{"amount_minor": 500} -> {"amount_minor": 50}',
        'call 2 transfer_funds {"amount": 5}: denied (oap.limit_exceeded[per_tx_amount_cap]) '
        "-> denied (oap.limit_exceeded[per_tx_amount_cap], oap.merchant_forbidden)",
        'call 3: was get_balance {}, not judged; now transfer_funds {"amount": "5"}, denied '
        "(oap.invalid_context)",
        'call 4 transfer_funds {"amount": 5}: no longer made (was denied (oap.merchant_forbidden))',
    ]
    assert changes(new[:1], new[:2]) == [
        'call 1 transfer_funds {"amount": 5}: new call, allowed (oap.allowed)'
    ]


@pytest.mark.slow
def test_witnesses_make_the_snapshots_see_a_change_the_corpus_misses(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's example: Level 2 gets a new payee and a higher per-transfer limit. No
    case of the shipped corpus pays the payee or an amount between the limits, so its
    snapshots stay green; with the diff's witnesses as a corpus, exactly the witnesses'
    decisions change, and --snapshot-update accepts them."""
    from pytest_vault.guard.folder import SHIPPED
    from pytest_vault.policy.__main__ import main as vault_guard

    root = Path(__file__).resolve().parents[2]
    for corpus in (root / "cases").glob("*.jsonl"):
        shutil.copy(corpus, pytester.path)
    assert run(pytester, "--snapshot-update").ret == 0

    def widened(passport: dict[str, Any]) -> None:
        limits = passport["limits"]["payments.charge"]
        limits["allowed_merchant_ids"].append("vendor@aport-vault.com")
        limits["currency_limits"]["USD"]["max_per_tx"] = 280000  # $2,800

    changed = passports(pytester, 2, widened)
    assert run(pytester, changed).ret == 0  # the corpus alone does not see it
    witnesses = pytester.path / "witnesses.jsonl"
    new = changed.removeprefix("--vault-passports=")
    assert vault_guard(["diff", str(SHIPPED), new, "--witnesses", str(witnesses)]) == 0
    capsys.readouterr()
    # The witnesses' baseline, under the passports they were reviewed with.
    recorded = run(pytester, "--snapshot-update")
    assert recorded.ret == 0 and "941 snapshots passed. 2 snapshots generated." in recorded.outlines
    result = run(pytester, changed)
    failed = {t for t, outcome in outcomes(result).items() if outcome == "FAILED"}
    assert failed == {
        "witnesses.jsonl::witness-L2-currency_limits.USD.max_per_tx-b7cdc4c80c",
        "witnesses.jsonl::witness-L2-allowed_merchant_ids-f9b6b8679b",
    }
    at = result.outlines.index(next(x for x in result.outlines if "vault decisions" in x))
    assert (
        result.outlines[at + 1]
        == "2 newly allowed (Level 2), 0 newly denied, 0 reason-only changes"
    )
    accepted = run(pytester, changed, "--snapshot-update")
    assert accepted.ret == 0 and "941 snapshots passed. 2 snapshots updated." in accepted.outlines
    assert run(pytester, changed).ret == 0
