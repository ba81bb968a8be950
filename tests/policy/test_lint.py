"""`vault-guard lint`: fail-open and deny-everything mistakes, each by file, pointer and code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import PassportError, read_passport
from pytest_vault.policy.__main__ import main
from pytest_vault.policy.lint import Finding, lint_paths

from ..guard.lines import dumped, written_line

L = "/limits/payments.charge"
ALLOW = f"{L}/allowed_merchant_ids"
USD = f"{L}/currency_limits/USD"
RENT, PAYROLL = "rent@aport-vault.com", "payroll@aport-vault.com"
NOW = datetime(2027, 6, 1, tzinfo=UTC)


def raw(level: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SHIPPED / f"level-{level}.json").read_text())
    return data


def charge(data: dict[str, Any]) -> dict[str, Any]:
    limits: dict[str, Any] = data["limits"]["payments.charge"]
    return limits


def write(tmp_path: Path, data: object, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else dumped(data))
    return path


def at(data: object, pointer: str) -> int:
    """The line `write` puts the pointer's field on (the oracle's, not the linter's)."""
    return written_line(data, [int(p) if p.isdigit() else p for p in pointer.split("/")[1:]])


def findings(tmp_path: Path, data: object) -> list[tuple[str, str, str]]:
    return [(f.pointer, f.severity, f.code) for f in lint_paths([write(tmp_path, data)], now=NOW)]


def loader_message(path: Path) -> str:
    with warnings.catch_warnings(), pytest.raises(PassportError) as excinfo:
        warnings.simplefilter("ignore")
        read_passport(path)
    return str(excinfo.value)


def test_the_shipped_passports_lint_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert lint_paths([SHIPPED], now=NOW) == []
    assert main(["lint", str(SHIPPED)]) == 0
    assert capsys.readouterr() == ("", "vault-guard lint: 0 errors, 0 warnings\n")


# -- errors ---------------------------------------------------------------------------------


def test_empty_allowlist_is_an_error(tmp_path: Path) -> None:
    data = raw(2)
    charge(data)["allowed_merchant_ids"] = []
    (finding,) = lint_paths([write(tmp_path, data)], now=NOW)
    assert finding == Finding(
        str(tmp_path / "p.json"),
        ALLOW,
        "error",
        "empty-allowlist",
        "EMPTY allowlist: the published pack reads it as 'any recipient' (fail-open); "
        'write ["*"] if that is meant, or list the recipients',
        at(data, ALLOW),
    )
    assert finding.lineno == 38  # as the shipped level-2.json is laid out by `dumped`


def test_expiry(tmp_path: Path) -> None:
    data = {k: v for k, v in raw(3).items() if k != "never_expires"}
    expired = {**data, "expires_at": "2027-06-01T00:00:00Z"}  # the very moment: expired
    assert findings(tmp_path, expired) == [("/expires_at", "error", "expired")]
    assert findings(tmp_path, {**data, "expires_at": "2027-06-01T00:00:01Z"}) == []
    assert findings(tmp_path, {**expired, "never_expires": False}) == [
        ("/expires_at", "error", "expired")
    ]
    (ignored,) = lint_paths([write(tmp_path, {**expired, "never_expires": True})], now=NOW)
    assert (ignored.pointer, ignored.severity, ignored.code, ignored.message) == (
        "/expires_at",
        "warning",
        "expiry-ignored",
        "never_expires is true, so expires_at 2027-06-01T00:00:00Z is ignored",
    )


# Where the engine reads "no limit": an error where the passport states a limit it does not
# give, a warning where it leaves a cap out, nothing where leaving out is the pack's way of
# saying there is no such rule.
def test_an_expiry_stated_without_a_date_is_an_error(tmp_path: Path) -> None:
    data = {**raw(3), "never_expires": False}  # and no expires_at
    path = write(tmp_path, data)
    assert lint_paths([path], now=NOW) == [
        Finding(
            str(path),
            "/never_expires",
            "error",
            "expiry-missing",
            "never_expires is false but there is no expires_at: the guard reads it as never "
            "expiring; give expires_at, or write never_expires: true if that is meant",
            at(data, "/never_expires"),
        )
    ]
    assert main(["lint", str(path)]) == 1
    # The guard does read it as never expiring: a call decades on is still judged.
    later = Guard(read_passport(path)[0], clock=lambda: datetime(2099, 1, 1, tzinfo=UTC))
    call = {"recipient": "savings@aport-vault.com", "amount": 1}
    assert later.check_call("transfer_funds", call).codes == ("oap.allowed",)


@pytest.mark.parametrize("never_expires", ["absent", None])
def test_no_expiry_at_all_is_a_warning(tmp_path: Path, never_expires: str | None) -> None:
    data = {k: v for k, v in raw(3).items() if k != "never_expires"}
    if never_expires is None:
        data["never_expires"] = None
    path = write(tmp_path, data)
    assert lint_paths([path], now=NOW) == [
        Finding(
            str(path),
            "/expires_at",
            "warning",
            "no-expiry",
            "no expires_at and no never_expires: the passport never expires; write "
            "never_expires: true if that is meant, or give expires_at",
            1,  # the field is not there: the line of the object that lacks it
        )
    ]
    assert main(["lint", str(path)]) == 0


def test_an_expiry_said_either_way_is_clean(tmp_path: Path) -> None:
    data = {k: v for k, v in raw(3).items() if k != "never_expires"}
    for said in (
        {"never_expires": True},
        {"never_expires": False, "expires_at": "2030-01-01T00:00:00Z"},
        {"expires_at": "2030-01-01T00:00:00Z"},
    ):
        assert findings(tmp_path, {**data, **said}) == []


def test_no_item_cap_is_a_warning(tmp_path: Path) -> None:
    data = raw(3)
    del charge(data)["max_items_per_tx"]
    path = write(tmp_path, data)
    where = f"{L}/max_items_per_tx"
    assert lint_paths([path], now=NOW) == [
        Finding(
            str(path),
            where,
            "warning",
            "no-item-cap",
            "no max_items_per_tx: a pack context may carry any number of items",
            at(data, where),
        )
    ]
    assert at(data, where) == at(data, L)  # the line of the limits that lack it


def test_an_empty_country_allowlist_is_an_error(tmp_path: Path) -> None:
    data = raw(3)
    charge(data)["allowed_countries"] = []
    path = write(tmp_path, data)
    where = f"{L}/allowed_countries"
    assert lint_paths([path], now=NOW) == [
        Finding(
            str(path),
            where,
            "error",
            "empty-country-allowlist",
            "EMPTY allowed_countries: the published pack reads it as 'any shipping country' "
            "(fail-open); list the countries, or leave the field out if any is meant",
            at(data, where),
        )
    ]
    # As the engine reads it: a context shipping anywhere passes the country rule.
    context = {
        "amount": 100,
        "currency": "USD",
        "merchant_id": "savings@aport-vault.com",
        "region": "US",
        "items": [{"sku": "a", "qty": 1}],
        "shipping_country": "KP",
    }
    assert Guard(read_passport(path)[0]).check_context(context).codes == ("oap.allowed",)
    # Left out, or naming countries: the passport says what it means.
    del charge(data)["allowed_countries"]
    assert findings(tmp_path, data) == []
    charge(data)["allowed_countries"] = ["US"]
    assert findings(tmp_path, data) == []


def test_assurance_below_what_is_required(tmp_path: Path) -> None:
    low = {**raw(3), "assurance_level": "L1"}
    finding, packs = lint_paths([write(tmp_path, low)], now=NOW)
    assert (finding.pointer, finding.severity, finding.code, finding.message) == (
        "/assurance_level",
        "error",
        "assurance-below-minimum",
        "assurance_level L1 is below the pack's minimum L2: every call is denied (oap.assurance_insufficient)",
    )
    # The other packs it grants, in one finding beside it.
    assert (packs.pointer, packs.code, packs.message) == (
        "/assurance_level",
        "assurance-below-minimum",
        "assurance_level L1 is below what finance.payment.refund.v1, "
        "finance.payment.payout.v1, finance.transaction.execute.v1 require: every refund, "
        "payout, scheduled payment and account change is denied (oap.assurance_insufficient)",
    )
    raised = raw(3)  # L4KYC, as the refund pack's tiers need: L4FIN is above it
    charge(raised)["require_assurance_at_least"] = "L4FIN"
    (finding,) = lint_paths([write(tmp_path, raised)], now=NOW)
    assert finding.message.startswith(
        "assurance_level L4KYC is below require_assurance_at_least L4FIN:"
    )
    # A passport that grants no payments denies nothing more for being L0.
    assert findings(tmp_path, {**raw(5), "assurance_level": "L0"}) == []


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d["limits"].clear(), L),
        (lambda d: charge(d).pop("currency_limits"), f"{L}/currency_limits"),
        (lambda d: charge(d).pop("allowed_merchant_ids"), f"{L}/allowed_merchant_ids"),
        (
            lambda d: charge(d)["currency_limits"]["USD"].update(max_per_tx="500"),
            f"{USD}/max_per_tx",
        ),
        (
            lambda d: charge(d)["currency_limits"].update(usd={"max_per_tx": 1}),
            f"{L}/currency_limits/usd",
        ),
        (lambda d: charge(d).update(idempotency_requried=True), f"{L}/idempotency_requried"),
        (lambda d: charge(d).update(allowed_merchant_ids=[RENT, 7]), f"{ALLOW}/1"),
    ],
)
def test_a_grant_without_readable_limits_is_the_loaders_error(
    tmp_path: Path, edit: Any, where: str
) -> None:
    data = raw(3)
    edit(data)
    path = write(tmp_path, data)
    (finding,) = lint_paths([path], now=NOW)
    line = at(data, where)
    assert finding == Finding(
        str(path), where, "error", "charge-limits-unreadable", loader_message(path), line
    )
    assert finding.message.startswith(f"{path}:{line}: limits.payments.charge")


@pytest.mark.parametrize(
    ("document", "where", "line"),
    [
        ('{"status": ', "", 1),
        ('{\n  "status": "active",\n\n  "status"', "", 4),
        ('{"a": 1, "a": 2}', "", 1),
        ('{\n  "a": {"b": 1},\n  "a": 2\n}', "", 3),
        ('{\n  "x": [1,\n    1e99999999999999999999]\n}', "", 3),
        (b"\xff{}", "", 1),
        (b'{\n  "a": "\xff"}', "", 2),
        ("[]", "", 1),
        ("\n\n[\n]", "", 3),
        # Line None: the oracle's, from where `dumped` writes the field.
        (dumped({**raw(3), "status": "paused"}), "/status", None),
        (dumped({k: v for k, v in raw(3).items() if k != "owner_id"}), "/owner_id", None),
        (dumped({**raw(3), "regions": ["us"]}), "/regions/0", None),
        (
            dumped({**raw(3), "capabilities": [{"id": "payments.charge", "x": 1}]}),
            "/capabilities/0/x",
            None,
        ),
        (dumped({**raw(3), "expires_at": "2030-01-01T00:00:00"}), "/expires_at", None),
        (dumped({**raw(5), "expires_at": "2030-01-01T00:00:00"}), "/expires_at", None),
    ],
)
def test_a_passport_that_cannot_be_loaded(
    tmp_path: Path, document: str | bytes, where: str, line: int | None
) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(document if isinstance(document, bytes) else document.encode())
    if line is None:
        assert isinstance(document, str)
        line = at(json.loads(document), where)
    (finding,) = lint_paths([path], now=NOW)
    assert finding == Finding(str(path), where, "error", "unloadable", loader_message(path), line)
    assert finding.message.startswith(f"{path}:{line}: ")


def test_unloadable_messages_are_the_loaders(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    bad = write(tmp_path, {**raw(3), "status": "paused"})
    assert [f.line() for f in lint_paths([missing, bad], now=NOW)] == [
        f"{missing}:: error: {missing}: cannot read: No such file or directory",
        f"{bad}:8:/status: error: {bad}:8: status: Input should be 'draft', 'active', 'suspended' or 'revoked'",
    ]


def test_entries_that_can_never_match(tmp_path: Path) -> None:
    data = raw(2)
    entries = [RENT, "evil@x.test ", "ev\u200bil@x.test", "", "\x1b[2Jevil", "a" * 255, PAYROLL]
    charge(data)["allowed_merchant_ids"] = entries
    found = lint_paths([write(tmp_path, data)], now=NOW)
    assert [(f.pointer, f.severity, f.code) for f in found] == [
        (f"{ALLOW}/{i}", "error", "unmatchable-recipient") for i in (1, 2, 3, 4, 5)
    ]
    assert [f.message for f in found[:4]] == [
        "'evil@x.test ' can never match: the guard denies such a recipient (recipient has surrounding whitespace: 'evil@x.test ')",
        "'ev\\u200bil@x.test' can never match: the guard denies such a recipient (recipient contains control or invisible characters: 'ev\\u200bil@x.test')",
        "'' can never match: the guard denies such a recipient (recipient must be 1 to 254 characters long)",
        "'\\x1b[2Jevil' can never match: the guard denies such a recipient (recipient contains control or invisible characters: '\\x1b[2Jevil')",
    ]


# -- warnings ---------------------------------------------------------------------------------


def test_duplicates_and_a_wildcard_beside_names(tmp_path: Path) -> None:
    data = raw(2)
    charge(data)["allowed_merchant_ids"] = [RENT, PAYROLL, RENT, "*", "*"]
    found = lint_paths([write(tmp_path, data)], now=NOW)
    assert [(f.pointer, f.severity, f.code, f.message) for f in found] == [
        (f"{ALLOW}/2", "warning", "duplicate-recipient", "'rent@aport-vault.com' repeats entry 0"),
        (
            f"{ALLOW}/3",
            "warning",
            "wildcard-beside-names",
            "'*' permits anyone, so the named entries beside it restrict nothing; e.g. "
            'transfer_funds {"amount": 1, "recipient": "payee-1@witness.example"} is allowed',
        ),
        (f"{ALLOW}/4", "warning", "duplicate-recipient", "'*' repeats entry 3"),
    ]
    charge(data)["allowed_merchant_ids"] = ["*", "*"]
    assert findings(tmp_path, data) == [(f"{ALLOW}/1", "warning", "duplicate-recipient")]


def test_currency_caps(tmp_path: Path) -> None:
    data = raw(3)
    charge(data)["currency_limits"] = {
        "USD": {"max_per_tx": 50000, "daily_cap": 10000},
        "EUR": {"max_per_tx": 50000},
        "XXX": {"max_per_tx": 1, "daily_cap": 1},
    }
    found = lint_paths([write(tmp_path, data)], now=NOW)
    assert [(f.pointer, f.severity, f.code, f.message) for f in found] == [
        (
            f"{USD}/max_per_tx",
            "warning",
            "max-above-daily-cap",
            "max_per_tx $500.00 is above daily_cap $100.00: the daily cap is the real "
            'limit, and max_per_tx can never bind; e.g. transfer_funds {"amount": 100.01, '
            '"recipient": "savings@aport-vault.com"} is denied (oap.limit_exceeded[daily_cap_check])',
        ),
        (
            f"{L}/currency_limits/EUR",
            "warning",
            "no-daily-cap",
            "EUR has no daily_cap: any number of transfers a day",
        ),
        (
            f"{L}/currency_limits/XXX",
            "warning",
            "unknown-currency",
            "the guard knows no currency XXX: calls in it are always denied",
        ),
    ]
    charge(data)["currency_limits"] = {}
    assert findings(tmp_path, data) == [(f"{L}/currency_limits", "warning", "no-currencies")]


@pytest.mark.parametrize("status", ["suspended", "revoked", "draft"])
def test_a_status_other_than_active(tmp_path: Path, status: str) -> None:
    (finding,) = lint_paths([write(tmp_path, {**raw(5), "status": status})], now=NOW)
    assert (finding.pointer, finding.severity, finding.code, finding.message) == (
        "/status",
        "warning",
        "not-active",
        f"status is {status}: every call is denied (oap.passport_suspended)",
    )


def test_rules_that_deny_every_call(tmp_path: Path) -> None:
    data = {**raw(3), "regions": []}
    charge(data).update(approval_required=True, blocked_categories=["gambling", "funds_transfer"])
    assert findings(tmp_path, data) == [
        ("/regions", "warning", "no-regions"),
        (f"{L}/approval_required", "warning", "approval-required"),
        (f"{L}/blocked_categories/1", "warning", "transfers-blocked"),
        # The refund limits' regions meet none of the passport's (there are none).
        ("/limits/finance.payment.refund/regions", "warning", "no-regions"),
    ]


def test_findings_of_one_passport_in_order(tmp_path: Path) -> None:
    data = {**raw(2), "status": "suspended", "assurance_level": "L1"}
    charge(data)["allowed_merchant_ids"] = [RENT, RENT + "\n"]
    charge(data)["currency_limits"]["USD"].pop("daily_cap")
    assert findings(tmp_path, data) == [
        ("/status", "warning", "not-active"),
        ("/assurance_level", "error", "assurance-below-minimum"),
        (f"{ALLOW}/1", "error", "unmatchable-recipient"),
        (USD, "warning", "no-daily-cap"),
        # L1 is below the refund pack's L2 and the payout and execute packs' L3 too.
        ("/assurance_level", "error", "assurance-below-minimum"),
    ]
    # Each on the line of its field, however the file is laid out.
    found = lint_paths([tmp_path / "p.json"], now=NOW)
    assert [f.lineno for f in found] == [at(data, f.pointer) for f in found] == [8, 7, 39, 33, 7]
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(data))
    assert [f.lineno for f in lint_paths([compact], now=NOW)] == [1, 1, 1, 1, 1]
    crlf = tmp_path / "crlf.json"
    crlf.write_bytes(dumped(data).replace("\n", "\r\n").encode())
    assert [f.lineno for f in lint_paths([crlf], now=NOW)] == [8, 7, 39, 33, 7]


# -- rules of no effect, and over-broad ones ---------------------------------------------------


def test_limits_that_can_never_bind_are_found_at_their_line(tmp_path: Path) -> None:
    data = raw(3)
    charge(data)["currency_limits"] = {
        "USD": {"max_per_tx": 150000, "daily_cap": 100000},  # the daily cap binds first
        "EUR": {"max_per_tx": 20000, "daily_cap": 20000},  # as high: per-transfer never decides
    }
    data["capabilities"][1]["params"]["max_amount"] = 150000  # as max_per_tx: no finding
    charge(data)["require_assurance_at_least"] = "L1"  # below the pack's L2
    found = lint_paths([write(tmp_path, data)], now=NOW)
    assert [(f.pointer, f.severity, f.code) for f in found] == [
        (f"{L}/require_assurance_at_least", "warning", "assurance-requirement-never-binds"),
        (f"{USD}/max_per_tx", "warning", "max-above-daily-cap"),
        (f"{L}/currency_limits/EUR/max_per_tx", "warning", "limit-never-binds"),
    ]
    assert [f.lineno for f in found] == [at(data, f.pointer) for f in found]
    assurance, daily, equal = found
    assert assurance.message == (
        "require_assurance_at_least L1 can never bind: the pack's minimum L2 applies first"
    )
    assert equal.message == (
        "max_per_tx €200.00 equals daily_cap: every amount over it is over the daily cap "
        "too, so max_per_tx can never decide a call"
    )
    assert (assurance.witness, equal.witness) == (None, None)  # no call can show it
    # The witness: an amount within max_per_tx that the daily cap denies, as the engine says.
    assert daily.witness == {
        "tool": "transfer_funds",
        "arguments": {"recipient": "savings@aport-vault.com", "amount": 1000.01},
        "allow": False,
        "reasons": [{"code": "oap.limit_exceeded", "rule": "daily_cap_check"}],
    }
    decision = Guard(read_passport(tmp_path / "p.json")[0]).judge_call(
        "transfer_funds", daily.witness["arguments"]
    )
    assert (decision.allow, [r.rule for r in decision.reasons]) == (False, ["daily_cap_check"])


def test_a_wildcard_beside_names_and_entries_written_as_patterns(tmp_path: Path) -> None:
    data = raw(2)
    charge(data)["allowed_merchant_ids"] = [RENT, "*@aport-vault.com"]
    (pattern,) = lint_paths([write(tmp_path, data)], now=NOW)
    assert (pattern.pointer, pattern.severity, pattern.code, pattern.lineno) == (
        f"{ALLOW}/1",
        "error",
        "pattern-recipient",
        at(data, f"{ALLOW}/1"),
    )
    assert pattern.message == (
        "'*@aport-vault.com' is no pattern: the guard matches recipients exactly ('*' alone "
        "permits anyone), so it permits only a recipient of exactly that name; e.g. "
        'transfer_funds {"amount": 1, "recipient": "payee@aport-vault.com"} is denied '
        "(oap.merchant_forbidden)"
    )
    assert pattern.witness is not None and pattern.witness["allow"] is False
    # Beside "*" it covers nothing the wildcard does not: no call is denied, so no witness.
    charge(data)["allowed_merchant_ids"] = [RENT, "*@aport-vault.com", "*"]
    found = lint_paths([write(tmp_path, data)], now=NOW)
    assert [(f.code, f.witness is None) for f in found] == [
        ("pattern-recipient", True),
        ("wildcard-beside-names", False),
    ]
    assert found[1].witness == {
        "tool": "transfer_funds",
        "arguments": {"recipient": "payee-1@witness.example", "amount": 1},
        "allow": True,
        "reasons": [{"code": "oap.allowed"}],
    }


def test_limits_of_a_capability_not_granted_can_never_bind(tmp_path: Path) -> None:
    data = {**raw(3), "capabilities": [{"id": "account.read"}]}
    finding, *others = lint_paths([write(tmp_path, data)], now=NOW)
    # The other packs' limits, likewise.
    assert [(f.pointer, f.code) for f in others] == [
        (f"/limits/{c}", "dormant-limits")
        for c in ("finance.payment.refund", "payments.payout", "finance.transaction")
    ]
    assert others[0].message == (
        "limits.finance.payment.refund can never bind: the passport does not grant "
        "finance.payment.refund, so every refund is denied (oap.unknown_capability)"
    )
    assert (finding.pointer, finding.severity, finding.code, finding.lineno) == (
        L,
        "warning",
        "dormant-limits",
        at(data, L),
    )
    assert finding.message == (
        "limits.payments.charge can never bind: the passport does not grant payments.charge, "
        "so every call is denied (oap.unknown_capability) whatever they say"
    )


# -- files, folders and the command line ------------------------------------------------------


def test_folders_lint_every_json_file(tmp_path: Path) -> None:
    folder = tmp_path / "passports"
    shutil.copytree(SHIPPED, folder)
    write(folder, {**raw(1), "status": "draft"}, "level-1.json")
    write(folder, "{", "zz-extra.json")
    (folder / "notes.txt").write_text("{")  # not *.json: not read
    empty = tmp_path / "empty"
    empty.mkdir()
    found = lint_paths([folder, empty], now=NOW)
    assert [(Path(f.file).name, f.pointer, f.code) for f in found] == [
        ("level-1.json", "/status", "not-active"),
        ("zz-extra.json", "", "unloadable"),
        ("empty", "", "no-passports"),
    ]
    assert found[-1].message == f"{empty}: no *.json passports in this folder"


def test_cli_text_exit_status_and_escaping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = raw(2)
    charge(data)["allowed_merchant_ids"] = [RENT, "\x1b]0;pwned\x07"]
    bad = write(tmp_path, data, "bad\x1b.json")
    warn = write(tmp_path, {**raw(5), "status": "revoked"}, "warn.json")
    assert main(["lint", str(bad), str(warn)]) == 1
    out, err = capsys.readouterr()
    name = str(bad).replace("\x1b", "\\x1b")
    assert out == (
        f"{name}:{at(data, ALLOW + '/1')}:{ALLOW}/1: error: '\\x1b]0;pwned\\x07' can never match: "
        "the guard denies such a recipient (recipient contains control or invisible characters: "
        "'\\x1b]0;pwned\\x07')\n"
        f"{warn}:8:/status: warning: status is revoked: every call is denied (oap.passport_suspended)\n"
    )
    assert err == "vault-guard lint: 1 error, 1 warning\n"
    # Warnings alone pass.
    assert main(["lint", str(warn)]) == 0


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = raw(2)
    charge(data)["allowed_merchant_ids"] = []
    path = write(tmp_path, data, "l\u00e9vel-2.json")
    assert main(["lint", str(path), "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert out.isascii()
    assert json.loads(out) == {
        "findings": [
            {
                "file": str(path),
                "pointer": ALLOW,
                "severity": "error",
                "code": "empty-allowlist",
                "message": "EMPTY allowlist: the published pack reads it as 'any recipient' "
                '(fail-open); write ["*"] if that is meant, or list the recipients',
                "line": at(data, ALLOW),
                "witness": None,
            }
        ]
    }
    assert main(["lint", str(SHIPPED), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"findings": []}


def test_cli_as_a_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vault.policy", "lint", str(SHIPPED / "level-1.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "",
        "vault-guard lint: 0 errors, 0 warnings\n",
    )
