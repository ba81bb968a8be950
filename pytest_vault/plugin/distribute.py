"""Under pytest-xdist, give every worker its share of the tests upfront.

A worker can only run evaluations ahead if it knows which tests it will get. With
`--dist load` (what `-n` uses by default) pytest-vault deals whole groups of tests
(one case and one model: its tracks and architectures, which share requests) to
workers `gw0`..`gw{N-1}` round-robin, all at once; each worker computes the same deal
from the collected node ids and its own id, and runs its share ahead,
`--vault-concurrency / N` at a time. A worker that replaces a crashed one gets the
leftovers and evaluates them as they come.

`ShareScheduling` is a scheduler of its own on xdist's `Scheduling` protocol: it sends
each node its whole share, then shuts it down, so nothing is left to balance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController


# A trial's suffix on a test's parameters: `-t2`.
TRIAL = re.compile(r"-t[0-9]+$")


def rank(node: Any) -> int:
    return int(str(node.gateway.id).removeprefix("gw"))


def group_of(nodeid: str) -> str:
    """`file::case[spec-track-arch]` (or `...-arch-tK`, a trial) -> `file::case[spec`: one
    case and one model, its trials together."""
    head, bracket, params = nodeid.rpartition("[")
    params = TRIAL.sub("", params.rstrip("]"))
    parts = params.rsplit("-", 2)
    return f"{head}[{parts[0]}" if bracket and len(parts) == 3 else nodeid


def deal(nodeids: Sequence[str], workers: int) -> list[int]:
    """The worker (0..workers-1) of each test: groups dealt round-robin in order."""
    slots: dict[str, int] = {}
    return [slots.setdefault(group_of(n), len(slots) % workers) for n in nodeids]


def worker_share(workerinput: dict[str, Any], nodeids: Sequence[str]) -> set[int] | None:
    """Indices of session.items this worker will run, or None if unknown."""
    if not workerinput.get("vault_share"):
        return None
    me = int(str(workerinput["workerid"]).removeprefix("gw"))
    return {i for i, w in enumerate(deal(nodeids, int(workerinput["workercount"]))) if w == me}


def shares(nodeids: Sequence[str], ranks: Sequence[int], workers: int) -> dict[int, list[int]]:
    """The test indices each live rank is sent: its deal; the groups of a rank whose
    worker is gone go round the replacements (ranks past the deal) first, else round the
    live ones, each whole."""
    live = sorted(ranks)
    spare = [r for r in live if r >= workers] or live
    out: dict[int, list[int]] = {r: [] for r in live}
    for index, worker in enumerate(deal(nodeids, workers)):
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
        for worker, share in shares(self.collection, list(nodes), count).items():
            self._send(nodes[worker], share)

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
