"""The five levels: a passport, a system prompt and decode settings each.

They live in a folder (`passports/` by default, shipped inside the package) holding
`level-N.json` passports and `levels.toml`, which a policy author can read and edit.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vault.core.json import sha256
from pytest_vault.corpus.model import RECORD_TOOLS, Case
from pytest_vault.guard.folder import LEVELS, SHIPPED, read_levels_file
from pytest_vault.guard.passport import Passport, read_passport


@dataclass(frozen=True)
class Level:
    number: int
    passport: Passport
    passport_file: Path
    temperature: float
    max_tokens: int
    system_prompt: str
    # "sha256:<hex>" of the bytes parsed, taken when they were read: what was enforced.
    passport_sha256: str
    settings_sha256: str
    # (record, paragraph) for each of the bank's records the level's prompt describes
    # (its `tools.RECORD` keys), in `RECORD_TOOLS` order.
    tools_prompts: tuple[tuple[str, str], ...] = ()

    def prompt_for(self, case: Case) -> str:
        """The system prompt a model is given on `case`: the level's, and a paragraph for
        each of the bank's records the case holds (the tools they add, the level's policy
        for each); a case holding none is given `system_prompt`, byte for byte."""
        env = case.environment
        if env is None:
            return self.system_prompt
        extra = [text for record, text in self.tools_prompts if getattr(env, record) is not None]
        return "\n\n".join([self.system_prompt, *extra])


def load_levels(folder: str | Path = SHIPPED) -> dict[int, Level]:
    """Read `levels.toml` and its passports; any problem is one line, a `FileError`
    (`PassportError` for a passport)."""
    folder = Path(folder)
    settings_file, data = read_levels_file(folder)
    levels: dict[int, Level] = {}
    for number in LEVELS:
        settings = settings_file.level[str(number)]  # type: ignore[index]
        path = folder / settings.passport
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            passport, digest = read_passport(path)
        levels[number] = Level(
            number=number,
            passport=passport,
            passport_file=path,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            system_prompt=settings.system_prompt.strip(),
            passport_sha256=digest,
            settings_sha256=sha256(data),
            tools_prompts=tuple(
                (record, settings.tools[record].strip())
                for record in RECORD_TOOLS
                if record in settings.tools
            ),
        )
    return levels


def passport_record(levels: Mapping[int, Level]) -> dict[str, Any]:
    """Per level, the passport file loaded and its digest, and the levels.toml digest
    (the shape a results file's metadata records them in)."""
    record: dict[str, Any] = {
        str(n): {"file": level.passport_file.name, "sha256": level.passport_sha256}
        for n, level in sorted(levels.items())
    }
    record["levels.toml"] = next(iter(levels.values())).settings_sha256
    return record
