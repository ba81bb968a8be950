"""The response cache: one file per model response, addressed by its request's content.

A rerun replays every response it has, so a finished run makes no request, and a run
killed at any moment resumes from its last answered request. Files are written to a
temporary name and renamed into place, so a reader never sees half a file and
concurrent writers (xdist workers) cannot corrupt one another. `fill` asks at most
once per key across processes: whoever holds the key's lock file asks, the others wait
for the answer (a lock dies with its process, so a killed run leaves none behind).
Only responses are stored: never keys, never headers.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

VERSION = "pytest-vault-cache-1"


def cache_key(material: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of what determines a response."""
    text = json.dumps(
        {"v": VERSION, **material}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / "responses" / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # absent, or unreadable: ask again rather than trust it
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
        with partial.open("w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)

    async def fill(
        self, key: str, ask: Callable[[], Awaitable[dict[str, Any]]], poll: float = 0.02
    ) -> tuple[dict[str, Any], bool]:
        """The cached answer for `key` (and True), or `ask()`'s, stored (and False)."""
        if (hit := self.get(key)) is not None:
            return hit, True
        lock_path = self._path(key).with_suffix(".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("a") as lock:
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:  # another process is asking: wait for its answer
                    await asyncio.sleep(poll)
                    if (hit := self.get(key)) is not None:
                        return hit, True
            try:
                if (hit := self.get(key)) is not None:
                    return hit, True
                answer = await ask()
                self.put(key, answer)
                return answer, False
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
