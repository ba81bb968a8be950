"""The five levels: a passport, a system prompt and decode settings each.

They live in a folder (`passports/` by default, shipped inside the package) holding
`level-N.json` passports and `levels.toml`, which a policy author can read and edit.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
)

from pytest_vault.guard.passport import (
    Passport,
    PassportError,
    describe,
    error_loc,
    read_passport,
    read_toml,
    reason,
    sha256,
    toml_at,
)

LEVELS = (1, 2, 3, 4, 5)
SHIPPED = Path(__file__).resolve().parents[1] / "passports"


class LevelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    passport: StrictStr
    # Strict: "0.5" and true (read as 1.0) are not temperatures.
    temperature: Annotated[StrictFloat, Field(ge=0, le=2, allow_inf_nan=False)]
    max_tokens: Annotated[StrictInt, Field(ge=1)]
    # Stripped before the length check: a prompt of spaces is no prompt.
    system_prompt: Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1)]


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


def load_levels(folder: str | Path = SHIPPED) -> dict[int, Level]:
    """Read `levels.toml` and its passports; any problem is a one-line `PassportError`."""
    folder = Path(folder)
    source = folder / "levels.toml"
    try:
        data = source.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise PassportError(f"{source}: cannot read: {reason(exc)}") from None
    table = read_toml(data, str(source))

    def at(*loc: int | str) -> str:
        return toml_at(str(source), data, loc)

    raw = table.get("level")
    if not isinstance(raw, dict):
        raise PassportError(f"{at('level')}: level: expected [level.1] ... [level.5] tables")
    levels: dict[int, Level] = {}
    for number in LEVELS:
        entry = raw.get(str(number))
        if entry is None:
            raise PassportError(f"{source}: level.{number}: missing")
        if not isinstance(entry, dict):
            raise PassportError(f"{at('level', str(number))}: level.{number}: expected a table")
        try:
            settings = LevelSettings.model_validate(entry)
        except ValidationError as exc:
            where = at("level", str(number), *error_loc(exc))
            raise PassportError(f"{where}: level.{number}.{describe(exc)}") from None
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
        )
    extra = sorted(set(raw) - {str(n) for n in LEVELS})
    if extra:
        raise PassportError(f"{at('level', extra[0])}: level.{extra[0]}: unknown level (1 to 5)")
    unknown = sorted(set(table) - {"level"})
    if unknown:  # a setting misplaced outside its [level.N] table is not applied: refused
        raise PassportError(f"{at(unknown[0])}: {unknown[0]}: unknown key (only [level.N] tables)")
    return levels
