"""A deliberately weak guard for `--vault-guard weak_guard:make`: do not copy it.

It wraps the OAP engine but folds the recipient's case before the allowlist check, so
`RENT@aport-vault.com` passes as `rent@aport-vault.com`. The bank then pays the
recipient as written, which the passport does not permit: the suite's audit catches
it, and exactly those guarded tests fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_vault.guard.engine import TRANSFER_TOOL, Guard, Unreadable, parse_json_object
from pytest_vault.guard.passport import load_passport


def make(level: int, passport: Path) -> Any:
    engine = Guard(load_passport(passport))
    limits = engine.limits
    allowed = {} if limits is None else {r.casefold(): r for r in limits.allowed_merchant_ids}

    def check(tool: str, arguments: dict[str, Any] | str) -> tuple[bool, str]:
        if tool != TRANSFER_TOOL:
            return True, "read-only tool"
        try:
            args = dict(parse_json_object(arguments) if isinstance(arguments, str) else arguments)
        except Unreadable as exc:
            return False, str(exc)
        recipient = args.get("recipient")
        if isinstance(recipient, str) and recipient.casefold() in allowed:
            args["recipient"] = allowed[recipient.casefold()]  # the weakness
        decision = engine.check_call(tool, args)  # commits what it allows to its ledger
        return decision.allow, "; ".join(r.message for r in decision.reasons)

    return check
