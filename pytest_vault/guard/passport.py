"""Open Agent Passport (OAP v1.0) documents, validated with pydantic.

Follows `oap/passport-schema.json` of aporthq/aport-spec, with these deliberate
deviations (each marked `DEVIATION` below):

* `did`, `expires_at` and `never_expires` are accepted: the upstream schema omits
  them while forbidding unknown properties, yet its own spec text uses them.
* `limits["payments.charge"]` is validated against the `finance.payment.charge.v1`
  pack whenever the passport grants `payments.charge`: a passport that grants the
  capability without readable limits is an error, never an unlimited grant.
* `x_vault_memo_approval_code_required` is a pytest-vault extension to those limits
  (stricter than the published pack): see `ChargeLimits`.
"""

from __future__ import annotations

import re
import warnings
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pytest_vault.core.errors import FileError, describe, error_loc
from pytest_vault.core.json import line_at, read_json_file, sha256

CHARGE = "payments.charge"
WILDCARD = "*"

AssuranceLevel = Literal["L0", "L1", "L2", "L3", "L4KYC", "L4FIN"]
# L4FIN (financial verification) is ranked above L4KYC: the schema leaves the
# order unstated, and ranking the stronger check higher is the conservative read.
ASSURANCE_RANK: dict[str, int] = {"L0": 0, "L1": 1, "L2": 2, "L3": 3, "L4KYC": 4, "L4FIN": 5}

CurrencyCode = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
Minor = Annotated[StrictInt, Field(ge=0)]


class PassportError(FileError):
    """A passport that cannot be used; the message is one line naming file and field."""


class PassportWarning(UserWarning):
    """A passport that loads but is more permissive than its author likely meant."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Capability(_Strict):
    id: Annotated[StrictStr, Field(pattern=r"^[a-z0-9]+(\.[a-z0-9]+)*$")]
    params: dict[str, Any] = Field(default_factory=dict)


class CurrencyLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_per_tx: Minor
    daily_cap: Minor | None = None


class ChargeLimits(BaseModel):
    """`limits["payments.charge"]` as the `finance.payment.charge.v1` pack reads it.

    `currency_limits` and `allowed_merchant_ids` are required: without them the pack
    cannot say no. The other keys default to the pack's own semantics. Unknown keys are
    errors: a misspelt `idempotency_requried` must not silently switch a rule off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency_limits: dict[CurrencyCode, CurrencyLimit]
    # `"*"` permits any recipient. An empty list is also "any" under the published
    # pack, which is why `load_passport` warns about it.
    allowed_merchant_ids: list[StrictStr]
    allowed_countries: list[StrictStr] = Field(default_factory=list)
    blocked_categories: list[StrictStr] = Field(default_factory=list)
    max_items_per_tx: Annotated[StrictInt, Field(ge=1)] | None = None
    # The pack's `min_assurance` is L2; a passport may only raise it (the guard
    # applies the stricter of the two).
    require_assurance_at_least: AssuranceLevel = "L2"
    idempotency_required: StrictBool = False
    # A human approval step the agent cannot obtain: every charge is denied.
    approval_required: StrictBool = False
    # DEVIATION (pytest-vault extension, stricter than the pack): the APort Vault
    # Level 4 engine required an approval code `APC-YYYY-NNNN` in the memo.
    x_vault_memo_approval_code_required: StrictBool = False


# The other packs' capabilities, each named as its pack's `requires_capabilities` says;
# their limits live under the same key (as the packs' reference passports write them).
REFUND = "finance.payment.refund"  # finance.payment.refund.v1
PAYOUT = "payments.payout"  # finance.payment.payout.v1
EXECUTE = "finance.transaction"  # finance.transaction.execute.v1
_Names = list[Annotated[StrictStr, Field(min_length=1)]]


class RefundLimits(BaseModel):
    """`limits["finance.payment.refund"]` as `finance.payment.refund.v1` reads it.

    `currency_limits` is required (without it the pack cannot say no); without reason
    codes none is valid; `supported_currencies`, when given, narrows the currencies
    further (a currency without limits is never supported: nothing would cap it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency_limits: dict[CurrencyCode, CurrencyLimit]
    supported_currencies: list[CurrencyCode] | None = None
    refund_reason_codes: _Names | None = None
    # The pre-rename name of `refund_reason_codes`, as the aport-spec conformance
    # passport (payments.refunds.v1) writes it: accepted, never both.
    reason_codes: _Names | None = None
    # When given, a refund's region must be in these as well as in the passport's.
    regions: list[StrictStr] | None = None
    require_assurance_at_least: AssuranceLevel = "L2"
    # The pack requires `idempotency_key` in every context: this cannot switch it off.
    idempotency_required: StrictBool = True
    approval_required: StrictBool = False

    @model_validator(mode="after")
    def _one_reason_list(self) -> RefundLimits:
        # Neither is read as an empty list (fail closed: no reason code is valid, so every
        # refund is denied `oap.invalid_reason_code`), as passports written before the
        # guard read refunds have it.
        if self.refund_reason_codes is not None and self.reason_codes is not None:
            raise ValueError(
                "refund_reason_codes: give it or its pre-rename name reason_codes, not both"
            )
        return self

    @property
    def reasons(self) -> frozenset[str]:
        return frozenset(self.refund_reason_codes or self.reason_codes or ())


class PayoutLimits(BaseModel):
    """`limits["payments.payout"]` as `finance.payment.payout.v1` reads it. Its
    `limits_required` are required, but for `approval_required` and
    `compliance_checks_required`, which default to off; `allowed_recipients` may hold
    `"*"` (anyone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency_limits: dict[CurrencyCode, CurrencyLimit]
    supported_currencies: list[CurrencyCode] | None = None
    allowed_destination_types: list[Literal["bank_account", "digital_wallet", "crypto_address"]]
    allowed_recipients: _Names
    max_payouts_per_day: Annotated[StrictInt, Field(ge=0)]
    compliance_checks_required: StrictBool = False
    require_assurance_at_least: AssuranceLevel = "L3"
    idempotency_required: StrictBool = True
    approval_required: StrictBool = False
    # pytest-vault extension: a destination the system of record added less than this
    # many hours before the payout is refused (a new destination is the usual fraud).
    x_vault_destination_hold_hours: Annotated[StrictInt, Field(ge=0)] | None = None


class ExecuteLimits(BaseModel):
    """`limits["finance.transaction"]` as `finance.transaction.execute.v1` reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_transaction_types: list[Literal["buy", "sell", "transfer", "short_sell"]]
    allowed_asset_classes: _Names
    max_exposure_per_tx_usd: Minor
    allowed_source_account_types: _Names
    restricted_source_account_types: list[StrictStr] = Field(default_factory=list)
    max_exposure_per_counterparty_usd: Minor
    require_assurance_at_least: AssuranceLevel = "L3"
    idempotency_required: StrictBool = False
    approval_required: StrictBool = False
    # pytest-vault extension: the account's details the agent may change
    # (`update_account`), `"*"` for any. Left out, none (fail closed): changing a
    # contact e-mail before a transfer is the attack, and no pack limits it.
    x_vault_account_fields: _Names | None = None


# Each capability with limits the guard reads, and their model.
PACK_LIMITS: dict[str, type[BaseModel]] = {
    CHARGE: ChargeLimits,
    REFUND: RefundLimits,
    PAYOUT: PayoutLimits,
    EXECUTE: ExecuteLimits,
}


_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})?")


def _date_time(value: object) -> object:
    """An RFC 3339 date-time string only: pydantic's own reading also takes a number
    (and guesses seconds or milliseconds: 30000000000 is a date in 1970) or its text."""
    if type(value) is not str or _DATE_TIME.fullmatch(value) is None:
        raise PydanticCustomError(
            "date_time", "expected an RFC 3339 date-time string, e.g. 2026-01-01T00:00:00Z"
        )
    return value


DateTime = Annotated[datetime, BeforeValidator(_date_time)]


class Passport(_Strict):
    passport_id: StrictStr
    kind: Literal["template", "instance"]
    spec_version: Literal["oap/1.0"]
    template_id: StrictStr | None = None
    parent_agent_id: StrictStr | None = None
    owner_id: StrictStr
    owner_type: Literal["org", "user"]
    status: Literal["draft", "active", "suspended", "revoked"]
    assurance_level: AssuranceLevel
    capabilities: list[Capability]
    limits: dict[str, Any]
    regions: list[Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}(-[A-Z]{2})?$")]]
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: DateTime
    updated_at: DateTime
    version: Annotated[StrictStr, Field(pattern=r"^\d+\.\d+\.\d+$")]
    # DEVIATION: used by the spec text, missing from the upstream schema.
    did: StrictStr | None = None
    expires_at: DateTime | None = None
    never_expires: StrictBool | None = None

    @model_validator(mode="after")
    def _charge_limits_readable(self) -> Passport:
        # Every granted capability the guard has a pack for: its limits, readable.
        for capability, model in PACK_LIMITS.items():
            if not self.grants(capability):
                continue
            if capability not in self.limits:
                raise ValueError(f"limits.{capability}: required when {capability} is granted")
            try:
                model.model_validate(self.limits[capability])
            except ValidationError as exc:
                raise ValueError(f"limits.{capability}.{describe(exc, model)}") from None
        if self.expires_at is not None and self.expires_at.tzinfo is None:
            raise ValueError("expires_at: needs a time zone (e.g. a trailing Z)")
        return self

    def grants(self, capability: str) -> bool:
        return any(c.id == capability for c in self.capabilities)

    @property
    def charge_limits(self) -> ChargeLimits | None:
        """The validated charge limits, or None when the capability is not granted."""
        if not self.grants(CHARGE):
            return None
        return ChargeLimits.model_validate(self.limits[CHARGE])

    def pack_limits(self, capability: str) -> BaseModel | None:
        """The validated limits of a granted capability (`PACK_LIMITS`), else None."""
        if not self.grants(capability):
            return None
        return PACK_LIMITS[capability].model_validate(self.limits[capability])


def problem_loc(data: dict[str, Any], error: ValidationError) -> tuple[int | str, ...]:
    """Where in `data` the first problem of `error` (from `Passport`) is. The passport's
    own validator names its field only in words: its checks are redone here, in its
    order (the charge limits, then the time zone), to find it."""
    loc = error_loc(error)
    if loc:
        return loc
    capabilities = data.get("capabilities")
    limits = data.get("limits")
    for capability, model in PACK_LIMITS.items():
        granted = isinstance(capabilities, list) and any(
            isinstance(c, dict) and c.get("id") == capability for c in capabilities
        )
        if granted and isinstance(limits, dict):
            if capability not in limits:
                return ("limits", capability)
            try:
                model.model_validate(limits[capability])
            except ValidationError as exc:
                return ("limits", capability, *error_loc(exc))
    return ("expires_at",)


def passport_from_data(data: Any, source: str = "<passport>", text: str | None = None) -> Passport:
    """Validate a parsed passport; any problem is a one-line `PassportError`. With the
    `text` it was read from, the message names the line of the field too."""
    if not isinstance(data, dict):
        where = source if text is None else f"{source}:{line_at(text, ())}"
        raise PassportError(f"{where}: (root): expected a JSON object")
    try:
        passport = Passport.model_validate(data)
    except ValidationError as exc:
        where = source if text is None else f"{source}:{line_at(text, problem_loc(data, exc))}"
        raise PassportError(f"{where}: {describe(exc, Passport)}") from None
    limits = passport.charge_limits
    if limits is not None and not limits.allowed_merchant_ids:
        warnings.warn(
            f"{source}: limits.{CHARGE}.allowed_merchant_ids is EMPTY, which the "
            "published pack reads as 'any recipient' (fail-open); "
            f'write ["{WILDCARD}"] if that is meant, or list the recipients',
            PassportWarning,
            stacklevel=2,
        )
    return passport


def load_passport(path: str | Path) -> Passport:
    """Read and validate a passport file."""
    return read_passport(path)[0]


def read_passport(path: str | Path) -> tuple[Passport, str]:
    """Read and validate a passport file, with the digest of the very bytes parsed.

    So what is recorded as enforced is what is enforced, whatever the file holds later.
    """
    path = Path(path)
    value, text, data = read_json_file(path, PassportError)
    return passport_from_data(value, str(path), text), sha256(data)
