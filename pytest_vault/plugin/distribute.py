"""Under pytest-xdist, give every worker its share of the tests upfront.

A worker can only run evaluations ahead if it knows which tests it will get. With
`--dist load` (what `-n` uses by default) pytest-vault deals whole groups of tests
(`group_of`, the rule `--vault-shard` shares by too) to workers `gw0`..`gw{N-1}`
round-robin, all at once; each worker computes the same deal from the collected node ids
(and its items' pairs) and its own id, and runs its share ahead,
`--vault-concurrency / N` at a time. A worker that replaces a crashed one gets the
leftovers and evaluates them as they come.

`ShareScheduling` is a scheduler of its own on xdist's `Scheduling` protocol: it sends
each node its whole share, then shuts it down, so nothing is left to balance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController


# A trial's suffix on a test's parameters: `-t2`.
TRIAL = re.compile(r"-t[0-9]+$")


def rank(node: Any) -> int:
    return int(str(node.gateway.id).removeprefix("gw"))


def group_of(nodeid: str, pair: str | None = None) -> str:
    """The one rule of which tests belong together, for `--vault-shard` and for xdist: a
    vault test `file.jsonl::case[spec-track-arch]` (or `...-arch-tK`, a trial) belongs to
    `file.jsonl::case[spec`, one case and one model with its tracks, architectures and
    trials; an indirect test (an attack, or the clean run that serves it) whose `pair` (its
    case's `clean_id()`) is given belongs to `indirect::pair::spec`, the clean run with
    every attack it serves, across files. Any other test is its own group.

    A function of the node id and the pair alone: the xdist controller, which has no
    items, and every worker and shard, which have, compute the same groups."""
    parsed = _parsed(nodeid)
    if parsed is None:
        return nodeid
    head, spec, _ = parsed
    return f"indirect::{pair}::{spec}" if pair is not None else f"{head}[{spec}"


def _parsed(nodeid: str) -> tuple[str, str, str] | None:
    """`file.jsonl::case[spec-track-arch(-tK)]` -> (`file.jsonl::case`, spec, track); None
    for a test of another kind."""
    head, bracket, params = nodeid.rpartition("[")
    parts = TRIAL.sub("", params.removesuffix("]")).rsplit("-", 2)
    if not bracket or len(parts) != 3 or not head.partition("::")[0].endswith(".jsonl"):
        return None
    return head, parts[0], parts[1]


def deal(nodeids: Sequence[str], workers: int, pairs: Mapping[str, str] | None = None) -> list[int]:
    """The worker (0..workers-1) of each test: groups dealt round-robin in order. `pairs`:
    the indirect tests' pairs, by node id."""
    pairs = pairs or {}
    slots: dict[str, int] = {}
    return [slots.setdefault(group_of(n, pairs.get(n)), len(slots) % workers) for n in nodeids]


def worker_share(
    workerinput: dict[str, Any], nodeids: Sequence[str], pairs: Mapping[str, str] | None = None
) -> set[int] | None:
    """Indices of session.items this worker will run, or None if unknown."""
    if not workerinput.get("vault_share"):
        return None
    me = int(str(workerinput["workerid"]).removeprefix("gw"))
    dealt = deal(nodeids, int(workerinput["workercount"]), pairs)
    return {i for i, w in enumerate(dealt) if w == me}


def pairs_of(nodeids: Sequence[str], rootpath: Path, builtin: Sequence[Path]) -> dict[str, str]:
    """The pair of each indirect test, by node id, read from its corpus file: what the
    controller, which collects nothing, needs to group as the workers do from their items.
    A clean run is `clean-of-X[...]` in the file of X, the attack it was made for, and
    shares X's pair. A file that does not load, whatever the failure, is left out: its
    workers fail to collect it, saying why."""
    from pytest_vault.core.text import shown
    from pytest_vault.corpus.builtin import nodeid as builtin_nodeid
    from pytest_vault.corpus.load import load_corpus
    from pytest_vault.report.transcript import CLEAN

    where = {builtin_nodeid(path): path for path in builtin}
    files: dict[str, dict[str, str]] = {}
    out: dict[str, str] = {}
    for node in nodeids:
        parsed = _parsed(node)
        if parsed is None or parsed[2] != "indirect":
            continue
        file, _, case = parsed[0].partition("::")
        if file not in files:
            try:
                entries = load_corpus(where.get(file, rootpath / file))
            except Exception:  # noqa: BLE001 - any: the workers read it and say the real error
                entries = []
            files[file] = {shown(c.id): p for _, c in entries if (p := c.clean_id()) is not None}
        known = files[file]
        pair = known.get(case) or known.get(case.removeprefix(CLEAN))
        if pair is not None:
            out[node] = pair
    return out


def shares(
    nodeids: Sequence[str],
    ranks: Sequence[int],
    workers: int,
    pairs: Mapping[str, str] | None = None,
) -> dict[int, list[int]]:
    """The test indices each live rank is sent: its deal; the groups of a rank whose
    worker is gone go round the replacements (ranks past the deal) first, else round the
    live ones, each whole."""
    live = sorted(ranks)
    spare = [r for r in live if r >= workers] or live
    out: dict[int, list[int]] = {r: [] for r in live}
    for index, worker in enumerate(deal(nodeids, workers, pairs)):
        out[worker if worker in out else spare[worker % len(spare)]].append(index)
    return out


class ShareScheduling:
    """xdist's `Scheduling` protocol (`xdist.scheduler.Scheduling`) for `--dist load`."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        try:
            from xdist.workermanage import parse_tx_spec_config
        except ImportError:  # pytest-xdist < 3.7 names it so
            from xdist.workermanage import parse_spec_config as parse_tx_spec_config

        self.config = config
        self.numnodes = len(parse_tx_spec_config(config))
        self.log: Callable[..., None] = log.vaultshare if log is not None else lambda *a: None
        self.collection: list[str] | None = None
        self.collections: dict[WorkerController, list[str]] = {}
        self.pending: dict[WorkerController, list[int]] = {}  # sent, not yet reported
        self.leftovers: list[int] = []  # a crashed node's, for a node that replaces it

    @property
    def nodes(self) -> list[WorkerController]:
        return list(self.pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.collections) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        # A worker keeps its last test until it is told to shut down: one pending is done.
        return (
            self.collection_is_completed
            and not self.leftovers
            and all(len(p) < 2 for p in self.pending.values())
        )

    @property
    def has_pending(self) -> bool:
        return bool(self.leftovers) or any(self.pending.values())

    def add_node(self, node: WorkerController) -> None:
        assert node not in self.pending
        self.pending[node] = []

    def add_node_collection(self, node: WorkerController, collection: Sequence[str]) -> None:
        if self.collection is not None and list(collection) != self.collection:
            # A replacement that collected something else gets nothing.
            from xdist.report import report_collection_diff

            self.log(
                report_collection_diff(self.collection, collection, "the run", node.gateway.id)
            )
            return
        self.collections[node] = list(collection)

    def mark_test_complete(
        self, node: WorkerController, item_index: int, duration: float = 0
    ) -> None:
        self.pending[node].remove(item_index)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        self.leftovers.insert(0, self.collection.index(item))
        self._hand_over()

    def remove_pending_tests_from_node(
        self, node: WorkerController, indices: Sequence[int]
    ) -> None:
        raise NotImplementedError  # only work stealing takes tests back

    def remove_node(self, node: WorkerController) -> str | None:
        """The test a crashed node was running; the rest of its share is left over. A
        node that dies before the deal is forgotten, its collection too: the deal waits for
        its replacement and goes to the nodes alive, never to it."""
        if self.collection is None:
            self.collections.pop(node, None)
        pending = self.pending.pop(node)
        if not pending:
            return None
        assert self.collection is not None
        self.leftovers.extend(pending[1:])
        self._hand_over()
        return self.collection[pending[0]]

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a replacement node collected: the leftovers
            self._hand_over()
            return
        if not self._same_collections():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.collections.values()))
        nodes = {rank(node): node for node in self.collections}
        count = int(next(iter(nodes.values())).workerinput["workercount"])
        pairs = self._pairs(self.collection)
        for worker, share in shares(self.collection, list(nodes), count, pairs).items():
            self._send(nodes[worker], share)

    def _pairs(self, nodeids: list[str]) -> dict[str, str]:
        """The indirect tests' pairs, read from the corpus files (only a run with indirect
        tests reads them)."""
        if not any((p := _parsed(n)) is not None and p[2] == "indirect" for n in nodeids):
            return {}
        from pytest_vault.plugin.session import VAULT

        builtin = self.config.stash[VAULT].corpora.builtin
        return pairs_of(nodeids, self.config.rootpath, builtin)

    def _send(self, node: WorkerController, indices: list[int]) -> None:
        if indices:
            self.pending[node].extend(indices)
            node.send_runtest_some(indices)
        node.shutdown()

    def _hand_over(self) -> None:
        """The leftovers, to the first node that has collected and is not shutting down."""
        for node in self.pending:
            if self.leftovers and node in self.collections and not node.shutting_down:
                indices, self.leftovers = self.leftovers, []
                self._send(node, indices)

    def _same_collections(self) -> bool:
        """Whether every node collected the same tests; else a collection error each."""
        from xdist.report import report_collection_diff

        (first, theirs), *others = self.collections.items()
        same = True
        for node, collection in others:
            diff = report_collection_diff(theirs, collection, first.gateway.id, node.gateway.id)
            if diff:
                same = False
                self.log(diff)
                report = pytest.CollectReport(node.gateway.id, "failed", diff, [])
                self.config.hook.pytest_collectreport(report=report)
        return same
