"""`--vault-plan[=json]`: what the collected run would cost, printed instead of running
it; and the evaluations a run plans, per coverage cell."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import pytest

from pytest_vault.core.text import safe
from pytest_vault.plugin.session import VAULT, VaultSession

if TYPE_CHECKING:
    from pytest_vault.harness.agent import Job
    from pytest_vault.models.plan import ModelPlan
    from pytest_vault.models.providers import ProviderModel


def without_workers(config: pytest.Config) -> None:
    """A plan runs nothing, so it distributes nothing: `-n N` is turned off (after
    xdist's tryfirst `pytest_cmdline_main` read it, before its configure starts workers),
    as xdist itself stays out of `--collect-only`. What is left is what `-n 0` leaves."""
    if config.getoption("vault_plan") is not None and hasattr(config.option, "dist"):
        config.option.numprocesses = 0
        config.option.dist = "no"
        config.option.tx = []


@pytest.hookimpl(tryfirst=True, specname="pytest_runtestloop")
def pytest_runtestloop_plan(session: pytest.Session) -> bool | None:
    """`--vault-plan`: print the plan of the collected items and run none of them."""
    config = session.config
    vault = config.stash[VAULT]
    if vault.options.plan is None:
        return None
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return None  # pytest's own loop stops on the collection errors: no partial plan
    from pytest_vault.models.plan import render
    from pytest_vault.plugin.collect import VaultItem
    from pytest_vault.plugin.outputs import stream

    plans = plan_of(vault, [item.job for item in session.items if isinstance(item, VaultItem)])
    if vault.options.plan == "json":
        from pytest_vault.core.text import json_text

        stream(config, "stdout", json_text([p.record() for p in plans], indent=2) + "\n")
        return True
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        stream(config, "stdout", "".join(line + "\n" for line in render(plans)))
        return True
    reporter.section("pytest-vault plan")
    for line in render(plans):
        reporter.write_line(line)
    return True


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_plan_output(config: pytest.Config) -> None:
    """`--vault-plan=json`: stdout holds the JSON document alone, so pytest's own lines
    (header, warnings, summaries) go to stderr."""
    if config.getoption("vault_plan") != "json":
        return
    import sys

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        config.pluginmanager.unregister(reporter, "terminalreporter")
        config.pluginmanager.register(
            pytest.TerminalReporter(config, sys.stderr), "terminalreporter"
        )


def plan_of(vault: VaultSession, jobs: list[Job]) -> list[ModelPlan]:
    """What running these jobs would take. Our providers' clients are built, to key
    requests exactly as they would, and closed unused: nothing is asked, no runner
    starts, nothing is written."""
    import asyncio

    from pytest_vault.models.cache import ResponseCache
    from pytest_vault.models.plan import Planned, plan_run

    opts = vault.options
    providers: dict[str, ProviderModel | str] = {}
    # Only our providers' requests can be keyed here; a plugin's are its own.
    for text in vault.maker.our_providers(opts.models):
        try:
            providers[text] = vault.maker.provider_model(text, keyless=True)
        except Exception as exc:  # noqa: BLE001 - one redacted line, not a traceback
            providers[text] = safe(f"cannot build the client: {type(exc).__name__}: {exc}")
    built = [m for m in providers.values() if not isinstance(m, str)]

    async def close() -> None:
        for model in built:
            await model.close()

    attacker = None if opts.attacker is None else vault.maker.our_providers([opts.attacker])
    try:
        return plan_run(
            [vault.maker.spec(text) for text in opts.models],
            [Planned(job.case, job.spec, job.track, job.copy, job.trial) for job in jobs],
            vault.levels if jobs else {},
            max_steps=opts.max_steps,
            providers=providers,
            cache=ResponseCache(opts.cache) if opts.cache else None,
            prices=vault.maker.spend.prices,
            rounds=opts.rounds,
            attacker=attacker[0] if attacker else None,
            judges=_judge_caps(vault),
            unknown=_theirs(vault),
        )
    finally:
        asyncio.run(close())
        vault.maker.forget_providers()  # never asked: they have no decode settings to record


def _judge_caps(vault: VaultSession) -> dict[str, int]:
    """Each real-model judge's token cap (the prompt was checked at configure time)."""
    real = vault.maker.our_providers(vault.options.judges)
    if not real:
        return {}
    from pytest_vault.harness.judges import judge_prompt_file, load_judge_prompt

    cap = load_judge_prompt(judge_prompt_file(vault.options.passports)).prompt.max_tokens
    return dict.fromkeys(real, cap)


def _theirs(vault: VaultSession) -> dict[str, Literal["judge", "attacker"]]:
    """A plugin's judges and attacker that spend: the plan names them, requests unknown."""
    from pytest_vault.plugin.specs import ours

    opts = vault.options
    roles: list[tuple[str, Literal["judge", "attacker"]]] = [(j, "judge") for j in opts.judges]
    if opts.attacker is not None:
        roles.append((opts.attacker, "attacker"))
    return {t: r for t, r in roles if (spec := vault.maker.spec(t)).provider and not ours(spec)}
