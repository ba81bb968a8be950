"""Witnesses: every change `vault-guard diff` reports as widening or narrowing comes with a
call the two passports decide differently, checked here again by fresh guards, from the
JSON the diff prints; a change of no effect has none, and says why; the search says when
it stops at its bounds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from pytest_vault.corpus.load import load_corpus
from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import Passport
from pytest_vault.policy.__main__ import main
from pytest_vault.policy.diff import Change, diff_passports, diff_paths, review_passports
from pytest_vault.policy.witness import Bounds, Search

from .test_diff import GRID, NOW, charge, load, passport_pairs, raw

L = "/limits/payments.charge"
ALLOW = f"{L}/allowed_merchant_ids"
USD = f"{L}/currency_limits/USD"
EVIL = "evil@x.test"
PAST, LATER = "2025-01-01T00:00:00Z", "2030-01-01T00:00:00Z"


def data(level: int, *edits: Any) -> dict[str, Any]:
    out = raw(level)
    for edit in edits:
        edit(out)
    return out


def limits(**fields: Any) -> Any:
    def edit(d: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                charge(d).pop(key, None)
            else:
                charge(d)[key] = value

    return edit


def usd(**fields: Any) -> Any:
    def edit(d: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                charge(d)["currency_limits"]["USD"].pop(key, None)
            else:
                charge(d)["currency_limits"]["USD"][key] = value

    return edit


def top(**fields: Any) -> Any:
    def edit(d: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                d.pop(key, None)
            else:
                d[key] = value

    return edit


def no_charge(d: dict[str, Any]) -> None:
    d["capabilities"] = [c for c in d["capabilities"] if c["id"] != "payments.charge"]


def add_payee(entry: str) -> Any:
    return lambda d: charge(d)["allowed_merchant_ids"].append(entry)


def add_currency(code: str, cap: dict[str, int]) -> Any:
    return lambda d: charge(d)["currency_limits"].update({code: cap})


# Each kind of change the engine reads, as (level, the narrower passport's edits, the wider
# one's, the pointer, the kind of witness): a field of every rule of the charge pack.
KINDS: dict[str, tuple[int, list[Any], list[Any], str, str]] = {
    "recipient": (2, [], [add_payee(EVIL)], ALLOW, "call"),
    "wildcard": (2, [], [add_payee("*")], ALLOW, "call"),
    "empty allowlist": (2, [], [limits(allowed_merchant_ids=[])], ALLOW, "call"),
    "currency": (
        3,
        [],
        [add_currency("EUR", {"max_per_tx": 10000})],
        f"{L}/currency_limits/EUR",
        "call",
    ),
    "currency, no minor unit": (
        3,
        [],
        [add_currency("JPY", {"max_per_tx": 5000, "daily_cap": 9000})],
        f"{L}/currency_limits/JPY",
        "call",
    ),
    "max_per_tx": (2, [], [usd(max_per_tx=280000)], f"{USD}/max_per_tx", "call"),
    "max_per_tx, level 4": (4, [], [usd(max_per_tx=150000)], f"{USD}/max_per_tx", "call"),
    "daily_cap": (3, [], [usd(daily_cap=150000)], f"{USD}/daily_cap", "call"),
    "daily_cap, level 4": (4, [], [usd(daily_cap=300000)], f"{USD}/daily_cap", "call"),
    "daily_cap removed": (3, [], [usd(daily_cap=None)], f"{USD}/daily_cap", "call"),
    "daily_cap below max_per_tx": (
        3,
        [usd(daily_cap=30000)],
        [usd(daily_cap=40000)],
        f"{USD}/daily_cap",
        "call",
    ),
    "status": (3, [top(status="suspended")], [], "/status", "call"),
    "expires_at": (
        3,
        [top(never_expires=None, expires_at=PAST)],
        [top(never_expires=None, expires_at=LATER)],
        "/expires_at",
        "call",
    ),
    "never_expires": (
        3,
        [top(never_expires=None, expires_at=PAST)],
        [top(expires_at=PAST)],
        "/never_expires",
        "call",
    ),
    "assurance_level": (3, [top(assurance_level="L1")], [], "/assurance_level", "call"),
    "require_assurance_at_least": (
        3,
        [limits(require_assurance_at_least="L4FIN")],
        [],
        f"{L}/require_assurance_at_least",
        "call",
    ),
    "capability": (3, [no_charge], [], "/capabilities", "call"),
    "regions emptied": (3, [top(regions=[])], [], "/regions", "call"),
    "region added": (3, [], [top(regions=["US", "GB"])], "/regions", "context"),
    "allowed_countries": (
        3,
        [limits(allowed_countries=["US"])],
        [limits(allowed_countries=["US", "GB"])],
        f"{L}/allowed_countries",
        "context",
    ),
    "allowed_countries lifted": (
        3,
        [limits(allowed_countries=["US"])],
        [],
        f"{L}/allowed_countries",
        "context",
    ),
    "blocked category": (
        3,
        [limits(blocked_categories=["gambling"])],
        [],
        f"{L}/blocked_categories",
        "context",
    ),
    "funds_transfer blocked": (
        3,
        [limits(blocked_categories=["funds_transfer"])],
        [],
        f"{L}/blocked_categories",
        "call",
    ),
    "max_items_per_tx": (3, [], [limits(max_items_per_tx=3)], f"{L}/max_items_per_tx", "context"),
    "max_items_per_tx removed": (
        3,
        [],
        [limits(max_items_per_tx=None)],
        f"{L}/max_items_per_tx",
        "context",
    ),
    "idempotency_required": (
        3,
        [limits(idempotency_required=True)],
        [],
        f"{L}/idempotency_required",
        "call",
    ),
    "approval_required": (
        3,
        [limits(approval_required=True)],
        [],
        f"{L}/approval_required",
        "call",
    ),
    "approval code": (
        4,
        [],
        [limits(x_vault_memo_approval_code_required=False)],
        f"{L}/x_vault_memo_approval_code_required",
        "call",
    ),
}


def rejudged(w: dict[str, Any], old: Passport, new: Passport) -> tuple[bool, bool]:
    """The witness as the diff printed it (JSON), judged by fresh guards: every earlier
    step allowed by both, and the last one's decision under each."""
    at = NOW if w["at"] is None else datetime.fromisoformat(w["at"].replace("Z", "+00:00"))

    def last(passport: Passport) -> bool:
        guard = Guard(passport, clock=lambda: at)

        def check(step: dict[str, Any]) -> bool:
            if w["kind"] == "call":
                return guard.check_call("transfer_funds", step).allow
            return guard.check_context(step).allow

        for step in w["earlier"]:
            assert check(step), "an earlier step was denied"
        return check(w["arguments"])

    return last(old), last(new)


def settled(old: dict[str, Any], new: dict[str, Any], **search: Any) -> list[Change]:
    return review_passports(load(old), load(new), search=Search(NOW, **search))


def gate(tmp_path: Path, old: dict[str, Any], new: dict[str, Any]) -> int:
    """`vault-guard diff OLD NEW --fail-on-widen`'s exit status."""
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    return main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--fail-on-widen"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_change_has_a_witness_both_ways(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    level, narrow, wide, pointer, shape = KINDS[kind]
    narrower, wider = data(level, *narrow), data(level, *wide)
    for old, new, effect in ((narrower, wider, "widens"), (wider, narrower, "narrows")):
        everything = [c for c in settled(old, new) if c.pointer == pointer]
        # The field's change, beside any entry the same edit makes of no effect.
        changes = [c for c in everything if c.effect != "neutral"]
        assert [(c.effect, c.undecided, c.note) for c in changes] == [(effect, False, None)]
        assert all(c.witness is None for c in everything if c not in changes)
        (change,) = changes
        assert change.witness is not None
        w = change.to_dict()["witness"]
        assert (w["kind"], w["effect"]) == (shape, effect)
        allowed = rejudged(w, load(old), load(new))
        assert allowed == ((False, True) if effect == "widens" else (True, False))
        # Refused for the changed rule alone (its own witness, not another change's).
        refused = w["old"] if effect == "widens" else w["new"]
        assert refused["allow"] is False and len(refused["reasons"]) == 1
        # --fail-on-widen: exactly when it widens (the judging instant is NOW's).
        monkeypatch.setattr("pytest_vault.policy.diff.datetime", _Frozen)
        assert gate(tmp_path, old, new) == (1 if effect == "widens" else 0)
        capsys.readouterr()


class _Frozen(datetime):
    """`datetime` whose now() is the tests' NOW (what `diff_paths` judges at by default)."""

    @classmethod
    def now(cls, tz: Any = None) -> _Frozen:  # type: ignore[override]
        return cls(2027, 6, 1, tzinfo=UTC)


# Changes that can change no decision: (level, old edits, new edits, pointer, why).
NO_EFFECT: dict[str, tuple[int, list[Any], list[Any], str, str | None]] = {
    "max_per_tx above the daily cap": (
        3,
        [usd(max_per_tx=100000)],
        [usd(max_per_tx=200000)],
        f"{USD}/max_per_tx",
        "the new passport's daily cap $1,000.00 binds first",
    ),
    "a payee beside a wildcard": (1, [], [add_payee(EVIL)], ALLOW, None),
    "a payee of a suspended passport": (
        3,
        [top(status="suspended")],
        [top(status="suspended"), add_payee(EVIL)],
        ALLOW,
        "the new passport permits nothing: its status is suspended",
    ),
    "a cap of a passport that grants no payments": (
        3,
        [no_charge],
        [no_charge, usd(max_per_tx=90000)],
        f"{USD}/max_per_tx",
        "the new passport permits nothing: it does not grant payments.charge",
    ),
    "an expiry moved within the past": (
        3,
        [top(never_expires=None, expires_at=PAST)],
        [top(never_expires=None, expires_at="2026-01-01T00:00:00Z")],
        "/expires_at",
        "both passports have expired (at 2025-01-01T00:00:00Z and 2026-01-01T00:00:00Z)",
    ),
    "the first region": (
        3,
        [top(regions=["US", "GB"])],
        [top(regions=["GB", "US"])],
        "/regions/0",
        None,
    ),
    "capability params": (
        3,
        [],
        [lambda d: d["capabilities"][1].update(params={"max_amount": 1})],
        "/capabilities/1/params",
        None,
    ),
    "an entry that can never match": (2, [], [add_payee(EVIL + " ")], ALLOW, None),
    "a currency the guard does not know": (
        3,
        [],
        [add_currency("XXX", {"max_per_tx": 100})],
        f"{L}/currency_limits/XXX",
        None,
    ),
    "a requirement below the pack's minimum": (
        3,
        [limits(require_assurance_at_least="L0")],
        [limits(require_assurance_at_least="L1")],
        f"{L}/require_assurance_at_least",
        None,
    ),
}


@pytest.mark.parametrize("kind", sorted(NO_EFFECT))
def test_a_change_of_no_effect_has_no_witness_and_says_why(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    level, before, after, pointer, why = NO_EFFECT[kind]
    monkeypatch.setattr("pytest_vault.policy.diff.datetime", _Frozen)
    for old, new in (
        (data(level, *before), data(level, *after)),
        (data(level, *after), data(level, *before)),
    ):
        (change,) = [c for c in settled(old, new) if c.pointer == pointer]
        assert (change.effect, change.undecided) == ("neutral", False)
        assert change.witness is None or change.witness.effect == "neutral"
        if why is not None and change.note is not None:
            assert change.note.replace("old", "new") == why.replace("old", "new")
        assert gate(tmp_path, old, new) == 0
        capsys.readouterr()


def test_a_cap_that_binds_after_another_shows_the_reasons_change() -> None:
    old, new = data(3, usd(max_per_tx=100000)), data(3, usd(max_per_tx=200000))
    (change,) = settled(old, new)
    assert change.line() == (
        f"{USD}/max_per_tx: no effect: USD per-transfer limit raised: $1,000.00 -> "
        "$2,000.00; the new passport's daily cap $1,000.00 binds first"
    )
    assert change.witness is not None
    assert change.witness.line() == (
        'reasons change: transfer_funds {"amount": 2000, "recipient": "savings@aport-vault.com"}: '
        "denied (oap.limit_exceeded[per_tx_amount_cap], oap.limit_exceeded[daily_cap_check]) -> "
        "denied (oap.limit_exceeded[daily_cap_check])"
    )


def test_a_daily_cap_witness_counts_the_days_earlier_transfers() -> None:
    (change,) = settled(data(3), data(3, usd(daily_cap=150000)))
    assert change.witness is not None
    assert change.witness.line() == (
        'witness: transfer_funds {"amount": 500, "recipient": "savings@aport-vault.com"} after 2 '
        "earlier transfers today ($1,000.00 allowed by both): denied "
        "(oap.limit_exceeded[daily_cap_check]) -> allowed"
    )
    # At Level 4 each transfer has its own key and the approval code.
    (l4,) = settled(data(4), data(4, usd(daily_cap=300000)))
    assert l4.witness is not None
    assert [s.get("idempotency_key") for s in l4.witness.steps] == [
        "witness-0001",
        "witness-0002",
        "witness-0003",
    ]
    assert {s["memo"] for s in l4.witness.steps} == {"APC-2026-0001"}


def test_an_expiry_in_the_future_is_witnessed_at_the_instant_it_bites() -> None:
    soon, later = "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"
    old = data(3, top(never_expires=None, expires_at=soon))
    new = data(3, top(never_expires=None, expires_at=later))
    (change,) = settled(old, new)
    assert change.effect == "widens" and change.witness is not None
    assert change.witness.at == datetime(2028, 1, 1, tzinfo=UTC)
    assert change.witness.line().startswith("witness at 2028-01-01T00:00:00Z: transfer_funds ")
    assert not change.witness.writable  # judged later than now: no corpus case


def test_the_search_says_when_it_stops_at_its_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # $10 a transfer, $1,000 a day raised to $2,000: 100 earlier transfers to reach the cap.
    old, new = data(3, usd(max_per_tx=1000)), data(3, usd(max_per_tx=1000, daily_cap=200000))
    (change,) = settled(old, new)
    assert (change.effect, change.undecided, change.witness) == ("widens", True, None)
    assert change.note == (
        "no witness: a witness needs 100 earlier transfers to reach the daily cap $1,000.00 "
        "(the bound is 64)"
    )
    assert change.line().startswith(f"{USD}/daily_cap: widens (undecided): USD daily cap raised")
    monkeypatch.setattr("pytest_vault.policy.diff.datetime", _Frozen)
    assert gate(tmp_path, old, new) == 1  # undecided widening: the gate stays shut
    assert "1 undecided" in capsys.readouterr().out.splitlines()[0]
    # A wider bound decides it.
    (wide,) = settled(old, new, bounds=Bounds(earlier=128))
    assert wide.witness is not None and len(wide.witness.steps) == 101
    assert (wide.effect, wide.undecided) == ("widens", False)
    # Items, and time: undecided, never "no effect".
    items = settled(data(3, limits(max_items_per_tx=1000)), data(3, limits(max_items_per_tx=2000)))
    assert [(c.effect, c.undecided, c.note) for c in items] == [
        ("widens", True, "no witness: a witness needs a context of 1,001 items (the bound is 256)")
    ]
    timed = settled(
        data(2), data(2, add_payee(EVIL), top(regions=["US", "GB"])), bounds=Bounds(seconds=0)
    )
    assert [(c.effect, c.undecided, c.note) for c in timed] == [
        ("widens", True, "no witness: the search stopped at its time bound (0 s)"),
        ("widens", True, "no witness: the search stopped at its time bound (0 s)"),
    ]


def test_a_change_other_changes_decide_for_it_is_undecided_not_without_effect() -> None:
    # The daily cap is raised, but the only payee is replaced: the day's earlier transfers
    # a witness needs go to a payee one of the passports refuses.
    old = data(3)
    new = data(3, usd(daily_cap=200000), limits(allowed_merchant_ids=["vendor@aport-vault.com"]))
    daily = next(c for c in settled(old, new) if c.pointer == f"{USD}/daily_cap")
    assert (daily.effect, daily.undecided, daily.witness) == ("widens", True, None)
    assert daily.note == (
        "no witness: the earlier transfers a witness needs are refused by one of the passports "
        "(other changes decide every call it could)"
    )


def test_a_neutral_change_sharing_a_rule_with_a_narrowing_keeps_no_witness() -> None:
    # The passport's assurance drops below the pack's minimum (narrows every call) while the
    # required level drops to L0, which the pack's minimum makes of no effect: the flip is
    # the assurance's, never the requirement's, though both are the same rule.
    changes = settled(
        data(3, limits(require_assurance_at_least=None)),
        data(3, top(assurance_level="L0"), limits(require_assurance_at_least="L0")),
    )
    assert [(c.pointer, c.effect, c.undecided) for c in changes] == [
        ("/assurance_level", "narrows", False),
        (f"{L}/require_assurance_at_least", "neutral", False),
    ]
    assert changes[0].witness is not None and changes[1].witness is None


@settings(max_examples=150, deadline=None)
@given(pair=passport_pairs())
def test_every_witness_differs_and_no_effect_is_never_claimed_wrongly(
    pair: tuple[Passport, Passport],
) -> None:
    """Random passport pairs: every witness the diff gives is decided differently by fresh
    guards; a change the field rules call neutral gets none (else the rules have a defect);
    a widening or narrowing is witnessed, or undecided, or of no effect; and wherever a call
    of the grid is newly allowed (denied), some change is a widening (narrowing) that is
    witnessed or undecided: "no effect" is never said of a change that has one."""
    old, new = pair
    hinted = {(c.pointer, repr(c.old), repr(c.new)): c.effect for c in diff_passports(old, new)}
    changes = review_passports(old, new, search=Search(NOW))
    for change in changes:
        if change.witness is not None:
            w = change.to_dict()["witness"]
            before, after = rejudged(w, old, new)
            assert w["effect"] == (
                "widens"
                if after and not before
                else "narrows"
                if before and not after
                else "neutral"
            )
            if w["effect"] == "neutral":
                assert (w["old"]["reasons"] != w["new"]["reasons"]) and before == after
        if hinted[(change.pointer, repr(change.old), repr(change.new))] == "neutral":
            assert change.effect == "neutral", change
        elif not change.undecided and change.effect != "neutral":
            assert change.witness is not None and change.witness.effect == change.effect
        if change.effect == "neutral" and not change.undecided:
            assert change.witness is None or change.witness.effect == "neutral"
    old_guard, new_guard = Guard(old, clock=lambda: NOW), Guard(new, clock=lambda: NOW)
    for call in GRID:
        was = old_guard.judge_call("transfer_funds", call).allow
        now = new_guard.judge_call("transfer_funds", call).allow
        if was != now:
            effect = "widens" if now else "narrows"
            assert any(c.effect == effect for c in changes), (call, changes)


# -- witnesses as corpus cases -------------------------------------------------------------------


def test_witnesses_are_corpus_cases_that_replay_as_witnessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_vault.plugin.decisions import decide

    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        for n in range(1, 6):
            (folder / f"level-{n}.json").write_text(json.dumps(raw(n)))
    (new / "level-2.json").write_text(json.dumps(data(2, add_payee(EVIL), usd(max_per_tx=280000))))
    (new / "level-3.json").write_text(
        json.dumps(data(3, usd(daily_cap=150000), limits(blocked_categories=["gambling"])))
    )
    (new / "level-4.json").write_text(json.dumps(data(4, usd(max_per_tx=80000))))
    cases = tmp_path / "witnesses.jsonl"
    assert main(["diff", str(old), str(new), "--witnesses", str(cases)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == (
        "3 newly allowed (Level 2: 2, Level 3: 1), 2 newly denied (Level 3: 1, Level 4: 1), "
        "0 reason-only changes"
    )
    # The category one is a pack context: not a corpus case, and said so.
    assert err.endswith(
        f"4 witness cases written to {cases} (1 more: pack contexts or later instants, "
        "not corpus cases)\n"
    )
    loaded = load_corpus(cases)
    assert [(c.level, c.category) for _, c in loaded] == [
        (2, "widens:currency_limits.USD.max_per_tx"),
        (2, "widens:allowed_merchant_ids"),
        (3, "widens:currency_limits.USD.daily_cap"),
        (4, "narrows:currency_limits.USD.max_per_tx"),
    ]
    # Replayed as the decision snapshots replay them: the last call decided as witnessed.
    for _, case in loaded:
        n = case.level
        before = decide(case, load(raw(n)))
        after = decide(case, load(json.loads((new / f"level-{n}.json").read_text())))
        want = case.metadata["metadata"]
        assert (before[-1]["allow"], after[-1]["allow"]) == (
            want["old"]["allow"],
            want["new"]["allow"],
        )
        assert all(call["allow"] for call in before[:-1] + after[:-1])
    # The same diff writes the same cases: ids are stable, so snapshots stay matched.
    first = cases.read_bytes()
    assert main(["diff", str(old), str(new), "--witnesses", str(cases)]) == 0
    assert cases.read_bytes() == first
    from pytest_vault.corpus.__main__ import main as corpus_main

    capsys.readouterr()
    assert corpus_main([str(cases)]) == 0
    assert capsys.readouterr().out == f"{cases}: 4 attacks, 0 benign, 4 sessions\n"


def test_witness_cases_of_two_files_need_a_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "new.json"
    new.write_text(json.dumps(data(3, add_payee(EVIL))))
    cases = tmp_path / "w.jsonl"
    old = str(SHIPPED / "level-3.json")
    # The shipped passports say their level (metadata.level).
    assert main(["diff", old, str(new), "--witnesses", str(cases)]) == 0
    assert [c.level for _, c in load_corpus(cases)] == [3]
    assert main(["diff", old, str(new), "--witnesses", str(cases), "--level", "2"]) == 0
    assert [c.level for _, c in load_corpus(cases)] == [2]
    unmarked = data(3, add_payee(EVIL))
    unmarked["metadata"] = {}
    new.write_text(json.dumps(unmarked))
    capsys.readouterr()
    assert main(["diff", old, str(new), "--witnesses", str(cases)]) == 2
    assert capsys.readouterr().err == (
        "error: --witnesses: give --level N: the witness cases of two passport files need the "
        "level they are judged at\n"
    )
    # An unwritable file: one line, and nothing else printed.
    assert main(["diff", old, str(new), "--level", "3", "--witnesses", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: --witnesses {tmp_path}: ")


def test_the_verdict_comes_first_and_reason_only_changes_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_vault.policy.diff.datetime", _Frozen)
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(data(3, usd(max_per_tx=100000))))
    new.write_text(
        json.dumps(data(3, usd(max_per_tx=200000), add_payee(EVIL), top(status="active")))
    )
    assert main(["diff", str(old), str(new)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "1 newly allowed, 0 newly denied, 1 reason-only change",
        f"{ALLOW}: widens: newly permitted: 'evil@x.test'",
        '  witness: transfer_funds {"amount": 1, "recipient": "evil@x.test"}: denied '
        "(oap.merchant_forbidden) -> allowed",
        f"{USD}/max_per_tx: no effect: USD per-transfer limit raised: $1,000.00 -> $2,000.00; "
        "the new passport's daily cap $1,000.00 binds first",
        "reason-only changes, by change of reasons; -v shows each:",
        "  oap.limit_exceeded[per_tx_amount_cap], oap.limit_exceeded[daily_cap_check] -> "
        "oap.limit_exceeded[daily_cap_check]: 1",
    ]
    assert main(["diff", str(old), str(new), "-v"]) == 0
    verbose = capsys.readouterr().out.splitlines()
    assert verbose[4].startswith('  reasons change: transfer_funds {"amount": 2000, ')
    assert main(["diff", str(old), str(new), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == lines[0]
    assert [c["witness"]["effect"] for c in doc["changes"]] == ["neutral", "widens"]


def test_amounts_are_exact_in_every_currency() -> None:
    # A cap with cents, in a currency of three minor digits.
    old = data(3, add_currency("KWD", {"max_per_tx": 1250, "daily_cap": 5000}))
    new = data(3, add_currency("KWD", {"max_per_tx": 1251, "daily_cap": 5000}))
    (change,) = settled(old, new)
    assert change.witness is not None
    assert change.witness.steps[-1]["amount"] == Decimal("1.251")
    assert change.to_dict()["witness"]["arguments"] == {
        "recipient": "savings@aport-vault.com",
        "amount": 1.251,
        "currency": "KWD",
    }


def test_the_shipped_folders_diff_against_themselves_to_nothing() -> None:
    assert diff_paths(SHIPPED, SHIPPED, now=NOW) == []


def test_a_witness_case_keeps_an_amount_past_a_doubles_precision_exact(tmp_path: Path) -> None:
    from pytest_vault.plugin.decisions import decide

    def huge(cap: int) -> dict[str, Any]:
        return data(1, usd(max_per_tx=cap, daily_cap=None))

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(huge(123456789012345677)))
    new.write_text(json.dumps(huge(123456789012345678)))
    cases = tmp_path / "w.jsonl"
    assert main(["diff", str(old), str(new), "--witnesses", str(cases)]) == 0
    ((_, case),) = load_corpus(cases)
    assert case.calls[0].arguments["amount"] == Decimal("1234567890123456.78")  # type: ignore[index]
    before = decide(case, load(huge(123456789012345677)))
    after = decide(case, load(huge(123456789012345678)))
    assert (before[0]["allow"], after[0]["allow"]) == (False, True)
