"""The generated blocks of the docs are committed in the pages, and the pages equal what
the code generates (`pytest_vault.plugin.docs`): a new option, column or reason code
fails here until `python -m pytest_vault.plugin.docs` is run."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from pytest_vault.plugin import docs, options
from pytest_vault.report import reference

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN = "run `python -m pytest_vault.plugin.docs`"


def test_every_page_holds_what_the_code_generates() -> None:
    """Tables and included files; the --help blocks are the slow test's below."""
    stale = docs.stale(DOCS, write=False, run_help=False)
    assert stale == [], f"stale generated blocks in {stale}: {RUN}"


@pytest.mark.slow  # each --help is a fresh interpreter
def test_every_help_block_is_the_commands_own() -> None:
    stale = docs.stale(DOCS, write=False)
    assert stale == [], f"stale generated blocks in {stale}: {RUN}"


def test_the_pages_hold_every_generated_table() -> None:
    text = {p.relative_to(DOCS).as_posix(): p.read_text(encoding="utf-8") for p in docs.pages(DOCS)}
    for name, page in [
        ("options", "reference/options.md"),
        ("corpus", "reference/corpus.md"),
        ("results", "reference/results.md"),
        ("reason-codes", "reference/reason-codes.md"),
    ]:
        block = (
            f"<!-- generated: {name} -->\n{docs.tables()[name]()}\n<!-- end generated: {name} -->"
        )
        assert block in text[page]
    assert text["reference/commands.md"].count("<!-- end help: ") == 6


def test_a_new_option_or_reason_makes_its_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    added = dataclasses.replace(options.OPTIONS[-1], flag="--vault-new", help="new")
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, added))
    monkeypatch.setitem(reference.REASON_WHEN, "oap.allowed", "every rule passed, newly")
    assert docs.stale(DOCS, write=False, run_help=False) == [
        "docs/reference/options.md",
        "docs/reference/reason-codes.md",
    ]


def _folder(tmp_path: Path, page: str) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "page.md").write_text(page, encoding="utf-8")
    (folder / "fresh.md").write_text("# untouched\n", encoding="utf-8")
    (folder / "snippet.yml").write_text("a: 1\n\n", encoding="utf-8")
    return folder


STALE = """\
# A page

<!-- generated: reason-codes -->
| old | table |
<!-- end generated: reason-codes -->
between
<!-- include: snippet.yml -->
<!-- end include: snippet.yml -->
after
"""


def test_the_command_rewrites_a_stale_page_and_check_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path, STALE)
    page = folder / "sub" / "page.md"
    assert docs.main([str(folder), "--check"]) == 1
    assert capsys.readouterr().out == f"docs/sub/page.md: stale generated blocks; {RUN}\n"
    assert page.read_text(encoding="utf-8") == STALE  # --check writes nothing

    assert docs.main([str(folder)]) == 0
    assert capsys.readouterr().out == "docs/sub/page.md: written\n"
    assert page.read_text(encoding="utf-8") == (
        "# A page\n\n<!-- generated: reason-codes -->\n"
        f"{reference.reason_codes()}\n"
        "<!-- end generated: reason-codes -->\nbetween\n"
        "<!-- include: snippet.yml -->\n```yaml\na: 1\n```\n<!-- end include: snippet.yml -->\n"
        "after\n"
    )
    assert sorted(p.name for p in folder.rglob("*")) == [
        "fresh.md",
        "page.md",
        "snippet.yml",
        "sub",
    ]  # no partial file left beside it
    assert docs.main([str(folder), "--check"]) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("page", "said"),
    [
        (
            "x\n<!-- generated: tables -->\n<!-- end generated: tables -->\n",
            "docs/sub/page.md:2: no generated table 'tables' "
            "(known: options, corpus, results, reason-codes)",
        ),
        (
            "<!-- generated: options -->\n| a |\n",
            "docs/sub/page.md:1: <!-- generated: options --> has no "
            "<!-- end generated: options --> after it",
        ),
        (
            "<!-- generated: options -->\n<!-- end generated: results -->\n",
            "docs/sub/page.md:1: <!-- generated: options --> has no "
            "<!-- end generated: options --> after it",
        ),
        (
            "<!-- generated: options -->\n<!-- generated: results -->\n"
            "<!-- end generated: results -->\n<!-- end generated: options -->\n",
            "docs/sub/page.md:1: <!-- generated: options --> has no "
            "<!-- end generated: options --> after it",
        ),
        (
            "a\n\n<!-- end generated: options -->\n",
            "docs/sub/page.md:3: <!-- end generated: options --> has no opening marker",
        ),
        (
            "<!-- include: ../secret.txt -->\n<!-- end include: ../secret.txt -->\n",
            "docs/sub/page.md:1: include: ../secret.txt: outside docs/",
        ),
        (
            "<!-- include: gone.yml -->\n<!-- end include: gone.yml -->\n",
            "docs/sub/page.md:1: include: gone.yml: No such file or directory",
        ),
    ],
    ids=["unknown", "unended", "other-end", "nested", "stray-end", "outside", "missing"],
)
def test_a_bad_marker_is_one_line_naming_page_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], page: str, said: str
) -> None:
    folder = _folder(tmp_path, page)
    assert docs.main([str(folder)]) == 2
    assert capsys.readouterr() == ("", f"error: {said}\n")
    assert (folder / "sub" / "page.md").read_text(encoding="utf-8") == page


def test_an_undescribed_column_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    row = tuple(c._replace(meaning="") if c.name == "trial" else c for c in reference.ROW)
    monkeypatch.setattr(reference, "ROW", row)
    folder = _folder(tmp_path, "<!-- generated: results -->\n<!-- end generated: results -->\n")
    assert docs.main([str(folder), "--check"]) == 2
    assert capsys.readouterr().err == (
        "error: docs/sub/page.md:1: results columns: undescribed ['trial']\n"
    )


def test_no_docs_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert docs.main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope'}: no such folder\n"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_is_built_from_the_same_blocks(tmp_path: Path) -> None:
    """The MkDocs hook renders with `docs.render`: a stale page is built fresh, and a
    current page is built exactly as committed."""
    hooks = _hooks()
    folder = _folder(tmp_path, STALE)
    config = {"docs_dir": str(folder)}
    hooks.on_pre_build(config)
    page = SimpleNamespace(file=SimpleNamespace(src_path="sub/page.md"))
    built = hooks.on_page_markdown(STALE, page=page, config=config)
    assert built == docs.render(STALE, "sub/page.md", docs.Blocks(folder))
    assert reference.reason_codes() in built

    hooks.on_pre_build({"docs_dir": str(DOCS)})
    for path in [DOCS / "reference" / "options.md", DOCS / "how-to" / "ci.md"]:
        text = path.read_text(encoding="utf-8")
        src = SimpleNamespace(file=SimpleNamespace(src_path=path.relative_to(DOCS).as_posix()))
        assert hooks.on_page_markdown(text, page=src, config={"docs_dir": str(DOCS)}) == text


def test_a_marker_in_a_code_block_is_text(tmp_path: Path) -> None:
    page = (
        "```text\n<!-- generated: nothing -->\n```\n"
        "<!-- generated: reason-codes -->\nold\n<!-- end generated: reason-codes -->\n"
        "```markdown\n<!-- end generated: options -->\n```\n"
    )
    assert docs.render(page, "p.md", docs.Blocks(_folder(tmp_path, ""))) == page.replace(
        "\nold\n", f"\n{reference.reason_codes()}\n"
    )
