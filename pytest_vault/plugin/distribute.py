"""Under pytest-xdist, give every worker its share of the tests upfront.

A worker can only run evaluations ahead if it knows which tests it will get. With
`--dist load` (what `-n` uses by default) pytest-vault deals whole groups of tests
(one case and one model: its tracks and architectures, which share requests) to
workers `gw0`..`gw{N-1}` round-robin, all at once; each worker computes the same deal
from the collected node ids and its own id, and runs its share ahead,
`--vault-concurrency / N` at a time. A worker that replaces a crashed one gets the
leftovers and evaluates them as they come.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdist.scheduler import LoadScheduling


def rank(node: Any) -> int:
    return int(str(node.gateway.id).removeprefix("gw"))


def group_of(nodeid: str) -> str:
    """`file::case[spec-track-arch]` -> `file::case[spec`: one case and one model."""
    head, bracket, params = nodeid.rpartition("[")
    parts = params.rstrip("]").rsplit("-", 2)
    return f"{head}[{parts[0]}" if bracket and len(parts) == 3 else nodeid


def deal(nodeids: Sequence[str], workers: int) -> list[int]:
    """The worker (0..workers-1) of each test: groups dealt round-robin in order."""
    slots: dict[str, int] = {}
    return [slots.setdefault(group_of(n), len(slots) % workers) for n in nodeids]


class ShareScheduling(LoadScheduling):
    collection: list[str] | None

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a replacement node joined: hand over leftovers
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.node2collection.values())))
        if not self.collection:
            return
        nodes = sorted(self.nodes, key=rank)
        count = int(nodes[0].workerinput["workercount"])
        by_rank = {rank(node): node for node in nodes}
        shares: dict[Any, list[int]] = {node: [] for node in nodes}
        for index, worker in enumerate(deal(self.collection, count)):
            # A rank whose worker never came up: its tests go round the others.
            node = by_rank.get(worker) or nodes[index % len(nodes)]
            shares[node].append(index)
        for node, share in shares.items():
            if share:
                self.node2pending[node].extend(share)
                node.send_runtest_some(share)
        self.pending[:] = []
        for node in nodes:
            node.shutdown()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            self._send_tests(node, len(self.pending))
        node.shutdown()


def worker_share(workerinput: dict[str, Any], nodeids: Sequence[str]) -> set[int] | None:
    """Indices of session.items this worker will run, or None if unknown."""
    if not workerinput.get("vault_share"):
        return None
    me = int(str(workerinput["workerid"]).removeprefix("gw"))
    return {i for i, w in enumerate(deal(nodeids, int(workerinput["workercount"]))) if w == me}
