"""Under pytest-xdist, give every worker its share of the tests upfront.

A worker can only run evaluations ahead if it knows which tests it will get. With
`--dist load` (what `-n` uses by default) pytest-vault schedules test i on worker
`gw{i % N}`, all at once; the worker computes the same share from its own id and
runs it ahead, `--vault-concurrency / N` at a time. A worker that replaces a crashed
one gets the leftovers and evaluates them as they come.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScheduling


def rank(node: Any) -> int:
    return int(str(node.gateway.id).removeprefix("gw"))


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
        for index in range(len(self.collection)):
            # A rank whose worker never came up: its tests go round the others.
            node = by_rank.get(index % count) or nodes[index % len(nodes)]
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


def worker_share(workerinput: dict[str, Any], count: int) -> set[int] | None:
    """Indices of session.items this worker will run, or None if unknown."""
    if not workerinput.get("vault_share"):
        return None
    me = int(str(workerinput["workerid"]).removeprefix("gw"))
    workers = int(workerinput["workercount"])
    return {i for i in range(count) if i % workers == me}
