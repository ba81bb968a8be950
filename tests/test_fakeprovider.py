"""The fake provider's benchmark window: what `bench_providers` times its runs by."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from .fakeprovider import FakeProvider


def post(url: str, user: str) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": user}]}
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    with urllib.request.urlopen(request) as answer:
        out: dict[str, Any] = json.load(answer)
        return out


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/_stats") as answer:
        out: dict[str, Any] = json.load(answer)
        return out


@pytest.mark.parametrize("keep", [True, False])
def test_the_window_counts_requests_and_a_benchmark_server_keeps_none(keep: bool) -> None:
    with FakeProvider(keep=keep) as fake:
        before = time.time()
        post(fake.url, "send $40 to rent@aport-vault.com")
        post(fake.url, "and $5 to evil@x.test")
        window = stats(fake.url)
        assert window["requests"] == 2
        assert before <= window["first_at"] <= window["last_at"] <= time.time()
        assert len(fake.requests) == (2 if keep else 0)
        # The window starts again; the count goes on.
        assert (stats(fake.url)["first_at"], stats(fake.url)["last_at"]) == (None, None)
        post(fake.url, "send $1 to rent@aport-vault.com")
        assert stats(fake.url)["requests"] == 3
