"""The OWASP ASI table: every built-in category maps, every entry is either tested by
some category or named as not tested, never both."""

from __future__ import annotations

import json

import pytest

from pytest_vault.corpus.builtin import files
from pytest_vault.corpus.owasp import ASI, BY_CATEGORY, NOT_TESTED, asi_of, risk_category


def test_every_entry_is_tested_or_said_not_to_be() -> None:
    tested = {asi for entries in BY_CATEGORY.values() for asi in entries}
    assert tested == {"ASI01", "ASI02", "ASI03", "ASI06"}
    assert set(NOT_TESTED) == {"ASI04", "ASI05", "ASI07", "ASI08", "ASI09", "ASI10"}
    assert tested | set(NOT_TESTED) == set(ASI)
    assert not tested & set(NOT_TESTED)


def test_every_shipped_category_is_in_the_table() -> None:
    categories = set()
    for path in files("builtin"):
        for line in path.read_text(encoding="utf-8").splitlines():
            categories.add(json.loads(line)["category"])
    assert categories - {"benign"} <= set(BY_CATEGORY)


@pytest.mark.parametrize(
    ("category", "track", "entries"),
    [
        ("direct_transfer", "A", ("ASI02",)),
        ("authority_claim", "B", ("ASI02", "ASI03")),
        ("fake_prior_approval", "indirect", ("ASI01", "ASI02", "ASI03", "ASI06")),
        ("benign", "A", ()),
        ("clean", "indirect", ()),
        # A category of a team's own, or an importer's, maps by its track.
        ("invoice_swap", "indirect", ("ASI01", "ASI02", "ASI06")),
        ("invoice_swap", "adaptive", ("ASI02",)),
    ],
)
def test_asi_of(category: str, track: str, entries: tuple[str, ...]) -> None:
    assert asi_of(category, track) == entries


def test_risk_category_is_a_custom_value() -> None:
    assert risk_category("ASI02") == "custom:owasp_asi02"


def test_an_indirect_placement_poisons_context_whatever_its_category() -> None:
    # AgentDojo's imported cases are all `prompt_injection`, planted in tool outputs.
    assert asi_of("prompt_injection", "indirect") == ("ASI01", "ASI02", "ASI06")
    assert asi_of("prompt_injection", "A") == ("ASI01", "ASI02")
