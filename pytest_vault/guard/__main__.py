"""The guard's command line: `python -m pytest_vault.guard --passport FILE < lines.jsonl`
(also `vault-guard --passport FILE`), one JSON decision per stdin line, in order; a line
that cannot be read is denied, never fatal. The policy authors' `vault-guard diff` and
`vault-guard lint` are `pytest_vault.policy`'s, a floor above.

A context line is judged under the pack its `"policy_id"` names, else `--policy`'s
(default `finance.payment.charge.v1`); the other packs (`guard.packs`) need facts of the
caller's system of record, which the command line has not: it decides them only with
`--context-facts`, taking those facts from the contexts, as the packs' reference tests
are written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import BinaryIO

from pytest_vault.core.cli import quiet_on_closed_pipe, write_all
from pytest_vault.core.json import dumps
from pytest_vault.core.text import utf8_json
from pytest_vault.guard.engine import (
    EVALUATION_ERROR,
    INVALID_CONTEXT,
    POLICY_ID,
    Decision,
    Guard,
    Reason,
    Unreadable,
    _show,
    deny,
    parse_json_object,
)
from pytest_vault.guard.packs import CAPABILITY, Packs, policy_of
from pytest_vault.guard.passport import Passport, PassportError, load_passport, passport_from_data

# A line's fields: "name" labels a line (the pack's conformance lines have one).
_TOOL_LINE = frozenset({"name", "tool", "arguments"})
_CONTEXT_LINE = frozenset({"name", "context", "overridePassport", "policy_id"})


def _unknown(fields: set[str], kind: str) -> Decision:
    names = ", ".join(sorted(map(_show, fields)))
    return deny(INVALID_CONTEXT, f"line: {kind} has no field(s) {names}")


_SAID_KEPT = 1024  # reasons' JSON kept per run: a flood of distinct ones cannot grow it


class _Session:
    """One run of the command line: the guard, the override passports read so far, and
    the JSON of the reasons said so far (an attack run repeats a few refusals)."""

    __slots__ = ("guard", "overrides", "packs", "policy", "said")

    def __init__(self, guard: Guard, policy: str = POLICY_ID, context_facts: bool = False) -> None:
        self.guard = guard
        self.overrides: dict[str, Passport] = {}
        self.said: dict[tuple[Reason, ...], str] = {}
        self.policy = policy  # the pack of a context line that names none
        self.packs = Packs(guard, context_facts=context_facts)

    def answer(self, line: bytes) -> str:
        """One decision for one input line, as its JSON text; malformed lines are
        denied, never fatal."""
        said = self.said
        if len(said) >= _SAID_KEPT:
            said.clear()
        try:
            decision, call, policy = self._decide(line)
            return decision_json(decision, call=call, said=said, policy_id=policy)
        except Exception as exc:  # noqa: BLE001 - fail closed, and keep answering
            return decision_json(deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}"))

    def _decide(self, line: bytes) -> tuple[Decision, bool, str]:
        """The decision for a line, whether its answer carries `executes` (a tool
        line's does), and the pack that decided."""
        try:
            # The same strict reading as tool arguments: exact decimals, no NaN, no
            # duplicate keys anywhere on the line.
            request = parse_json_object(line)
        except Unreadable as exc:
            return deny(INVALID_CONTEXT, f"line: {exc}"), False, POLICY_ID
        guard = self.guard
        # A field the line's kind does not have is refused, never skipped: a dropped
        # `overridePassport` (misspelt, or on a tool line) would judge the wrong passport.
        if "tool" in request:
            if not request.keys() <= _TOOL_LINE:
                return _unknown(request.keys() - _TOOL_LINE, "a tool line"), True, POLICY_ID
            return guard.check_call(request["tool"], request.get("arguments")), True, POLICY_ID
        if "context" not in request:
            said = 'line needs "tool" and "arguments", or "context"'
            return deny(INVALID_CONTEXT, said), False, POLICY_ID
        if not request.keys() <= _CONTEXT_LINE:
            return _unknown(request.keys() - _CONTEXT_LINE, "a context line"), False, POLICY_ID
        policy = self.policy
        if "policy_id" in request:
            named = policy_of(request["policy_id"])
            if named is None:
                said = (
                    f"line: policy_id {_show(request['policy_id'])} is not a pack the guard knows"
                )
                return deny(INVALID_CONTEXT, said), False, POLICY_ID
            policy = named
        passport: Passport | None = None
        if "overridePassport" in request:
            override = _override(guard.passport, request["overridePassport"], self.overrides)
            if isinstance(override, Decision):
                return override, False, policy
            passport = override
        if policy != POLICY_ID:
            return self.packs.check_context(policy, request["context"], passport), False, policy
        return guard.check_context(request["context"], passport), False, POLICY_ID


# `Decision.to_dict` as compact JSON (`json.dumps(..., ensure_ascii=False,
# separators=(",", ":"))`), written out directly: the same text, without building and
# walking the dicts of every answer. Strings are quoted by the encoder's own function.
_quote = encode_basestring
_POLICY = f',"policy_id":{_quote(POLICY_ID)}'


def _optional(text: str | None) -> str:
    return "null" if text is None else _quote(text)


def _reason(r: Reason) -> str:
    rule = "" if r.rule is None else f',"rule":{_quote(r.rule)}'
    return f'{{"code":{_quote(r.code)},"message":{_quote(r.message)}{rule}}}'


def _reasons(reasons: tuple[Reason, ...]) -> str:
    return ",".join([_reason(r) for r in reasons])


def decision_json(
    decision: Decision,
    *,
    call: bool = False,
    said: dict[tuple[Reason, ...], str] | None = None,
    policy_id: str = POLICY_ID,
) -> str:
    """The JSON text of `decision.to_dict(call=call, policy_id=policy_id)`; `said` keeps
    the reasons' JSON by their value, for a caller that answers many decisions."""
    why = decision.reasons
    reasons = None if said is None else said.get(why)
    if reasons is None:
        reasons = _reasons(why)
        if said is not None:
            said[why] = reasons
    head = '{"allow":true,"reasons":[' if decision.allow else '{"allow":false,"reasons":['
    if policy_id is not POLICY_ID and policy_id != POLICY_ID:
        return f'{head}{reasons}],"policy_id":{_quote(policy_id)}}}'
    if not call:
        return f"{head}{reasons}]{_POLICY}}}"
    t = decision.executes
    if t is None:
        return f'{head}{reasons}]{_POLICY},"executes":null}}'
    return (
        f'{head}{reasons}]{_POLICY},"executes":{{"recipient":{_quote(t.recipient)},'
        f'"amount_minor":{int.__repr__(t.amount_minor)},"currency":{_quote(t.currency)},'
        f'"memo":{_optional(t.memo)},"idempotency_key":{_optional(t.idempotency_key)}}}}}'
    )


def _override(base: Passport, override: object, cache: dict[str, Passport]) -> Passport | Decision:
    if not isinstance(override, dict):
        return deny(INVALID_CONTEXT, "overridePassport must be an object")
    # Its exact JSON: a decimal as its number, so `1.5` and `"1.5"` are two overrides.
    key = dumps(override, sort_keys=True)
    if key not in cache:
        try:
            merged = {**base.model_dump(mode="json", exclude_none=True), **override}
            cache[key] = passport_from_data(merged, "overridePassport")
        except PassportError as exc:
            return deny(INVALID_CONTEXT, str(exc))
    return cache[key]


def _utf8(answers: str) -> bytes:
    # A lone surrogate ("\\ud800" in a line's JSON) is quoted back in a reason: it leaves
    # as the same JSON escape it came in as, never as bytes that are not UTF-8.
    try:
        return answers.encode()
    except UnicodeEncodeError:
        return utf8_json(answers).encode()


USAGE = "python -m pytest_vault.guard --passport FILE < lines.jsonl"


def main(argv: Sequence[str] | None = None, *, prog: str = "", usage: str = USAGE) -> int:
    """`python -m pytest_vault.guard` (and `vault-guard` without a subcommand, which
    passes its own `prog` and `usage`); a closed stdout ends it quietly, with status 1."""
    args = sys.argv[1:] if argv is None else list(argv)
    return quiet_on_closed_pipe(lambda: _main(args, prog or "python -m pytest_vault.guard", usage))


def _main(argv: list[str], prog: str, usage: str) -> int:
    import argparse
    import warnings

    parser = argparse.ArgumentParser(
        prog=prog,
        usage=usage,
        description="Judge JSON Lines on stdin (pack contexts or transfer_funds calls) "
        "against a passport; one JSON decision per line on stdout.",
    )
    parser.add_argument("--passport", required=True, help="OAP passport JSON file")
    parser.add_argument(
        "--policy",
        default=POLICY_ID,
        help="the pack of a context line that names none in its policy_id "
        f"(default {POLICY_ID}; also {', '.join(p for p in CAPABILITY if p != POLICY_ID)})",
    )
    parser.add_argument(
        "--context-facts",
        action="store_true",
        help="conformance mode: take the facts the other packs need (an order's total, a "
        "destination's type, an account's type) from the contexts, as the packs' reference "
        "tests are written; without it those packs are denied (no system of record)",
    )
    args = parser.parse_args(argv)
    policy = policy_of(args.policy)
    if policy is None:
        parser.error(f"--policy: {args.policy!r} is not a pack the guard knows")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            guard = Guard(load_passport(args.passport))
        except PassportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for w in caught:
        print(f"WARNING: {w.message}", file=sys.stderr)

    _serve(_Session(guard, policy, args.context_facts), sys.stdin.fileno(), sys.stdout.buffer)
    return 0


def _serve(session: _Session, source: int, sink: BinaryIO) -> None:
    """Read what is available, answer every complete line, flush once per chunk: a
    caller feeding one line at a time (a co-process) gets its answer at once, and a
    file of 100,000 lines is not paid for with 100,000 flushes. Only the new chunk is
    searched for a newline, so one very long line costs linear time."""
    pending = bytearray()
    while chunk := os.read(source, 1 << 16):
        searched = len(pending)
        pending += chunk
        end = pending.rfind(b"\n", searched)
        if end < 0:
            continue
        lines = bytes(pending[:end]).split(b"\n")
        del pending[: end + 1]
        answers = [session.answer(line) for line in lines]
        write_all(sink, _utf8("\n".join(answers) + "\n"))
    if pending.strip():  # a last line without its newline is still a line
        write_all(sink, _utf8(session.answer(bytes(pending)) + "\n"))


if __name__ == "__main__":
    sys.exit(main())
