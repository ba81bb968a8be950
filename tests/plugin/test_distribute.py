"""How the tests are shared out under xdist (plugin/distribute.py): the deal as
arithmetic, and the scheduler on xdist's `Scheduling` protocol with stand-in nodes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from xdist.scheduler import Scheduling

from pytest_vault.plugin.distribute import (
    ShareScheduling,
    deal,
    group_of,
    shares,
    worker_share,
)

# Two cases x two models, each with two tracks; and a test of another kind.
IDS = [
    f"c.jsonl::{case}[{model}-{track}-model]"
    for case in ("a", "b")
    for model in ("scripted:obedient", "openai:gpt-x")
    for track in ("A", "B")
] + ["test_other.py::test_it"]


def test_a_group_is_one_case_and_one_model() -> None:
    assert group_of("c.jsonl::a[scripted:obedient-A-guarded]") == "c.jsonl::a[scripted:obedient"
    assert group_of("c.jsonl::a[openai:gpt-4.1-mini-B-model]") == "c.jsonl::a[openai:gpt-4.1-mini"
    assert group_of("test_other.py::test_it[1]") == "test_other.py::test_it[1]"
    assert group_of("test_other.py::test_it") == "test_other.py::test_it"


def test_groups_are_dealt_round_robin_whole() -> None:
    assert deal(IDS, 2) == [0, 0, 1, 1, 0, 0, 1, 1, 0]
    assert deal(IDS, 3) == [0, 0, 1, 1, 2, 2, 0, 0, 1]
    assert deal(IDS, 1) == [0] * 9
    assert deal([], 4) == []


def test_each_worker_computes_its_own_share() -> None:
    def share(worker: str, count: int) -> set[int] | None:
        return worker_share({"vault_share": True, "workerid": worker, "workercount": count}, IDS)

    assert share("gw0", 2) == {0, 1, 4, 5, 8}
    assert share("gw1", 2) == {2, 3, 6, 7}
    assert share("gw2", 3) == {4, 5}
    # Every test exactly once, over the workers.
    assert sorted(i for w in ("gw0", "gw1", "gw2") for i in share(w, 3) or ()) == list(range(9))
    assert worker_share({"vault_share": False, "workerid": "gw0", "workercount": 2}, IDS) is None


def test_a_rank_that_never_came_up_has_its_tests_go_round() -> None:
    assert shares(IDS, [0, 1], 2) == {0: [0, 1, 4, 5, 8], 1: [2, 3, 6, 7]}
    assert shares(IDS, [1], 2) == {1: list(range(9))}
    assert shares(IDS, [0, 2], 3) == {0: [0, 1, 6, 7], 2: [2, 3, 4, 5, 8]}
    # gw0 died before the deal and gw2 replaced it: gw2 takes gw0's deal, whole.
    assert shares(IDS, [1, 2], 2) == {1: [2, 3, 6, 7], 2: [0, 1, 4, 5, 8]}


class Node:
    def __init__(self, rank: int, count: int) -> None:
        self.gateway = SimpleNamespace(id=f"gw{rank}")
        self.workerinput = {"workercount": count}
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler(workers: int) -> tuple[ShareScheduling, list[Any]]:
    reports: list[Any] = []
    hook = SimpleNamespace(pytest_collectreport=lambda report: reports.append(report))
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"], hook=hook)
    return ShareScheduling(config, None), reports  # type: ignore[arg-type]


def test_the_scheduler_is_xdists_protocol() -> None:
    members = {m for m in vars(Scheduling) if not m.startswith("_")}
    assert len(members) == 11
    assert {m for m in members if not hasattr(ShareScheduling, m)} == set()


def test_each_node_gets_its_share_upfront_and_is_shut_down() -> None:
    sched, reports = scheduler(2)
    nodes = [Node(1, 2), Node(0, 2)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
    sched.add_node_collection(nodes[0], IDS)  # type: ignore[arg-type]
    assert not sched.collection_is_completed
    sched.add_node_collection(nodes[1], IDS)  # type: ignore[arg-type]
    assert sched.collection_is_completed
    sched.schedule()
    assert (nodes[0].sent, nodes[1].sent) == ([[2, 3, 6, 7]], [[0, 1, 4, 5, 8]])
    assert all(n.shutting_down for n in nodes) and reports == []
    assert (sched.has_pending, sched.tests_finished) == (True, False)
    for index in (2, 3, 6):
        sched.mark_test_complete(nodes[0], index)  # type: ignore[arg-type]
    for index in (0, 1, 4, 5):
        sched.mark_test_complete(nodes[1], index)  # type: ignore[arg-type]
    assert (sched.has_pending, sched.tests_finished) == (True, True)  # each runs its last
    assert sched.remove_node(nodes[0]) == "c.jsonl::b[openai:gpt-x-B-model]"  # type: ignore[arg-type]
    sched.mark_test_complete(nodes[1], 8)  # type: ignore[arg-type]
    assert sched.remove_node(nodes[1]) is None  # type: ignore[arg-type]
    assert (sched.has_pending, sched.tests_finished, sched.nodes) == (False, True, [])


def test_a_replacement_node_gets_a_crashed_nodes_leftovers() -> None:
    sched, _ = scheduler(2)
    gw0, gw1 = Node(0, 2), Node(1, 2)
    for node in (gw0, gw1):
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, IDS)  # type: ignore[arg-type]
    sched.schedule()
    sched.mark_test_complete(gw0, 0)  # type: ignore[arg-type]
    # gw0 crashed while running test 1: 4, 5 and 8 never ran.
    assert sched.remove_node(gw0) == IDS[1]  # type: ignore[arg-type]
    assert (sched.leftovers, sched.tests_finished) == ([4, 5, 8], False)
    again = Node(0, 2)
    sched.add_node(again)  # type: ignore[arg-type]
    sched.add_node_collection(again, IDS)  # type: ignore[arg-type]
    sched.schedule()
    assert (again.sent, again.shutting_down, sched.leftovers) == ([[4, 5, 8]], True, [])
    assert gw1.sent == [[2, 3, 6, 7]]


def test_a_node_that_dies_before_the_deal_is_dealt_nothing() -> None:
    # gw0 collects and dies while gw1 is still collecting (issue 39, point 5: xdist then
    # asked the scheduler to send gw0 its share, and it raised KeyError: INTERNALERROR).
    sched, _ = scheduler(2)
    gw0, gw1, gw2 = Node(0, 2), Node(1, 2), Node(2, 2)
    for node in (gw0, gw1):
        sched.add_node(node)  # type: ignore[arg-type]
    sched.add_node_collection(gw0, IDS)  # type: ignore[arg-type]
    assert sched.remove_node(gw0) is None  # type: ignore[arg-type]
    sched.add_node_collection(gw1, IDS)  # type: ignore[arg-type]
    assert not sched.collection_is_completed  # the deal waits for the replacement
    sched.add_node(gw2)  # type: ignore[arg-type]
    sched.add_node_collection(gw2, IDS)  # type: ignore[arg-type]
    assert sched.collection_is_completed
    sched.schedule()
    assert (gw0.sent, gw1.sent, gw2.sent) == ([], [[2, 3, 6, 7]], [[0, 1, 4, 5, 8]])
    assert sched.nodes == [gw1, gw2]


def test_nodes_that_collected_differently_run_nothing() -> None:
    sched, reports = scheduler(2)
    gw0, gw1 = Node(0, 2), Node(1, 2)
    for node, ids in ((gw0, IDS), (gw1, IDS[:-1])):
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, ids)  # type: ignore[arg-type]
    sched.schedule()
    assert (gw0.sent, gw1.sent) == ([], [])
    assert [(r.nodeid, r.outcome) for r in reports] == [("gw1", "failed")]


@pytest.mark.parametrize("count", [1, 2])
def test_an_empty_collection_shuts_the_nodes_down(count: int) -> None:
    sched, _ = scheduler(count)
    nodes = [Node(r, count) for r in range(count)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, [])  # type: ignore[arg-type]
    sched.schedule()
    assert [(n.sent, n.shutting_down) for n in nodes] == [([], True)] * count
    assert (sched.has_pending, sched.tests_finished) == (False, True)
