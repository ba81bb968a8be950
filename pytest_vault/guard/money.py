"""Money: an amount in the minor units of an ISO 4217 currency, and how it is written.

The one definition of each currency's minor-unit exponent (`MINOR_DIGITS`: JPY 0, USD 2,
KWD 3) and the one formatter of an amount (`written`), for everything that shows or
stores one. An amount is never converted: 500 JPY is written `500 JPY`, never `$5`.

Each place money is written has its named `Style`:

* `MODEL`: what a model is told (the bank's answers, a case's messages). US dollars as
  the suite always wrote them (`$5`, `$1,250.50`, `$2,500,000`), byte for byte, because
  what a model is told is part of the provider cache keys; every other currency as the
  figure and its code (`500 JPY`, `1.250 KWD`, `12 EUR`).
* `ATTACKER`: the adaptive attacker's messages and policy text: as `MODEL`, with every
  minor digit (`$5.00`, `$1,250.50`, `500 JPY`).
* `ENGINE`: the engine's messages and failure messages: every minor digit and the code
  (`1,250.50 USD`, `500 JPY`, `1.250 KWD`).
* `REPORT`: reports, tables, and the policy tools' lines (diff, lint, witnesses): every
  minor digit behind the currency's usual sign where it has one (`$2,150.00`, `€12.00`,
  `£3.50`, `¥500`), else the code (`1.250 KWD`).

`Money.told()`, `str(money)` and `Money.shown()` are `MODEL`, `ENGINE` and `REPORT`.
"""

from __future__ import annotations

from decimal import Decimal
from enum import Enum
from typing import NamedTuple

from pytest_vault.core.text import shown

# ISO 4217 codes the suite can convert to minor units, with their exponent. A code
# outside this table is unknown: what "1" of it is in minor units cannot be said, so the
# guard denies it rather than guess.
MINOR_DIGITS: dict[str, int] = {
    **dict.fromkeys(
        "USD EUR GBP CHF CAD AUD NZD SEK NOK DKK PLN CZK HUF RON BGN MXN BRL ZAR "
        "INR CNY HKD SGD THB MYR PHP IDR TRY ILS AED SAR EGP NGN KES".split(),
        2,
    ),
    **dict.fromkeys("JPY KRW CLP ISK VND UGX XAF XOF".split(), 0),
    **dict.fromkeys("BHD KWD OMR JOD TND".split(), 3),
}

# The one currency a model is told with a symbol: the suite's tools have always told the
# model US dollars as `$…`, and recorded provider caches replay only if that text is unchanged.
_TOLD_SIGNS = {"USD": "$"}
# The signs a report writes an amount with (`REPORT`): only those a reader cannot mistake.
SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def minor_digits(currency: str) -> int:
    """The currency's minor-unit exponent; ValueError, in words, for an unknown code."""
    digits = MINOR_DIGITS.get(currency) if type(currency) is str else None
    if digits is None:
        raise ValueError(f"currency {shown(repr(currency))} is not a known ISO 4217 code")
    return digits


class Style(Enum):
    """Where an amount is written; see the module's docstring for each one's text."""

    MODEL = "model"
    ATTACKER = "attacker"
    ENGINE = "engine"
    REPORT = "report"


def written(amount: Decimal, currency: str, style: Style) -> str:
    """The one text of an amount in major units of a known `currency`, in `style`
    (ValueError, in words, for an unknown code). `MODEL` drops a whole amount's
    fraction (`$5`); every other style writes each minor digit."""
    digits = minor_digits(currency)
    whole = style is Style.MODEL and amount == amount.to_integral_value()
    figure = f"{amount:,.{0 if whole else digits}f}"
    if style is Style.ENGINE:
        return f"{figure} {currency}"
    sign = (SIGNS if style is Style.REPORT else _TOLD_SIGNS).get(currency)
    if sign is None:
        return f"{figure} {currency}"
    if style is Style.REPORT and figure.startswith("-"):
        return f"-{sign}{figure[1:]}"
    return f"{sign}{figure}"  # a model has always been told `$-5`


def told(amount: Decimal, currency: str, *, whole: bool = True) -> str:
    """An amount in major units as a model is told it: `written` in `MODEL` style
    (`$5`, `500 JPY`), or with `whole=False` in `ATTACKER` style (`$5.00`)."""
    return written(amount, currency, Style.MODEL if whole else Style.ATTACKER)


class Money(NamedTuple):
    """An exact amount: whole minor units of `currency` (30050 USD is $300.50)."""

    minor: int
    currency: str

    def major(self) -> Decimal:
        """The amount in major units, exactly, in as few digits as it needs: 30050 USD
        -> 300.5, 500 JPY -> 500. Made from its text, which Decimal reads exactly in any
        context: arithmetic would follow the caller's (`prec = 2` made $123,456.78 1.2E+5)."""
        digits = minor_digits(self.currency)
        whole, part = divmod(abs(self.minor), 10**digits)
        fraction = f".{part:0{digits}d}".rstrip("0") if part else ""
        return Decimal(f"{'-' if self.minor < 0 else ''}{whole}{fraction}")

    def written(self, style: Style) -> str:
        """This amount in `style`. An unknown code's amount is written for people
        (`ENGINE`, `REPORT`) in its minor units, never read with a guessed exponent; a
        model is never told one (ValueError)."""
        known = type(self.currency) is str and self.currency in MINOR_DIGITS
        if not known and style in (Style.ENGINE, Style.REPORT):
            return f"{self.minor:,} minor units of {shown(repr(self.currency))}"
        return written(self.major(), self.currency, style)

    def told(self) -> str:
        """`MODEL`: `$5`, `$1,250.50`, `500 JPY`, `1.250 KWD`."""
        return self.written(Style.MODEL)

    def __str__(self) -> str:
        """`ENGINE`: `1,250.50 USD`, `500 JPY`."""
        return self.written(Style.ENGINE)

    def shown(self) -> str:
        """`REPORT`: `$2,150.00`, `¥500`, `1.250 KWD`."""
        return self.written(Style.REPORT)
