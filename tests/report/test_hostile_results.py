"""vault-report, the results file, the HTML report and the session summary, under hostile input.

Every writer survives hostile text; human-facing outputs show it escaped; a malformed
results file is one line naming the file and what is wrong; every table is a function
of the set of rows; CSV cells never start a formula; no URL secret is copied.
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_vault.core.text import shown, stored
from pytest_vault.report import summary
from pytest_vault.report.__main__ import main
from pytest_vault.report.formats import render_text, write_csv
from pytest_vault.report.html import write_html
from pytest_vault.report.results import SCHEMA, write_results

from .rows import V1_SCHEMA, row

# A lone surrogate, an OSC title sequence (ESC ... BEL), a bidi override and HTML.
# The rows hold an evaluation that errored: the verdict is INCOMPLETE, and vault-report
# exits 1 once everything is written (issue 39).
INCOMPLETE = 1
HOSTILE = "a\ud800b\x1b]0;pwned\x07c\u202ed<script>alert(1)</script>"
RAW = ("\ud800", "\x1b", "\x07", "\u202e")
# How people see it: each character that is not printable as its backslash escape.
SEEN = "a\\ud800b\\x1b]0;pwned\\x07c\\u202ed<script>alert(1)</script>"
SEEN_HTML = "a\\ud800b\\x1b]0;pwned\\x07c\\u202ed&lt;script&gt;alert(1)&lt;/script&gt;"
MODEL = f"m{HOSTILE}"
ATTACK = f"A{HOSTILE}"


CALLS = [
    {
        "name": "transfer_funds",
        "arguments": {"recipient": f"{HOSTILE}@evil.test", "amount": 5},
        "executed": True,
        "permitted": False,
        "transfer": {
            "recipient": f"{HOSTILE}@evil.test",
            "amount_minor": 500,
            "currency": "USD",
            "memo": HOSTILE,
        },
    }
]


def hostile_rows() -> list[dict[str, Any]]:
    """A model-alone payment to a hostile payee and its guarded twin, and an error row.

    `tool_calls` keeps the raw surrogate, as `json.dumps(ensure_ascii=False)` writes it.
    """
    paid = {"requested": True, "paid": True, "unpermitted": True, "violation": True}
    common = {"attack_id": ATTACK, "session": HOSTILE, "category": HOSTILE, "model": MODEL}
    return [
        row(**common, **paid, tool_calls=json.dumps(CALLS, ensure_ascii=False)),
        row(**common, architecture="guarded", requested=True, allowed_calls=0, denied_calls=1),
        row(**common, track="B", status="error", error=HOSTILE),
    ]


def _text_writer(run: Callable[[Path, Path], list[Path]]) -> Callable[[Path], str]:
    """A writer of text files from a results file of the hostile rows: their text."""

    def write(tmp: Path) -> str:
        results = tmp / "run.parquet"
        write_results(hostile_rows(), results, {"models": [MODEL]})
        return "".join(p.read_bytes().decode("utf-8") for p in run(results, tmp))

    return write


def _cli(*args: str) -> Callable[[Path, Path], list[Path]]:
    def run(results: Path, tmp: Path) -> list[Path]:
        argv = [a.replace("OUT", str(tmp / "out")) for a in args]
        assert main([str(results), *argv]) == INCOMPLETE
        out = tmp / "out"
        return sorted(out.iterdir()) if out.is_dir() else [out]

    return run


def _stdout(*args: str) -> Callable[[Path, pytest.CaptureFixture[bytes]], str]:
    def write(tmp: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> str:
        results = tmp / "run.parquet"
        write_results(hostile_rows(), results, {"models": [MODEL]})
        capsysbinary.readouterr()
        assert main([str(results), *args]) == INCOMPLETE
        return capsysbinary.readouterr().out.decode("utf-8")  # strict

    return write


def _html_at_the_end_of_a_run(tmp: Path) -> str:
    page = tmp / "report.html"
    write_html(hostile_rows(), [{"models": [MODEL]}], page)  # rows as the plugin holds them
    return page.read_bytes().decode("utf-8")


def _summary(tmp: Path) -> str:
    text = "\n".join(summary.render(hostile_rows())) + "\n"
    return text.encode("utf-8").decode("utf-8")  # as the terminal gets it


# Human-facing writers: (name, writer, does it need stdout, is it HTML).
SHOWN: list[tuple[str, Any, bool, bool]] = [
    ("text-stdout", _stdout(), True, False),
    ("csv", _text_writer(_cli("--format", "csv", "--out", "OUT")), False, False),
    ("html-cli", _text_writer(_cli("--html", "OUT")), False, True),
    ("html-run", _html_at_the_end_of_a_run, False, True),
    ("summary", _summary, False, False),
]


@pytest.mark.parametrize(
    ("writer", "stdout", "html"), [s[1:] for s in SHOWN], ids=[s[0] for s in SHOWN]
)
def test_every_human_facing_writer_shows_hostile_text_escaped(
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    writer: Any,
    stdout: bool,
    html: bool,
) -> None:
    text = writer(tmp_path, capsysbinary) if stdout else writer(tmp_path)
    for char in RAW:
        assert char not in text
    if html:
        assert "<script" not in text
        assert f"A{SEEN_HTML}" in text  # the attack id of the unpermitted transfer
        assert f"{SEEN_HTML}@evil.test" in text  # its payee
        assert f"m{SEEN_HTML}" in text  # the model
    else:
        assert f"m{SEEN}" in text  # the model
        assert "\\x1b" in SEEN and "\\u202e" in SEEN and "\\ud800" in SEEN


# Machine-facing writers keep text exact (a lone surrogate as its escape, the one thing a
# UTF-8 column cannot hold) and are valid UTF-8.


def test_parquet_writer_survives_lone_surrogates_and_keeps_text_exact(tmp_path: Path) -> None:
    path = tmp_path / "run.parquet"
    write_results(hostile_rows(), path, {"models": [MODEL], "note": HOSTILE})
    table = pq.read_table(path)
    table.validate(full=True)  # every string column is valid UTF-8
    rows = {(r["architecture"], r["track"]): r for r in table.to_pylist()}
    model_alone = rows[("model", "A")]
    assert (model_alone["attack_id"], model_alone["category"], model_alone["model"]) == (
        stored(ATTACK),
        stored(HOSTILE),
        stored(MODEL),
    )
    assert "\x1b" in model_alone["category"]  # exact: only the surrogate is escaped
    assert rows[("model", "B")]["error"] == stored(HOSTILE)
    # A call's arguments stay exact JSON text: they read back as the very arguments,
    # surrogate included; its other texts are stored as every column stores them.
    [call] = model_alone["tool_calls"]
    assert json.loads(call["arguments"]) == CALLS[0]["arguments"]
    assert call["transfer"] == {
        "recipient": stored(f"{HOSTILE}@evil.test"),
        "amount_minor": 500,
        "currency": "USD",
        "memo": stored(HOSTILE),
        "idempotency_key": None,
    }
    meta = table.schema.metadata[b"pytest_vault"]
    assert json.loads(meta.decode("ascii")) == {"models": [MODEL], "note": HOSTILE}


@pytest.mark.parametrize("where", ["stdout", "out"])
def test_json_writer_is_exact_ascii(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], where: str
) -> None:
    results = tmp_path / "run.parquet"
    write_results(hostile_rows(), results, {"models": [MODEL]})
    capsysbinary.readouterr()
    out = tmp_path / "t.json"
    assert (
        main([str(results), "--format", "json", *(["--out", str(out)] * (where == "out"))])
        == INCOMPLETE
    )
    data = out.read_bytes() if where == "out" else capsysbinary.readouterr().out
    text = data.decode("ascii")
    for char in RAW:
        assert char not in text
    tables = json.loads(text)
    [cat] = [r for r in tables["unpermitted_by_category"] if r["architecture"] == "model"]
    assert cat["category"] == stored(HOSTILE)
    assert {r["model"] for r in tables["stages"]} == {"all", stored(MODEL)}


# -- terminal output ---------------------------------------------------------------------------

TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"


def test_sarif_messages_and_properties_show_hostile_text_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Code scanning and SARIF viewers show a finding's message and properties: each text
    escaped, as the terminal gets it."""
    results = tmp_path / "run.parquet"
    write_results(hostile_rows(), results, {"models": [MODEL]})
    capsys.readouterr()
    assert main([str(results), "--format", "sarif"]) == INCOMPLETE
    [finding] = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    message = finding["message"]["text"]
    assert not [char for char in RAW if char in message]
    assert message.startswith(f"m{SEEN} alone paid an unpermitted recipient: $5.00 to ")
    assert finding["properties"]["model"] == f"m{SEEN}"


def test_terminal_tables_escape_control_characters() -> None:
    text = render_text(
        {
            "unpermitted_by_category": [
                {"category": TITLE, "track": "A", "architecture": "model", "evaluations": 2}
            ],
            "model_rates": [{"model": f"m{CLEAR}", "architecture": "model", "rate": 0.5}],
        }
    )
    assert "\x1b" not in text and "\x07" not in text
    assert text.splitlines()[2] == "\\x1b]0;pwned\\x07  A             model            2"
    assert text.splitlines()[-1] == "m\\x1b[2J  model         50.0%"


def test_session_summary_escapes_control_characters() -> None:
    rows = [
        row(attack_id=f"a{CLEAR}", category=TITLE, model=f"m{CLEAR}"),
        row(attack_id=f"a{CLEAR}", category=TITLE, model="plain"),
    ]
    lines = summary.render(rows)
    assert not any("\x1b" in line or "\x07" in line for line in lines)
    assert (
        lines[4]
        == "m\\x1b[2J  model      1          0     0          0  0 (95% bound 95%, 3/S 100%)           0             -       0        0"
    )
    # Ordinary text is unchanged, byte for byte.
    assert lines[5].startswith("plain     model      1")


# -- CSV formula injection ---------------------------------------------------------------------


def read_csv(cells: list[Any], tmp: Path) -> list[str]:
    write_csv({"t": [{f"c{i}": v for i, v in enumerate(cells)}]}, tmp)
    with (tmp / "t.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[1]


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_text_starting_like_a_formula_is_prefixed(lead: str, tmp_path: Path) -> None:
    value = f'{lead}HYPERLINK("http://evil.test","x")'
    assert read_csv([value], tmp_path) == ["'" + shown(value)]


def test_csv_numbers_stay_numbers_and_text_that_looks_like_arithmetic_is_text(
    tmp_path: Path,
) -> None:
    cells = [-0.25, 3, -7, 1.5e-07, True, None, "-2+3", "plain", " =1", {"=x": 1}, "=\x1b[2J"]
    cells += ["   @SUM(A1)", "a =1"]
    assert read_csv(cells, tmp_path) == [
        "-0.25",
        "3",
        "-7",
        "1.5e-07",
        "True",
        "",
        "'-2+3",
        "plain",
        "' =1",  # some spreadsheets trim leading spaces on import: a formula then
        '{"=x": 1}',
        "'=\\x1b[2J",
        "'   @SUM(A1)",
        "a =1",
    ]
    from pytest_vault.report.formats import csv_cell

    assert csv_cell(-0.25) == -0.25 and csv_cell(-2) == -2 and csv_cell(False) == "False"


# -- malformed results files -------------------------------------------------------------------


def table(rows: list[dict[str, Any]] | None = None) -> pa.Table:
    """A version-1 file's rows (no schema version: its logs are JSON text)."""
    rows = rows or [row(attack_id=f"a{i}") for i in range(1, 4)]
    return pa.Table.from_pylist(rows, schema=V1_SCHEMA)


def with_meta(raw: bytes) -> Callable[[], pa.Table]:
    return lambda: table().replace_schema_metadata({b"pytest_vault": raw})


def meta(value: Any) -> Callable[[], pa.Table]:
    return with_meta(json.dumps(value).encode())


def with_column(name: str, values: pa.Array) -> Callable[[], pa.Table]:
    def make() -> pa.Table:
        t = table()
        return t.set_column(t.schema.get_field_index(name), name, values)

    return make


def with_row(index: int, **over: Any) -> Callable[[], pa.Table]:
    def make() -> pa.Table:
        rows = table().to_pylist()
        rows[index] |= over
        return table(rows)

    return make


def _invalid_utf8() -> pa.Array:
    raw = pa.array([b"a1", b"a\xff", b"a3"], pa.binary())
    return pa.Array.from_buffers(pa.string(), 3, raw.buffers())


PLAN = "m|model|2|attack|A"
MALFORMED: list[tuple[str, Callable[[], pa.Table], str]] = [
    ("shard-text", meta({"shard": "x"}), "metadata: shard: expected K/N, got 'x'"),
    ("shard-zero", meta({"shard": "0/3"}), "metadata: shard: expected K/N, got '0/3'"),
    ("shard-k>n", meta({"shard": "4/3"}), "metadata: shard: expected K/N with K <= N, got '4/3'"),
    ("shard-number", meta({"shard": 3}), "metadata: shard: expected K/N, got 3"),
    (
        "shard-huge",
        meta({"shard": "1/" + "9" * 50}),
        f"metadata: shard: expected K/N, got '1/{'9' * 50}'",
    ),
    ("shard-escape", meta({"shard": "\x1b[2J"}), "metadata: shard: expected K/N, got '\\x1b[2J'"),
    (
        "planned-list",
        meta({"planned": [1]}),
        "metadata: planned: Input should be a valid dictionary",
    ),
    (
        "planned_run-list",
        meta({"planned_run": [1]}),
        "metadata: planned_run: Input should be a valid dictionary",
    ),
    (
        "planned-key",
        meta({"planned": {"x": 1}}),
        "metadata: planned: key 'x': expected 'model|architecture|level|kind|track'",
    ),
    (
        "planned-level",
        meta({"planned": {"m|model|9|attack|A": 1}}),
        "metadata: planned: key 'm|model|9|attack|A': level '9' is outside 1..5",
    ),
    (
        "planned-arch",
        meta({"planned": {"m|both|2|attack|A": 1}}),
        "metadata: planned: key 'm|both|2|attack|A': architecture 'both' is not one of model, guarded",
    ),
    (
        "planned-negative",
        meta({"planned": {PLAN: -1}}),
        f"metadata: planned.{PLAN}: Input should be greater than or equal to 0",
    ),
    (
        "planned-text",
        meta({"planned": {PLAN: "1"}}),
        f"metadata: planned.{PLAN}: Input should be a valid integer",
    ),
    (
        "planned-bool",
        meta({"planned": {PLAN: True}}),
        f"metadata: planned.{PLAN}: Input should be a valid integer",
    ),
    ("models-text", meta({"models": "m"}), "metadata: models: Input should be a valid list"),
    ("models-number", meta({"models": [1]}), "metadata: models[0]: Input should be a valid string"),
    (
        "base_url-number",
        meta({"base_url": 5}),
        "metadata: base_url: Input should be a valid string",
    ),
    ("a-list", meta([1]), "metadata: expected a JSON object, got a list"),
    ("a-string", meta("x"), "metadata: expected a JSON object, got a string"),
    ("not-utf8", with_meta(b'{"models": ["\xff"]}'), "metadata: not valid UTF-8"),
    ("not-json", with_meta(b'{"models": '), "metadata: not valid JSON"),
    (
        "duplicate-key",
        with_meta(b'{"shard": null, "shard": "1/2"}'),
        "metadata: duplicate key 'shard'",
    ),
    ("nan", with_meta(b'{"x": NaN}'), "metadata: NaN is not valid JSON"),
    ("huge-number", with_meta(b'{"x": 1' + b"0" * 5000 + b"}"), "metadata: number out of range"),
    ("deep", with_meta(b"[" * 100_000 + b"]" * 100_000), "metadata: nested too deeply"),
    (
        "level-text",
        with_column("level", pa.array(["2", "x", "2"])),
        "column level: cannot be read as int8 (the file has string)",
    ),
    (
        "level-overflow",
        with_column("level", pa.array([2, 300, 2])),
        "column level: cannot be read as int8 (the file has int64)",
    ),
    (
        "deny_codes-number",
        with_column("deny_codes", pa.array([1, 2, 3])),
        "column deny_codes: cannot be read as list<item: string> (the file has int64)",
    ),
    (
        "string-not-utf8",
        with_column("attack_id", _invalid_utf8()),
        "column attack_id: not valid UTF-8",
    ),
    (
        "no-column",
        lambda: table().drop_columns(["tool_calls"]),
        "not a pytest-vault results file (no column 'tool_calls')",
    ),
    ("level-9", with_row(1, level=9), "row 2: level: 9 is outside 1..5"),
    ("level-0", with_row(2, level=0), "row 3: level: 0 is outside 1..5"),
    ("level-missing", with_row(0, level=None), "row 1: level: missing"),
    ("model-missing", with_row(1, model=None), "row 2: model: missing"),
    ("requested-missing", with_row(1, requested=None), "row 2: requested: missing"),
    ("kind", with_row(0, kind="attak"), "row 1: kind: 'attak' is not one of attack, benign"),
    (
        "architecture",
        with_row(0, architecture="\x1b[2J"),
        "row 1: architecture: '\\x1b[2J' is not one of model, guarded",
    ),
    ("track", with_row(0, track="C"), "row 1: track: 'C' is not one of A, B, adaptive, indirect"),
    (
        "status",
        with_row(0, status="done"),
        "row 1: status: 'done' is not one of completed, error, not_run",
    ),
    (
        "negative-count",
        with_row(2, architecture="guarded", denied_calls=-1),
        "row 3: denied_calls: -1 is negative",
    ),
    # Arrow's own cast read 5, 0.5, NaN and "1" as true, and "2" or 2.0 as a level.
    *(
        (
            f"{name}-{kind}",
            with_column(name, pa.array(values)),
            f"column {name}: cannot be read as {want} (the file has {kind})",
        )
        for name, values, kind, want in [
            ("requested", [5, 0, -3], "int64", "bool"),
            ("unpermitted", [0.5, 0.0, float("nan")], "double", "bool"),
            ("paid", ["1", "0", "0"], "string", "bool"),
            ("level", [2.0, 2.0, 2.0], "double", "int8"),
            ("attack_id", [1, 2, 3], "int64", "string"),
            ("input_tokens", [1.0, 2.0, 3.0], "double", "int64"),
            ("deny_codes", [[1], [2], [3]], "list<element: int64>", "list<item: string>"),
        ]
    ),
    ("trial-0", with_row(1, trial=0), "row 2: trial: 0 is below 1"),
    (
        "trial-text",
        with_column("trial", pa.array(["1", "2", "x"])),
        "column trial: cannot be read as int32 (the file has string)",
    ),
    (
        "goal-negative",
        with_row(0, goal_amount_minor=-5),
        "row 1: goal_amount_minor: -5 is negative",
    ),
    ("transcript-not-json", with_row(2, transcript="{"), "row 3: transcript: not valid JSON"),
    (
        "transcript-not-a-list",
        with_row(0, transcript='{"role": "user"}'),
        "row 1: transcript: Input should be a valid list",
    ),
    ("input_tokens", with_row(1, input_tokens=-1000), "row 2: input_tokens: -1000 is negative"),
    ("output_tokens", with_row(0, output_tokens=-1), "row 1: output_tokens: -1 is negative"),
    ("steps", with_row(2, steps=-2), "row 3: steps: -2 is negative"),
    *(
        (
            f"{name}-{value}",
            with_row(1, **{name: value}),
            f"row 2: {name}: {shown} is not a finite number >= 0",
        )
        for name in ("cost_usd", "latency_s")
        for value, shown in [(-0.5, "-0.5"), (float("nan"), "nan"), (float("inf"), "inf")]
    ),
]


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    status = main(argv)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_every_malformed_results_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[], pa.Table], message: str
) -> None:
    path = tmp_path / "run.parquet"
    pq.write_table(make(), path)
    status, err = run_main([str(path), "--format", "json"], capsys)
    assert (status, err) == (2, f"vault-report: error: {path}: {message}\n")


def paid(calls: str) -> dict[str, Any]:
    return row(attack_id="a2", requested=True, paid=True, unpermitted=True, tool_calls=calls)


BAD_CALLS = [
    ("not-json", "[{", "tool_calls: not valid JSON"),
    ("not-a-list", '{"name": "x"}', "tool_calls: Input should be a valid list"),
    ("not-an-object", "[1]", "tool_calls: [0]: Input should be a valid dictionary"),
    ("no-executed", '[{"name": "transfer_funds"}]', "tool_calls: [0].executed: Field required"),
    (
        "executed-text",
        '[{"name": "t", "executed": "yes"}]',
        "tool_calls: [0].executed: Input should be a valid boolean",
    ),
    (
        "amount-text",
        '[{"name": "t", "executed": true, "permitted": false, "transfer": {"recipient": "x", "amount_minor": "5", "currency": "USD"}}]',
        "tool_calls: [0].transfer.amount_minor: Input should be a valid integer",
    ),
    (
        "duplicate-key",
        '[{"name": "t", "executed": false, "executed": true}]',
        "tool_calls: duplicate key 'executed'",
    ),
    ("nan", '[{"name": "t", "executed": true, "x": NaN}]', "tool_calls: NaN is not valid JSON"),
    ("deep", "[" * 100_000 + "]" * 100_000, "tool_calls: nested too deeply"),
]


@pytest.mark.parametrize(
    ("calls", "message"), [b[1:] for b in BAD_CALLS], ids=[b[0] for b in BAD_CALLS]
)
def test_every_malformed_call_log_names_its_file_and_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], calls: str, message: str
) -> None:
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(table([row(attack_id="z1")]), first)
    # Unsorted on purpose: the row is the file's own, whatever order the tables use.
    pq.write_table(table([row(attack_id="b1"), paid(calls), row(attack_id="a3")]), second)
    html = tmp_path / "r.html"
    status, err = run_main([str(first), str(second), "--html", str(html)], capsys)
    assert (status, err) == (2, f"vault-report: error: {second}: row 2: {message}\n")
    assert not html.exists()  # nothing written from a file that cannot be read


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("--resamples", "0", "expected a whole number from 1 to 100,000, got '0'"),
        ("--resamples", "x", "expected a whole number from 1 to 100,000, got 'x'"),
        ("--resamples", "10000000", "expected a whole number from 1 to 100,000, got '10000000'"),
        ("--seed", "-1", "expected a whole number from 0 to 18,446,744,073,709,551,615, got '-1'"),
    ],
)
def test_bad_options_are_one_line_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, problem: str
) -> None:
    path = tmp_path / "run.parquet"
    write_results([row()], path, {})
    with pytest.raises(SystemExit) as exit:
        main([str(path), f"{option}={value}"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"vault-report: error: argument {option}: {problem}"
    )


@pytest.mark.parametrize("option", ["--out", "--html", "--merge-to"])
def test_an_output_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    path = tmp_path / "run.parquet"
    write_results([row()], path, {})
    target = tmp_path / "a-folder"
    target.mkdir()
    argv = [str(path), *(["--format", "json"] if option == "--out" else []), option, str(target)]
    status, err = run_main(argv, capsys)
    assert (status, err) == (
        2,
        f"vault-report: error: {option} {target}: cannot write: Is a directory\n",
    )


def test_many_missing_shards_are_counted_not_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.parquet"
    write_results([row()], path, {"shard": "2/999999999"})
    status, err = run_main(
        [
            str(path),
            "--format",
            "json",
            "--out",
            str(tmp_path / "t.json"),
            "--allow-missing-shards",
        ],
        capsys,
    )
    assert status == 0
    shards = ", ".join(f"{k}/999999999" for k in (1, *range(3, 12)))
    assert err == (
        f"vault-report: warning: shards {shards}, 999,999,988 more of 999999999 are missing: "
        "coverage shows their tests as missing\n"
    )


# -- every table is a function of the set of rows ------------------------------------------------


def many_rows(seed: int = 11) -> list[dict[str, Any]]:
    """Sessions whose labels sort apart from their attack ids, outcomes that vary."""
    rng = random.Random(seed)
    out = []
    for _ in range(24):
        session = f"S{rng.randrange(10**6):06d}"
        for a in range(4):
            attack = f"A{rng.randrange(10**6):06d}"
            level = rng.choice([1, 2, 2, 3, 4, 5])
            kind = "benign" if a == 3 else "attack"
            for model in ("m1", "m2"):
                for track in ("A", "B"):
                    for arch in ("model", "guarded"):
                        requested = rng.random() < 0.6
                        unpermitted = requested and arch == "model" and rng.random() < 0.4
                        guarded = arch == "guarded"
                        out.append(
                            row(
                                attack_id=attack,
                                session=session,
                                level=level,
                                kind=kind,
                                category=rng.choice(["c1", "c2", "c3"]),
                                model=model,
                                track=track,
                                architecture=arch,
                                requested=requested,
                                paid=requested and not guarded,
                                paid_allowlisted=requested and not unpermitted and not guarded,
                                unpermitted=unpermitted,
                                completed=(rng.random() < 0.7) if kind == "benign" else None,
                                allowed_calls=0 if guarded else None,
                                denied_calls=int(requested) if guarded else None,
                                deny_codes=["oap.merchant_forbidden"] * requested
                                if guarded
                                else None,
                                status="error" if rng.random() < 0.03 else "completed",
                            )
                        )
    return out


def plan(rows: list[dict[str, Any]]) -> dict[str, int]:
    keys = ("model", "architecture", "level", "kind", "track")
    return dict(Counter("|".join(str(r[k]) for k in keys) for r in rows))


def test_every_table_is_a_function_of_the_set_of_rows(tmp_path: Path) -> None:
    rows = many_rows()
    whole = plan(rows)
    write_results(rows, tmp_path / "whole.parquet", {"planned": whole})
    # The same rows in another order, as another tool may write them.
    shuffled = rows[:]
    random.Random(5).shuffle(shuffled)
    pq.write_table(
        table(shuffled).replace_schema_metadata(
            {b"pytest_vault": json.dumps({"planned": whole}).encode()}
        ),
        tmp_path / "shuffled.parquet",
    )
    # Three shards, each with the whole run's plan.
    shards: list[list[dict[str, Any]]] = [[], [], []]
    for r in rows:
        shards[random.Random(r["session"] + r["model"]).randrange(3)].append(r)
    for k, part in enumerate(shards, 1):
        metadata = {"shard": f"{k}/3", "planned": plan(part), "planned_run": whole}
        write_results(part, tmp_path / f"shard{k}.parquet", metadata)
    outputs = {}
    for name, files in (
        ("whole", ["whole.parquet"]),
        ("shuffled", ["shuffled.parquet"]),
        ("shards", ["shard3.parquet", "shard1.parquet", "shard2.parquet"]),
    ):
        out = tmp_path / f"{name}.json"
        argv = [*(str(tmp_path / f) for f in files), "--format", "json", "--out", str(out)]
        # About 3% of the rows errored: INCOMPLETE, exit 1, whatever the order or sharding.
        assert main([*argv, "--resamples", "300"]) == INCOMPLETE
        outputs[name] = out.read_bytes()
    assert outputs["shuffled"] == outputs["whole"]
    assert outputs["shards"] == outputs["whole"]
    stages = json.loads(outputs["whole"])["stages"]
    assert any(r["requested_ci_low"] not in (None, 0.0) for r in stages)  # intervals at stake


# -- no URL secret is copied -----------------------------------------------------------------

URLS = {
    "password": "http://user:secret@host.test/v1",
    "username": "http://secret@host.test/v1",
    "query": "http://host.test/v1?api-key=secret",
    "fragment": "http://host.test/v1#secret",
    "everything": "http://user:secret@host.test/v1?api-key=k#secret",
}


@pytest.mark.parametrize("url", URLS.values(), ids=URLS.keys())
def test_no_url_secret_reaches_a_merged_file_or_a_report(tmp_path: Path, url: str) -> None:
    metadata = {"base_url": url, "decode": {"m": {"endpoint": url}}, "models": ["m"]}
    raw = json.dumps(metadata).encode()
    source = tmp_path / "run.parquet"
    pq.write_table(table().replace_schema_metadata({b"pytest_vault": raw}), source)
    merged, page = tmp_path / "merged.parquet", tmp_path / "r.html"
    assert (
        main(
            [
                str(source),
                "--merge-to",
                str(merged),
                "--html",
                str(page),
                "--format",
                "json",
                "--out",
                str(tmp_path / "t.json"),
            ]
        )
        == 0
    )
    written = pq.read_table(merged).schema.metadata[b"pytest_vault"]
    end_of_run = tmp_path / "run.html"
    write_html([row()], [metadata], end_of_run)
    recorded = tmp_path / "recorded.parquet"
    write_results([row()], recorded, metadata)
    for data in (
        written,
        page.read_bytes(),
        end_of_run.read_bytes(),
        pq.read_table(recorded).schema.metadata[b"pytest_vault"],
    ):
        assert b"secret" not in data and b"api-key" not in data
    assert json.loads(written)["base_url"] == "http://host.test/v1"
    assert json.loads(written)["decode"] == {"m": {"endpoint": "http://host.test/v1"}}


# -- every command reads the call log; files of other passports and corpus versions ---------


@pytest.mark.parametrize("argv", [[], ["--format", "json"], ["--format", "csv", "--out", "t"]])
@pytest.mark.parametrize(
    ("calls", "message"),
    [("[{", "row 2: tool_calls: not valid JSON"), (None, "row 2: tool_calls: missing")],
    ids=["not-json", "null"],
)
def test_every_command_refuses_a_bad_call_log(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    calls: str | None,
    message: str,
) -> None:
    # A null log on a row that paid would hide its payments from every re-reading.
    path = tmp_path / "run.parquet"
    pq.write_table(table([row(attack_id="b1"), paid(calls), row(attack_id="a3")]), path)
    merged = tmp_path / "merged.parquet"
    status, err = run_main([str(path), *argv, "--merge-to", str(merged)], capsys)
    assert (status, err) == (2, f"vault-report: error: {path}: {message}\n")
    assert not merged.exists()


def test_files_run_under_different_passports_do_not_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    record = {"3": {"file": "level-3.json", "sha256": "sha256:aa"}}
    write_results([row(attack_id="a1")], one, {"passports": record})
    other = {"3": {"file": "level-3.json", "sha256": "sha256:bb"}}
    write_results([row(attack_id="a2")], two, {"passports": other})
    status, err = run_main([str(one), str(two)], capsys)
    assert (status, err) == (
        2,
        f"vault-report: error: {two} and {one} were run under different passports "
        "(passports.3): re-score one with `vault-report rescore` instead of merging\n",
    )
    # The same passports merge, in any order.
    write_results([row(attack_id="a2")], two, {"passports": record})
    assert run_main([str(two), str(one)], capsys) == (0, "")


def test_files_run_on_different_corpus_versions_do_not_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two, old = (tmp_path / f"{n}.parquet" for n in ("one", "two", "old"))
    write_results([row(attack_id="a1")], one, {"corpus_digest": "sha256:aa"})
    write_results([row(attack_id="a2")], two, {"corpus_digest": "sha256:bb"})
    write_results([row(attack_id="a3")], old, {})  # before the digest: nothing to compare
    merged = tmp_path / "merged.parquet"
    status, err = run_main([str(one), str(old), str(two), "--merge-to", str(merged)], capsys)
    assert (status, err) == (
        2,
        f"vault-report: error: {two} and {one} were run on different corpus versions "
        "(corpus_digest): merge shards of one run, or runs of the same corpus\n",
    )
    assert not merged.exists()
    write_results([row(attack_id="a2")], two, {"corpus_digest": "sha256:aa"})
    assert run_main([str(two), str(old), str(one)], capsys) == (0, "")


def test_a_file_from_before_the_guard_column_reads_with_the_guard_unknown(tmp_path: Path) -> None:
    from pytest_vault.report.results import read_table

    path = tmp_path / "old.parquet"
    pq.write_table(table().drop_columns(["guard"]), path)
    checked, _ = read_table(path)
    assert checked.schema == SCHEMA
    assert checked["guard"].null_count == checked.num_rows == 3


def test_the_results_file_is_written_sorted_a_row_group_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_vault.report import results

    monkeypatch.setattr(results, "ROW_GROUP", 3)
    rows = [
        row(attack_id=f"a{n}", model=model, track=track, architecture=arch)
        for n in (3, 1, 2)
        for model in ("m2", "m1")
        for track in ("B", "A")
        for arch in ("model", "guarded")
    ]  # 24 rows, 8 groups of 3
    random.Random(5).shuffle(rows)
    path = tmp_path / "r.parquet"
    write_results(rows, path, {"run": 1})
    assert pq.ParquetFile(path).num_row_groups == 8
    order = sorted(rows, key=lambda r: tuple(r[k] for k in results.SORT_KEY))
    written = pq.read_table(path)
    assert written.column("attack_id").to_pylist()[:8] == ["a1"] * 8
    assert written.equals(results.to_table(order).replace_schema_metadata(written.schema.metadata))
    assert json.loads(written.schema.metadata[results.META_KEY]) == {"run": 1}


def test_rows_held_as_values_are_written_as_their_table_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`write_rows` sorts in Python and makes one row group at a time; the file is the
    one `write_table` writes from the whole table, byte for byte, whatever the keys
    hold: text past the BMP, a lone surrogate, and a null (Arrow puts it last)."""
    from pytest_vault.report import results

    monkeypatch.setattr(results, "ROW_GROUP", 4)
    # "a\ud800" is stored as "a\\ud800", before "a]"; raw, it would sort after it.
    ids = ["b", "a", "é", "z", "\U0001f600", "a\ud800", "a]", "\uffff", "A", "a "]
    rows = [
        row(attack_id=attack, model=model, track=track)
        for attack in ids
        for model in ("m1", None, "m0")
        for track in ("B", "A")
    ]  # 60 rows: 15 groups
    random.Random(7).shuffle(rows)
    names = SCHEMA.names
    values = [tuple(r.get(n) for n in names) for r in rows]
    ours, theirs = tmp_path / "rows.parquet", tmp_path / "table.parquet"
    results.write_rows(values, names, ours, {"run": "\ud800"})
    results.write_table(results.to_table(rows), theirs, {"run": "\ud800"})
    assert ours.read_bytes() == theirs.read_bytes()
    assert pq.ParquetFile(ours).num_row_groups == 15
    written = pq.read_table(ours)
    assert written.column("attack_id").to_pylist()[:6] == ["A"] * 6
    assert written.column("model").to_pylist()[:6] == ["m0", "m0", "m1", "m1", None, None]
    assert written.column("attack_id").to_pylist()[-6:] == ["\U0001f600"] * 6
    assert written.column("attack_id").to_pylist()[18:30] == ["a\\ud800"] * 6 + ["a]"] * 6
    # No row: a file with the schema and no row group, as from an empty table.
    results.write_rows([], names, ours, {})
    results.write_table(results.to_table([]), theirs, {})
    assert ours.read_bytes() == theirs.read_bytes()
