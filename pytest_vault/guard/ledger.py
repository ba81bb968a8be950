"""Where a production guard keeps what it let through: in memory, or durably in SQLite.

A store hands out one `transaction(day, currency, key, tallies)` at a time: a `Ledger`
holding what the engine needs to judge that call (the day's total in that currency,
whether that idempotency key is used, and the named running counts and totals of the
other packs, `guard.packs`: a day's payout count, what was refunded of an order), which
the engine reads and commits to. On a clean exit
the store records what changed; on an exception it records nothing.

`SqliteLedger` makes check-and-record one `BEGIN IMMEDIATE` transaction, so processes
sharing one file are judged one after another against the same totals. Its path must
name a durable file, checked when it is made: SQLite reads `""` and `:memory:` as private
databases that vanish at close, so a cap would start again with every restart. Whatever
goes wrong with the file later (locked past the busy timeout, corrupt, not a database,
another schema, another passport's ledger) is a one-line `LedgerError`, never a partial
write.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import date
from typing import Protocol

from pytest_vault.core.errors import VaultError, reason
from pytest_vault.core.text import shown
from pytest_vault.guard.engine import Ledger

SCHEMA_VERSION = "1"
_TABLES = frozenset({"vault_meta", "vault_daily", "vault_keys"})
# Totals are stored as decimal text: exact at any size (SQLite integers stop at 2**63).
_CREATE = (
    "CREATE TABLE vault_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE vault_daily (day TEXT NOT NULL, currency TEXT NOT NULL,"
    " spent_minor TEXT NOT NULL, PRIMARY KEY (day, currency))",
    "CREATE TABLE vault_keys (key TEXT PRIMARY KEY, day TEXT NOT NULL)",
)
# The other packs' tallies by name; added to a ledger made before them when it is opened.
_TALLIES = "CREATE TABLE vault_tallies (name TEXT PRIMARY KEY, value TEXT NOT NULL)"


class LedgerError(VaultError):
    """The ledger cannot be used: a path that names no durable file, when the guard is
    made; a file that cannot be read or written, at a check, which is then denied."""


class LedgerStore(Protocol):
    def transaction(
        self, day: date, currency: str, key: str | None, tallies: tuple[str, ...] = ()
    ) -> AbstractContextManager[Ledger]: ...

    def close(self) -> None: ...


class MemoryLedger:
    """The engine's own in-memory ledger, behind a lock: lost when the process ends."""

    def __init__(self) -> None:
        self.state = Ledger()
        self._lock = threading.Lock()

    @contextmanager
    def transaction(
        self, day: date, currency: str, key: str | None, tallies: tuple[str, ...] = ()
    ) -> Iterator[Ledger]:
        with self._lock:
            yield self.state

    def close(self) -> None:
        pass


def _minor(value: object, where: str) -> int:
    if type(value) is not str or not value.isascii() or not value.isdigit():
        raise LedgerError(f"ledger row {where} does not hold an amount")
    return int(value)


def durable_path(path: object) -> str:
    """`path` if it can name a durable ledger file, else a one-line `LedgerError` saying why.

    Refused: `""` (SQLite's private temporary database) and `:memory:`, both lost at
    close; any `file:` name, which an SQLite built to read URIs may read as one
    (`file::memory:`, `?mode=memory`: write `./file:…` for a file named so); a folder, a
    device or anything else that is not a regular file; a file in a folder that is not
    there."""
    name = os.fspath(path) if isinstance(path, str | os.PathLike) else path
    if type(name) is not str:
        raise LedgerError(f"ledger {path!r}: not a file path")
    said = f"ledger {shown(repr(name))}"
    if name in ("", ":memory:"):
        raise LedgerError(f"{said}: SQLite makes it a private database, lost at close")
    if name[:5].lower() == "file:":
        raise LedgerError(f"{said}: a file: URI, which SQLite may keep in memory; give a path")
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        folder = os.path.dirname(name) or "."
        if not os.path.isdir(folder):
            raise LedgerError(f"{said}: the folder {folder!r} does not exist") from None
        return name
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise LedgerError(f"{said}: {reason(exc)}") from None
    if stat.S_ISDIR(mode):
        raise LedgerError(f"{said}: a folder, not a file")
    if not stat.S_ISREG(mode):
        raise LedgerError(f"{said}: not a regular file")
    return name


class SqliteLedger:
    """A durable ledger in one SQLite file, dedicated to one passport's agent."""

    def __init__(
        self, path: str | os.PathLike[str], *, passport_id: str, busy_timeout: float = 5.0
    ) -> None:
        self.path = durable_path(path)
        self._owner = passport_id
        self._timeout = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            # A connection inherited through fork() is the parent's: never use or close it.
            self._db, self._pid = None, os.getpid()
        if self._db is None:
            # Autocommit mode: every transaction is begun and ended here, explicitly.
            db = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            try:
                self._prepare(db)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Create the schema in an empty file, or prove the file is this passport's ledger."""
        db.execute("BEGIN IMMEDIATE")
        try:
            # Every object but SQLite's own (the primary keys' autoindexes): a stray
            # trigger or view could change what a query reads.
            tables = {
                row[0]
                for row in db.execute(
                    "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite^_%' ESCAPE '^'"
                )
            }
            if not tables:
                for statement in (*_CREATE, _TALLIES):
                    db.execute(statement)
                db.executemany(
                    "INSERT INTO vault_meta VALUES (?, ?)",
                    [("schema", SCHEMA_VERSION), ("passport_id", self._owner)],
                )
            elif tables - {"vault_tallies"} != _TABLES:
                raise LedgerError("the file holds another schema, not a pytest-vault ledger")
            else:
                if "vault_tallies" not in tables:  # a ledger from before the other packs
                    db.execute(_TALLIES)
                meta = dict(db.execute("SELECT name, value FROM vault_meta").fetchall())
                if meta.get("schema") != SCHEMA_VERSION:
                    raise LedgerError(f"unknown ledger schema {meta.get('schema')}")
                if meta.get("passport_id") != self._owner:
                    raise LedgerError(f"the ledger belongs to passport {meta.get('passport_id')}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    @contextmanager
    def transaction(
        self, day: date, currency: str, key: str | None, tallies: tuple[str, ...] = ()
    ) -> Iterator[Ledger]:
        with self._lock:
            try:
                db = self._connect()
                db.execute("BEGIN IMMEDIATE")  # the write lock, held until COMMIT
            except sqlite3.Error as exc:
                raise LedgerError(_why(exc)) from None
            try:
                state, before = self._read(db, day, currency, key, tallies)
                yield state
                self._write(db, state, before, day)
                db.execute("COMMIT")
            except BaseException as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise LedgerError(_why(exc)) from None
                raise

    @staticmethod
    def _read(
        db: sqlite3.Connection, day: date, currency: str, key: str | None, tallies: tuple[str, ...]
    ) -> tuple[Ledger, Ledger]:
        state = Ledger()
        row = db.execute(
            "SELECT spent_minor FROM vault_daily WHERE day = ? AND currency = ?",
            (day.isoformat(), currency),
        ).fetchone()
        if row is not None:
            state.daily[(day, currency)] = _minor(row[0], f"{day} {currency}")
        if (
            key is not None
            and db.execute("SELECT 1 FROM vault_keys WHERE key = ?", (key,)).fetchone()
        ):
            state.keys.add(key)
        for name in tallies:
            row = db.execute("SELECT value FROM vault_tallies WHERE name = ?", (name,)).fetchone()
            if row is not None:
                state.tallies[name] = _minor(row[0], f"tally {shown(repr(name))}")
        return state, Ledger(dict(state.daily), set(state.keys), dict(state.tallies))

    @staticmethod
    def _write(db: sqlite3.Connection, state: Ledger, before: Ledger, day: date) -> None:
        for (when, currency), spent in state.daily.items():
            if before.daily.get((when, currency)) != spent:
                db.execute(
                    "INSERT INTO vault_daily VALUES (?, ?, ?) ON CONFLICT (day, currency)"
                    " DO UPDATE SET spent_minor = excluded.spent_minor",
                    (when.isoformat(), currency, str(spent)),
                )
        for name, value in state.tallies.items():
            if before.tallies.get(name) != value:
                db.execute(
                    "INSERT INTO vault_tallies VALUES (?, ?) ON CONFLICT (name)"
                    " DO UPDATE SET value = excluded.value",
                    (name, str(value)),
                )
        db.executemany(
            "INSERT INTO vault_keys VALUES (?, ?)",
            [(k, day.isoformat()) for k in sorted(state.keys - before.keys)],
        )

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _why(exc: sqlite3.Error) -> str:
    # "database is locked", "file is not a database", "unable to open database file".
    return shown(" ".join(str(exc).split()) or type(exc).__name__)
