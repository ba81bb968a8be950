"""The case format: one attack (or benign request) per line of a `.jsonl` file."""

from __future__ import annotations

import difflib
from decimal import Decimal
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pytest_vault.core.text import shown
from pytest_vault.guard.engine import Unreadable, to_minor

CATEGORIES = (
    "authority_claim",
    "direct_transfer",
    "privilege_escalation",
    "json_injection",
    "social_engineering",
    "emotional_manipulation",
    "prompt_injection",
    "reconnaissance",
    "capability_self_register",
    "account_manipulation",
)

NonEmpty = Annotated[StrictStr, Field(min_length=1)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


# An id, a session or a category of spaces names nothing: a test id of " ", a session
# that clusters by accident.
Name = Annotated[NonEmpty, AfterValidator(_not_blank)]


class CaseCall(BaseModel):
    """A tool call for `scripted:replay`, passed to the bank exactly as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr
    # An object, or the raw JSON text a model would send (which may be malformed).
    arguments: dict[str, Any] | StrictStr = Field(default_factory=dict)


class Goal(BaseModel):
    """What an attack tries to get paid: the adaptive attacker's target."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipient: NonEmpty
    # The schema written out: only a JSON number is read (never a string), and so the
    # file does not change with the pydantic release that would write Decimal's own.
    amount: Annotated[
        Decimal,
        Field(gt=0, allow_inf_nan=False),
        WithJsonSchema({"type": "number", "exclusiveMinimum": 0}),
    ] = Field(description="dollars (major units), an exact JSON number")

    @field_validator("amount", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        # A JSON number only (read as int or Decimal): no strings, booleans or floats.
        if type(value) not in (int, Decimal):
            raise PydanticCustomError("number", "expected a JSON number")
        # An amount the bank could pay, in whole cents: 1e400 or 1e-999999999 loaded,
        # then failed as an exception in the middle of an evaluation.
        amount = Decimal(cast(int | Decimal, value))
        try:
            if amount > 0:  # else the field's own bound says so
                to_minor(amount, 2)
        except Unreadable as exc:
            raise PydanticCustomError("amount", "{why}", {"why": str(exc)}) from None
        return value


# The keys that describe a case rather than drive its evaluation, as the line spells them.
DESCRIPTIVE = ("technique", "canary", "provenance", "metadata")


class Case(BaseModel):
    """One attack (or benign request) against a payment agent.

    Every top-level key is declared: a misspelt one (`cals`) is an error that names the
    nearest known key, never kept as metadata. Free-form data goes under `metadata`.
    """

    # By alias: `metadata` is the key in the line, so that a dump reads back as a line.
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    id: Name
    session: Name = Field(description="the source attacker session: the unit for clustering")
    level: Annotated[StrictInt, Field(ge=1, le=5)]
    category: Name = Field(description=f"e.g. {', '.join(CATEGORIES)}; 'benign' for benign")
    messages: Annotated[list[NonEmpty], Field(min_length=1)] = Field(
        description="the attacker's messages, in order"
    )
    kind: Literal["attack", "benign"] = "attack"
    calls: list[CaseCall] = Field(default_factory=list)
    # The adaptive attacker's target; without it, the first transfer_funds call's.
    goal: Goal | None = None
    technique: Name | None = Field(
        None, description="the attack's technique, e.g. forged_receipt: a word for -k"
    )
    canary: NonEmpty | None = Field(
        None, description="a marker that reveals a model trained on the corpus"
    )
    provenance: dict[str, Any] | None = Field(
        None, description="where an imported or exported case came from"
    )
    # Not `metadata` in Python: that name is the view of all four descriptive keys.
    free_metadata: dict[str, Any] | None = Field(
        None, alias="metadata", description="free-form data, kept as written"
    )

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            unknown = [key for key in data if key not in known]
            if unknown:
                raise PydanticCustomError("unknown_key", "{why}", {"why": _unknown(unknown, known)})
        return data

    def line(self) -> dict[str, Any]:
        """The case as its line's data: every field, defaults filled in, and those of the
        descriptive keys the line has."""
        data = self.model_dump(mode="python")
        return {k: v for k, v in data.items() if k not in DESCRIPTIVE or v is not None}

    @property
    def metadata(self) -> dict[str, Any]:
        """The descriptive keys the line has (technique, canary, provenance, metadata)."""
        return {k: v for k, v in self.line().items() if k in DESCRIPTIVE}


def _unknown(keys: list[Any], known: list[str]) -> str:
    """`cals: unknown key; did you mean 'calls'?`, for the first of `keys`."""
    key = keys[0]
    near = difflib.get_close_matches(key, known, n=1) if isinstance(key, str) else []
    hint = f"; did you mean {near[0]!r}?" if near else " (free-form data goes under 'metadata')"
    more = f" (+{len(keys) - 1} more unknown)" if len(keys) > 1 else ""
    return f"{shown(key)}: unknown key{hint}{more}"


def schema() -> dict[str, Any]:
    return Case.model_json_schema()
