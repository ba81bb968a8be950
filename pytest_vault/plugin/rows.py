"""The run's rows, held small until the end: at 87,420 tests a dict per row (34 keys)
costs more than the rest of the row.

Each row is kept as a tuple of its values in column order (the results columns, then
the adaptive find): the values themselves are the row's own objects, most of them
shared with the case and the spec, equal texts shared with each other. The end of the
run reads them as mappings (the summary), as the results file written a row group at a
time, or as one Arrow table built a column at a time (the HTML report, the baseline
gate): never a list of the run's rows as dicts. pyarrow is imported only then, never
by `import pytest_vault.plugin`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import pytest

if TYPE_CHECKING:
    import pyarrow as pa


def _names() -> tuple[str, ...]:
    """The results columns in order (from the one row definition, `events.ROW`, which
    needs no pyarrow), then the adaptive find."""
    from pytest_vault.harness.events import COLUMNS, FOUND

    return (*COLUMNS, FOUND)


class RowStore:
    """One row per test, keyed by node id. A test run again (a rerun plugin) is one
    evaluation, counted once: its last attempt's row, unless an earlier attempt made a
    forbidden transfer, which no later attempt undoes (the first such row is kept)."""

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._values: list[tuple[Any, ...]] = []
        # Node id -> position of its last row. Reassigning a key keeps its place: the
        # order of the tests' first reports, as a dict of rows by node id kept them.
        self._at: dict[str, int] = {}
        self._table: pa.Table | None = None
        # One copy of each text and of each call log (`tool_calls`, a tuple of
        # `harness.calls.Call`s): a log is mostly one of a few hundred, made afresh for
        # every row (and received afresh on the xdist controller): the rows hold each
        # distinct one once, not once a row.
        self._texts: dict[str | tuple[Any, ...], Any] = {}
        # Tests that ran more than once, how many times each ran in all, and whether the
        # last attempt passed (their reports, as logged).
        self.attempts: dict[str, int] = {}
        self.passed_last: dict[str, bool] = {}

    @property
    def names(self) -> tuple[str, ...]:
        if self._names is None:
            self._names = _names()
        return self._names

    def add(self, key: str, row: Mapping[str, Any]) -> None:
        """Store a test's row; its `attempt` and `attempts` are this store's to number."""
        names = self.names
        attempts, attempt = names.index("attempts"), names.index("attempt")
        before = self._at.get(key)
        n = 1
        if before is not None:
            n = self.attempts[key] = self.attempts.get(key, 1) + 1
            kept = self._values[before]
            if kept[names.index("violation")]:
                # A forbidden transfer executed: no later attempt undoes it (the first kept).
                self._values[before] = (*kept[:attempts], n, *kept[attempts + 1 :])
                self._table = None
                return
        self._at[key] = len(self._values)
        texts = self._texts
        values = [
            texts.setdefault(v, v) if type(v) is str or type(v) is tuple else v
            for v in map(row.get, names)
        ]
        values[attempts] = values[attempt] = n
        self._values.append(tuple(values))
        self._table = None

    def __len__(self) -> int:
        return len(self._at)

    def _last(self) -> list[tuple[Any, ...]]:
        if len(self._at) == len(self._values):
            return self._values
        return [self._values[i] for i in self._at.values()]

    def rows(self) -> TableRows:
        """Every test's last row, as read-only mappings (no dict per row)."""
        return TableRows(self.names, self._last())

    def keyed(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Each test's node id with its last row (as `rows()` reads them)."""
        return zip(self._at, self.rows(), strict=True)

    def results(self) -> pa.Table:
        """The rows as a results table, made once."""
        if self._table is None:
            from pytest_vault.report.results import table_of

            self._table = table_of(self._last(), self.names)
        return self._table

    def write_results(self, path: Path, metadata: Mapping[str, Any]) -> None:
        """The results file, made from the rows a row group at a time: never the whole
        table, which at 87,420 rows was most of what the file cost in memory."""
        from pytest_vault.report.results import write_rows

        write_rows(self._last(), self.names, path, metadata)

    def attribute(self) -> None:
        """Join each attacked indirect row with its paired clean run (`events.attribution`),
        once every row is in: on the xdist controller, the pair may come from two workers."""
        if not self._at:
            return  # no row: a run of none of ours imports none of the harness
        from pytest_vault.harness.events import attribution, logged_calls

        names, values = self.names, self._values
        request, paid = names.index("attributable_request"), names.index("attributable_paid")
        at = list(self._at.values())  # each test's last row, as `rows()` reads them
        for i, (req, pay) in attribution(self.rows(), logged_calls).items():
            old = list(values[at[i]])
            old[request], old[paid] = req, pay
            values[at[i]] = tuple(old)
        self._table = None

    def rerun_violations(self, strict: bool) -> list[str]:
        """The tests run more than once whose kept row records a forbidden transfer that
        fails the test (behind the guard, or any under `strict`): a rerun that passed
        must not pass the run."""
        if not self.attempts:
            return []  # and a run of none of ours imports none of the harness
        names = self.names
        violation, arch = names.index("violation"), names.index("architecture")
        return [
            key
            for key in self.attempts
            if self.passed_last.get(key)
            and self._values[self._at[key]][violation]
            and (strict or self._values[self._at[key]][arch] == "guarded")
        ]

    def found(self) -> list[str]:
        """The adaptive finds' corpus lines, one per row that found."""
        at = len(self.names) - 1
        return [v[at] for v in self._last() if isinstance(v[at], str)]


class LastAttempts:
    """Whether each test run more than once (a rerun plugin) passed at its last attempt,
    as its reports are logged; on the process that keeps the rows."""

    def __init__(self, store: RowStore) -> None:
        self.store = store

    @pytest.hookimpl(trylast=True)  # after the xdist controller has added the row
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.nodeid in self.store.attempts:
            self.store.passed_last[report.nodeid] = report.passed


class _Row(Mapping[str, Any]):
    """One row's values, read by column name."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: Mapping[str, int], values: tuple[Any, ...]) -> None:
        self._index, self._values = index, values

    def __getitem__(self, key: str) -> Any:
        return self._values[self._index[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


class TableRows(Sequence[Mapping[str, Any]]):
    """Rows held as tuples (values in `names` order), seen as mappings."""

    def __init__(self, names: Sequence[str], values: Sequence[tuple[Any, ...]]) -> None:
        self._index = {name: i for i, name in enumerate(names)}
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, i: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Mapping[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> Mapping[str, Any] | Sequence[Mapping[str, Any]]:
        if isinstance(i, slice):
            return [_Row(self._index, v) for v in self._values[i]]
        return _Row(self._index, self._values[i])

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        index = self._index
        return (_Row(index, v) for v in self._values)
