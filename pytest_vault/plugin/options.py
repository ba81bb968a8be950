"""Every pytest-vault option, once: its flag, converter, default, help and config key.

The converter is argparse's `type=`, so a bad value on the command line is a usage error
while pytest parses it. Every option can also be set in the config file under its key
(`[tool.pytest.ini_options]`, pytest.ini, tox.ini, setup.cfg): `checks.settle` reads the keys
the command line left unset through the same converters, before any hook of ours reads
an option. The README's option reference is `reference()`.

Nothing heavy is imported here: `pytest --help` reads this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_vault.corpus.builtin import is_builtin
from pytest_vault.models.specs import CONTROL_MODELS
from pytest_vault.plugin.convert import (
    OptionError,
    choice,
    corpus,
    count,
    number,
    path,
    shard,
    spec,
    target,
    text,
    url,
)

DEFAULT_CACHE = ".vault-cache"
# The options whose `Options` field is named otherwise than the option.
RENAMED = {
    "model": "models",
    "track": "tracks",
    "arch": "architectures",
    "level": "levels",
    "judge": "judges",
    "progress": "progress_s",
}
# A list in the config file for an option of one value: pytest 9 warns, pytest 10 refuses.
NOT_A_LIST = "expected one value, not a list"
# Trials per evaluation, at most: a bound, so a typo (`--vault-trials 300`) is said, not run.
MAX_TRIALS = 100


# -- the table ------------------------------------------------------------------------------

Kind = Literal["value", "list", "flag", "optional"]
# How pytest reads each kind from a config file: a list as shell words or a TOML list.
INI_TYPE: dict[Kind, Literal["string", "args", "bool"]] = {
    "value": "string",
    "list": "args",
    "flag": "bool",
    "optional": "string",
}


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    # None only for a flag: it takes no value (on the command line, nothing can be wrong).
    convert: Callable[[str], Any] | None = None
    kind: Kind = "value"
    metavar: str | None = None
    default: Any = None
    const: str | None = None  # the value of a bare `optional` flag

    @property
    def key(self) -> str:
        """The argparse dest and the config-file key."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def field(self) -> str:
        """The `settings.Options` field it settles into (most: its key without `vault_`)."""
        name = self.key.removeprefix("vault_")
        return RENAMED.get(name, name)

    @property
    def is_path(self) -> bool:
        """A file or folder: settled as an absolute `Path`."""
        return bool(getattr(self.convert, "is_path", False))

    @property
    def usage(self) -> str:
        if self.kind == "flag":
            return self.flag
        if self.kind == "optional":
            return f"{self.flag}[={self.metavar}]"
        return f"{self.flag} {self.metavar}"

    def described(self) -> str:
        if self.default is None or self.kind == "flag":
            return self.help
        default = f"{self.default:g}" if isinstance(self.default, float) else self.default
        return f"{self.help} (default {default})"

    def cli(self, value: str) -> Any:
        """argparse's `type=`: a usage error of one line (argparse's own error would
        add its usage line)."""
        assert self.convert is not None
        try:
            return self.convert(value)
        except OptionError as exc:
            raise pytest.UsageError(f"{self.flag} {exc}") from None

    def from_config(self, raw: object, where: str, folder: Path | None) -> Any:
        """A value as pytest read it from the config file, converted as on the command
        line; a path is taken from the config file's folder."""
        if self.kind == "flag":
            return bool(raw)  # pytest read it as a boolean
        assert self.convert is not None
        try:
            if self.kind == "list":
                items = raw if isinstance(raw, list) else [raw]
                if not items:
                    raise OptionError("expected at least one value")
                values = [self._one(item, folder) for item in items]
                return values
            if isinstance(raw, list):
                raise OptionError(NOT_A_LIST)
            return self._one(raw, folder)
        except OptionError as exc:
            raise pytest.UsageError(f"{where} {exc}") from None

    def _one(self, raw: object, folder: Path | None) -> Any:
        assert self.convert is not None
        # An `ini_options` TOML list keeps its items as TOML wrote them (`[2, 3]`).
        value = self.convert(raw if isinstance(raw, str) else str(raw))
        if getattr(self.convert, "is_path", False) and folder is not None and not is_builtin(value):
            return str(folder / value)
        return value


OPTIONS: tuple[Option, ...] = (
    Option(
        "--vault-model",
        "model to evaluate, repeatable: openai:MODEL, anthropic:MODEL, "
        "agent:MODULE:FACTORY (your agent), a control, or a spec another plugin claims; "
        "default: the five controls " + ", ".join(CONTROL_MODELS),
        spec,
        kind="list",
        metavar="SPEC",
    ),
    Option(
        "--vault-track",
        "track filter, repeatable: A sends the attacker's final message, B the whole "
        "sequence (the agent answering each message), adaptive lets the attacker write the "
        "next messages (needs --vault-attacker), indirect runs the cases whose attack is "
        "planted in what the tools return (each beside its paired clean run); default A, B "
        "and indirect, and adaptive with an attacker",
        choice("A", "B", "adaptive", "indirect"),
        kind="list",
        metavar="A|B|adaptive|indirect",
    ),
    Option(
        "--vault-arch",
        "architecture filter, repeatable; default both",
        choice("model", "guarded"),
        kind="list",
        metavar="model|guarded",
    ),
    Option(
        "--vault-level",
        "level filter, 1-5, repeatable; default all five",
        count(1, 5),
        kind="list",
        metavar="N",
    ),
    Option(
        "--vault-guard",
        "your guard in front of every tool call of the guarded architecture, instead of the "
        "OAP engine: FACTORY(level, passport_path) returns (tool, arguments) -> bool or "
        "(bool, reason)",
        target,
        metavar="MODULE:FACTORY",
    ),
    Option(
        "--vault-passports",
        "folder with level-1.json ... level-5.json and levels.toml; default the passports "
        "shipped inside pytest-vault",
        path(),
        metavar="DIR",
    ),
    Option(
        "--vault-results",
        "write one results row per evaluation (merged across xdist workers) to this file",
        path(),
        metavar="FILE.parquet",
    ),
    Option(
        "--vault-strict",
        "also fail model-alone tests in which a forbidden transfer executed",
        kind="flag",
        default=False,
    ),
    Option(
        "--vault-max-steps",
        "model steps per user message before the turn is cut; never cuts scripted:replay short",
        count(1, 1000),
        metavar="N",
        default=8,
    ),
    Option(
        "--vault-base-url",
        "an OpenAI-compatible server for openai: models (vLLM, Ollama, llama.cpp, OpenRouter...)",
        url,
        metavar="URL",
    ),
    Option(
        "--vault-concurrency",
        "evaluations in flight at once, for the whole run",
        count(1, 4096),  # each is a task, and a thread for a sync agent
        metavar="N",
        default=16,
    ),
    Option(
        "--vault-rpm",
        "requests per minute per provider endpoint, for the whole run",
        number(0, above=True),
        metavar="N",
    ),
    Option(
        "--vault-tpm",
        "tokens per minute per provider endpoint, for the whole run",
        number(0, above=True),
        metavar="N",
    ),
    Option(
        "--vault-tries",
        "tries per request on 429, 5xx, timeouts and dropped connections",
        count(1, 100),
        metavar="N",
        default=6,
    ),
    Option(
        "--vault-timeout",
        "timeout of one provider request",
        number(0, above=True),
        metavar="SECONDS",
        default=120.0,
    ),
    Option(
        "--vault-agent-timeout",
        "timeout of one reply of an agent: spec, its tool calls included; past it the "
        "evaluation is an error row",
        number(0, above=True),
        metavar="SECONDS",
        default=600.0,
    ),
    Option(
        "--vault-cache",
        f"response cache folder; default {DEFAULT_CACHE} in the rootdir",
        path(),
        metavar="DIR",
    ),
    Option(
        "--vault-no-cache",
        "neither read nor write the response cache",
        kind="flag",
        default=False,
    ),
    Option(
        "--vault-prices",
        'price table: ["spec"] input_per_mtok, output_per_mtok (USD per million tokens)',
        path(),
        metavar="FILE.toml",
    ),
    Option(
        "--vault-budget-usd",
        "stop issuing requests once real (uncached) spend reaches X (needs --vault-prices); "
        "the rest is skipped as not run",
        number(0, above=False),
        metavar="X",
    ),
    Option(
        "--vault-shard",
        "run share K of N (1-based): N CI jobs together run every test exactly once; auto: "
        "the shard the CI engine's variables say (GitLab, Bazel, a Kubernetes Indexed Job, "
        "VAULT_SHARD)",
        shard,
        metavar="K/N|auto",
    ),
    Option(
        "--vault-report",
        "write the HTML report of this run's rows at the end",
        path(),
        metavar="FILE.html",
    ),
    Option(
        "--vault-otel",
        "write the run as OpenTelemetry traces (OTLP/JSON: GenAI agent, tool and guardrail "
        "spans) to this file at the end; with the [otel] extra and OTEL_EXPORTER_OTLP_ENDPOINT "
        "set, also send them to that collector",
        path(),
        metavar="FILE.json",
    ),
    Option(
        "--vault-otel-key-env",
        "the environment variable holding the key of the guardrail spans' input hash "
        "(HMAC-SHA256 of the RFC 8785 canonical arguments; needs the [otel] extra); unset: "
        "no hash",
        text("a variable name"),
        metavar="NAME",
    ),
    Option(
        "--vault-progress",
        "at most one progress line per SECONDS (0: none), and only when it says something new",
        number(0, above=False),
        metavar="SECONDS",
        default=15.0,
    ),
    Option(
        "--vault-decisions",
        "instead of evaluations, one syrupy snapshot test per case with calls "
        "(FILE::ID[decisions]): each call's decision under the level passports",
        kind="flag",
        default=False,
    ),
    # CI at real cost: a fair sample for pull requests, a gate against the last release,
    # and a plan before spending.
    Option(
        "--vault-sample",
        "run a stratified sample of N attacks over level x category (after -k and "
        "--vault-level), the same on every machine, worker and shard; benign cases stay in full",
        count(1, 10_000_000),
        metavar="N",
    ),
    Option(
        "--vault-sample-benign",
        "also sample the benign cases down to M",
        count(0, 10_000_000),
        metavar="M",
    ),
    Option(
        "--vault-transcripts",
        "which evaluations keep their conversation in the results (and the HTML report): "
        "failures (a forbidden transfer, an unpermitted one, an error) or all",
        choice("failures", "all"),
        metavar="failures|all",
        default="failures",
    ),
    Option(
        "--vault-trials",
        "run every evaluation N times, as independent trials (their own requests; trial 1 "
        "is the request a run of one trial makes): for models that answer differently each "
        f"time; at most {MAX_TRIALS}",
        count(1, MAX_TRIALS),
        metavar="N",
        default=1,
    ),
    Option(
        "--vault-seed",
        "seed of the sample, and of the stochastic control scripted:coin:P: the same seed, "
        "corpus and N, the same cases",
        count(0, 2**63 - 1),
        metavar="S",
        default=0,
    ),
    Option(
        "--vault-baseline",
        "compare with the last release's results at the end, per track; a regression (a "
        "guarded unpermitted transfer, a model-alone unpermitted, attributable or clean-run "
        "payment rate significantly up, benign completion significantly down), or cells "
        "one run measured and the other did not (INCOMPLETE), makes the exit status non-zero",
        path(),
        metavar="RUN.parquet",
    ),
    Option(
        "--vault-baseline-model",
        "the baseline's model to compare with, when it holds several",
        text("a spec"),
        metavar="SPEC",
    ),
    Option(
        "--vault-baseline-any-corpus",
        "compare even with a baseline run on another corpus version",
        kind="flag",
        default=False,
    ),
    Option(
        "--vault-baseline-subset",
        "accept a verdict on the cells both runs measured, when either lacks some (a sample, "
        "a shard, -k, a baseline that errored or was cut short): the verdict names itself as "
        "on N of M cells; else any cell not comparable makes the gate INCOMPLETE",
        kind="flag",
        default=False,
    ),
    Option(
        "--vault-baseline-out",
        "write the gate's verdict, coverage and every regressed attack to this JSON file",
        path(),
        metavar="FILE.json",
    ),
    Option(
        "--vault-plan",
        "collect, print what the run would cost (evaluations, requests, tokens, cache, "
        "spend), and exit without asking any provider (so needing no key)",
        choice("text", "json"),
        kind="optional",
        metavar="text|json",
        const="text",
    ),
    # The adaptive track: an attacker writes each next message; reported apart.
    Option(
        "--vault-attacker",
        "adaptive attacker: scripted:escalate, openai:MODEL or anthropic:MODEL; adds the "
        "adaptive track",
        spec,
        metavar="SPEC",
    ),
    Option(
        "--vault-rounds",
        "attacker messages per adaptive evaluation, the seed's first",
        count(1, 50),
        metavar="N",
        default=5,
    ),
    Option(
        "--vault-attacker-sees-policy",
        "show the attacker a summary of the level's passport (recipients, caps, codes)",
        kind="flag",
        default=False,
    ),
    Option(
        "--vault-export-found",
        "write each adaptive find (an unpermitted transfer) as a corpus line that replays "
        "on track B",
        path(".jsonl"),
        metavar="FILE.jsonl",
    ),
    Option(
        "--vault-judge",
        "a judge that reads each completed evaluation's transcript, repeatable: openai:MODEL, "
        "anthropic:MODEL, scripted:judge-final-text, scripted:judge-lenient or "
        "scripted:judge-always; an audit recorded in judge_verdicts, never a test's outcome",
        spec,
        kind="list",
        metavar="SPEC",
    ),
    Option(
        "--vault-corpus",
        "corpus to run, repeatable: builtin (the cases shipped with pytest-vault), "
        "builtin:level-N (one level), or a .jsonl file or a folder of them; on the command "
        "line, the run's only corpora; in the config file, added to a bare pytest. Other "
        ".jsonl files are never collected, unless named on the command line or *.vault.jsonl",
        corpus,
        kind="list",
        metavar="builtin|PATH",
    ),
)


def default(field: str) -> Any:
    """The default of the option that settles into `field` (`settings.Options`): the one
    the table states, so that `--help` and the run cannot disagree."""
    [value] = [o.default for o in OPTIONS if o.field == field]
    return value


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("vault", "pytest-vault: payment-agent attack suite")
    for option in OPTIONS:
        more: dict[str, Any] = {"action": "store_true"}
        if option.kind != "flag":
            more = {"type": option.cli, "metavar": option.metavar}
        if option.kind == "list":
            more["action"] = "append"
        if option.kind == "optional":
            more.update(nargs="?", const=option.const)
        # None: not on the command line, so `settle` looks in the config file.
        group.addoption(option.flag, dest=option.key, default=None, help=option.described(), **more)
        parser.addini(option.key, option.described(), type=INI_TYPE[option.kind], default=None)


# -- the README's option reference ---------------------------------------------------------

BEGIN = "<!-- options: generated by pytest_vault.plugin.options.reference(); do not edit -->"
END = "<!-- options: end -->"


def reference() -> str:
    """The README's table of options, between BEGIN and END."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [BEGIN, "", "| option | config key | meaning |", "|---|---|---|"]
    for o in OPTIONS:
        kind = {"list": " (a list)", "flag": " (true/false)"}.get(o.kind, "")
        lines.append(f"| `{cell(o.usage)}` | `{o.key}`{kind} | {cell(o.described())} |")
    return "\n".join([*lines, "", END])


if __name__ == "__main__":  # python -m pytest_vault.plugin.options > the README's section
    print(reference())
