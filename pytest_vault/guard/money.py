"""Money: an amount in the minor units of an ISO 4217 currency, and how it is written.

The one definition of each currency's minor-unit exponent (`MINOR_DIGITS`: JPY 0, USD 2,
KWD 3) and of the text of an amount, for everything that shows or stores one: the
bank's answers to the model, the adaptive attacker's messages, failure messages and
reports. An amount is never converted: 500 JPY is written `500 JPY`, never `$5`.

Two ways of writing one:

* `told`: what a model is told. US dollars are written as the suite always wrote them
  (`$5`, `$1,250.50`, `$2,500,000`), byte for byte, because what a model is told is part
  of the provider cache keys; every other currency as the figure and its code
  (`500 JPY`, `1.250 KWD`, `12 EUR`).
* `str(money)`: for people reading a message: every minor digit and the code,
  `1,250.50 USD`, `500 JPY`, `1.250 KWD`.
* `shown()`: for people reading a table or a report: every minor digit behind the
  currency's usual sign where it has one (`$2,150.00`, `€12.00`, `£3.50`, `¥500`), else
  the code (`1.250 KWD`).
"""

from __future__ import annotations

from decimal import Decimal
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

# The one currency written with a symbol: the suite's tools have always told the model
# US dollars as `$…`, and recorded provider caches replay only if that text is unchanged.
_DOLLAR = "USD"
# The signs a report writes an amount with (`shown`): only those a reader cannot mistake.
SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def minor_digits(currency: str) -> int:
    """The currency's minor-unit exponent; ValueError, in words, for an unknown code."""
    digits = MINOR_DIGITS.get(currency) if type(currency) is str else None
    if digits is None:
        raise ValueError(f"currency {shown(repr(currency))} is not a known ISO 4217 code")
    return digits


def told(amount: Decimal, currency: str, *, whole: bool = True) -> str:
    """An amount in major units as a model is told it: `$1,250.50`, `500 JPY`.

    `whole`: a whole amount drops its fraction (`$5`, as the bank writes it); else every
    minor digit is written (`$5.00`, as the adaptive attacker writes it).
    """
    digits = minor_digits(currency)
    shown_digits = 0 if whole and amount == amount.to_integral_value() else digits
    figure = f"{amount:,.{shown_digits}f}"
    return f"${figure}" if currency == _DOLLAR else f"{figure} {currency}"


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

    def told(self) -> str:
        """What a model is told: `$5`, `$1,250.50`, `500 JPY`, `1.250 KWD`."""
        return told(self.major(), self.currency)

    def __str__(self) -> str:
        """For people: `1,250.50 USD`, `500 JPY`; an unknown code's amount stays in its
        minor units, never read with a guessed exponent."""
        digits = MINOR_DIGITS.get(self.currency) if type(self.currency) is str else None
        if digits is None:
            return f"{self.minor:,} minor units of {shown(repr(self.currency))}"
        return f"{self.major():,.{digits}f} {self.currency}"

    def shown(self) -> str:
        """For a table: `$2,150.00`, `¥500`, `1.250 KWD` (an unknown code as `str`)."""
        sign = SIGNS.get(self.currency) if type(self.currency) is str else None
        if sign is None:
            return str(self)
        figure = f"{self.major():,.{minor_digits(self.currency)}f}"
        return f"-{sign}{figure[1:]}" if figure.startswith("-") else f"{sign}{figure}"
