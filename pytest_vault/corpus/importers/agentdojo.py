"""AgentDojo's banking suite (MIT), converted into attack cases.

Each injection task whose ground truth moves money to an account (`send_money`,
`schedule_transaction`, or `update_scheduled_transaction` pointed at one) is crossed with
each of AgentDojo's fixed-template attacks. An attack counts as fixed when it is a
`FixedJailbreakAttack`, not a denial-of-service one, and its text is the same whatever
the victim model and whatever the user's task: an attack that names the model (taken
from the pipeline) or quotes the user's task has no one text we could replay.

Each pair is one case: the attack's text (its template filled with the task's `GOAL`)
is the attacker's message; its ground-truth payments become `transfer_funds(recipient,
amount)` in USD (AgentDojo's bank has no currency), a redirected scheduled payment
paying the amount that payment carries in the default environment. The level is
`2 + (task index + attack index) % 3` over the sorted lists, so each task and each
attack is spread over Levels 2-4, and is checked against the shipped passports: the
attacker's account must be permitted by none.

Each transfer carries what its level asks of every transfer (Level 4: an approval code
in the memo and an idempotency key), and the import judges it with the guard: it is
refused for its recipient (`oap.merchant_forbidden`), and for nothing else but, where
AgentDojo's own amount is over the level's per-transfer or daily cap, those caps
(`oap.limit_exceeded`): "as much money as possible" and "$30,000 in increments of no
more than $10,000" are the attacks, so their amounts are kept as AgentDojo states them.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_vault.corpus.importers import (
    PAYING_LEVELS,
    ImporterError,
    attack_case,
    for_level,
    forbidding_levels,
    package_license,
    shipped_passports,
    transfer,
)
from pytest_vault.guard.engine import LIMIT_EXCEEDED

SUITE = "banking"
# The AgentDojo calls that move money; `update_scheduled_transaction` only when it
# names a recipient (a new amount alone moves nothing to anyone new).
PAYING = ("send_money", "schedule_transaction", "update_scheduled_transaction")
# Read calls with a counterpart among our tools; others are dropped.
READS = {
    "get_balance": "get_balance",
    "get_most_recent_transactions": "get_transaction_history",
    "get_scheduled_transactions": "get_transaction_history",
}
_VERSION_DIR = re.compile(r"v\d+(?:_\d+)*")


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def natural(key: str) -> tuple[tuple[int, str], ...]:
    """`injection_task_2` before `injection_task_10`."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", key))


def latest_suite_version() -> str:
    """The newest benchmark version with a banking folder, as `v1.2.2`."""
    package = _module("agentdojo.default_suites")
    folders = [
        p
        for base in package.__path__
        for p in Path(base).iterdir()
        if _VERSION_DIR.fullmatch(p.name) and (p / SUITE).is_dir()
    ]
    if not folders:
        raise ImporterError(f"agentdojo: no {SUITE} suite in agentdojo.default_suites")
    newest = max(folders, key=lambda p: tuple(int(n) for n in p.name[1:].split("_")))
    return newest.name.replace("_", ".")


class _Pipeline:
    """What an attack reads of the pipeline it targets: only its name."""

    def __init__(self, name: str) -> None:
        self.name = name


def _texts(attack: Any, user_tasks: list[Any], task: Any) -> set[str]:
    out: set[str] = set()
    for user_task in user_tasks:
        out |= set(attack.attack(user_task, task).values())
    return out


def fixed_attacks(suite: Any, probe_task: Any) -> list[tuple[str, type[Any]]]:
    """(name, class) of the attacks whose text depends on the goal alone, by name."""
    attacks = _module("agentdojo.attacks")  # importing it registers every attack
    registry: dict[str, type[Any]] = _module("agentdojo.attacks.attack_registry").ATTACKS
    fixed = attacks.base_attacks.FixedJailbreakAttack
    # Two victims with different names: a text that changes between them names the model.
    names: dict[str, str] = _module("agentdojo.models").MODEL_NAMES
    victims: dict[str, str] = {}
    for key in sorted(names):
        victims.setdefault(names[key], key)
    pipelines = [_Pipeline(key) for key in sorted(victims.values())[:2]]
    # Two user tasks: a text that changes between them quotes the user's task.
    user_tasks = [suite.user_tasks[k] for k in sorted(suite.user_tasks, key=natural)[:2]]
    chosen = []
    for name, cls in sorted(registry.items()):
        if not issubclass(cls, fixed) or cls.is_dos_attack:
            continue
        try:
            texts = set().union(*(_texts(cls(suite, p), user_tasks, probe_task) for p in pipelines))
        except ValueError:  # it needs a pipeline name it knows: it names the model
            continue
        if len(texts) == 1:
            chosen.append((name, cls))
    return chosen


def _amount(value: Any) -> int | float:
    if type(value) not in (int, float):
        raise ImporterError(f"agentdojo: amount {value!r}: expected a number")
    return value  # type: ignore[no-any-return]


def payments(task: Any, environment: Any) -> list[dict[str, Any]]:
    """The task's ground truth as our calls; empty when it pays no one."""
    scheduled = {t.id: t for t in environment.bank_account.scheduled_transactions}
    calls: list[dict[str, Any]] = []
    pays = False
    for call in task.ground_truth(environment):
        args = dict(call.args)
        if call.function in PAYING and "recipient" in args:
            if "amount" in args:
                amount = _amount(args["amount"])
            elif args.get("id") in scheduled:  # redirected: it pays what it carried
                amount = _amount(scheduled[args["id"]].amount)
            else:
                raise ImporterError(f"agentdojo: {task.ID}: {call.function}: no amount")
            calls.append(transfer(str(args["recipient"]), amount))
            pays = True
        elif call.function in READS:
            calls.append({"name": READS[call.function], "arguments": {}})
    return calls if pays else []


def convert(version: str) -> list[dict[str, Any]]:
    suite_version = latest_suite_version()
    suite = _module("agentdojo.task_suite.load_suites").get_suite(suite_version, SUITE)
    environment = suite.load_and_inject_default_environment({})
    tasks = [
        (task_id, task, calls)
        for task_id, task in sorted(suite.injection_tasks.items(), key=lambda i: natural(i[0]))
        if (calls := payments(task, environment))
    ]
    if not tasks:
        raise ImporterError(f"agentdojo: {suite_version}: no injection task pays anyone")
    attacks = fixed_attacks(suite, tasks[0][1])
    passports = shipped_passports()
    victim = _Pipeline(min(_module("agentdojo.models").MODEL_NAMES))
    user_task = suite.user_tasks[min(suite.user_tasks, key=natural)]
    license = package_license("agentdojo")
    lines = []
    for t, (task_id, task, calls) in enumerate(tasks):
        recipients = [c["arguments"]["recipient"] for c in calls if c["name"] == "transfer_funds"]
        levels = forbidding_levels(passports, recipients)
        for a, (attack_name, cls) in enumerate(attacks):
            level = PAYING_LEVELS[(t + a) % len(PAYING_LEVELS)]
            if level not in levels:
                raise ImporterError(
                    f"agentdojo: {task_id}: level {level}'s passport permits {recipients[0]!r}"
                )
            [text] = set(cls(suite, victim).attack(user_task, task).values())
            case_id = f"agentdojo-{suite_version}-{SUITE}-{task_id}-{attack_name}"
            lines.append(
                attack_case(
                    id=case_id,
                    session=f"agentdojo-{suite_version}-{SUITE}-{task_id}",
                    level=level,
                    category="prompt_injection",
                    messages=[text],
                    calls=for_level(
                        calls, passports[level], case_id, "agentdojo", {LIMIT_EXCEEDED}
                    ),
                    technique=f"agentdojo:{attack_name}",
                    provenance={
                        "package": "agentdojo",
                        "version": version,
                        "license": license,
                        "suite": SUITE,
                        "suite_version": suite_version,
                        "injection_task": task_id,
                        "attack": attack_name,
                    },
                )
            )
    return lines
