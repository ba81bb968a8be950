"""Evaluations below pytest, in the shorthand the tests use: each goes through the one
entry, `harness.agent.evaluate`, with the subject and driver the session would use."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

from pytest_vault.corpus.model import Case
from pytest_vault.harness import agent
from pytest_vault.harness.adaptive import Campaign
from pytest_vault.harness.agent import (
    DEFAULT_MAX_STEPS,
    Copy,
    Evaluation,
    Job,
    Model,
    ModelSubject,
    Track,
)
from pytest_vault.harness.bank import Architecture, Screen
from pytest_vault.harness.levels import Level
from pytest_vault.harness.yours import AgentSubject, Loader


async def evaluate(
    case: Case,
    level: Level,
    model: Model,
    track: Track,
    architecture: Architecture,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    screen: Callable[[], Screen] | None = None,
    copy: Copy = "attack",
    trial: int = 1,
) -> Evaluation:
    """A model on a track's own messages."""
    job = Job(case, model.spec, track, architecture, copy, trial)
    return await agent.evaluate(job, level, ModelSubject(model, max_steps), screen=screen)


async def evaluate_adaptive(
    case: Case,
    level: Level,
    model: Model,
    architecture: Architecture,
    plan: Campaign,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    screen: Callable[[], Screen] | None = None,
    trial: int = 1,
) -> Evaluation:
    """A model on the adaptive track, `plan` writing the messages."""
    job = Job(case, model.spec, "adaptive", architecture, trial=trial)
    subject = ModelSubject(model, max_steps)
    return await agent.evaluate(job, level, subject, plan, screen=screen)


async def evaluate_agent(
    case: Case,
    level: Level,
    spec: str,
    loader: Loader,
    track: Track,
    architecture: Architecture,
    *,
    pool: concurrent.futures.ThreadPoolExecutor,
    max_steps: int,
    reply_timeout: float | None = None,
    screen: Callable[[], Screen] | None = None,
    copy: Copy = "attack",
    trial: int = 1,
    plan: Campaign | None = None,
) -> Evaluation:
    """A team's agent on a track's own messages (or, with `plan`, the adaptive track)."""
    job = Job(case, spec, track, architecture, copy, trial)
    subject = AgentSubject(loader, max_steps=max_steps, reply_timeout=reply_timeout, pool=pool)
    driver = agent.FIXED if plan is None else plan
    return await agent.evaluate(job, level, subject, driver, screen=screen)


async def evaluate_agent_adaptive(
    case: Case,
    level: Level,
    spec: str,
    loader: Loader,
    architecture: Architecture,
    plan: Campaign,
    *,
    pool: concurrent.futures.ThreadPoolExecutor,
    max_steps: int,
    reply_timeout: float | None = None,
    screen: Callable[[], Screen] | None = None,
    trial: int = 1,
) -> Evaluation:
    """A team's agent on the adaptive track."""
    return await evaluate_agent(
        case,
        level,
        spec,
        loader,
        "adaptive",
        architecture,
        pool=pool,
        max_steps=max_steps,
        reply_timeout=reply_timeout,
        screen=screen,
        trial=trial,
        plan=plan,
    )
