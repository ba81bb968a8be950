"""Per-item state at scale: user properties shared between tests, words per case."""

from __future__ import annotations

import pytest

from pytest_vault.corpus.model import Case
from pytest_vault.plugin import session as session_module
from pytest_vault.plugin.collect import keywords
from pytest_vault.plugin.session import VaultSession
from pytest_vault.plugin.settings import Options


def test_recorded_shares_equal_scalars_and_keeps_types_apart() -> None:
    vault = VaultSession(Options())
    first = vault.recorded("paid", False)
    assert vault.recorded("paid", False) is first
    assert vault.recorded("paid", 0) == ("paid", 0)
    assert type(vault.recorded("paid", 0)[1]) is int
    assert type(vault.recorded("paid", False)[1]) is bool
    assert vault.recorded("status", "com\x1bpleted") == ("status", "com\\x1bpleted")
    codes = ["AMOUNT_OVER_LIMIT"]
    pair = vault.recorded("deny_codes", codes)
    assert pair == ("deny_codes", codes) and pair[1] is codes
    assert vault.recorded("deny_codes", codes) is not pair


def test_recorded_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "SHARED_PROPERTIES", 2)
    vault = VaultSession(Options())
    for n in range(5):
        assert vault.recorded("error", f"e{n}") == ("error", f"e{n}")
    assert len(vault._properties) == 2
    assert vault.recorded("error", "e4") is not vault.recorded("error", "e4")
    assert vault.recorded("error", "e0") is vault.recorded("error", "e0")


def test_keywords_per_case() -> None:
    base = {"id": "a", "session": "s1", "level": 2, "category": "direct_transfer"}
    case = Case.model_validate({**base, "messages": ["pay"], "technique": "forged_receipt"})
    assert keywords(case) == ("level2", "direct_transfer", "attack", "s1", "forged_receipt")
    plain = Case.model_validate({**base, "messages": ["pay"]})
    assert keywords(plain) == ("level2", "direct_transfer", "attack", "s1")
