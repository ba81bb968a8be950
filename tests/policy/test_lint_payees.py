"""`vault-guard lint` against a payee that can pass for another (`rent@aport-vault.com`
with a Cyrillic 'a', which the guard then pays) and against a capability's `max_amount`,
which the guard never reads, beside the `max_per_tx` it does."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import pytest_vault.policy.lint as lint_module
from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import read_passport
from pytest_vault.policy.lint import Finding, lint_paths, look_alike
from pytest_vault.policy.sarif import LINT_HELP

from ..guard.lines import dumped, written_line

ALLOW = "/limits/payments.charge/allowed_merchant_ids"
NOW = datetime(2027, 6, 1, tzinfo=UTC)
MAX_AMOUNT = "/capabilities/1/params/max_amount"


def level(n: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SHIPPED / f"level-{n}.json").read_text())
    return data


def lint(tmp_path: Path, data: dict[str, Any]) -> list[Finding]:
    path = tmp_path / "p.json"
    path.write_text(dumped(data))
    return lint_paths([path], now=NOW)


def at(data: object, pointer: str) -> int:
    return written_line(data, [int(p) if p.isdigit() else p for p in pointer.split("/")[1:]])


def decided(tmp_path: Path, witness: dict[str, Any]) -> bool:
    """The witness's call, judged again by a guard of the linted file."""
    guard = Guard(read_passport(tmp_path / "p.json")[0])
    return guard.judge_call(witness["tool"], witness["arguments"]).allow


# -- look-alike payees ----------------------------------------------------------------------


def test_the_issues_look_alike_payee_is_a_warning_with_the_call_the_guard_allows(
    tmp_path: Path,
) -> None:
    data = level(2)
    entries = data["limits"]["payments.charge"]["allowed_merchant_ids"]
    entries.append("rent@\u0430port-vault.com")  # its 'a' Cyrillic: was clean
    (finding,) = lint(tmp_path, data)
    assert finding == Finding(
        str(tmp_path / "p.json"),
        f"{ALLOW}/3",
        "warning",
        "look-alike-recipient",
        "'rent@\u0430port-vault.com' can pass for another payee: it mixes Latin with Cyrillic "
        "(U+0430 CYRILLIC SMALL LETTER A); the guard pays exactly this text, whoever holds it; "
        'e.g. transfer_funds {"amount": 1, "recipient": "rent@\\u0430port-vault.com"} is '
        "allowed",
        at(data, f"{ALLOW}/3"),
        {
            "tool": "transfer_funds",
            "arguments": {"amount": 1, "recipient": "rent@\u0430port-vault.com"},
            "allow": True,
            "reasons": [{"code": "oap.allowed"}],
        },
    )
    assert finding.witness is not None and decided(tmp_path, finding.witness) is True


# Each entry, and why it can pass for another payee (None: it cannot).
ENTRIES: list[tuple[str, str | None]] = [
    ("rent@aport-vault.com", None),
    ("caf\u00e9@aport-vault.com", None),  # a Latin letter with its accent, composed
    (
        "\u043e\u043f\u043b\u0430\u0442\u0430@\u0431\u0430\u043d\u043a.\u0440\u0444",
        None,
    ),  # Cyrillic
    ("\u5c71\u7530\u30bf\u30ed\u30a6@example.jp", None),  # Latin, Han and Katakana: allowed
    ("\ud55c\uae00@example.kr", None),  # Latin and Hangul: allowed
    ("rent@ap\u03bfrt-vault.com", "it mixes Latin with Greek (U+03BF GREEK SMALL LETTER OMICRON)"),
    (
        "\u0440ay@x\u03b1.test",  # Cyrillic 'p', then Latin, then Greek 'a'
        "it mixes Cyrillic with Latin (U+0061 LATIN SMALL LETTER A) and Greek (U+03B1 GREEK "
        "SMALL LETTER ALPHA)",
    ),
    (
        "payroll\u0661@aport-vault.com",  # an Arabic-Indic digit one
        "it mixes Latin with Arabic-Indic (U+0661 ARABIC-INDIC DIGIT ONE)",
    ),
    (
        "\u5c71\u7530@\ud55c\u30bf.jp",  # Hangul beside Katakana: no allowed set holds both
        "it mixes Han with Hangul (U+D55C HANGUL SYLLABLE HAN) and Katakana (U+30BF KATAKANA "
        "LETTER TA) and Latin (U+006A LATIN SMALL LETTER J)",
    ),
    (
        "\uff52ent@aport-vault.com",
        "it reads as 'rent@aport-vault.com' once normalized (NFKC; U+FF52 FULLWIDTH LATIN SMALL "
        "LETTER R)",
    ),
    (
        "rent@\U0001d41aport-vault.com",
        "it reads as 'rent@aport-vault.com' once normalized (NFKC; U+1D41A MATHEMATICAL BOLD "
        "SMALL A)",
    ),
    (
        "cafe\u0301@aport-vault.com",  # the accent written apart: the same look, other text
        "it reads as 'caf\u00e9@aport-vault.com' once normalized (NFKC; U+0301 COMBINING ACUTE "
        "ACCENT)",
    ),
]


@pytest.mark.parametrize(("entry", "why"), ENTRIES, ids=[ascii(e) for e, _ in ENTRIES])
def test_what_makes_a_payee_pass_for_another(entry: str, why: str | None) -> None:
    assert look_alike(entry) == why


def test_each_look_alike_entry_is_found_at_its_line_and_the_others_are_clean(
    tmp_path: Path,
) -> None:
    data = level(2)
    data["limits"]["payments.charge"]["allowed_merchant_ids"] = [e for e, _ in ENTRIES]
    found = lint(tmp_path, data)
    flagged = [i for i, (_, why) in enumerate(ENTRIES) if why is not None]
    assert [(f.pointer, f.severity, f.code) for f in found] == [
        (f"{ALLOW}/{i}", "warning", "look-alike-recipient") for i in flagged
    ]
    assert [f.lineno for f in found] == [at(data, f.pointer) for f in found]
    # Each witness is a call the guard allows: the look-alike is paid.
    assert [f.witness is not None and decided(tmp_path, f.witness) for f in found] == [True] * len(
        flagged
    )


def test_an_entry_already_refused_for_another_reason_is_not_said_twice(tmp_path: Path) -> None:
    data = level(2)
    data["limits"]["payments.charge"]["allowed_merchant_ids"] = [
        "rent@aport-vault.com",
        "*@\u0430port-vault.com",  # a pattern first
    ]
    assert [(f.pointer, f.code) for f in lint(tmp_path, data)] == [
        (f"{ALLOW}/1", "pattern-recipient")
    ]


# -- max_amount beside max_per_tx --------------------------------------------------------------


def test_a_max_amount_above_max_per_tx_is_a_warning_with_a_denied_witness(tmp_path: Path) -> None:
    data = level(2)
    data["capabilities"][1]["params"]["max_amount"] = 300000  # $3,000 over a $2,500 limit
    (finding,) = lint(tmp_path, data)
    assert (finding.pointer, finding.severity, finding.code, finding.lineno) == (
        MAX_AMOUNT,
        "warning",
        "max-amount-above-limit",
        at(data, MAX_AMOUNT),
    )
    assert finding.message == (
        "max_amount $3,000.00 is above payments.charge max_per_tx $2,500.00: the guard "
        "reads only max_per_tx, so a transfer over $2,500.00 is denied; e.g. transfer_funds "
        '{"amount": 2500.01, "recipient": "rent@aport-vault.com"} is denied '
        "(oap.limit_exceeded[per_tx_amount_cap])"
    )
    assert finding.witness is not None and decided(tmp_path, finding.witness) is False


def test_a_max_amount_below_max_per_tx_is_a_warning_with_an_allowed_witness(
    tmp_path: Path,
) -> None:
    data = level(2)
    data["capabilities"][1]["params"]["max_amount"] = 1000  # $10: the guard allows $2,500
    (finding,) = lint(tmp_path, data)
    assert (finding.pointer, finding.severity, finding.code) == (
        MAX_AMOUNT,
        "warning",
        "max-amount-not-enforced",
    )
    assert finding.message == (
        "max_amount $10.00 is below payments.charge max_per_tx $2,500.00: the guard "
        "never reads max_amount, so transfers up to $2,500.00 are allowed; e.g. "
        'transfer_funds {"amount": 10.01, "recipient": "rent@aport-vault.com"} is allowed'
    )
    assert finding.witness is not None and decided(tmp_path, finding.witness) is True


@pytest.mark.parametrize(
    ("params", "codes"),
    [
        ({"currency": "USD", "max_amount": 250000}, []),  # as the shipped passport says
        ({"max_amount": 250000}, []),  # no currency: the limits' only one
        ({"max_amount": 250001}, ["max-amount-above-limit"]),
        ({"currency": "EUR", "max_amount": 1}, []),  # no EUR limit to compare with
        ({"currency": "USD", "max_amount": "lots"}, []),  # not an amount: the schema's to say
        ({"currency": "USD", "max_amount": 2500.5}, []),
        ({"currency": "USD", "max_amount": True}, []),
        ({"currency": "USD", "max_amount": -1}, []),
        ({"currency": "USD"}, []),
        ({}, []),
    ],
)
def test_what_max_amount_is_compared_with(
    tmp_path: Path, params: dict[str, Any], codes: list[str]
) -> None:
    data = level(2)
    data["capabilities"][1]["params"] = params
    assert [f.code for f in lint(tmp_path, data)] == codes


def test_a_max_amount_with_several_currencies_is_compared_in_its_own(tmp_path: Path) -> None:
    data = level(2)
    data["limits"]["payments.charge"]["currency_limits"]["EUR"] = {
        "max_per_tx": 100000,
        "daily_cap": 100000 * 4,
    }
    data["capabilities"][1]["params"] = {"currency": "EUR", "max_amount": 250000}
    assert [(f.pointer, f.code) for f in lint(tmp_path, data)] == [
        (MAX_AMOUNT, "max-amount-above-limit")
    ]
    data["capabilities"][1]["params"] = {"max_amount": 250000}  # which currency: unknown
    assert lint(tmp_path, data) == []


def test_the_shipped_passports_still_lint_clean() -> None:
    assert lint_paths([SHIPPED], now=NOW) == []


# -- the rules' help in SARIF -------------------------------------------------------------------


def test_every_code_lint_can_give_has_its_help_for_code_scanning() -> None:
    tree = ast.parse(Path(lint_module.__file__).read_text(encoding="utf-8"))
    codes = {
        call.args[3].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "Finding"
        and len(call.args) > 3
        and isinstance(call.args[3], ast.Constant)
    }
    assert len(codes) == 38  # 29 for the charge limits, 9 more for the other packs
    assert codes == set(LINT_HELP)  # and no help for a code lint never gives
    assert {"look-alike-recipient", "max-amount-above-limit", "max-amount-not-enforced"} <= codes
