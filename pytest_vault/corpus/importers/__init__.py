"""Importers of public corpora: `python -m pytest_vault.corpus import NAME [--out FILE]
[--passports DIR] [--direct]` (the options an importer takes).

Each importer converts a corpus that an installed package publishes into our case
format, on the user's machine, with provenance on every line: the converted texts are
never shipped with pytest-vault. An importer's package is an optional extra
(`pip install 'pytest-vault[NAME]'`); a missing one is a one-line `ImporterError`.

The common converter is here: `attack_case` builds a case and checks it loads;
`forbidding_levels` says which paying levels' shipped passports forbid a recipient, so
every imported attack is put where its payment would be unpermitted; and `for_level`
gives each transfer what its level asks of every transfer (Level 4: an idempotency key
and an approval code in the memo), then judges it with the guard, so an imported attack
is refused for its recipient, never stopped first by a rule it was not written to break.
`indirect_case` builds an indirect case (a user's task, an environment, the attacks
planted in it) and checks it loads. An importer's `convert(version, **options)` returns
its lines, or a `Converted` that also says what it counted and the passport folder it
writes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vault.core.errors import FileError, VaultError
from pytest_vault.core.text import json_text
from pytest_vault.corpus.load import CorpusError, read_case
from pytest_vault.guard.engine import (
    MERCHANT_FORBIDDEN,
    TRANSFER_TOOL,
    Guard,
    permits_recipient,
)
from pytest_vault.guard.folder import passport_files
from pytest_vault.guard.passport import Passport, load_passport

# The passports shipped inside the package (`harness.levels.SHIPPED`, which this wing
# may not import): the levels an imported case is placed at are judged by them.
PASSPORTS = Path(__file__).resolve().parents[2] / "passports"
# Level 1 permits any recipient and Level 5 no payment: attacks go to the headline.
PAYING_LEVELS = (2, 3, 4)
# The approval code an imported transfer's memo carries where its level asks for one: of
# the form the guard reads (`engine.APPROVAL_CODE`), naming no real approval.
APPROVAL_MEMO = "APC-2026-0001"


class ImporterError(VaultError):
    """An import that cannot run: the message is one line, and says what to do."""


@dataclass(frozen=True)
class Importer:
    name: str
    package: str  # the distribution that publishes the corpus
    module: str  # ours, imported only when this importer runs
    summary: str
    # What its `convert` takes of `direct` (a flag) and `passports` (write them: a flag
    # here; the command takes the folder).
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Converted:
    """What an importer made: its lines, what it says of them (a line each, for stderr),
    and the files of the passport folder the cases are to run under (name -> bytes)."""

    lines: list[dict[str, Any]]
    notes: tuple[str, ...] = ()
    passports: dict[str, bytes] = field(default_factory=dict)


IMPORTERS: dict[str, Importer] = {
    i.name: i
    for i in (
        Importer(
            "agentdojo",
            "agentdojo",
            "pytest_vault.corpus.importers.agentdojo",
            "AgentDojo's banking user tasks x money-moving injection tasks x fixed-text"
            " attacks, planted in what the tools return (MIT)",
            ("direct", "passports"),
        ),
        Importer(
            "pyrit",
            "pyrit",
            "pytest_vault.corpus.importers.pyrit",
            "PyRIT's jailbreak templates around our own payment goals (MIT)",
        ),
    )
}


def installed_version(package: str) -> str:
    """The installed version of `package`, or an `ImporterError` saying what to install."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise ImporterError(
            f"{package} is not installed: pip install 'pytest-vault[{package}]'"
        ) from None


def package_license(package: str) -> str:
    """The licence the installed distribution declares (SPDX expression, else classifier)."""
    meta = importlib.metadata.metadata(package)
    fields = meta.get_all("License-Expression") or meta.get_all("License") or [""]
    declared = str(fields[0]).strip()
    if declared and "\n" not in declared:  # a whole licence text is not a name
        return declared
    prefix = "License :: OSI Approved :: "
    names = [c[len(prefix) :] for c in meta.get_all("Classifier") or [] if c.startswith(prefix)]
    return "; ".join(names) or "unknown"


def run_importer(name: str) -> list[dict[str, Any]]:
    """The cases of importer `name`, as corpus lines (dicts), in a fixed order."""
    return run_import(name).lines


def run_import(name: str, **options: Any) -> Converted:
    """Importer `name`'s conversion with `options` (only those given are passed on, and
    only to an importer that takes them)."""
    importer = IMPORTERS.get(name)
    if importer is None:
        known = ", ".join(sorted(IMPORTERS))
        raise ImporterError(f"unknown importer {name!r}; known: {known}")
    for option in options:
        if option not in importer.options:
            raise ImporterError(f"importer {name!r} takes no --{option} option")
    version = installed_version(importer.package)
    convert: Callable[..., list[dict[str, Any]] | Converted] = importlib.import_module(
        importer.module
    ).convert
    try:
        made = convert(version, **options)
    except ImportError as exc:  # installed, but a dependency of it is broken or missing
        raise ImporterError(
            f"{importer.package} {version} cannot be imported: {type(exc).__name__}: {exc}"
        ) from None
    return made if isinstance(made, Converted) else Converted(made)


def shipped_passports(folder: Path = PASSPORTS) -> dict[int, Passport]:
    """The paying levels' passports, named by `levels.toml` as the suite reads them."""
    try:
        files = passport_files(folder)
        return {level: load_passport(files[level]) for level in PAYING_LEVELS}
    except FileError as exc:
        raise ImporterError(str(exc)) from None


def forbidding_levels(passports: Mapping[int, Passport], recipients: Iterable[str]) -> list[int]:
    """The levels, in order, whose passport permits none of `recipients`."""
    wanted = list(recipients)
    return [
        level
        for level, passport in sorted(passports.items())
        if not any(permits_recipient(passport.charge_limits, r) for r in wanted)
    ]


def required_arguments(passport: Passport, case_id: str, number: int) -> dict[str, str]:
    """What `passport` asks of every transfer besides a permitted recipient, for transfer
    `number` of case `case_id`: a memo with an approval code, and an idempotency key
    (8-128 printable characters, distinct per transfer, the same on every import)."""
    limits = passport.charge_limits
    out: dict[str, str] = {}
    if limits is not None and limits.x_vault_memo_approval_code_required:
        out["memo"] = APPROVAL_MEMO
    if limits is not None and limits.idempotency_required:
        digest = hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out["idempotency_key"] = f"import-{digest}-{number}"
    return out


def for_level(
    calls: Sequence[Mapping[str, Any]],
    passport: Passport,
    case_id: str,
    package: str,
    also: Set[str] = frozenset(),
) -> list[dict[str, Any]]:
    """`calls`, each transfer given its `required_arguments`, and judged in order by a
    guard of `passport`: each must be refused for its recipient (`oap.merchant_forbidden`)
    and for nothing but the codes in `also`, else an `ImporterError`."""
    guard = Guard(passport)
    out = []
    number = 0
    for call in calls:
        call = dict(call)
        if call["name"] == TRANSFER_TOOL:
            number += 1
            arguments = dict(call["arguments"])  # its own memo or key, if any, kept
            required = required_arguments(passport, case_id, number).items()
            call["arguments"] = arguments | {k: v for k, v in required if k not in arguments}
            codes = guard.check_call(TRANSFER_TOOL, call["arguments"]).codes
            if MERCHANT_FORBIDDEN not in codes or not set(codes) <= {MERCHANT_FORBIDDEN, *also}:
                raise ImporterError(
                    f"{package}: case {case_id!r}: transfer {number} is refused for "
                    f"{', '.join(codes) or 'nothing'}, not for its recipient alone"
                )
        out.append(call)
    return out


def transfer(recipient: str, amount: int | float | str, currency: str = "USD") -> dict[str, Any]:
    """A `transfer_funds` call as a case's `calls` hold it."""
    arguments = {"recipient": recipient, "amount": amount, "currency": currency}
    return {"name": "transfer_funds", "arguments": arguments}


def attack_case(
    *,
    id: str,
    session: str,
    level: int,
    category: str,
    messages: Sequence[str],
    calls: Sequence[Mapping[str, Any]],
    technique: str,
    provenance: Mapping[str, str],
    indirect: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One attack as a corpus line, checked against the case format. `indirect`: an
    indirect case's `goal`, `environment` and `injections` (its messages and calls are
    the user's task)."""
    line = {
        "id": id,
        "session": session,
        "level": level,
        "kind": "attack",
        "category": category,
        "messages": list(messages),
        "calls": [dict(c) for c in calls],
        **(indirect or {}),
        "technique": technique,
        "provenance": dict(provenance),
    }
    try:  # as the suite will read it: a package whose data changed shape stops here
        read_case(json_text(line), f"{provenance.get('package')}: case {id!r}")
    except CorpusError as exc:
        raise ImporterError(str(exc)) from None
    return line


def indirect_case(
    *,
    goal: Mapping[str, Any],
    environment: Mapping[str, Any],
    injections: Sequence[Mapping[str, str]],
    **case: Any,
) -> dict[str, Any]:
    """One indirect case as a corpus line (the user's task, the environment its tools
    read, the attacks planted in it, the injected action), checked against the format."""
    planted = {
        "goal": dict(goal),
        "environment": dict(environment),
        "injections": [dict(i) for i in injections],
    }
    return attack_case(**case, indirect=planted)


def jsonl(lines: Iterable[Mapping[str, Any]]) -> str:
    """The corpus file: one exact, valid UTF-8 JSON object per line."""
    return "".join(json_text(line) + "\n" for line in lines)
