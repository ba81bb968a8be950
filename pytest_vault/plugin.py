"""pytest entry point (`-p vault`). Kept import-light: heavy modules load lazily."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vault", "pytest-vault: payment-agent attack suite")
    group.addoption(
        "--vault-passports",
        metavar="DIR",
        default=None,
        help="folder with level-1.json ... level-5.json and levels.toml "
        "(default: the passports shipped with pytest-vault)",
    )
