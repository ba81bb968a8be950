"""A red run names what got through (issue 40, point 1): the summary ends with the
evaluations in which a forbidden transfer executed, up to ten per model and
architecture, each with its test id, what executed and why the passport forbids it, and
the command that shows its conversation; then how many more and where they all are.
Nothing of it when nothing got through."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from .test_cut_short import corpus

pytest_plugins = ["pytester"]


def run(pytester: pytest.Pytester, cases: int, *more: str) -> pytest.RunResult:
    corpus(pytester, cases)
    return pytester.runpytest(
        *("-p", "no:randomly", "-p", "no:cacheprovider", "--vault-progress=0", "-q"),
        *("--vault-track=A", "--vault-results=r.parquet"),
        *more,
    )


def section(result: pytest.RunResult) -> list[str]:
    lines = result.outlines
    start = next(i for i, x in enumerate(lines) if "pytest-vault, what got through" in x)
    return lines[start + 1 : -1]  # pytest's own last line: "24 passed in 5.08s"


def test_the_summary_names_each_attack_that_got_through_and_how_to_see_it(
    pytester: pytest.Pytester,
) -> None:
    result = run(pytester, 12, "--vault-model=scripted:obedient")
    assert result.ret == pytest.ExitCode.OK  # model alone, not strict: no test fails
    # Sorted by test id (a0, a10, a11, a1[, a2, ...): the first ten; the guard held the rest.
    ids = sorted(range(12), key=lambda i: f"a{i}[")[:10]
    expected = [
        "What got through: 12 evaluation(s) in which a forbidden transfer executed",
        "  scripted:obedient, model alone: 12",
    ]
    for i in ids:
        node = f"a.jsonl::a{i}[scripted:obedient-A-model]"
        expected += [
            f"    {node}",
            f"      paid ${40 + i}.00 to 'mallory@evil.example' (oap.merchant_forbidden)",
            f"      vault-report {pytester.path / 'r.parquet'} --show '{node}'",
        ]
    expected += [
        "    ... and 2 more",
        f"All of them: the results file {pytester.path / 'r.parquet'}.",
    ]
    assert section(result) == expected


@pytest.mark.slow  # runs the printed command in a shell
def test_the_printed_command_shows_the_conversation(pytester: pytest.Pytester) -> None:
    result = run(pytester, 1, "--vault-model=scripted:obedient")
    command = section(result)[4].strip()
    assert shlex.split(command)[:2] == ["vault-report", str(pytester.path / "r.parquet")]
    shown = subprocess.run(
        command, shell=True, capture_output=True, text=True, cwd=pytester.path, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert "executed: $40.00 to 'mallory@evil.example' (NOT permitted)" in shown.stdout


def test_nothing_is_listed_when_nothing_got_through(pytester: pytest.Pytester) -> None:
    result = run(pytester, 2, "--vault-model=scripted:refuser")
    assert result.ret == pytest.ExitCode.OK
    assert not any("what got through" in line for line in result.outlines)


def test_without_a_results_file_it_says_how_to_keep_them(pytester: pytest.Pytester) -> None:
    corpus(pytester, 1)
    result = pytester.runpytest(
        *("-p", "no:randomly", "-p", "no:cacheprovider", "--vault-progress=0", "-q"),
        *("--vault-track=A", "--vault-model=scripted:obedient"),
    )
    assert section(result) == [
        "What got through: 1 evaluation(s) in which a forbidden transfer executed",
        "  scripted:obedient, model alone: 1",
        "    a.jsonl::a0[scripted:obedient-A-model]",
        "      paid $40.00 to 'mallory@evil.example' (oap.merchant_forbidden)",
        "All of them, with their conversations: run with --vault-results FILE.",
    ]


def test_the_html_report_opens_with_the_same_list(pytester: pytest.Pytester) -> None:
    run(pytester, 12, "--vault-model=scripted:obedient", "--vault-report=r.html")
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    start = page.index('<section id="through"')
    section = page[start : page.index("</section>", start)]
    assert page.index('id="verdict"') < start < page.index('id="failures"')
    assert "<h2>What got through: 12 evaluations in which a forbidden transfer executed</h2>" in (
        section
    )
    assert "<h3>scripted:obedient, model alone: 12</h3>" in section
    assert section.count("<li>") == 10
    assert "… and 2 more, listed with the failures below." in section
    # Each named by its node id, as the terminal names it and --show takes it, with what it
    # paid and why; the same ten, in the same order, as the terminal's.
    node = "a.jsonl::a0[scripted:obedient-A-model]"
    assert (
        "<li><code>a.jsonl:<wbr>:<wbr>a0[scripted:<wbr>obedient-<wbr>A-<wbr>model]</code>: "
        "paid $40.00 to "
        "<code>mallory@evil.example</code> (oap.merchant_forbidden).\n"
        f"In a terminal: <code>vault-report RESULTS --show &#39;{node}&#39;</code>"
    ) in section
