"""A folder of passports: `levels.toml` names each level's passport (and the prompt and
decode settings the suite gives the model), read into one model wherever it is read: by
the suite, by `vault-guard diff` and `lint`, and by the importers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from pytest_vault.core.toml import load_toml

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
    # `tools.RECORD`: a paragraph the prompt gains for each of the bank's records a
    # case holds (the record tools it offers, and the level's policy for them); a case
    # holding none is prompted with `system_prompt` alone.
    tools: dict[
        Literal["orders", "payout_destinations", "scheduled", "account"],
        Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1)],
    ] = {}


class LevelsFile(BaseModel):
    """`levels.toml`: a `[level.N]` table for each of the five levels, and nothing else
    (a setting misplaced outside its table would not be applied: refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: dict[Literal["1", "2", "3", "4", "5"], LevelSettings]

    @model_validator(mode="after")
    def _every_level(self) -> LevelsFile:
        missing = [n for n in LEVELS if str(n) not in self.level]
        if missing:
            raise ValueError(f"level.{missing[0]}: missing")
        return self


def read_levels_file(folder: Path) -> tuple[LevelsFile, bytes]:
    """`folder`'s `levels.toml`, and the bytes read; any problem is one `FileError`."""
    return load_toml(folder / "levels.toml", LevelsFile)


def passport_files(folder: Path) -> dict[int, Path]:
    """Each level's passport file, as `folder`'s `levels.toml` names it."""
    settings = read_levels_file(folder)[0]
    return {n: folder / settings.level[str(n)].passport for n in LEVELS}  # type: ignore[index]
