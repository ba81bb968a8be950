"""Decision snapshots (`pytest CORPUS --vault-decisions`): what the guard decides, per call.

Each case with `calls` becomes one test, `FILE::ID[decisions]`, that replays its calls in
order through a guarded bank with a fresh guard under the case's level passport, and
compares per call the tool, the arguments as written, `allow`, what executes and the
reasons (each code with the rule that gave it) against a syrupy snapshot. A corpus file's
snapshots live in one file beside it, `__snapshots__/<stem>.decisions`: syrupy's amber
layout (a block per case, sorted by name) holding one JSON object per call over three
lines: the call, the decision, the reasons. So a diff that changes only the reasons is
visibly that: its decision line is unchanged. No timestamps; every character that is not
printable escaped, so hostile text can neither break the file nor a terminal.

A run with changed decisions ends with a summary of them, its first line the verdict
(`policy.verdict`): newly allowed calls by level, newly denied, then the reason-only
changes counted by change of reasons (listed with `-v`).

Syrupy's own unused detection guesses which snapshots a partial run "should" have used
(by name prefixes and `-k` text), and treats only `.py` files as owners. Here it is exact
instead: the extension shows syrupy only the snapshots of cases that no longer exist, and
only for a corpus file that was collected whole and fully selected, in a session without
collection errors. So a removed case is reported unused (deleted by `--snapshot-update`),
and a filtered, sharded, interrupted or broken run never deletes or rewrites the snapshot
of a case it did not run. Other syrupy extensions never see `.decisions` files at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.data import Snapshot, SnapshotCollection, SnapshotCollections
from syrupy.exceptions import TaintedSnapshotError
from syrupy.extensions.amber import AmberDataSerializer, AmberSnapshotExtension
from syrupy.extensions.amber.serializer import MalformedAmberFile
from syrupy.location import PyTestLocation
from syrupy.terminal import disable_color

from pytest_vault.core.json import dumps
from pytest_vault.core.text import shown, visible
from pytest_vault.plugin.session import vault_of

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion
    from syrupy.types import SerializableData, SnapshotIndex

    from pytest_vault.corpus.model import Case
    from pytest_vault.guard.passport import Passport

# The last suffix of a snapshot file; also what other syrupy extensions are told to ignore.
SUFFIX = "decisions"


# -- the session's knowledge: which snapshots exist for which corpus file -------------------
@dataclass
class CorpusSnapshots:
    """The decision tests one corpus file collected, and whether all of them were selected."""

    nodeids: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # their snapshot names
    complete: bool = False


@dataclass
class DecisionState:
    files: dict[Path, CorpusSnapshots] = field(default_factory=dict)
    collection_failed: bool = False
    all_selected: bool = False  # no decision test of the session was deselected
    # What the failed decision tests found changed (from their reports: xdist too).
    changed: list[dict[str, Any]] = field(default_factory=list)

    def orphans(self, corpus: Path, stored: set[str]) -> set[str]:
        """Snapshots of `corpus` whose case is gone; none unless that is certain."""
        if self.collection_failed:
            return set()
        owner = self.files.get(corpus)
        if owner is None:  # a corpus file that was removed (or renamed) takes its cases along
            return stored if self.all_selected and not corpus.exists() else set()
        return stored - owner.names if owner.complete else set()


DECISIONS = pytest.StashKey[DecisionState]()


def configure(config: pytest.Config) -> None:
    """`--vault-decisions`: check syrupy is there, and keep its colours off under --color=no."""
    if not config.pluginmanager.hasplugin("syrupy"):
        raise pytest.UsageError(
            "--vault-decisions needs syrupy (pip install syrupy; and no '-p no:syrupy')"
        )
    if config.getoption("color") == "no":
        config.option.no_colors = True
    config.stash[DECISIONS] = DecisionState()
    config.pluginmanager.register(DecisionHooks(config), "vault-decisions")


def hide_from_other_extensions(config: pytest.Config) -> None:
    """Keep `.decisions` files out of every other extension's discovery, in every run: to
    syrupy's amber default they are unknown files, which it deletes under --snapshot-update.
    (This module imports nothing heavy: this runs whenever syrupy is installed.)"""
    ignored = list(config.option.ignore_file_extensions or [])
    if SUFFIX not in ignored:
        config.option.ignore_file_extensions = [*ignored, SUFFIX]


class DecisionHooks:
    def __init__(self, config: pytest.Config) -> None:
        self.state = config.stash[DECISIONS]
        self.config = config

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            # Cases of a file that failed to load are unknown: nothing may count as unused.
            self.state.collection_failed = True
            self.config.option.no_cleanup = True

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        selected = {item.nodeid for item in session.items if isinstance(item, DecisionItem)}
        for snapshots in self.state.files.values():
            snapshots.complete = snapshots.nodeids <= selected
        self.state.all_selected = all(s.complete for s in self.state.files.values())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":  # each phase's report carries the test's properties
            return
        for name, value in report.user_properties:
            if name == CHANGED and isinstance(value, dict):
                self.state.changed.append({**value, "nodeid": report.nodeid})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.state.changed:
            verbose = self.config.get_verbosity() > 0
            terminalreporter.write_sep("=", "vault decisions")
            for text in summary(self.state.changed, verbose=verbose):
                terminalreporter.write_line(text)


def deselect_levels(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--vault-level` for decision tests: a deselection syrupy sees as one (a file with no
    collected test would count as orphaned)."""
    levels = vault_of(config).options.levels

    def other_level(item: pytest.Item) -> bool:
        return isinstance(item, DecisionItem) and item.case.level not in levels

    dropped = [item for item in items if other_level(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not other_level(item)]


# -- collection -------------------------------------------------------------------------------
def collect(parent: pytest.File, entries: list[tuple[int, Case]]) -> Iterator[pytest.Item]:
    """One decision test per case that has calls, whatever its level (see deselect_levels)."""
    snapshots = parent.config.stash[DECISIONS].files[parent.path] = CorpusSnapshots()
    for lineno, case in entries:
        if not case.calls:
            continue
        item = DecisionItem.from_parent(
            parent,
            # Ids come from the corpus: shown, so no id is a terminal escape.
            name=f"{shown(case.id)}[decisions]",
            callobj=decisions,
            case=case,
            lineno=lineno,
        )
        snapshots.nodeids.add(item.nodeid)
        snapshots.names.add(DecisionExtension.get_snapshot_name(test_location=PyTestLocation(item)))
        yield item


class DecisionItem(pytest.Function):
    """A `pytest.Function` (what syrupy tracks) over the module-level `decisions`."""

    def __init__(self, *, case: Case, lineno: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # pytest >= 9.2 keeps a structured id beside the string: for a Function it takes
        # the name's brackets for a name, where the ids of --lf, --ff and --sw, parsed from
        # the cache, hold them as params, and would match no decision test. A Function
        # takes no node id, so its id is parsed from the string as pytest parses those.
        structured = getattr(self, "_id", None)
        if structured is not None:
            self._id = type(structured).parse(self.nodeid)
        self.case = case
        self.lineno = lineno
        technique = case.metadata.get("technique")
        words = [f"level{case.level}", case.category, case.kind, case.session]
        if isinstance(technique, str):
            words.append(technique)
        self.extra_keyword_matches.update(words)

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, self.lineno - 1, self.name


def decisions(snapshot: SnapshotAssertion, request: pytest.FixtureRequest) -> None:
    """The test of one case: its decisions, call by call, against the snapshot."""
    item = request.node
    assert isinstance(item, DecisionItem)
    passport = vault_of(item.config).levels[item.case.level].passport
    assertion = snapshot.use_extension(DecisionExtension)
    matched = assertion == decide(item.case, passport)  # recorded by syrupy, either way
    if not matched:
        item.user_properties.append((CHANGED, found(item, assertion)))
        pytest.fail(explain(item, assertion), pytrace=False)


def decide(case: Case, passport: Passport) -> list[dict[str, Any]]:
    """The case's calls in order through a guarded bank with a fresh guard, holding the
    case's records (orders, payout destinations, scheduled payments, the account: what
    the other tools are judged on) where it has an environment; a direct case's bank is
    as before."""
    from pytest_vault.harness.bank import Bank, Scene

    bank = Bank(passport, "guarded", scene=Scene.of(case, "attack"))
    for call in case.calls:
        bank.call(call.name, call.arguments)
    out = []
    for index, (call, record) in enumerate(zip(case.calls, bank.log, strict=True)):
        decision = record.decision  # None: a tool the guard does not judge
        executes = record.transfer if record.executed else None
        reasons = None
        if decision is not None:
            reasons = [
                {"code": r.code} if r.rule is None else {"code": r.code, "rule": r.rule}
                for r in decision.reasons
            ]
        out.append(
            {
                "call": index,
                "tool": call.name,
                "arguments": call.arguments,  # as written: exact decimals, or the raw text
                "allow": None if decision is None else decision.allow,
                "executes": None if executes is None else executes.to_dict(),
                "reasons": reasons,
            }
        )
    return out


# -- the snapshot text --------------------------------------------------------------------------
def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON spells an astral character as its surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _string(text: str) -> str:
    """A JSON string, readable, with every non-printable character (bidi overrides, lone
    surrogates, ...) as its escape: valid UTF-8, exact, and safe to print."""
    out = json.dumps(text, ensure_ascii=False)
    return out if visible(out) else "".join(c if visible(c) else _escape(c) for c in out)


def to_json(value: Any) -> str:
    """Compact JSON with sorted keys; decimals exactly as read (`500.00`, `1E+2`), strings
    readable and safe to print (`_string`)."""
    return dumps(value, sort_keys=True, decimal=str, quote=_string)


# Each call's three lines: what was called, what was decided, and why.
LINES = (("call", "tool", "arguments"), ("allow", "executes"), ("reasons",))


def _call_text(call: dict[str, Any]) -> str:
    """One call over three lines (any other key on a last line of its own, sorted)."""
    known = {key for keys in LINES for key in keys}
    rows = [[key for key in keys if key in call] for keys in LINES]
    rows.append(sorted(key for key in call if key not in known))
    parts = [", ".join(f"{_string(k)}: {to_json(call[k])}" for k in row) for row in rows if row]
    return "{" + ",\n   ".join(parts) + "}"


def render(calls: list[dict[str, Any]]) -> str:
    """A case's snapshot: a JSON array, each call over three lines (the call, the
    decision, its reasons), so a diff names the call and shows which of them changed."""
    return "[\n" + ",\n".join(f"  {_call_text(call)}" for call in calls) + "\n]"


class DecisionFile(AmberDataSerializer):
    """Amber's file layout; the version marks this format, so a change taints old files."""

    VERSION = "pytest-vault-decisions-2"
    # Version 1 (a line per call, sorted keys, reason codes without their rules).
    OLDER = ("pytest-vault-decisions-1",)

    @classmethod
    def read_file(cls, filepath: str) -> SnapshotCollection:
        """A file that cannot be read as snapshots is tainted (its tests fail and ask for
        --snapshot-update, which rewrites it), never an internal error."""
        try:
            return super().read_file(filepath)
        except (MalformedAmberFile, OSError, UnicodeDecodeError):
            return SnapshotCollection(location=filepath, tainted=True)


class DecisionExtension(AmberSnapshotExtension):
    file_extension = SUFFIX
    serializer_class = DecisionFile

    def serialize(self, data: SerializableData, **kwargs: Any) -> str:
        return render(data)

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        name = super().get_snapshot_name(test_location=test_location, index=index)
        # The amber reader strips a name's surrounding blanks; ids are shown(), so a
        # leading space is the only blank one can start with.
        bare = name.lstrip(" ")
        return "\\x20" * (len(name) - len(bare)) + bare

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        """Beside the corpus file, except for the built-in corpus: its snapshots are the
        user's (under their passports), in `__snapshots__/builtin/` of their rootdir, never
        in the installed package."""
        from pytest_vault.corpus import builtin

        config = getattr(test_location.item, "config", None)
        if config is not None and Path(test_location.filepath).parent == builtin.FOLDER:
            return str(config.rootpath / "__snapshots__" / builtin.PREFIX)
        return super().dirname(test_location=test_location)

    @classmethod
    def matches_test_location(
        cls, *, test_location: PyTestLocation, snapshot_location: str
    ) -> bool:
        if Path(snapshot_location).parent == Path(cls.dirname(test_location=test_location)):
            return Path(snapshot_location).stem == test_location.basename
        return super().matches_test_location(
            test_location=test_location, snapshot_location=snapshot_location
        )

    def discover_snapshots(
        self, *, test_location: PyTestLocation, ignore_extensions: list[str] | None = None
    ) -> SnapshotCollections:
        """Only the snapshots of removed cases (see the module docstring): all that syrupy
        may call unused. The rest of the file stays out of its reach."""
        found = SnapshotCollections()
        config = getattr(test_location.item, "config", None)
        state = None if config is None else config.stash.get(DECISIONS, None)
        if state is None:
            return found
        folder = Path(self.dirname(test_location=test_location))
        corpus_folder = Path(test_location.filepath).parent
        for path in sorted(folder.glob(f"*.{SUFFIX}")):
            stored = self.read_snapshot_collection(snapshot_location=str(path))
            corpus = corpus_folder / f"{path.stem}.jsonl"
            orphans = state.orphans(corpus, {s.name for s in stored})
            if orphans:
                collection = SnapshotCollection(location=str(path))
                for name in orphans:
                    # Syrupy prints these names: a hand-edited file's escape stays text.
                    collection.add(Snapshot(name=shown(name)))
                found.add(collection)
        return found

    def delete_snapshots(self, snapshot_location: str, snapshot_names: set[str]) -> None:
        stored = self.read_snapshot_collection(snapshot_location=snapshot_location)
        names = {s.name for s in stored if shown(s.name) in snapshot_names}
        if names:
            super().delete_snapshots(snapshot_location=snapshot_location, snapshot_names=names)


# -- the failure message --------------------------------------------------------------------------
def _calls(text: Any) -> list[dict[str, Any]] | None:
    from pytest_vault.core.json import DocumentError, read_json

    if not isinstance(text, str):
        return None
    try:
        value = read_json(text)
    except DocumentError:
        return None
    if isinstance(value, list) and all(isinstance(c, dict) for c in value):
        return value
    return None


def labels(call: dict[str, Any] | None) -> list[str] | None:
    """A call's reasons as people read them (`oap.limit_exceeded[daily_cap_check]`);
    None where there are none or they are not reasons (a hand-edited snapshot)."""
    from pytest_vault.guard.engine import label

    reasons = None if call is None else call.get("reasons")
    if not isinstance(reasons, list):
        return None
    out = []
    for r in reasons:
        code, rule = (r.get("code"), r.get("rule")) if isinstance(r, dict) else (None, None)
        if type(code) is not str or (rule is not None and type(rule) is not str):
            return None
        out.append(shown(label(code, rule)))
    return out


def _decision(call: dict[str, Any]) -> str:
    allow = call.get("allow")
    if allow is None:
        return "not judged"
    said = labels(call)
    listed = to_json(call.get("reasons")) if said is None else ", ".join(said)
    return f"{'allowed' if allow is True else 'denied'} ({listed})"


def _call(call: dict[str, Any]) -> str:
    tool = call.get("tool")
    return f"{shown(tool) if type(tool) is str else to_json(tool)} {to_json(call.get('arguments'))}"


def changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """One line per call that differs: which call, and its old and new decision."""
    lines = []
    for index in range(max(len(old), len(new))):
        was = old[index] if index < len(old) else None
        now = new[index] if index < len(new) else None
        if was == now:
            continue
        if was is None:
            assert now is not None
            lines.append(f"call {index} {_call(now)}: new call, {_decision(now)}")
        elif now is None:
            lines.append(f"call {index} {_call(was)}: no longer made (was {_decision(was)})")
        elif _call(was) != _call(now):
            lines.append(
                f"call {index}: was {_call(was)}, {_decision(was)}; "
                f"now {_call(now)}, {_decision(now)}"
            )
        elif _decision(was) != _decision(now):
            lines.append(f"call {index} {_call(now)}: {_decision(was)} -> {_decision(now)}")
        else:
            executes = f"{to_json(was.get('executes'))} -> {to_json(now.get('executes'))}"
            lines.append(f"call {index} {_call(now)}: {_decision(now)}, executes {executes}")
    return lines


def _relative(path: Path, root: Path) -> str:
    try:
        return shown(path.relative_to(root))
    except ValueError:
        return shown(path)


def explain(item: DecisionItem, assertion: SnapshotAssertion) -> str:
    config = item.config
    result = assertion.executions[assertion.num_executions - 1]
    where = _relative(Path(result.snapshot_location), config.rootpath)
    passport = vault_of(config).levels[item.case.level].passport_file
    case = shown(item.case.id)
    old, new = _calls(result.recalled_data), _calls(result.asserted_data)
    if result.exception is None and result.recalled_data is None:
        head = [f"{case}: no decision snapshot in {where}; record it with --snapshot-update"]
    elif result.exception is None and old is not None and new is not None:
        lines = changes(old, new)
        head = [
            f"{case}: {len(lines)} of {max(len(old), len(new))} calls differ from the snapshot "
            f"in {where}, "
            f"under {_relative(passport, config.rootpath)}:",
            *(f"  {line}" for line in lines),
            "review, then accept with --snapshot-update",
        ]
    elif isinstance(result.exception, TaintedSnapshotError):
        older = _older_format(Path(result.snapshot_location))
        if older is not None:
            return (
                f"{case}: {where} holds decision snapshots of an older format ({older}, "
                "before reasons named their rule); record it again with --snapshot-update "
                "under the passports it was reviewed with, then review the change"
            )
        return (
            f"{case}: {where} cannot be read as decision snapshots (damaged, or written by "
            "another version); review it, then rewrite it with --snapshot-update"
        )
    elif result.exception is not None:
        problem = f"{type(result.exception).__name__}: {result.exception}"
        return f"{case}: cannot compare with {where}: {shown(problem)}"
    else:  # a hand-edited snapshot that is not a list of calls
        head = [f"{case}: the snapshot in {where} is not a list of calls"]
    colours = disable_color() if config.option.no_colors else nullcontext()
    with colours:
        diff = assertion.get_assert_diff(diff_mode=config.option.diff_mode)
    return "\n".join([*head, "", "snapshot diff (- snapshot, + received):", *diff])


def _older_format(path: Path) -> str | None:
    """The older format a snapshot file is written in, as its first line says; or None."""
    try:
        with path.open(encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return None
    prefix = "# serializer version: "
    version = first.removeprefix(prefix).strip() if first.startswith(prefix) else ""
    return version if version in DecisionFile.OLDER else None


# -- the summary of changed decisions ----------------------------------------------------------
CHANGED = "vault_decisions_changed"


def found(item: DecisionItem, assertion: SnapshotAssertion) -> dict[str, Any]:
    """What one failed decision test found, as plain data (a report carries it to the
    xdist controller): its level, and each changed call, by kind of change."""
    result = assertion.executions[assertion.num_executions - 1]
    old, new = _calls(result.recalled_data), _calls(result.asserted_data)
    out: dict[str, Any] = {"case": shown(item.case.id), "level": item.case.level, "calls": []}
    if result.exception is None and result.recalled_data is None:
        out["kind"] = "new case"
    elif result.exception is not None or old is None or new is None:
        out["kind"] = "unreadable"  # a damaged file, an older format, a hand-edited block
    else:
        out["kind"] = "changed"
        lines = iter(changes(old, new))
        for index in range(max(len(old), len(new))):
            was = old[index] if index < len(old) else None
            now = new[index] if index < len(new) else None
            if was != now:
                out["calls"].append(
                    {"kind": _kind(was, now), "line": next(lines), **_codes(was, now)}
                )
    return out


def _kind(was: dict[str, Any] | None, now: dict[str, Any] | None) -> str:
    """`allowed` (newly), `denied` (newly), `reasons` (the same decision, other reasons),
    or `other` (a call made, no longer made or changed; only what executes changed)."""
    if was is None or now is None or _call(was) != _call(now):
        return "other"
    before, after = was.get("allow"), now.get("allow")
    if before is not True and after is True:
        return "allowed"
    if before is True and after is not True:
        return "denied"
    return "reasons" if was.get("reasons") != now.get("reasons") else "other"


def _codes(was: dict[str, Any] | None, now: dict[str, Any] | None) -> dict[str, Any]:
    return {"old": labels(was) or [], "new": labels(now) or []}


def summary(changed: list[dict[str, Any]], *, verbose: bool = False, most: int = 20) -> list[str]:
    """The verdict line, then the newly allowed and newly denied calls (each listed, the
    first `most` of each), the reason-only changes counted by change of reasons (each
    listed with `verbose`), and the other failures counted."""
    from pytest_vault.policy.verdict import code_change, collapsed, plural, verdict

    by_kind: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    cases = {"new case": 0, "unreadable": 0}
    for test in sorted(changed, key=lambda t: (t["level"], t["nodeid"])):
        if test["kind"] in cases:
            cases[test["kind"]] += 1
        for call in test["calls"]:
            by_kind.setdefault(call["kind"], []).append((test, call))

    def per_level(kind: str) -> dict[int | None, int]:
        counts: dict[int | None, int] = {}
        for test, _ in by_kind.get(kind, []):
            counts[test["level"]] = counts.get(test["level"], 0) + 1
        return counts

    reasons = by_kind.get("reasons", [])
    lines = [verdict(per_level("allowed"), per_level("denied"), len(reasons))]
    for kind, title in (("allowed", "newly allowed"), ("denied", "newly denied")):
        listed = by_kind.get(kind, [])
        if listed:
            lines.append(f"{title}: {plural(len(listed), 'call')}")
            for test, call in listed[:most]:
                lines.append(f"  {shown(test['nodeid'])}: {call['line']}")
            if len(listed) > most:
                lines.append(f"  ... and {len(listed) - most:,} more (above, each failure)")
    if reasons:
        hint = "" if verbose else "; -v lists each"
        lines.append(
            f"reason-only changes: {plural(len(reasons), 'call')}, by change of reasons{hint}"
        )
        counts = collapsed(
            f"Level {t['level']}: {code_change(c['old'], c['new'])}" for t, c in reasons
        )
        lines += [f"  {change}: {n:,}" for change, n in counts]
        if verbose:
            lines += [f"  {shown(t['nodeid'])}: {c['line']}" for t, c in reasons]
    other = len(by_kind.get("other", []))
    rest = [f"{plural(other, 'call')} otherwise changed (made, no longer made, or what executes)"]
    rest += [
        f"{cases['new case']:,} cases without a snapshot",
        f"{cases['unreadable']:,} unreadable",
    ]
    counted = [words for words in rest if not words.startswith("0 ")]
    if counted:
        lines.append("also: " + "; ".join(counted))
    return lines
