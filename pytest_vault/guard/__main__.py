"""The guard's command line: `python -m pytest_vault.guard --passport FILE < lines.jsonl`
(also `vault-guard`). One JSON decision per stdin line, in order; a line that cannot be
read is denied, never fatal.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from pytest_vault.guard.engine import (
    EVALUATION_ERROR,
    INVALID_CONTEXT,
    Decision,
    Guard,
    Unreadable,
    deny,
    parse_json_object,
)
from pytest_vault.guard.passport import Passport, PassportError, load_passport, passport_from_data
from pytest_vault.guard.text import utf8_json


def _answer(guard: Guard, line: bytes, overrides: dict[str, Passport]) -> dict[str, Any]:
    """One decision for one input line; malformed lines are denied, never fatal."""
    try:
        return _decide(guard, line, overrides)
    except Exception as exc:  # noqa: BLE001 - fail closed, and keep answering
        return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}").to_dict()


def _decide(guard: Guard, line: bytes, overrides: dict[str, Passport]) -> dict[str, Any]:
    try:
        # The same strict reading as tool arguments: exact decimals, no NaN, no
        # duplicate keys anywhere on the line.
        request = parse_json_object(line)
    except Unreadable as exc:
        return deny(INVALID_CONTEXT, f"line: {exc}").to_dict()
    if "tool" in request:
        return guard.check_call(request["tool"], request.get("arguments")).to_dict(call=True)
    if "context" not in request:
        return deny(INVALID_CONTEXT, 'line needs "tool" and "arguments", or "context"').to_dict()
    override = request.get("overridePassport")
    if override is None:
        return guard.check_context(request["context"]).to_dict()
    passport = _override(guard.passport, override, overrides)
    if isinstance(passport, Decision):
        return passport.to_dict()
    return guard.check_context(request["context"], passport).to_dict()


def _override(base: Passport, override: object, cache: dict[str, Passport]) -> Passport | Decision:
    if not isinstance(override, dict):
        return deny(INVALID_CONTEXT, "overridePassport must be an object")
    key = json.dumps(override, sort_keys=True, default=str)
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


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import warnings

    parser = argparse.ArgumentParser(
        prog="python -m pytest_vault.guard",
        description="Judge JSON Lines on stdin (pack contexts or transfer_funds calls) "
        "against a passport; one JSON decision per line on stdout.",
    )
    parser.add_argument("--passport", required=True, help="OAP passport JSON file")
    args = parser.parse_args(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            guard = Guard(load_passport(args.passport))
        except PassportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for w in caught:
        print(f"WARNING: {w.message}", file=sys.stderr)

    overrides: dict[str, Passport] = {}
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    source, sink = sys.stdin.fileno(), sys.stdout.buffer
    pending = bytearray()
    # Read what is available, answer every complete line, flush once per chunk: a
    # caller feeding one line at a time (a co-process) gets its answer at once, and a
    # file of 100,000 lines is not paid for with 100,000 flushes. Only the new chunk is
    # searched for a newline, so one very long line costs linear time.
    while chunk := os.read(source, 1 << 16):
        searched = len(pending)
        pending += chunk
        end = pending.rfind(b"\n", searched)
        if end < 0:
            continue
        lines = bytes(pending[:end]).split(b"\n")
        del pending[: end + 1]
        answers = [dumps(_answer(guard, line, overrides)) for line in lines]
        sink.write(_utf8("\n".join(answers) + "\n"))
        sink.flush()
    if pending.strip():  # a last line without its newline is still a line
        sink.write(_utf8(dumps(_answer(guard, bytes(pending), overrides)) + "\n"))
        sink.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
