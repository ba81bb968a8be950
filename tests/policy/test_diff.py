"""`vault-guard diff`: what two passports permit differently, field by field, and exactly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_vault.core.json import read_json
from pytest_vault.guard.engine import APPROVAL_CODE, Guard, Transfer
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import (
    EXECUTE,
    PAYOUT,
    REFUND,
    Passport,
    PassportError,
    passport_from_data,
)
from pytest_vault.policy.__main__ import main
from pytest_vault.policy.diff import Change, diff_passports, diff_paths, review_passports

L = "/limits/payments.charge"
ALLOW = f"{L}/allowed_merchant_ids"
USD = f"{L}/currency_limits/USD"
RENT, PAYROLL, UTIL = "rent@aport-vault.com", "payroll@aport-vault.com", "utilities@aport-vault.com"
SAVINGS, AUDIT, EVIL = "savings@aport-vault.com", "audit@aport-vault.com", "evil@x.test"
NOW = datetime(2027, 6, 1, tzinfo=UTC)


def raw(level: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SHIPPED / f"level-{level}.json").read_text())
    return data


def load(data: dict[str, Any]) -> Passport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return passport_from_data(data)


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any, str]]:
    return [(c.pointer, c.old, c.new, c.effect) for c in diff_passports(load(old), load(new))]


def edited(level: int, edit: Any) -> dict[str, Any]:
    data = raw(level)
    edit(data)
    return data


def charge(data: dict[str, Any]) -> dict[str, Any]:
    limits: dict[str, Any] = data["limits"]["payments.charge"]
    return limits


CHARGE_ONLY = ("account.read", "payments.charge")


def charge_only(data: dict[str, Any]) -> dict[str, Any]:
    """A shipped passport without the packs it grants beside the charge, at the charge
    pack's own L2 (as the levels were before they granted refunds, payouts and
    transactions): what the diff's charge-only behaviour is shown on."""
    data["assurance_level"] = "L2"
    data["capabilities"] = [c for c in data["capabilities"] if c["id"] in CHARGE_ONLY]
    data["limits"] = {k: v for k, v in data["limits"].items() if k == "payments.charge"}
    return data


# -- every field kind ---------------------------------------------------------------------------


def test_identical_passports_and_folders_have_no_changes() -> None:
    assert diff_paths(SHIPPED, SHIPPED) == []
    for n in range(1, 6):
        assert diff_paths(SHIPPED / f"level-{n}.json", SHIPPED / f"level-{n}.json") == []


def test_text_only_changes_are_not_changes() -> None:
    def cosmetic(d: dict[str, Any]) -> None:
        d.update(passport_id="other", owner_id="someone", version="2.0.0")
        d["metadata"] = {"description": "edited"}
        d["updated_at"] = "2027-01-01T00:00:00Z"
        charge(d)["allowed_merchant_ids"] = [UTIL, RENT, PAYROLL, RENT]  # order, repeats

    assert diff(raw(2), edited(2, cosmetic)) == []


def test_recipients_one_change_each() -> None:
    def edit(d: dict[str, Any]) -> None:
        charge(d)["allowed_merchant_ids"] = [PAYROLL, EVIL, UTIL]

    changes = diff_passports(load(raw(2)), load(edited(2, edit)))
    # The field rules alone: no witness yet (review_passports searches them).
    unsettled = {"witness": None, "note": None, "undecided": False}
    assert [c.to_dict() for c in changes] == [
        {
            "level": None,
            "pointer": ALLOW,
            "old": RENT,
            "new": None,
            "effect": "narrows",
            "summary": "no longer permitted: 'rent@aport-vault.com'",
            **unsettled,
        },
        {
            "level": None,
            "pointer": ALLOW,
            "old": None,
            "new": EVIL,
            "effect": "widens",
            "summary": "newly permitted: 'evil@x.test'",
            **unsettled,
        },
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # "*" and [] both permit anyone: moving between them changes nothing in effect.
        (["*"], [], [(ALLOW, "*", None, "neutral")]),
        ([], ["*"], [(ALLOW, None, "*", "neutral")]),
        # The empty list has no entry: the whole list carries the change.
        ([RENT], [], [(ALLOW, [RENT], [], "widens"), (ALLOW, RENT, None, "neutral")]),
        ([], [RENT], [(ALLOW, [], [RENT], "narrows"), (ALLOW, None, RENT, "neutral")]),
        ([RENT], [RENT, "*"], [(ALLOW, None, "*", "widens")]),
        (["*", RENT], [RENT], [(ALLOW, "*", None, "narrows")]),
        (
            ["*", RENT],
            [SAVINGS],
            [
                (ALLOW, "*", None, "narrows"),
                (ALLOW, RENT, None, "narrows"),
                (ALLOW, None, SAVINGS, "neutral"),
            ],
        ),
        (["*"], ["*", EVIL], [(ALLOW, None, EVIL, "neutral")]),
        (["*", EVIL], ["*"], [(ALLOW, EVIL, None, "neutral")]),
        (["*", RENT], [], [(ALLOW, "*", None, "neutral"), (ALLOW, RENT, None, "neutral")]),
        # Entries the guard can never match permit no one, added or removed.
        ([RENT], [RENT, EVIL + " "], [(ALLOW, None, EVIL + " ", "neutral")]),
        ([RENT, "ev\u200bil"], [RENT], [(ALLOW, "ev\u200bil", None, "neutral")]),
        ([RENT], [RENT, ""], [(ALLOW, None, "", "neutral")]),
        ([RENT, RENT.upper()], [RENT], [(ALLOW, RENT.upper(), None, "narrows")]),
        ([RENT, PAYROLL], [PAYROLL, RENT], []),
    ],
)
def test_allowlist_follows_the_guards_reading(
    old: list[str], new: list[str], expected: list[tuple[str, Any, Any, str]]
) -> None:
    def with_list(entries: list[str]) -> Any:
        return lambda d: charge(d).update(allowed_merchant_ids=entries)

    assert diff(edited(2, with_list(old)), edited(2, with_list(new))) == expected


def test_allowlist_summaries_say_what_the_guard_does() -> None:
    def with_list(entries: list[str]) -> dict[str, Any]:
        return edited(2, lambda d: charge(d).update(allowed_merchant_ids=entries))

    summaries = [
        c.summary
        for old, new in ((["*"], []), ([RENT], []), ([RENT], [RENT, EVIL + " "]), (["*"], [RENT]))
        for c in diff_passports(load(with_list(old)), load(with_list(new)))
    ]
    assert summaries == [
        "'*' removed; the EMPTY allowlist still permits anyone (fail-open)",
        "newly permitted: anyone (an EMPTY allowlist permits anyone under the published pack, fail-open)",
        "removed 'rent@aport-vault.com', permitted either way: the allowlist permits anyone",
        "added 'evil@x.test ', which can never match (recipient has surrounding whitespace: 'evil@x.test ')",
        "no longer permitted: anyone ('*' removed); only the listed ones remain",
        "added 'rent@aport-vault.com', permitted either way: the allowlist permits anyone",
    ]


def test_currency_limits_per_currency_and_cap() -> None:
    def edit(d: dict[str, Any]) -> None:
        charge(d)["currency_limits"] = {
            "USD": {"max_per_tx": 60000},  # raised; daily cap removed
            "EUR": {"max_per_tx": 10000, "daily_cap": 20000},  # new
            "JPY": {"max_per_tx": 0, "daily_cap": 100},  # new, but permits no amount
            "XXX": {"max_per_tx": 10000, "daily_cap": 20000},  # a currency the guard lacks
        }

    old, new = raw(3), edited(3, edit)
    assert diff(old, new) == [
        (f"{L}/currency_limits/EUR", None, {"max_per_tx": 10000, "daily_cap": 20000}, "widens"),
        (f"{L}/currency_limits/JPY", None, {"max_per_tx": 0, "daily_cap": 100}, "neutral"),
        (f"{USD}/max_per_tx", 50000, 60000, "widens"),
        (f"{USD}/daily_cap", 100000, None, "widens"),
        (f"{L}/currency_limits/XXX", None, {"max_per_tx": 10000, "daily_cap": 20000}, "neutral"),
    ]
    assert diff(new, old) == [
        (f"{L}/currency_limits/EUR", {"max_per_tx": 10000, "daily_cap": 20000}, None, "narrows"),
        (f"{L}/currency_limits/JPY", {"max_per_tx": 0, "daily_cap": 100}, None, "neutral"),
        (f"{USD}/max_per_tx", 60000, 50000, "narrows"),
        (f"{USD}/daily_cap", None, 100000, "narrows"),  # a cap where there was none
        (f"{L}/currency_limits/XXX", {"max_per_tx": 10000, "daily_cap": 20000}, None, "neutral"),
    ]
    assert [c.summary for c in diff_passports(load(old), load(new))] == [
        "newly permitted currency: EUR, up to €100.00 a transfer, daily cap €200.00",
        "newly permitted currency: JPY, up to ¥0 a transfer, daily cap ¥100; it permits no amount",
        "USD per-transfer limit raised: $500.00 -> $600.00",
        "USD daily cap removed (was $1,000.00)",
        "newly permitted currency: XXX, up to 10,000 minor units of 'XXX' a transfer, daily cap "
        "20,000 minor units of 'XXX'; "
        "the guard knows no currency XXX: calls in it are denied whatever its caps",
    ]


def test_lowered_daily_cap_and_caps_of_an_unknown_currency() -> None:
    def lower(d: dict[str, Any]) -> None:
        charge(d)["currency_limits"]["USD"]["daily_cap"] = 50000
        charge(d)["currency_limits"]["XXX"] = {"max_per_tx": 5}

    def raise_xxx(d: dict[str, Any]) -> None:
        charge(d)["currency_limits"]["XXX"] = {"max_per_tx": 9, "daily_cap": 10}

    assert diff(raw(3), edited(3, lower))[0] == (f"{USD}/daily_cap", 100000, 50000, "narrows")
    assert diff(edited(3, lower), edited(3, raise_xxx))[1:] == [
        (f"{L}/currency_limits/XXX/max_per_tx", 5, 9, "neutral"),
        (f"{L}/currency_limits/XXX/daily_cap", None, 10, "neutral"),
    ]


@pytest.mark.parametrize(
    ("old", "new", "effect", "summary"),
    [
        ("active", "suspended", "narrows", "status active -> suspended: every call is denied"),
        ("revoked", "active", "widens", "status revoked -> active: calls are judged again"),
        ("draft", "revoked", "neutral", "status draft -> revoked: every call is denied either way"),
    ],
)
def test_status(old: str, new: str, effect: str, summary: str) -> None:
    changes = diff_passports(
        load(edited(3, lambda d: d.update(status=old))),
        load(edited(3, lambda d: d.update(status=new))),
    )
    assert [(c.pointer, c.old, c.new, c.effect, c.summary) for c in changes] == [
        ("/status", old, new, effect, summary)
    ]


def test_suspending_narrows_by_its_field_and_has_no_effect_where_nothing_is_permitted() -> None:
    old, new = load(raw(5)), load(edited(5, lambda d: d.update(status="suspended")))
    (change,) = diff_passports(old, new)
    assert change == Change(
        None,
        "/status",
        "active",
        "suspended",
        "narrows",
        "status active -> suspended: every call is denied",
    )
    # Settled on the engine: the old passport permitted nothing to deny.
    (settled,) = review_passports(old, new)
    assert settled == change._replace(
        effect="neutral",
        note="the old passport permits nothing: it does not grant payments.charge",
    )
    assert settled.line() == (
        "/status: no effect: status active -> suspended: every call is denied; "
        "the old passport permits nothing: it does not grant payments.charge"
    )


PAST, LATER = "2025-01-01T00:00:00Z", "2030-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            {"never_expires": True},
            {"never_expires": False, "expires_at": PAST},
            ("/expires_at", None, PAST, "narrows"),
        ),
        ({"expires_at": PAST}, {"expires_at": LATER}, ("/expires_at", PAST, LATER, "widens")),
        ({"expires_at": LATER}, {"expires_at": PAST}, ("/expires_at", LATER, PAST, "narrows")),
        (
            {"expires_at": PAST},
            {"expires_at": PAST, "never_expires": True},
            ("/never_expires", None, True, "widens"),
        ),
        ({"expires_at": LATER}, {}, ("/expires_at", LATER, None, "widens")),
        # never_expires overrides expires_at: moving the date changes nothing in effect.
        (
            {"never_expires": True, "expires_at": PAST},
            {"never_expires": True, "expires_at": LATER},
            ("/expires_at", PAST, LATER, "neutral"),
        ),
        (
            {"never_expires": True},
            {"never_expires": False},
            ("/never_expires", True, False, "neutral"),
        ),
    ],
)
def test_expiry(
    old: dict[str, Any], new: dict[str, Any], expected: tuple[str, Any, Any, str]
) -> None:
    def with_expiry(fields: dict[str, Any]) -> dict[str, Any]:
        data = raw(3)
        del data["never_expires"]
        return {**data, **fields}

    assert diff(with_expiry(old), with_expiry(new)) == [expected]


def test_expiry_summaries() -> None:
    base = {k: v for k, v in raw(3).items() if k != "never_expires"}
    later = diff_passports(load({**base, "expires_at": PAST}), load({**base, "expires_at": LATER}))
    moot = diff_passports(
        load({**base, "never_expires": True, "expires_at": PAST}),
        load({**base, "never_expires": True, "expires_at": LATER}),
    )
    assert [c.summary for c in later + moot] == [
        "expiry 2025-01-01T00:00:00Z -> 2030-01-01T00:00:00Z",
        "expiry never -> never (unchanged in effect: never_expires is true)",
    ]


@pytest.mark.parametrize(
    ("field", "old", "new", "effect"),
    [
        ("/assurance_level", "L2", "L1", "narrows"),
        ("/assurance_level", "L1", "L3", "widens"),
        ("/assurance_level", "L0", "L1", "neutral"),  # both below the pack's L2
        ("/assurance_level", "L4KYC", "L4FIN", "widens"),
        (f"{L}/require_assurance_at_least", "L2", "L3", "narrows"),
        (f"{L}/require_assurance_at_least", "L4FIN", "L3", "widens"),
        (f"{L}/require_assurance_at_least", "L0", "L2", "neutral"),  # the pack's L2 applies
    ],
)
def test_assurance(field: str, old: str, new: str, effect: str) -> None:
    def with_level(level: str) -> dict[str, Any]:
        data = raw(3)
        if field == "/assurance_level":
            data["assurance_level"] = level
        else:
            charge(data)["require_assurance_at_least"] = level
        return data

    assert diff(with_level(old), with_level(new)) == [(field, old, new, effect)]


def test_regions() -> None:
    def regions(*names: str) -> dict[str, Any]:
        return edited(3, lambda d: d.update(regions=list(names)))

    assert diff(regions("US"), regions("US", "GB")) == [("/regions", None, "GB", "widens")]
    assert diff(regions("US", "GB"), regions("GB")) == [
        ("/regions", "US", None, "narrows"),
        ("/regions/0", "US", "GB", "neutral"),  # transfers are judged in the first region
    ]
    changes = diff_passports(load(regions("US")), load(regions()))
    assert [(c.effect, c.summary) for c in changes] == [
        (
            "narrows",
            "region 'US' no longer permitted: no region left, every transfer_funds call is denied",
        )
    ]
    assert diff(regions(), regions("GB")) == [("/regions", None, "GB", "widens")]


def test_categories_countries_and_items() -> None:
    def edit(d: dict[str, Any]) -> None:
        charge(d).update(
            blocked_categories=["funds_transfer", "gambling"],
            allowed_countries=["US"],
            max_items_per_tx=None,
        )
        del charge(d)["max_items_per_tx"]

    old, new = raw(3), edited(3, edit)
    assert diff(old, new) == [
        (f"{L}/allowed_countries", [], ["US"], "narrows"),
        (f"{L}/blocked_categories", None, "funds_transfer", "narrows"),
        (f"{L}/blocked_categories", None, "gambling", "narrows"),
        (f"{L}/max_items_per_tx", 1, None, "widens"),
    ]
    assert [c.summary for c in diff_passports(load(new), load(old))] == [
        "any shipping country permitted; pack contexts only: a transfer_funds call carries no shipping country",
        "category 'funds_transfer' no longer blocked: every transfer_funds call is of this category",
        "category 'gambling' no longer blocked: pack contexts only: a transfer_funds call's category is funds_transfer",
        "max_items_per_tx None -> 1; pack contexts only: a transfer_funds call is one item",
    ]
    more = edited(3, lambda d: charge(d).update(allowed_countries=["GB", "FR"], max_items_per_tx=3))
    fewer = edited(3, lambda d: charge(d).update(allowed_countries=["FR"], max_items_per_tx=2))
    assert diff(more, fewer) == [
        (f"{L}/allowed_countries", "GB", None, "narrows"),
        (f"{L}/max_items_per_tx", 3, 2, "narrows"),
    ]


@pytest.mark.parametrize(
    "field", ["idempotency_required", "approval_required", "x_vault_memo_approval_code_required"]
)
def test_rules_that_deny_when_switched_on(field: str) -> None:
    on = edited(3, lambda d: charge(d).update({field: True}))
    assert diff(raw(3), on) == [(f"{L}/{field}", False, True, "narrows")]
    assert diff(on, raw(3)) == [(f"{L}/{field}", True, False, "widens")]


def test_level4_approval_code_extension_summary() -> None:
    off = edited(4, lambda d: charge(d).update(x_vault_memo_approval_code_required=False))
    (change,) = diff_passports(load(raw(4)), load(off))
    assert (
        change.summary
        == "x_vault_memo_approval_code_required off: no approval code needed in the memo"
    )


def test_capabilities() -> None:
    def edit(d: dict[str, Any]) -> None:
        d["capabilities"] = [
            {"id": "payments.charge", "params": {"currency": "USD", "max_amount": 1}},
            *d["capabilities"][2:],  # the packs granted beside the charge, unchanged
            {"id": "payments.refund"},
        ]

    assert diff(raw(3), edited(3, edit)) == [
        ("/capabilities", "account.read", None, "neutral"),
        (
            "/capabilities/0/params",
            {"currency": "USD", "max_amount": 50000},
            {"currency": "USD", "max_amount": 1},
            "neutral",
        ),
        ("/capabilities", None, "payments.refund", "neutral"),
    ]
    # Level 5 grants no payments: granting it widens; the limits come with it.
    grant = charge_only(raw(3))
    grant["metadata"] = raw(5)["metadata"]
    assert diff(raw(5), grant) == [
        ("/capabilities", None, "payments.charge", "widens"),
        (L, None, load(raw(3)).charge_limits.model_dump(), "neutral"),  # type: ignore[union-attr]
    ]
    assert diff(grant, raw(5))[0] == ("/capabilities", "payments.charge", None, "narrows")


def test_dormant_limits_are_diffed_and_say_so() -> None:
    def revoke(d: dict[str, Any]) -> None:
        d["capabilities"] = [{"id": "account.read"}]

    def revoke_and_raise(d: dict[str, Any]) -> None:
        revoke(d)
        charge(d)["currency_limits"]["USD"]["max_per_tx"] = 90000

    old, new = load(edited(3, revoke)), load(edited(3, revoke_and_raise))
    changes = diff_passports(old, new)
    assert [(c.pointer, c.effect, c.summary) for c in changes] == [
        (f"{USD}/max_per_tx", "widens", "USD per-transfer limit raised: $500.00 -> $900.00")
    ]
    # In effect, none: the new passport grants no payments, so nothing is newly allowed.
    assert [(c.effect, c.witness, c.note) for c in review_passports(old, new)] == [
        ("neutral", None, "the new passport permits nothing: it does not grant payments.charge")
    ]


# -- folders -----------------------------------------------------------------------------------


def copy_shipped(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(SHIPPED, folder)
    return folder


def test_folders_pair_levels_by_file_name(tmp_path: Path) -> None:
    old, new = copy_shipped(tmp_path, "old"), copy_shipped(tmp_path, "new")
    for folder in (old, new):  # without a levels.toml, the level-N.json files are the levels
        (folder / "levels.toml").unlink()
    level2 = raw(2)
    charge(level2)["allowed_merchant_ids"].append(EVIL)
    (new / "level-2.json").write_text(json.dumps(level2))
    (new / "notes.json").write_text("not a level")  # not level-N.json: not read
    assert [(c.level, c.pointer, c.old, c.new, c.effect) for c in diff_paths(old, new)] == [
        (2, ALLOW, None, EVIL, "widens"),
    ]


def test_folders_whose_levels_do_not_match_are_one_line_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A level on one side only has no passport to compare it with, so no witness: the
    folders are refused, naming the file, before any search starts."""
    from pytest_vault.policy import witness

    searched: list[str] = []
    monkeypatch.setattr(witness.Search, "find", lambda self, pointer, *a: searched.append(pointer))
    old, new = copy_shipped(tmp_path, "old"), copy_shipped(tmp_path, "new")
    for folder in (old, new):
        (folder / "levels.toml").unlink()
    level2 = raw(2)
    charge(level2)["allowed_merchant_ids"].append(EVIL)  # a change before the bad level
    (new / "level-2.json").write_text(json.dumps(level2))
    shutil.copy(SHIPPED / "level-3.json", new / "level-6.json")
    with pytest.raises(PassportError) as added:
        diff_paths(old, new)
    assert str(added.value) == (
        f"{new / 'level-6.json'}: level 6 is not in {old}: the folders' levels must match"
    )
    (new / "level-6.json").unlink()
    (new / "level-5.json").unlink()
    with pytest.raises(PassportError) as removed:
        diff_paths(old, new)
    assert str(removed.value) == (
        f"{old / 'level-5.json'}: level 5 is not in {new}: the folders' levels must match"
    )
    assert searched == []


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "status": "active",\n  "status": "revoked"\n}')
    with pytest.raises(PassportError) as excinfo:
        diff_paths(SHIPPED, SHIPPED / "level-1.json")
    assert str(excinfo.value) == (
        f"{SHIPPED / 'level-1.json'}: not a folder like {SHIPPED}: compare two files or two folders"
    )
    with pytest.raises(PassportError, match=r"empty: no level-N\.json passports in this folder$"):
        diff_paths(SHIPPED, empty)
    with pytest.raises(PassportError) as excinfo:
        diff_paths(SHIPPED / "level-1.json", bad)
    assert str(excinfo.value) == f"{bad}:3: (root): duplicate key 'status'"


def test_passports_of_another_spec_version_or_pack_are_one_line(tmp_path: Path) -> None:
    old = write(tmp_path / "level-3.json", charge_only(raw(3)))
    # Another spec version: named as such, not as the loader's "Input should be 'oap/1.0'".
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**raw(3), "spec_version": "oap/1.1"}))
    with pytest.raises(PassportError) as version:
        diff_paths(old, newer)
    assert str(version.value) == (
        f"{newer}: spec_version 'oap/1.1' is not 'oap/1.0' as in {old}: "
        "compare passports of one spec version"
    )
    # A refund passport (the pack finance.payment.refund governs it) against a charge one.
    refund = {**raw(3), "capabilities": [{"id": "finance.payment.refund"}]}
    refund["limits"] = {"finance.payment.refund": {"currency_limits": {"USD": {"max_per_tx": 5}}}}
    other = write(tmp_path / "refund.json", refund)
    with pytest.raises(PassportError) as pack:
        diff_paths(old, other)
    assert str(pack.value) == (
        f"{other}: configures 'finance.payment.refund', not 'payments.charge' as {old} does: "
        "compare passports of one pack"
    )
    # A passport that configures no pack (it grants nothing) compares with any.
    assert next(c.effect for c in diff_paths(old, SHIPPED / "level-5.json")) == "narrows"


def test_a_passport_the_guard_refuses_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_vault.policy import diff as module

    def refusing(passport: Passport, **kwargs: Any) -> Guard:
        if passport.status == "suspended":
            raise ValueError("cannot compile\x1b[2J this passport")
        return Guard(passport, **kwargs)

    monkeypatch.setattr(module, "Guard", refusing)
    suspended = write(tmp_path / "s.json", edited(3, lambda d: d.update(status="suspended")))
    with pytest.raises(PassportError) as excinfo:
        diff_paths(SHIPPED / "level-3.json", suspended)
    assert str(excinfo.value) == (
        f"{suspended}: the guard cannot use this passport: ValueError: cannot compile\\x1b[2J "
        "this passport"
    )


# -- the command line ----------------------------------------------------------------------------


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_cli_text_and_exit_statuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lookalike = "s\u0430vings@aport-vault.com"  # a Cyrillic a: another payee
    entries = [SAVINGS, lookalike, "\x1b[31mevil"]
    new = write(
        tmp_path / "new.json", edited(3, lambda d: charge(d).update(allowed_merchant_ids=entries))
    )
    old = SHIPPED / "level-3.json"
    assert main(["diff", str(old), str(new)]) == 0
    out, err = capsys.readouterr()
    assert out == (
        "1 newly allowed, 0 newly denied, 0 reason-only changes\n"
        f"{ALLOW}: widens: newly permitted: '{lookalike}'\n"
        f'  witness: transfer_funds {{"amount": 1, "recipient": "{lookalike}"}}: '
        "denied (oap.merchant_forbidden) -> allowed\n"
        f"{ALLOW}: no effect: added '\\x1b[31mevil', which can never match (recipient contains "
        "control or invisible characters: '\\x1b[31mevil')\n"
    )
    assert err == "vault-guard diff: 2 changes (1 widens, 0 narrows, 1 neutral)\n"
    assert main(["diff", str(old), str(new), "--fail-on-widen"]) == 1
    capsys.readouterr()
    # Narrowing passes the gate.
    assert main(["diff", str(new), str(old), "--fail-on-widen"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == [
        "0 newly allowed, 1 newly denied, 0 reason-only changes",
        f"{ALLOW}: narrows: no longer permitted: '{lookalike}'",
    ]
    assert main(["diff", str(SHIPPED), str(SHIPPED), "--fail-on-widen"]) == 0
    assert capsys.readouterr() == (
        "0 newly allowed, 0 newly denied, 0 reason-only changes\n",
        "vault-guard diff: 0 changes (0 widens, 0 narrows, 0 neutral)\n",
    )


def test_cli_json_is_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = "\u202eevil\ud800"
    new = write(
        tmp_path / "new.json", edited(3, lambda d: charge(d).update(allowed_merchant_ids=[hostile]))
    )
    assert main(["diff", str(SHIPPED / "level-3.json"), str(new), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert out.isascii()
    witness = {
        "kind": "call",
        "tool": "transfer_funds",
        "earlier": [],
        "arguments": {"recipient": SAVINGS, "amount": 1},
        "at": None,
        "effect": "narrows",
        "old": {"allow": True, "reasons": [{"code": "oap.allowed"}]},
        "new": {
            "allow": False,
            "reasons": [{"code": "oap.merchant_forbidden", "rule": "merchant_allowed"}],
        },
    }
    assert json.loads(out) == {
        "verdict": "0 newly allowed, 1 newly denied, 0 reason-only changes",
        "changes": [
            {
                "level": None,
                "pointer": ALLOW,
                "old": SAVINGS,
                "new": None,
                "effect": "narrows",
                "summary": "no longer permitted: 'savings@aport-vault.com'",
                "witness": witness,
                "note": None,
                "undecided": False,
            },
            {
                "level": None,
                "pointer": ALLOW,
                "old": None,
                "new": hostile,
                "effect": "neutral",
                "summary": "added '\\u202eevil\\ud800', which can never match (recipient contains control or invisible characters: '\\u202eevil\\ud800')",
                "witness": None,
                "note": None,
                "undecided": False,
            },
        ],
    }


def test_cli_folders_with_levels_and_decimal_params(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = copy_shipped(tmp_path, "new")
    text = (
        (SHIPPED / "level-1.json")
        .read_text()
        .replace('"max_amount": 5000000', '"max_amount": 50000.5')
    )
    (new / "level-1.json").write_text(text)
    assert main(["diff", str(SHIPPED), str(new), "--format", "json"]) == 0
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert (change["level"], change["pointer"], change["new"]) == (
        1,
        "/capabilities/1/params",
        {"currency": "USD", "max_amount": 50000.5},
    )
    assert main(["diff", str(SHIPPED), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "0 newly allowed, 0 newly denied, 0 reason-only changes",
        "level 1: /capabilities/1/params: no effect: params of 'payments.charge' changed: not "
        "read by the guard, which reads limits.payments.charge",
    ]


@pytest.mark.parametrize(
    ("written", "out"),
    [
        ("1E+5000", "1e+5000"),
        ("1e-400", "1e-400"),
        ("1E+9999999", "1e+9999999"),
        ("2E+3", "2000.0"),
    ],
)
def test_cli_json_writes_a_number_out_of_a_doubles_range_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], written: str, out: str
) -> None:
    # An exact JSON number (`core.json.number`), never through int() or a float: int() of
    # 1E+5000 is past Python's digit limit, and of 1E+9999999 takes minutes.
    new = copy_shipped(tmp_path, "new")
    text = (SHIPPED / "level-1.json").read_text()
    new_text = text.replace('"max_amount": 5000000', f'"max_amount": {written}')
    assert new_text != text
    (new / "level-1.json").write_text(new_text)
    assert main(["diff", str(SHIPPED), str(new), "--format", "json"]) == 0
    printed = capsys.readouterr().out
    assert f'"max_amount": {out}\n' in printed
    (change,) = read_json(printed)["changes"]
    assert change["new"] == {"currency": "USD", "max_amount": Decimal(written)}


def test_cli_unloadable_passport(tmp_path: Path) -> None:
    bad = tmp_path / "bad\x1b.json"
    bad.write_text('{"status": ')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_vault.policy",
            "diff",
            str(SHIPPED / "level-1.json"),
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, "")
    shown_bad = str(bad).replace("\x1b", "\\x1b")
    assert result.stderr == f"error: {shown_bad}:1: invalid JSON: Expecting value at column 12\n"


# -- exactness: a property ---------------------------------------------------------------------

RECIPIENTS = [RENT, PAYROLL, SAVINGS, AUDIT, EVIL, "*"]
ENTRIES = [*RECIPIENTS, SAVINGS + " ", RENT.upper()]
MINOR = [0, 1, 40000, 50000, 100000, 250000, 5000000]
LEVELS = ["L0", "L1", "L2", "L3", "L4KYC", "L4FIN"]


def cap() -> st.SearchStrategy[dict[str, int] | None]:
    def build(max_per_tx: int, daily: int | None) -> dict[str, int]:
        return {"max_per_tx": max_per_tx} | ({} if daily is None else {"daily_cap": daily})

    return st.none() | st.builds(build, st.sampled_from(MINOR), st.none() | st.sampled_from(MINOR))


Field = tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]


def choice(usual: Any, *others: Any) -> Field:
    """A field's value: in the old passport the usual one nine times in ten (so most old
    passports permit calls); in the new, any of them (so a change is likely)."""
    return st.sampled_from([usual] * 9 * len(others) + list(others)), st.sampled_from(
        [usual, *others]
    )


def anything(strategy: st.SearchStrategy[Any]) -> Field:
    return strategy, strategy


USUAL_CAP = {"max_per_tx": 250000, "daily_cap": 1000000}

# Every field the guard reads, each drawn on its own.
FIELDS: dict[str, Field] = {
    "grant": choice(True, False),
    "dormant_limits": anything(st.booleans()),
    "status": choice("active", "suspended", "draft", "revoked"),
    "expires_at": choice(None, PAST, LATER, "2027-06-01T00:00:00Z"),
    "never_expires": choice(None, True, False),
    "assurance_level": choice("L2", "L0", "L1", "L3", "L4KYC", "L4FIN"),
    "regions": choice(["US"], ["GB", "US"], []),
    "allowed_merchant_ids": anything(st.lists(st.sampled_from(ENTRIES), max_size=4)),
    "USD": (st.sampled_from([USUAL_CAP] * 3) | cap(), cap()),
    "EUR": anything(cap()),
    "JPY": anything(cap()),
    "XXX": anything(cap()),
    "require_assurance_at_least": choice(None, "L0", "L2", "L3", "L4FIN"),
    "blocked_categories": choice([], ["gambling"], ["funds_transfer"]),
    "allowed_countries": choice(None, [], ["US"]),
    "max_items_per_tx": choice(None, 1, 2),
    "idempotency_required": choice(None, False, True),
    "approval_required": choice(None, False, True),
    "x_vault_memo_approval_code_required": choice(None, False, True),
}
LIMIT_FIELDS = [
    "require_assurance_at_least",
    "blocked_categories",
    "allowed_countries",
    "max_items_per_tx",
    "idempotency_required",
    "approval_required",
    "x_vault_memo_approval_code_required",
    "allowed_merchant_ids",
]


def build(fields: dict[str, Any]) -> dict[str, Any]:
    """A level-3-shaped passport with these fields."""
    data = {k: v for k, v in raw(3).items() if k != "never_expires"}
    for key in ("status", "assurance_level", "regions", "expires_at", "never_expires"):
        if fields[key] is not None:
            data[key] = fields[key]
    limits = {key: fields[key] for key in LIMIT_FIELDS if fields[key] is not None}
    limits["currency_limits"] = {c: fields[c] for c in ("USD", "EUR", "JPY", "XXX") if fields[c]}
    data["limits"] = (
        {"payments.charge": limits} if fields["grant"] or fields["dormant_limits"] else {}
    )
    data["capabilities"] = [{"id": "account.read"}] + [{"id": "payments.charge"}] * fields["grant"]
    return data


@st.composite
def passport_pairs(draw: st.DrawFn) -> tuple[Passport, Passport]:
    """An old passport, and a new one with one to three of its fields drawn again."""
    old = {key: draw(field[0], label=key) for key, field in FIELDS.items()}
    changed = draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3, unique=True))
    new = dict(old)
    for key in changed:
        new[key] = draw(FIELDS[key][1].filter(lambda v, was=old[key]: v != was), label=f"new {key}")
    return load(build(old)), load(build(new))


calls = st.lists(
    st.fixed_dictionaries(
        {
            "recipient": st.sampled_from(RECIPIENTS),
            "amount": st.sampled_from(
                ["0.01", "1", "400", "500", "500.01", "1000", "2500", "50000"]
            ).map(Decimal),
            "currency": st.sampled_from(["USD", "USD", "EUR", "JPY"]),
        },
        optional={
            "memo": st.sampled_from(["APC-2026-0142", "no code"]),
            "idempotency_key": st.just("key-00000001"),
        },
    ),
    min_size=1,
    max_size=8,
)


# Every call of this grid is judged under every generated pair, beside the drawn calls:
# the passports are random, the calls near every limit they can have.
GRID = [
    {"recipient": r, "amount": Decimal(a), "currency": c, **extra}
    for r in RECIPIENTS
    for a in ("0.01", "400", "500.01", "1000", "2500", "50000")
    for c in ("USD", "EUR", "JPY")
    for extra in ({"memo": "APC-2026-0142", "idempotency_key": "key-00000001"}, {})
]


def explains(change: Change, t: Transfer, old: Passport, new: Passport, effect: str) -> bool:
    """Whether `change`, of this effect, can account for this call's decision flipping.

    Each kind of change is tied to the calls it can decide: a recipient entry to calls to
    that recipient ("*" and the whole list to any), a cap to amounts between its old and
    new values in its currency, a rule to the calls it applies to.
    """
    if change.effect != effect:
        return False
    p, widening = change.pointer, effect == "widens"
    value = change.new if change.old is None else change.old  # an entry's change: one side
    if p in ("/status", "/expires_at", "/never_expires", "/assurance_level"):
        return True
    if p in (f"{L}/require_assurance_at_least", f"{L}/approval_required"):
        return True
    if p == "/capabilities":
        return value == "payments.charge"
    if p == "/regions":
        return not (old if widening else new).regions
    if p == f"{L}/idempotency_required":
        return t.idempotency_key is None
    if p == f"{L}/x_vault_memo_approval_code_required":
        return not APPROVAL_CODE.search(t.memo or "")
    if p == f"{L}/blocked_categories":
        return value == "funds_transfer"
    if p == ALLOW:
        return value in (t.recipient, "*") or [] in (change.old, change.new)
    prefix = f"{L}/currency_limits/{t.currency}"
    if p == prefix:
        return True
    if p in (f"{prefix}/max_per_tx", f"{prefix}/daily_cap"):
        inf = float("inf")
        low, high = sorted(inf if v is None else v for v in (change.old, change.new))
        return low < t.amount_minor <= high
    return False


def unexplained(
    old: Passport, new: Passport, changes: list[Change], args: list[dict[str, Any]]
) -> list[str]:
    """The calls whose decision flips with no change in `changes` to explain it."""
    problems = []
    # judge_call leaves the ledger alone: each call is judged as the first of its day.
    old_guard, new_guard = Guard(old, clock=lambda: NOW), Guard(new, clock=lambda: NOW)
    for call in args:
        before = old_guard.judge_call("transfer_funds", call)
        after = new_guard.judge_call("transfer_funds", call)
        if before.allow == after.allow:
            continue
        effect = "widens" if after.allow else "narrows"
        assert after.transfer is not None
        if not any(explains(c, after.transfer, old, new, effect) for c in changes):
            problems.append(f"{effect} unexplained: {call} {before.codes} -> {after.codes}")
    return problems


@settings(max_examples=200, deadline=None)
@given(pair=passport_pairs(), args=calls)
def test_every_flipped_decision_is_explained(
    pair: tuple[Passport, Passport], args: list[dict[str, Any]]
) -> None:
    old, new = pair
    assert unexplained(old, new, diff_passports(old, new), args + GRID) == []
    assert unexplained(new, old, diff_passports(new, old), args + GRID) == []


def flips(old: Passport, new: Passport, args: list[dict[str, Any]]) -> int:
    old_guard, new_guard = Guard(old, clock=lambda: NOW), Guard(new, clock=lambda: NOW)
    return sum(
        old_guard.judge_call("transfer_funds", c).allow
        != new_guard.judge_call("transfer_funds", c).allow
        for c in args
    )


def limits_edit(**fields: Any) -> Any:
    return lambda d: charge(d).update(fields)


def usd(**fields: Any) -> Any:
    return lambda d: charge(d)["currency_limits"]["USD"].update(fields)


def no_daily_cap(d: dict[str, Any]) -> None:
    del charge(d)["currency_limits"]["USD"]["daily_cap"]


KINDS = {
    "recipient added": limits_edit(allowed_merchant_ids=[SAVINGS, AUDIT]),
    "recipient removed": limits_edit(allowed_merchant_ids=[RENT]),
    "wildcard": limits_edit(allowed_merchant_ids=[SAVINGS, "*"]),
    "empty allowlist": limits_edit(allowed_merchant_ids=[]),
    "currency added": lambda d: charge(d)["currency_limits"].update(EUR={"max_per_tx": 100}),
    "currency removed": limits_edit(currency_limits={"EUR": {"max_per_tx": 100}}),
    "max_per_tx raised": usd(max_per_tx=5000000),
    "max_per_tx lowered": usd(max_per_tx=30000),
    "daily_cap lowered": usd(daily_cap=30000),
    "daily_cap removed": lambda d: (usd(max_per_tx=5000000)(d), no_daily_cap(d)),
    "status": lambda d: d.update(status="revoked"),
    "expires_at": lambda d: d.update(never_expires=None, expires_at=PAST),
    "never_expires": lambda d: d.update(never_expires=False, expires_at=PAST),
    "assurance_level": lambda d: d.update(assurance_level="L1"),
    "require_assurance_at_least": limits_edit(require_assurance_at_least="L4FIN"),
    "regions": lambda d: d.update(regions=[]),
    "blocked_categories": limits_edit(blocked_categories=["funds_transfer"]),
    "idempotency_required": limits_edit(idempotency_required=True),
    "approval_required": limits_edit(approval_required=True),
    "approval code": limits_edit(x_vault_memo_approval_code_required=True),
    "capability": lambda d: d.update(capabilities=[{"id": "account.read"}]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_change_flips_decisions_it_explains(kind: str) -> None:
    """Each kind of change, alone, flips some calls of the grid, and explains each flip."""
    data = raw(3)
    KINDS[kind](data)
    old, new = load(raw(3)), load({k: v for k, v in data.items() if v is not None})
    assert flips(old, new, GRID) > 0
    assert unexplained(old, new, diff_passports(old, new), GRID) == []
    assert unexplained(new, old, diff_passports(new, old), GRID) == []


def test_the_property_can_fail() -> None:
    """The check finds flips that a diff missing its changes cannot explain."""
    old, new = load(raw(2)), load(raw(3))
    args = [
        {"recipient": SAVINGS, "amount": 100},  # newly permitted recipient
        {"recipient": RENT, "amount": 100},  # no longer permitted
        {"recipient": RENT, "amount": 1000},  # over the new cap too
    ]
    changes = diff_passports(old, new)
    assert unexplained(old, new, changes, args) == []
    assert len(unexplained(old, new, [], args)) == 3
    flipped = [c._replace(effect="neutral") if c.pointer == ALLOW else c for c in changes]
    assert unexplained(old, new, flipped, args) == [
        f"widens unexplained: {args[0]} ('oap.merchant_forbidden',) -> ('oap.allowed',)",
        f"narrows unexplained: {args[1]} ('oap.allowed',) -> ('oap.merchant_forbidden',)",
        # still explained: its amount's cap was lowered below it
    ]


def test_a_folder_is_read_as_its_levels_toml_points(tmp_path: Path) -> None:
    """Pointing a level at another file in levels.toml is what the suite enforces: the
    diff and the lint must see it, not the unused level-N.json."""
    from pytest_vault.guard.folder import SHIPPED
    from pytest_vault.policy.__main__ import main as guard_main

    new = tmp_path / "new"
    shutil.copytree(SHIPPED, new)
    toml = new / "levels.toml"
    toml.write_text(toml.read_text().replace('"level-3.json"', '"level-1.json"'))
    changes = diff_paths(SHIPPED, new)
    refund, payout, execute = (f"/limits/{c}" for c in (REFUND, PAYOUT, EXECUTE))
    assert [(c.level, c.pointer, c.effect) for c in changes if c.effect == "widens"] == [
        (3, "/limits/payments.charge/currency_limits/USD/max_per_tx", "widens"),
        (3, "/limits/payments.charge/currency_limits/USD/daily_cap", "widens"),
        (3, "/limits/payments.charge/allowed_merchant_ids", "widens"),
        # Level 1's refund, payout and execute limits too, each change with its witness.
        *(
            (3, where, "widens")
            for where in [
                f"{refund}/currency_limits/USD/max_per_tx",
                f"{refund}/currency_limits/USD/daily_cap",
                *[f"{refund}/refund_reason_codes"] * 3,  # fraud, not_received, other
                f"{payout}/currency_limits/USD/max_per_tx",
                f"{payout}/currency_limits/USD/daily_cap",
                *[f"{payout}/allowed_destination_types"] * 2,  # digital_wallet, crypto_address
                f"{payout}/allowed_recipients",  # "*"
                f"{payout}/x_vault_destination_hold_hours",
                f"{payout}/max_payouts_per_day",
                f"{execute}/max_exposure_per_tx_usd",
                *[f"{execute}/allowed_source_account_types"] * 2,  # joint, business
                f"{execute}/max_exposure_per_counterparty_usd",
                f"{execute}/x_vault_account_fields",  # "*"
            ]
        ),
    ]
    assert all(c.witness is not None and not c.undecided for c in changes if c.effect == "widens")
    assert guard_main(["diff", str(SHIPPED), str(new), "--fail-on-widen"]) == 1
    toml.write_text("[level.3]\npassport = 3\n")
    from pytest_vault.policy.lint import lint_paths

    [finding] = [f for f in lint_paths([new]) if f.severity == "error"]
    assert (finding.file, finding.code) == (str(toml), "unloadable")
    # Read as the suite reads it: the whole levels.toml, the first problem by its path.
    assert finding.message == (
        f"{toml}: level.3.passport: Input should be a valid string (+3 more)"
    )
