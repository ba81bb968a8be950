"""A semantic diff of two passports: what they permit differently, not how their text differs.

Each `Change` names a level, a JSON pointer into the passport, the old and new value and
an `effect`: `widens` (a call is newly allowed), `narrows` (newly denied), or `neutral`.

Two steps. `diff_passports` reads each field's own direction with the guard's semantics
(`"*"` and an empty allowlist both permit anyone; an entry the guard can never match
permits no one; a currency the guard does not know pays nothing) and the pack's fixed
rules (the L2 minimum; a transfer is one `funds_transfer` item judged in the passport's
first region). `review_passports` then settles each change on the engine itself: it
searches a witness (`witness.py`), a call OLD decides one way and NEW the other, checked
by running both through a `Guard`. A change with a witness has the witness's effect; one
that can change no decision, whatever the field's direction (a raised cap above a daily
cap that binds first, anything in a passport that permits nothing), is `neutral` with the
reason in `note`; one the search could not decide within its bounds keeps the field's
direction, `undecided`, and says why. A neutral change is searched too, both ways: a
witness for it would be a defect of the field rules, and is reported as what it shows.

Fields the guard never reads (ids, owner, metadata, version, creation dates) are not
part of what a passport permits, so they are not reported.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pytest_vault.core.errors import reason
from pytest_vault.core.json import DocumentError, read_json, utf8
from pytest_vault.core.text import shown
from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import passport_files
from pytest_vault.guard.passport import CHARGE, Passport, PassportError, read_passport
from pytest_vault.policy.fields import ALLOWLIST as ALLOWLIST
from pytest_vault.policy.fields import CHARGE_LIMITS as CHARGE_LIMITS
from pytest_vault.policy.fields import FIELDS, field_at, quoted, readable_limits
from pytest_vault.policy.fields import NARROWS as NARROWS
from pytest_vault.policy.fields import NEUTRAL as NEUTRAL
from pytest_vault.policy.fields import WIDENS as WIDENS
from pytest_vault.policy.fields import parts as parts
from pytest_vault.policy.fields import pointer as pointer
from pytest_vault.policy.witness import Bounds, Effect, Search, Witness

LEVEL_FILE = re.compile(r"level-([1-9][0-9]*)\.json")


class Change(NamedTuple):
    level: int | None
    pointer: str
    old: Any
    new: Any
    effect: Effect
    summary: str
    # Settled by `review_passports`: the call OLD and NEW decide differently (for a change
    # of no effect, one whose reasons alone change, where there is one).
    witness: Witness | None = None
    # Why a change has no effect on any decision, or why it is undecided.
    note: str | None = None
    # The search stopped at its bounds: the effect is the field's own direction.
    undecided: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = self._asdict()
        out["witness"] = None if self.witness is None else self.witness.to_dict()
        return out

    def line(self) -> str:
        where = "" if self.level is None else f"level {self.level}: "
        effect: str = "no effect" if self.effect == NEUTRAL else self.effect
        if self.undecided:
            effect += " (undecided)"
        note = "" if self.note is None else f"; {self.note}"
        return shown(f"{where}{self.pointer or '(passport)'}: {effect}: {self.summary}{note}")


def diff_passports(old: Passport, new: Passport, *, level: int | None = None) -> list[Change]:
    """Every change of a field the guard reads, with the field's own direction, in a
    fixed order: each entry of `FIELDS` in turn, its classifier comparing the two
    passports, or their charge limits where both have readable ones, then the other
    packs' limits (`review_passports` settles each change on the engine)."""
    out = []
    for field in FIELDS:
        if field.scope == "passport" and field.direction is not None:
            out += field.direction(old, new)
    o_lim, n_lim = readable_limits(old), readable_limits(new)
    if o_lim is not None and n_lim is not None:
        for field in FIELDS:
            if field.scope == "limits" and field.direction is not None:
                out += field.direction(o_lim, n_lim)
    # The other packs' limits (refund, payout, transaction execute), pack by pack.
    for field in FIELDS:
        if field.scope == "pack" and field.direction is not None:
            out += field.direction(old, new)
    return [Change(level, *change) for change in out]


def review_passports(
    old: Passport, new: Passport, *, level: int | None = None, search: Search | None = None
) -> list[Change]:
    """`diff_passports`, each change settled by a witness search on the engine: its
    witness and effect, or why it has none (see the module docstring)."""
    search = search or Search(datetime.now(UTC))
    out = []
    for change in diff_passports(old, new, level=level):
        field = field_at(change.pointer)
        found = search.find(change.pointer, change.old, change.new, change.effect, old, new, field)
        w = found.witness
        if w is not None and w.effect != NEUTRAL:
            out.append(change._replace(effect=w.effect, witness=w))
        elif found.no_effect is not None:
            out.append(change._replace(effect=NEUTRAL, witness=w, note=found.no_effect))
        elif found.undecided is not None:
            note = f"no witness: {found.undecided}"
            out.append(change._replace(witness=w, note=note, undecided=True))
        else:
            out.append(change._replace(witness=w))
    return out


# -- files and folders -----------------------------------------------------------------------


def _load(path: Path) -> Passport:
    # An empty allowlist loads with a warning; the diff says "anyone" itself.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_passport(path)[0]


def level_files(folder: Path) -> dict[int, Path]:
    """The passports of a folder, by level: as its `levels.toml` points them (what the
    suite enforces), else its `level-N.json` files."""
    if (folder / "levels.toml").is_file():
        return passport_files(folder)  # the suite's own reading
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        raise PassportError(f"{folder}: cannot read: {reason(exc)}") from None
    found = {int(m[1]): folder / name for name in names if (m := LEVEL_FILE.fullmatch(name))}
    if not found:
        raise PassportError(f"{folder}: no level-N.json passports in this folder")
    return dict(sorted(found.items()))


class Pair(NamedTuple):
    """One level's two passports, loaded and checked comparable."""

    level: int | None
    old_file: Path
    new_file: Path
    old: Passport
    new: Passport


def _spec_version(path: Path) -> object:
    """The `spec_version` a file states, read before validation; None if it cannot tell."""
    try:
        data = read_json(utf8(path.read_bytes()))
    except (OSError, ValueError, DocumentError):
        return None
    return data.get("spec_version") if isinstance(data, dict) else None


def _packs(passport: Passport) -> set[str]:
    """The capabilities the passport configures limits for (each governed by its pack),
    and payments.charge where it is granted."""
    return set(passport.limits) | ({CHARGE} if passport.grants(CHARGE) else set())


def _pair(level: int | None, old_file: Path, new_file: Path) -> Pair:
    """Both passports loaded, of one spec version and one pack, and usable by the guard;
    else a one-line `PassportError` naming the file."""
    loaded: list[Passport] = []
    refused: list[PassportError] = []
    for path in (old_file, new_file):
        try:
            loaded.append(_load(path))
        except PassportError as exc:
            refused.append(exc)
    old_version, new_version = _spec_version(old_file), _spec_version(new_file)
    if old_version is not None and new_version is not None and old_version != new_version:
        raise PassportError(
            f"{new_file}: spec_version {shown(repr(new_version))} is not "
            f"{shown(repr(old_version))} as in {old_file}: compare passports of one spec version"
        )
    if refused:
        raise refused[0]
    old, new = loaded
    old_packs, new_packs = _packs(old), _packs(new)
    if old_packs and new_packs and not old_packs & new_packs:
        raise PassportError(
            f"{new_file}: configures {', '.join(map(quoted, sorted(new_packs)))}, not "
            f"{', '.join(map(quoted, sorted(old_packs)))} as {old_file} does: "
            "compare passports of one pack"
        )
    for path, passport in ((old_file, old), (new_file, new)):
        try:
            Guard(passport)
        except Exception as exc:  # noqa: BLE001 - whatever the engine refuses, in one line
            raise PassportError(
                f"{path}: the guard cannot use this passport: {type(exc).__name__}: {exc}"
            ) from None
    return Pair(level, old_file, new_file, old, new)


def load_pairs(old: str | Path, new: str | Path) -> list[Pair]:
    """Two passport files, or two folders of passports paired by level, loaded and checked
    before anything is compared: each problem is a one-line `PassportError` naming the
    file (a folder's level the other lacks, a passport of another spec version or pack,
    one the guard cannot use)."""
    old, new = Path(old), Path(new)
    if old.is_dir() != new.is_dir():
        folder, other = (old, new) if old.is_dir() else (new, old)
        if not other.exists():  # a misspelt folder, most likely
            raise PassportError(f"{other}: no such folder")
        raise PassportError(
            f"{other}: not a folder like {folder}: compare two files or two folders"
        )
    if not old.is_dir():
        return [_pair(None, old, new)]
    olds, news = level_files(old), level_files(new)
    for number in sorted(olds.keys() | news.keys()):
        if number not in olds:
            raise PassportError(
                f"{news[number]}: level {number} is not in {old}: the folders' levels must match"
            )
        if number not in news:
            raise PassportError(
                f"{olds[number]}: level {number} is not in {new}: the folders' levels must match"
            )
    return [_pair(n, olds[n], news[n]) for n in sorted(olds)]


def review_pairs(
    pairs: Sequence[Pair], *, now: datetime | None = None, bounds: Bounds | None = None
) -> list[Change]:
    """Each pair's changes settled by its witness (`review_passports`), in one search;
    `now`: the instant calls are judged at."""
    search = Search(now or datetime.now(UTC), bounds)
    changes: list[Change] = []
    for pair in pairs:
        changes += review_passports(pair.old, pair.new, level=pair.level, search=search)
    return changes


def diff_paths(
    old: str | Path,
    new: str | Path,
    *,
    now: datetime | None = None,
    bounds: Bounds | None = None,
) -> list[Change]:
    """Diff two passport files, or two folders of passports paired by level, each change
    settled by its witness (`review_pairs`). Any problem with the input is a one-line
    `PassportError`, before any search."""
    return review_pairs(load_pairs(old, new), now=now, bounds=bounds)


def any_widen(changes: Iterable[Change]) -> bool:
    """Whether a change widens: witnessed, or undecided and widening by its field."""
    return any(c.effect == WIDENS for c in changes)
