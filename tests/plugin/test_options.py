"""The options table (plugin/options.py): every option refuses a bad value in one line
when pytest starts, from the command line and from the config file alike; a config
value is read through the same converter and the command line overrides it; the
README's reference is the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vault.plugin.options import OPTIONS, reference
from pytest_vault.plugin.session import VAULT
from pytest_vault.plugin.settings import Options

README = Path(__file__).parents[2] / "README.md"
SPEC = "'': expected a spec, e.g. openai:MODEL"
PATH = "'': expected a path"

# A bad value of every option in the table, and what follows the option's name in its
# error. A flag takes no value on the command line: only its config value can be bad.
BAD: dict[str, tuple[str, str]] = {
    "vault_model": ("", SPEC),
    "vault_track": ("C", "'C': expected A, B, adaptive or indirect"),
    "vault_arch": ("both", "'both': expected model or guarded"),
    "vault_level": ("6", "'6': must be from 1 to 5"),
    "vault_guard": ("guard", "'guard': expected MODULE:FACTORY, e.g. my_guard:make"),
    "vault_passports": ("", PATH),
    "vault_results": ("", PATH),
    "vault_strict": ("maybe", ""),
    "vault_max_steps": ("0", "'0': must be from 1 to 1000"),
    "vault_base_url": ("localhost:8000", "'localhost:8000': expected an http:// or https:// URL"),
    "vault_concurrency": ("x", "'x': expected a whole number"),
    "vault_rpm": ("nan", "nan: must be a finite number above 0"),
    "vault_tpm": ("-5", "-5.0: must be a finite number above 0"),
    "vault_tries": ("101", "'101': must be from 1 to 100"),
    "vault_timeout": ("0", "0.0: must be a finite number above 0"),
    "vault_agent_timeout": ("inf", "inf: must be a finite number above 0"),
    "vault_cache": ("", PATH),
    "vault_no_cache": ("maybe", ""),
    "vault_prices": ("", PATH),
    "vault_budget_usd": ("-1", "-1.0: must be a finite number at least 0"),
    "vault_shard": ("0/3", "'0/3': expected K/N with 1 <= K <= N, e.g. 2/3"),
    "vault_report": ("", PATH),
    "vault_otel": ("", PATH),
    "vault_otel_key_env": (" ", "' ': expected a variable name"),
    "vault_progress": ("-1", "-1.0: must be a finite number at least 0"),
    "vault_decisions": ("maybe", ""),
    "vault_sample": ("0", "'0': must be from 1 to 10,000,000"),
    "vault_sample_benign": ("-1", "'-1': must be from 0 to 10,000,000"),
    "vault_transcripts": ("some", "'some': expected failures or all"),
    "vault_trials": ("0", "'0': must be from 1 to 100"),
    "vault_seed": ("s", "'s': expected a whole number"),
    "vault_baseline": ("", PATH),
    "vault_baseline_model": ("", "'': expected a spec"),
    "vault_baseline_any_corpus": ("maybe", ""),
    "vault_baseline_subset": ("maybe", ""),
    "vault_baseline_out": ("", PATH),
    "vault_plan": ("yaml", "'yaml': expected text or json"),
    "vault_attacker": ("", SPEC),
    "vault_rounds": ("51", "'51': must be from 1 to 50"),
    "vault_attacker_sees_policy": ("maybe", ""),
    "vault_export_found": ("found.json", "'found.json': expected a .jsonl file"),
    "vault_judge": ("", SPEC),
    "vault_corpus": (
        "builtin:level-9",
        "'builtin:level-9': no such built-in corpus (builtin, builtin:indirect, "
        "builtin:level-1, builtin:level-2, builtin:level-3, builtin:level-4, builtin:level-5, "
        "builtin:tools-indirect, builtin:tools)",
    ),
}


def errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.errlines if line.strip()]


def test_every_option_of_the_table_has_a_bad_value_here() -> None:
    assert len(OPTIONS) == 43
    assert list(BAD) == [o.key for o in OPTIONS]
    assert [o.key for o in OPTIONS if o.kind == "flag"] == [
        k for k, (_, said) in BAD.items() if not said
    ]


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.key)
def test_a_bad_value_is_one_line_at_parse_time(pytester: pytest.Pytester, option: object) -> None:
    from pytest_vault.plugin.options import Option

    assert isinstance(option, Option)
    value, said = BAD[option.key]
    pytester.makepyfile(test_nothing="def test_never_collected(): pass")
    if option.kind != "flag":
        result = pytester.runpytest(f"{option.flag}={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert errors(result) == [f"ERROR: {option.flag} {said}"]
        assert result.outlines == []  # nothing collected, nothing run
    written = f'["{value}"]' if option.kind == "list" else f'"{value}"'
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{option.key} = {written}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    if option.kind == "flag":
        said = ": invalid truth value 'maybe'"
    else:
        said = " " + said
    assert errors(result) == [f"ERROR: pyproject.toml: {option.key}{said}"]
    assert result.outlines == []


def options(pytester: pytest.Pytester, *args: str) -> Options:
    config = pytester.parseconfigure(*args)
    # As pytester's own inline runs do: no five full garbage collections of this
    # process's heap when the config is torn down (2 s a test in a full run).
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:  # pytest < 8.4 collects nothing there
        pass
    else:
        config.stash[gc_collect_iterations_key] = 0
    return config.stash[VAULT].options


PYPROJECT = """\
[tool.pytest.ini_options]
vault_model = ["scripted:obedient", "scripted:refuser"]
vault_level = [2, 3]
vault_max_steps = 3
vault_rpm = 1.5
vault_strict = true
vault_shard = "2/3"
vault_results = "out/run.parquet"
vault_plan = "json"
"""


def test_the_config_file_sets_every_kind_of_option(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(PYPROJECT)
    sub = pytester.mkdir("sub")
    opts = options(pytester, str(sub))
    assert opts.models == ("scripted:obedient", "scripted:refuser")
    assert opts.levels == frozenset({2, 3})
    assert (opts.max_steps, opts.rpm, opts.strict, opts.shard) == (3, 1.5, True, (2, 3))
    assert opts.plan == "json"
    # A path is the config file's, not the working folder's.
    assert opts.results == pytester.path / "out" / "run.parquet"
    assert sorted(opts.specs) == ["scripted:obedient", "scripted:refuser"]


def test_the_settings_are_read_as_pytest_10_will_without_a_warning(
    pytester: pytest.Pytester,
) -> None:
    import warnings

    pytester.makepyprojecttoml(PYPROJECT)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        opts = options(pytester)
    assert opts.max_steps == 3
    # pytest 9 warns of `config.inicfg`, and of a list given to a "string" key.
    assert [str(w.message) for w in seen if "Removed" in type(w.message).__name__] == []


def test_the_command_line_overrides_the_config_file(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(PYPROJECT)
    opts = options(
        pytester, "--vault-level=4", "--vault-model=scripted:replay", "--vault-max-steps=9"
    )
    assert (opts.levels, opts.models, opts.max_steps) == (frozenset({4}), ("scripted:replay",), 9)
    assert (opts.rpm, opts.strict) == (1.5, True)  # the file's, where the line says nothing


@pytest.mark.parametrize("name", ["pytest.ini", "tox.ini", "setup.cfg"])
def test_an_ini_file_holds_words(pytester: pytest.Pytester, name: str) -> None:
    section = "tool:pytest" if name == "setup.cfg" else "pytest"
    (pytester.path / "tox.ini").unlink()  # the test project's: it would come first
    pytester.makefile(
        Path(name).suffix,
        **{
            Path(name).stem: f"[{section}]\nvault_level = 2 5\nvault_no_cache = yes\n"
            "vault_track = A\nvault_timeout = 30\n"
        },
    )
    opts = options(pytester)
    assert (opts.levels, opts.tracks) == (frozenset({2, 5}), ("A",))
    assert (opts.cache, opts.timeout) == (None, 30.0)


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("vault_rpm = 0", "vault_rpm 0.0: must be a finite number above 0"),
        ("vault_level = [2, 9]", "vault_level '9': must be from 1 to 5"),
        ("vault_max_steps = [1, 2]", "vault_max_steps expected one value, not a list"),
        ("vault_model = []", "vault_model expected at least one value"),
        (
            'vault_model = ["gemini:pro"]',
            "vault_model 'gemini:pro': expected openai:MODEL, anthropic:MODEL, or a control "
            "(scripted:reference, scripted:obedient, scripted:receipt-trusting, "
            "scripted:refuser, scripted:replay); or agent:MODULE:FACTORY",
        ),
        ("vault_export_found = 'f.jsonl'", "vault_export_found needs --vault-attacker"),
    ],
)
def test_a_bad_config_value_names_the_file_and_key(
    pytester: pytest.Pytester, written: str, said: str
) -> None:
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{written}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: pyproject.toml: {said}"]


def test_an_override_is_named_as_one(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-o", "vault_level=x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == ["ERROR: -o vault_level 'x': expected a whole number"]


def test_the_docs_option_reference_is_generated_from_the_table() -> None:
    # The page holds the table between its markers, as the code makes it (the pages are
    # kept current by `python -m pytest_vault.plugin.docs`; tests/test_reference_pages.py).
    page = (README.parent / "docs" / "reference" / "options.md").read_text(encoding="utf-8")
    assert page.count("<!-- generated: options -->") == 1
    block = page.split("<!-- generated: options -->")[1].split("<!-- end generated: options -->")[0]
    for option in OPTIONS:
        assert f"`{option.key}`" in block
    rows = [line for line in reference().splitlines() if line.startswith("|")]
    assert rows and all(line in block for line in rows)


def test_the_options_import_nothing_heavy() -> None:
    code = (
        "import sys, pytest_vault.plugin, pytest_vault.plugin.options; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert {"pydantic", "pyarrow", "numpy", "openai", "anthropic", "httpx"} & set(
        out.stdout.split()
    ) == set()


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            (
                "tox.ini",
                "[pytest]\nvault_corpus = .\nvault_modle = scripted:replay\nvault_zzz = 1\n",
            ),
            "tox.ini: vault_modle: unknown pytest-vault key; did you mean vault_model?",
        ),
        (
            ("pyproject.toml", "[tool.pytest.ini_options]\nvault_strickt = true\n"),
            "pyproject.toml: vault_strickt: unknown pytest-vault key; did you mean vault_strict?",
        ),
        (
            ("pyproject.toml", "[tool.pytest.ini_options]\nvault_zzz = 1\n"),
            "pyproject.toml: vault_zzz: unknown pytest-vault key",
        ),
    ],
)
def test_an_unknown_vault_key_is_a_usage_error_naming_the_nearest_known_key(
    pytester: pytest.Pytester, config: tuple[str, str], said: str
) -> None:
    name, text = config
    (pytester.path / "tox.ini").unlink()  # the test project's: it would come first
    (pytester.path / name).write_text(text, encoding="utf-8")
    pytester.makepyfile(test_one="def test_one(): pass")
    result = pytester.runpytest("-W", "always")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # Once: pytest's own "Unknown config option" check never comes (nothing is collected).
    assert errors(result) == [f"ERROR: {said}"]
    assert result.outlines == []


def test_an_unknown_key_given_with_o_is_named_as_one(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-o", "vault_trails=3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [
        "ERROR: -o vault_trails: unknown pytest-vault key; did you mean vault_trials?"
    ]


def test_other_keys_are_left_to_pytest(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nvaultish = 1\nmy_plugin_key = 2\n")
    pytester.makepyfile(test_one="def test_one(): pass")
    result = pytester.runpytest("-W", "always")
    result.assert_outcomes(passed=1)
    warned = sorted(
        line.partition("PytestConfigWarning: ")[2]
        for line in result.outlines
        if "PytestConfigWarning: Unknown config option" in line
    )
    assert warned == [
        "Unknown config option: my_plugin_key",
        "Unknown config option: vaultish",
    ]


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_work_whatever_the_vault_settings_say(
    pytester: pytest.Pytester, flag: str
) -> None:
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nvault_strict = "maybe"\nvault_trials = "0"\n'
        'vault_corpus = ["nowhere"]\nvault_strickt = true\n'
    )
    result = pytester.runpytest(flag)
    assert result.ret == pytest.ExitCode.OK
    said = [*result.outlines, *result.errlines]  # pytest < 9.1 prints its version on stderr
    assert [line for line in said if line.startswith("ERROR") or "maybe" in line] == []
    if flag == "--version":
        assert f"pytest {pytest.__version__}" in said
    else:
        assert any("--vault-baseline=RUN.parquet" in line for line in result.outlines)


@pytest.mark.parametrize(
    ("written", "said"),
    [
        # pytest 9's native TOML table: its types are checked by pytest, named by us.
        ("vault_max_steps = 3", "vault_max_steps: expects a string, got int: 3"),
        (
            "vault_corpus = 'cases'",
            "vault_corpus: expects a list for type 'args', got str: 'cases'",
        ),
        ("vault_strict = 'yes'", "vault_strict: expects a bool, got str: 'yes'"),
    ],
)
def test_a_native_toml_table_of_the_wrong_type_names_the_file_and_key(
    pytester: pytest.Pytester, written: str, said: str
) -> None:
    if int(pytest.__version__.partition(".")[0]) < 9:
        pytest.skip("pytest < 9 reads no [tool.pytest] table")
    pytester.makepyprojecttoml(f"[tool.pytest]\n{written}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = errors(result)
    assert line.startswith(f"ERROR: pyproject.toml: {said}")
