"""Hostile corpus lines, passports and levels.toml: one line `FILE:LINE: field: problem`.

Every entry point (`load_corpus`, `python -m pytest_vault.corpus`, pytest collection,
`load_passport`, `load_levels`) answers each member of the class with the same words,
never a traceback or an exception's repr, and never a silent default.
"""

from __future__ import annotations

import codecs
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vault.core.errors import FileError
from pytest_vault.core.json import DuplicateKey, unique_keys
from pytest_vault.corpus import __main__ as corpus_cli
from pytest_vault.corpus.load import CorpusError, load_corpus
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import PassportError, load_passport
from pytest_vault.harness.levels import load_levels

pytest_plugins = ["pytester"]

GOOD = b'{"id": "good", "session": "s0", "level": 2, "category": "c", "messages": ["hi"]}'
TOO_DEEP = "nested too deeply (more than 32 levels)"


def case_line(rest: bytes, id: bytes = b"x1") -> bytes:
    """A valid case line with `rest` (more members of its object) at the end."""
    head = b'{"id": "' + id + b'", "session": "s1", "level": 2, "category": "c", "messages": ["m"]'
    return head + b", " + rest + b"}"


def calls(*arguments: bytes) -> bytes:
    return (
        b'"calls": ['
        + b", ".join(b'{"name": "t", "arguments": ' + a + b"}" for a in arguments)
        + b"]"
    )


# id: (one JSON document on one line, the problem, whether its line is known in the
# document). A problem in the text (syntax, encoding) has the decoder's line; one found in
# the parsed tree (a duplicate key, a number out of range) names its field, and the text is
# walked again for the field's line. Nesting too deep is refused before any walk: no line.
HOSTILE_JSON: dict[str, tuple[bytes, str, bool]] = {
    "arrays-100000-deep": (case_line(b'"x": ' + b"[" * 100_000 + b"]" * 100_000), TOO_DEEP, False),
    "objects-100000-deep": (
        case_line(b'"x": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000),
        TOO_DEEP,
        False,
    ),
    # The root object is the first level: 32 arrays inside it are one too many.
    "arrays-33-deep": (case_line(b'"x": ' + b"[" * 32 + b"]" * 32), TOO_DEEP, False),
    "exponent-too-large": (
        case_line(calls(b'{"recipient": "r@x.test", "amount": 1.5e99999999999999999999}')),
        "calls[0].arguments.amount: number out of range",
        True,
    ),
    "exponent-too-small": (
        case_line(b'"x": 1e-9999999999999999999'),
        "x: number out of range",
        True,
    ),
    "integer-5000-digits": (case_line(b'"x": ' + b"9" * 5000), "x: number out of range", True),
    "NaN": (case_line(b'"x": [1, NaN]'), "x[1]: NaN is not valid JSON", True),
    "Infinity": (case_line(b'"x": Infinity'), "x: Infinity is not valid JSON", True),
    "-Infinity": (case_line(b'"x": -Infinity'), "x: -Infinity is not valid JSON", True),
    "invalid-utf8": (
        case_line(b'"x": "\xff"'),
        "not valid UTF-8: byte 0xff at column 85",
        True,
    ),
    "truncated-utf8": (
        case_line(b'"x": "\xc3"'),
        "not valid UTF-8: byte 0xc3 at column 85",
        True,
    ),
    "surrogate-as-utf8-bytes": (
        case_line(b'"x": "\xed\xa0\x80"'),
        "not valid UTF-8: byte 0xed at column 85",
        True,
    ),
    "syntax": (case_line(b'"x": }'), "invalid JSON: Expecting value at column 84", True),
    "control-character": (
        case_line(b'"x": "\x1b[2J"'),
        "invalid JSON: Invalid control character at column 85",
        True,
    ),
    "unterminated": (b'{"id": "x', "invalid JSON: Unterminated string starting at column 8", True),
    # Duplicate keys at every depth: the first object (in document order) holding one.
    "duplicate-at-root": (case_line(b'"level": 5'), "(root): duplicate key 'level'", True),
    "duplicate-in-a-call": (
        case_line(b'"calls": [{"name": "a", "name": "transfer_funds"}]'),
        "calls[0]: duplicate key 'name'",
        True,
    ),
    "duplicate-in-arguments": (
        case_line(
            calls(
                b'{"recipient": "r@x.test", "amount": 1}',
                b'{"recipient": "evil@x.test", "recipient": "r@x.test", "amount": 1}',
            )
        ),
        "calls[1].arguments: duplicate key 'recipient'",
        True,
    ),
    "duplicate-deep-in-arguments": (
        case_line(calls(b'{"memo": {"a": [{"b": 1, "b": 2}]}}')),
        "calls[0].arguments.memo.a[0]: duplicate key 'b'",
        True,
    ),
    "duplicate-in-metadata": (
        case_line(b'"technique": {"t": 1, "t": 2}'),
        "technique: duplicate key 't'",
        True,
    ),
    "outer-duplicate-first": (
        case_line(calls(b'{"a": 1, "a": 2}') + b', "kind": "attack", "kind": "benign"'),
        "(root): duplicate key 'kind'",
        True,
    ),
    # Keys are quoted safely, in the message and in the field path.
    "duplicate-escape-key": (
        case_line(b'"\\u001b[2J": 1, "\\u001b[2J": 2'),
        "(root): duplicate key '\\x1b[2J'",
        True,
    ),
    "duplicate-surrogate-key": (
        case_line(calls(b'{"\\ud800": 1, "\\ud800": 2}')),
        "calls[0].arguments: duplicate key '\\ud800'",
        True,
    ),
    "duplicate-bidi-key": (
        case_line(b'"\\u202e": 1, "\\u202e": 2'),
        "(root): duplicate key '\\u202e'",
        True,
    ),
    "duplicate-newline-key": (
        case_line(b'"a\\nb": 1, "a\\nb": 2'),
        "(root): duplicate key 'a\\nb'",
        True,
    ),
    "path-through-hostile-keys": (
        case_line(b'"\\u001b]0;pwned\\u0007": {"\\ud800": {"k": 1, "k": 2}}'),
        "\\x1b]0;pwned\\x07.\\ud800: duplicate key 'k'",
        True,
    ),
}


@pytest.fixture(params=list(HOSTILE_JSON), ids=list(HOSTILE_JSON))
def hostile(request: pytest.FixtureRequest) -> tuple[bytes, str, bool]:
    return HOSTILE_JSON[request.param]


def corpus_file(folder: Path, document: bytes, name: str = "c.jsonl") -> Path:
    """A corpus whose line 2 is `document`, after a good line (its id: the file's name)."""
    path = folder / name
    good = GOOD.replace(b'"good"', b'"%s"' % path.stem.encode("utf-8", "surrogateescape"))
    path.write_bytes(good + b"\n" + document + b"\n")
    return path


def test_every_hostile_corpus_line_is_one_line_error(
    tmp_path: Path, hostile: tuple[bytes, str, bool]
) -> None:
    document, problem, _ = hostile
    path = corpus_file(tmp_path, document)
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert str(info.value) == f"{path}:2: {problem}"


def test_every_hostile_corpus_line_through_the_corpus_command(
    tmp_path: Path, hostile: tuple[bytes, str, bool], capsys: pytest.CaptureFixture[str]
) -> None:
    document, problem, _ = hostile
    path = corpus_file(tmp_path, document)
    assert corpus_cli.main([str(path)]) == 1
    assert capsys.readouterr() == ("", f"error: {path}:2: {problem}\n")


def test_every_hostile_passport_file_is_one_line_error(
    tmp_path: Path, hostile: tuple[bytes, str, bool]
) -> None:
    document, problem, located = hostile
    path = tmp_path / "p.json"
    path.write_bytes(document)
    with pytest.raises(PassportError) as info:
        load_passport(path)
    assert str(info.value) == (f"{path}:1: {problem}" if located else f"{path}: {problem}")


def test_the_corpus_command_answers_every_file_in_words(tmp_path: Path) -> None:
    """One real process over every hostile file, and a file whose name is not UTF-8."""
    files = [
        corpus_file(tmp_path, doc, f"{i:02d}.jsonl")
        for i, (doc, _, _) in enumerate(HOSTILE_JSON.values())
    ]
    odd = tmp_path / "ok\udcff.jsonl"  # the name's byte 0xff, as Python reads it from argv
    odd.write_bytes(GOOD + b"\n")  # one good line: it loads, and its name is printed
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vault.corpus", *map(str, files), str(odd)],
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"error: {path}:2: {problem}"
        for path, (_, problem, _) in zip(files, HOSTILE_JSON.values(), strict=True)
    ]
    assert (
        result.stdout.decode() == f"{tmp_path}/ok\\udcff.jsonl: 1 attacks, 0 benign, 1 sessions\n"
    )


def test_pytest_collects_hostile_corpus_files_as_one_line_errors(
    pytester: pytest.Pytester,
) -> None:
    chosen = ("arrays-100000-deep", "exponent-too-large", "invalid-utf8", "duplicate-at-root")
    for i, name in enumerate(chosen):
        corpus_file(pytester.path, HOSTILE_JSON[name][0], f"f{i}.jsonl")
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    out = result.stdout.str()
    for i, name in enumerate(chosen):
        assert f"{pytester.path / f'f{i}.jsonl'}:2: {HOSTILE_JSON[name][1]}" in out.splitlines()
    for word in ("Traceback", "RecursionError", "InvalidOperation", "UnicodeDecodeError"):
        assert word not in out
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert out.count("ERROR collecting") == len(chosen)


def test_pytest_collection_reports_every_bad_line_of_a_file(pytester: pytest.Pytester) -> None:
    bad = pytester.path / "bad.jsonl"
    bad.write_bytes(
        b"\n".join(
            [GOOD, b"{not json", case_line(b'"cals": []', b"x2"), case_line(b'"level": 7', b"x3")]
        )
        + b"\n"
    )
    corpus_file(pytester.path, GOOD.replace(b'"good"', b'"other"'), "ok.jsonl")
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    lines = result.stdout.str().splitlines()
    for problem in (
        f"{bad}:2: invalid JSON: Expecting property name enclosed in double quotes at column 2",
        f"{bad}:3: cals: unknown key; did you mean 'calls'?",
        f"{bad}:4: (root): duplicate key 'level'",
    ):
        assert problem in lines
    assert result.stdout.str().count("ERROR collecting") == 1
    assert "Traceback" not in result.stdout.str()


def test_nesting_up_to_the_bound_loads_as_written(tmp_path: Path) -> None:
    # 32 levels exactly: the root object, the free `metadata` object, then 30 arrays.
    line = case_line(b'"metadata": {"x": ' + b"[" * 30 + b"]" * 30 + b"}")
    [_, (_, case)] = load_corpus(corpus_file(tmp_path, line))
    assert case.free_metadata is not None
    value, arrays = case.free_metadata["x"], 1
    while value:
        [value] = value
        arrays += 1
    assert arrays == 30


def test_a_lone_surrogate_in_a_value_is_kept_exactly(tmp_path: Path) -> None:
    line = case_line(
        calls(b'{"recipient": "a\\ud800@x.test", "memo": "\\udfff"}', b'"{\\"\\ud800\\": 1}"')
    )
    [_, (_, case)] = load_corpus(corpus_file(tmp_path, line))
    assert case.calls[0].arguments == {"recipient": "a\ud800@x.test", "memo": "\udfff"}
    assert case.calls[1].arguments == '{"\ud800": 1}'


def test_a_byte_order_mark_is_not_part_of_any_document(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + GOOD + b"\n")
    assert [c.id for _, c in load_corpus(path)] == ["good"]
    passport = tmp_path / "p.json"
    passport.write_bytes(codecs.BOM_UTF8 + (SHIPPED / "level-3.json").read_bytes())
    assert load_passport(passport) == load_passport(SHIPPED / "level-3.json")
    folder = levels_folder(tmp_path / "levels")
    (folder / "levels.toml").write_bytes(codecs.BOM_UTF8 + (SHIPPED / "levels.toml").read_bytes())
    assert sorted(load_levels(folder)) == [1, 2, 3, 4, 5]


# -- levels.toml ---------------------------------------------------------------------------------

TOML = (SHIPPED / "levels.toml").read_text()
# The line of `[level.3]` in the shipped file, for the messages that name a line: tomllib's
# (a syntax error) and the UTF-8 reader's; a bad field of valid TOML is named by its path.
LEVEL_3 = TOML.splitlines().index("[level.3]") + 1


def levels_folder(folder: Path) -> Path:
    folder.mkdir()
    for name in (f"level-{n}.json" for n in range(1, 6)):
        shutil.copy(SHIPPED / name, folder / name)
    return folder


def _at_level_3(extra: str) -> str:
    return TOML.replace("[level.3]\n", f"[level.3]\n{extra}\n")


def _prompt_of_level_3(prompt: str) -> str:
    head, table, tail = TOML.partition("[level.3]\n")
    text = re.sub(
        r'system_prompt = """.*?"""',
        lambda _: f"system_prompt = {prompt}",
        tail,
        count=1,
        flags=re.S,
    )
    return head + table + text


# id: (levels.toml bytes, the message after the folder; "{toml}" is levels.toml's path)
HOSTILE_TOML: dict[str, tuple[bytes, str]] = {
    "arrays-100000-deep": (
        (TOML + "\nx = " + "[" * 100_000 + "]" * 100_000 + "\n").encode(),
        "levels.toml: invalid TOML: nested too deeply",
    ),
    "inline-tables-3000-deep": (
        (TOML + "\nx = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n").encode(),
        "levels.toml: invalid TOML: nested too deeply",
    ),
    "integer-5000-digits": (
        TOML.replace("max_tokens = 256", "max_tokens = " + "9" * 5000).encode(),
        "levels.toml: invalid TOML: number out of range",
    ),
    "invalid-utf8": (
        _at_level_3("# caf\xe9").encode("latin-1"),
        f"levels.toml:{LEVEL_3 + 1}: not valid UTF-8: byte 0xe9 at column 6",
    ),
    "syntax": (
        _at_level_3("temperature == 0.5").encode(),
        f"levels.toml:{LEVEL_3 + 1}: invalid TOML: Invalid value at column 14",
    ),
    "end-of-document": (
        (TOML + "\nx = ").encode(),
        "levels.toml: invalid TOML: Invalid value at end of document",
    ),
    "NaN-temperature": (
        TOML.replace("temperature = 0.5", "temperature = nan").encode(),
        "levels.toml: level.3.temperature: Input should be a finite number",
    ),
    # Strict: "0.5" and true (1.0) were read as temperatures; a prompt of spaces as ''.
    "text-temperature": (
        TOML.replace("temperature = 0.5", 'temperature = "0.5"').encode(),
        "levels.toml: level.3.temperature: Input should be a valid number",
    ),
    "bool-temperature": (
        TOML.replace("temperature = 0.5", "temperature = true").encode(),
        "levels.toml: level.3.temperature: Input should be a valid number",
    ),
    "blank-prompt": (
        _prompt_of_level_3('"  \\n "').encode(),
        "levels.toml: level.3.system_prompt: String should have at least 1 character",
    ),
    "unknown-top-level-key": (
        ("temperature = 0.0\n" + TOML).encode(),
        "levels.toml: temperature: unknown key",
    ),
    "infinite-max-tokens": (
        TOML.replace("max_tokens = 256", "max_tokens = inf").encode(),
        "levels.toml: level.5.max_tokens: Input should be a valid integer",
    ),
    "level-not-a-table": (
        TOML.replace("[level.5]", "[level]\n5 = 3\n[elsewhere]").encode(),
        "levels.toml: level.5: Input should be a valid dictionary (+1 more)",
    ),
    "hostile-level-key": (
        (TOML + '\n[level."\\u001b]0;x\\u0007"]\n').encode(),
        "levels.toml: level.\\x1b]0;x\\x07: unknown key (Input "
        "should be '1', '2', '3', '4' or '5') (+4 more)",
    ),
    "NUL-in-passport-path": (
        TOML.replace('"level-3.json"', '"level-\\u0000.json"').encode(),
        "level-\\x00.json: cannot read: embedded null byte",
    ),
    "missing-passport": (
        TOML.replace('"level-3.json"', '"gone\\u001b[2J.json"').encode(),
        "gone\\x1b[2J.json: cannot read: No such file or directory",
    ),
    "hostile-passport": (
        TOML.replace('"level-3.json"', '"deep.json"').encode(),
        f"deep.json: {TOO_DEEP}",
    ),
}


@pytest.mark.parametrize(("content", "message"), HOSTILE_TOML.values(), ids=list(HOSTILE_TOML))
def test_every_hostile_levels_toml_is_one_line_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    folder = levels_folder(tmp_path / "levels")
    (folder / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    (folder / "levels.toml").write_bytes(content)
    with pytest.raises(FileError) as info:
        load_levels(folder)
    assert str(info.value) == f"{folder}/{message}"


# -- messages that quote hostile text ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("\x1b[2J", "'\\x1b[2J'"),
        ("\ud800", "'\\ud800'"),
        ("\u202e", "'\\u202e'"),
        ("a\nb", "'a\\nb'"),
    ],
    ids=["escape", "lone-surrogate", "bidi-override", "newline"],
)
def test_every_duplicate_key_message_quotes_the_key_safely(key: str, shown: str) -> None:
    # The guard's hook: same exception, a message that is safe to print.
    with pytest.raises(DuplicateKey) as info:
        unique_keys([(key, 1), ("other", 2), (key, 3)])
    assert str(info.value) == f"duplicate key {shown}"


def test_every_error_message_escapes_what_it_quotes(tmp_path: Path) -> None:
    passport = (SHIPPED / "level-3.json").read_text().replace("{", '{"\\u001b[2J": 1, ', 1)
    (tmp_path / "p.json").write_text(passport)
    with pytest.raises(PassportError) as info:
        load_passport(tmp_path / "p.json")
    assert str(info.value) == f"{tmp_path}/p.json:1: \\x1b[2J: unknown key"
    named = tmp_path / "c\x1b[2J.jsonl"
    named.write_bytes(b"[1]\n")
    with pytest.raises(CorpusError) as corpus_info:
        load_corpus(named)
    assert str(corpus_info.value) == f"{tmp_path}/c\\x1b[2J.jsonl:1: (root): expected a JSON object"
