from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_vault.core.errors import FileError
from pytest_vault.core.json import line_at, read_json
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import PassportError, PassportWarning, load_passport, read_passport
from pytest_vault.harness.levels import load_levels
from pytest_vault.policy.diff import parts

from .lines import dumped, written_line


def level2() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SHIPPED / "level-2.json").read_text())
    return data


def write(tmp_path: Path, data: object, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else dumped(data))
    return path


def test_shipped_levels() -> None:
    levels = load_levels()
    assert [(n, lv.temperature, lv.max_tokens) for n, lv in levels.items()] == [
        (1, 0.8, 1024),
        (2, 0.6, 1024),
        (3, 0.5, 1024),
        (4, 0.3, 1024),
        (5, 0.1, 256),
    ]
    allow = {
        n: (lv.passport.charge_limits.allowed_merchant_ids if lv.passport.charge_limits else None)
        for n, lv in levels.items()
    }
    assert allow == {
        1: ["*"],
        2: ["rent@aport-vault.com", "payroll@aport-vault.com", "utilities@aport-vault.com"],
        3: ["savings@aport-vault.com"],
        4: ["audit@aport-vault.com"],
        5: None,
    }
    caps = {
        n: lv.passport.charge_limits.currency_limits["USD"].max_per_tx
        for n, lv in levels.items()
        if lv.passport.charge_limits
    }
    assert caps == {1: 5_000_000, 2: 250_000, 3: 50_000, 4: 100_000}
    l4 = levels[4].passport.charge_limits
    assert l4 is not None and l4.idempotency_required and l4.x_vault_memo_approval_code_required
    assert not levels[5].passport.grants("payments.charge")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("status", "paused", "status: Input should be 'draft', 'active', 'suspended' or 'revoked'"),
        ("status", KeyError, "status: Field required"),
        ("owner_id", 7, "owner_id: Input should be a valid string"),
        ("assurance_level", "L9", "assurance_level: Input should be"),
        ("capabilities", {"id": "payments.charge"}, "capabilities: Input should be a valid list"),
        ("limits", KeyError, "limits: Field required"),
        (
            "limits.payments~charge",
            KeyError,
            "limits.payments.charge: required when payments.charge is granted",
        ),
        (
            "limits.payments~charge.allowed_merchant_ids",
            KeyError,
            "limits.payments.charge.allowed_merchant_ids: Field required",
        ),
        (
            "limits.payments~charge.allowed_merchant_ids",
            "rent@aport-vault.com",
            "limits.payments.charge.allowed_merchant_ids: Input should be a valid list",
        ),
        (
            "limits.payments~charge.currency_limits.USD.max_per_tx",
            "250000",
            "payments.charge.currency_limits.USD.max_per_tx: Input should be a valid integer",
        ),
        (
            "limits.payments~charge.currency_limits.USD.max_per_tx",
            -1,
            "max_per_tx: Input should be greater than or equal to 0",
        ),
        (
            "limits.payments~charge.idempotency_required",
            "yes",
            "idempotency_required: Input should be a valid boolean",
        ),
        ("regions.0", "usa", "regions[0]: String should match pattern"),
        ("spec_version", "oap/2.0", "spec_version: Input should be 'oap/1.0'"),
        ("surprise", 1, "surprise: unknown key"),
        ("expires_at", "2026-01-01T00:00:00", "expires_at: needs a time zone"),
        # pydantic's lax reading took numbers, guessing seconds or milliseconds.
        *(
            (
                field,
                value,
                f"{field}: expected an RFC 3339 date-time string, e.g. 2026-01-01T00:00:00Z",
            )
            for field, value in [
                ("expires_at", 30000000000),
                ("expires_at", "4102444800"),
                ("created_at", 0),
                ("updated_at", "2026-01-01"),
                ("expires_at", "2026-01-01 00:00:00Z"),
                ("expires_at", True),
            ]
        ),
        (
            "limits.payments~charge.idempotency_requried",
            True,
            "limits.payments.charge.idempotency_requried: unknown key; did you mean 'idempotency_required'?",
        ),
        (
            "limits.payments~charge.currency_limits.USD.daily_limit",
            1,
            "currency_limits.USD.daily_limit: unknown key",
        ),
    ],
)
def test_invalid_passports_are_one_line_errors(
    tmp_path: Path, path: str, value: object, message: str
) -> None:
    data = level2()
    # Keys may contain dots ("payments.charge"): walk the path by hand.
    parts: list[int | str] = [
        int(p) if p.isdigit() else p.replace("~", ".") for p in path.split(".")
    ]
    node: Any = data
    for part in parts[:-1]:
        node = node[part]
    if value is KeyError:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    file = write(tmp_path, data)
    with pytest.raises(PassportError) as info:
        load_passport(file)
    text = str(info.value)
    assert "\n" not in text
    # The line of the field (of the object that lacks it, when it is missing).
    assert text.startswith(f"{file}:{written_line(data, parts)}: ")
    assert message in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", ":1: invalid JSON: Expecting property name enclosed in double quotes at column 2"),
        ("[]", ":1: (root): expected a JSON object"),
        ("\n\n  [\n]", ":3: (root): expected a JSON object"),
        ("\n\n  nope", ":3: invalid JSON: Expecting value at column 3"),
    ],
)
def test_unreadable_passport_files(tmp_path: Path, content: str, message: str) -> None:
    file = write(tmp_path, content)
    with pytest.raises(PassportError) as info:
        load_passport(file)
    assert str(info.value) == f"{file}{message}"


def test_duplicate_allowlist_cannot_widen_a_passport(tmp_path: Path) -> None:
    text = (
        (SHIPPED / "level-3.json")
        .read_text()
        .replace(
            '"allowed_merchant_ids": [', '"allowed_merchant_ids": ["*"], "allowed_merchant_ids": ['
        )
    )
    file = write(tmp_path, text)
    with pytest.raises(PassportError) as info:
        load_passport(file)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '["*"], "allowed_merchant' in t)
    assert line > 1
    assert str(info.value) == (
        f"{file}:{line}: limits.payments.charge: duplicate key 'allowed_merchant_ids'"
    )


def test_missing_passport_file(tmp_path: Path) -> None:
    with pytest.raises(PassportError) as info:
        load_passport(tmp_path / "nope.json")
    assert str(info.value) == f"{tmp_path / 'nope.json'}: cannot read: No such file or directory"


def test_empty_allowlist_warns_loudly(tmp_path: Path) -> None:
    data = level2()
    data["limits"]["payments.charge"]["allowed_merchant_ids"] = []
    with pytest.warns(PassportWarning, match="EMPTY.*fail-open"):
        load_passport(write(tmp_path, data))


def test_wildcard_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_passport(SHIPPED / "level-1.json")


def test_upstream_example_passports_load(charge_tests: Path) -> None:
    for name in ("passport.instance.json", "passport.template.json"):
        passport = load_passport(charge_tests / name)
        assert passport.charge_limits is not None
        assert passport.charge_limits.allowed_merchant_ids == ["merch_abc", "merch_xyz"]


def test_levels_toml_errors(tmp_path: Path) -> None:
    for n in range(1, 6):
        (tmp_path / f"level-{n}.json").write_text((SHIPPED / f"level-{n}.json").read_text())
    toml = (SHIPPED / "levels.toml").read_text()
    (tmp_path / "levels.toml").write_text(toml.replace("temperature = 0.5", 'temperature = "hot"'))
    with pytest.raises(
        FileError, match=r"levels\.toml: level\.3\.temperature: Input should be a valid number"
    ):
        load_levels(tmp_path)
    (tmp_path / "levels.toml").write_text(toml.replace("[level.5]", "[level.6]"))
    with pytest.raises(FileError, match=r"levels\.toml: level\.6: unknown key \(Input"):
        load_levels(tmp_path)
    (tmp_path / "levels.toml").write_text(toml.split("[level.5]")[0])
    with pytest.raises(FileError, match=r"levels\.toml: level\.5: missing"):
        load_levels(tmp_path)


# -- what is recorded is what was enforced -------------------------------------------------------


def test_levels_record_the_file_loaded_and_the_digest_of_its_bytes(tmp_path: Path) -> None:
    for n in (1, 2, 4, 5):
        (tmp_path / f"level-{n}.json").write_bytes((SHIPPED / f"level-{n}.json").read_bytes())
    shipped = (SHIPPED / "level-3.json").read_bytes()
    custom = shipped.replace(b'"max_per_tx": 50000', b'"max_per_tx": 40000')
    assert custom != shipped
    (tmp_path / "custom.json").write_bytes(custom)
    settings = (SHIPPED / "levels.toml").read_bytes().replace(b'"level-3.json"', b'"custom.json"')
    (tmp_path / "levels.toml").write_bytes(settings)
    levels = load_levels(tmp_path)
    assert {n: lv.passport_file.name for n, lv in levels.items()} == {
        1: "level-1.json",
        2: "level-2.json",
        3: "custom.json",
        4: "level-4.json",
        5: "level-5.json",
    }
    digest = {n: lv.passport_sha256 for n, lv in levels.items()}
    assert digest[3] == "sha256:" + hashlib.sha256(custom).hexdigest()
    assert (
        digest[2] == "sha256:" + hashlib.sha256((SHIPPED / "level-2.json").read_bytes()).hexdigest()
    )
    settings_digest = "sha256:" + hashlib.sha256(settings).hexdigest()
    assert {lv.settings_sha256 for lv in levels.values()} == {settings_digest}
    # Edited on disk after loading: the record still names what was loaded and enforced.
    (tmp_path / "custom.json").write_bytes(shipped)
    (tmp_path / "levels.toml").write_bytes(b"# emptied\n")
    assert levels[3].passport_sha256 == digest[3]
    assert levels[3].settings_sha256 == settings_digest
    limits = levels[3].passport.charge_limits
    assert limits is not None and limits.currency_limits["USD"].max_per_tx == 40_000


def test_read_passport_digests_the_bytes_it_parsed(tmp_path: Path) -> None:
    data = (SHIPPED / "level-2.json").read_bytes()
    path = tmp_path / "p.json"
    path.write_bytes(data)
    passport, digest = read_passport(path)
    assert passport == load_passport(SHIPPED / "level-2.json")
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()


# -- the line a field is written on --------------------------------------------------------------


class _Layout:
    """An independent writer: the JSON text of a value, one entry a line after a drawn
    number of blank lines, and the line it put each entry's path on."""

    def __init__(self, gaps: list[int], newline: str) -> None:
        self.parts: list[str] = []
        self.line, self.lines, self.gaps, self.newline = 1, {}, gaps, newline
        self.entries = 0

    def _break(self) -> None:
        blank = self.gaps[self.entries % len(self.gaps)] if self.gaps else 0
        self.entries += 1
        for _ in range(1 + blank):
            self.parts.append(self.newline)
            self.line += 1

    def write(self, value: Any, path: tuple[int | str, ...] = ()) -> None:
        if path == ():
            self._break()
            self.lines[path] = self.line
        if isinstance(value, dict | list):
            self.parts.append("{" if isinstance(value, dict) else "[")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for n, (key, child) in enumerate(items):
                self.parts.append("," if n else "")
                self._break()
                self.lines[(*path, key)] = self.line
                if isinstance(value, dict):
                    self.parts.append(json.dumps(key, ensure_ascii=False) + " :\t")
                self.write(child, (*path, key))
            self._break()
            self.parts.append("}" if isinstance(value, dict) else "]")
        else:
            self.parts.append(json.dumps(value, ensure_ascii=False))


# Text that looks like structure: quotes, escapes, brackets, separators, line separators
# that are not JSON's newlines.
_TRICKY = st.text(alphabet=st.sampled_from('ab"\\{}[]:, /~\n\u2028\x1b'), max_size=6)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    value=_VALUES,
    gaps=st.lists(st.integers(0, 2), max_size=5),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_every_entry_is_found_on_the_line_it_is_written(
    value: Any, gaps: list[int], newline: str
) -> None:
    layout = _Layout(gaps, newline)
    layout.write(value)
    text = "".join(layout.parts)
    assert read_json(text) == value
    for path, line in layout.lines.items():
        assert line_at(text, path) == line
        # Past what the text holds: the deepest entry it reaches.
        assert line_at(text, (*path, "\x00not a key")) == line
        assert line_at(text, (*path, 10**6)) == line


@pytest.mark.parametrize(
    ("text", "loc", "line"),
    [
        ('{"a": 1,\n "a": 2}', ["a"], 2),  # the last occurrence: the one a reader keeps
        ('{"a": {"b": 1},\n "a": {\n "c": 2}}', ["a", "b"], 2),  # ... and only it is walked
        ("[0,\n1,\n 2]", ["2"], 3),  # a pointer's digits index an array
        ("[0,\n1,\n 2]", ["02"], 1),  # but not with a leading zero
        ('{"2": 0,\n "x": 1}', [2], 1),  # an int does not name a key
        ('{"a/b": 0,\n "c~d": 1}', parts("/c~0d"), 2),
        ('{"a/b": 0,\n "c~d": 1}', parts("/a~1b"), 1),
        ('{"s": "}\\"\\n{",\n "t": 1}', ["t"], 2),  # an escaped quote, brackets in a string
        ("\n\n  7", [], 3),
    ],
)
def test_the_line_of_an_entry(text: str, loc: list[int | str], line: int) -> None:
    json.loads(text)  # each text is JSON (a duplicate key aside)
    assert line_at(text, loc) == line


def test_levels_toml_names_the_path_of_a_field_after_a_prompt_that_mimics_it(
    tmp_path: Path,
) -> None:
    for n in range(1, 6):
        (tmp_path / f"level-{n}.json").write_text((SHIPPED / f"level-{n}.json").read_text())
    toml = (SHIPPED / "levels.toml").read_text()
    # The prompt of level 3 now holds a look-alike table and key; its temperature is bad.
    mimic = toml.replace(
        'system_prompt = """\n', 'system_prompt = """\n[level.3]\ntemperature = 0.5\n'
    ).replace("temperature = 0.5\nmax_tokens = 1024", 'temperature = "hot"\nmax_tokens = 1024')
    (tmp_path / "levels.toml").write_text(mimic)
    with pytest.raises(FileError) as info:
        load_levels(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'levels.toml'}: level.3.temperature: Input should be a valid number"
    )
