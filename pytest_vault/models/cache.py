"""The response cache: one file per model response, addressed by its request's content.

A rerun replays every response it has, so a finished run makes no request, and a run
killed at any moment resumes from its last answered request. Files are written to a
temporary name and renamed into place, so a reader never sees half a file and
concurrent writers (xdist workers) cannot corrupt one another. `fill` asks at most
once per key across processes: whoever holds the key's lock file asks, the others wait
for the answer. The lock is `filelock`'s, the operating system's own on each platform
(flock, or msvcrt on Windows), so it dies with its process: a killed run leaves none held.
Only responses are stored: never keys, never headers. An answer that cannot be stored
(a full disk) is still used, and `Unstored` says so: it was paid for.

Every entry is checked against its schema when it is read, and names the request key
it answers. One that fails (edited, truncated, from an older version, copied under
another name) is unreadable: it is asked again and overwritten, never replayed. This
guards against corruption and mistakes, not against someone who can write the folder.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, TypeAdapter

from pytest_vault.core.files import write_bytes
from pytest_vault.core.json import DATA

VERSION = "pytest-vault-cache-1"
# Next to each entry, named so nobody mistakes it for someone else's (nor for an entry).
LOCK_SUFFIX = ".pytest-vault.lock"

# Tokens one answer can use: far above any model's context, far below what would let
# one bad number switch the spend cap off.
MAX_TOKENS = 10**8


def _tokens(value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:  # bool is not an int here
        raise ValueError(f"must be an integer from 0 to {MAX_TOKENS}")
    return value


Tokens = Annotated[int, PlainValidator(_tokens)]


class _Entry(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class CachedCall(_Entry):
    id: str
    name: str
    # An object, or the model's own JSON text when it cannot be read unambiguously.
    arguments: dict[str, Any] | str


class CachedUsage(_Entry):
    input_tokens: Tokens
    output_tokens: Tokens


class Answer(_Entry):
    """A model's answer to one request."""

    key: str
    text: str
    tool_calls: list[CachedCall]
    usage: CachedUsage
    latency_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    decode: dict[str, str]  # the decode settings sent, as the provider named them


class Blocked(_Entry):
    """The provider refused the input; `error` is what it said."""

    key: str
    input_blocked: Literal[True]
    error: Annotated[str, Field(min_length=1)]
    decode: dict[str, str]


class Stopped(_Entry):
    """An answer the provider stopped (its output filter, or a cut at the token limit
    before a tool call): no answer to score, but billed. Kept, with what it used, so
    that it is paid for once and its error row replays; `stopped` is that error."""

    key: str
    stopped: Annotated[str, Field(min_length=1)]
    usage: CachedUsage
    decode: dict[str, str]


Entry = Answer | Blocked | Stopped
# How `fill` got an answer (see there).
Got = Literal["asked", "cached", "waited"]
_ENTRY: TypeAdapter[Entry] = TypeAdapter(Entry)


# The canonical form: `json.dumps(..., sort_keys=True, separators=(",", ":"))`, built once
# (the function would build an encoder for every request).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def cache_key(material: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of what determines a response.

    ASCII JSON: exact (a lone surrogate is its `\\uXXXX` escape) and always encodable.
    """
    text = _CANONICAL.encode({"v": VERSION, **material})
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def read_entry(data: bytes, key: str) -> Entry | None:
    """The entry in a cache file's bytes, or None unless it is a valid answer to `key`."""
    try:
        entry = _ENTRY.validate_python(DATA.loads(data))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, not an entry
        return None
    return entry if entry.key == key else None


class Unstored(Exception):
    """An answer that was paid for but could not be stored (a full disk, a folder where
    its file goes): the answer is still the evaluation's; the message says why.

    Control flow, not an error of ours (no `VaultError`): it carries the answer one frame
    up, to `ProviderModel`, which always catches it and uses the answer; the reason
    reaches people only as the summary's count, made safe there once."""

    def __init__(self, entry: Entry, message: str) -> None:
        super().__init__(message)
        self.entry = entry


class ResponseCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / "responses" / key[:2] / f"{key}.json"

    def get(self, key: str) -> Entry | None:
        try:
            data = self._path(key).read_bytes()
        except OSError:
            return None  # absent, or unreadable: ask again rather than trust it
        return read_entry(data, key)

    def put(self, entry: Entry) -> None:
        # ASCII JSON: lone surrogates stay the exact `\uXXXX` escapes they arrived as.
        data = json.dumps(entry.model_dump(), ensure_ascii=True).encode("ascii")
        # On disk before it is in place: other processes read it, and so does the next run.
        write_bytes(self._path(entry.key), data, fsync=True)

    async def fill(
        self, key: str, ask: Callable[[], Awaitable[Entry]], poll: float = 0.02
    ) -> tuple[Entry, Got]:
        """The answer for `key`, and how it was got: `ask()`'s, stored ("asked"); one
        stored before ("cached"); or one another caller was asking meanwhile, waited
        for ("waited")."""
        if (hit := self.get(key)) is not None:
            return hit, "cached"
        where = self._path(key)
        where.parent.mkdir(parents=True, exist_ok=True)
        # One lock object per call, shared by no thread: two calls in one process exclude
        # each other as two processes do.
        lock = FileLock(where.with_name(key + LOCK_SUFFIX), thread_local=False)
        while True:
            try:
                lock.acquire(blocking=False)
                break
            except Timeout:  # another process is asking: wait for its answer
                await asyncio.sleep(poll)
                if (hit := self.get(key)) is not None:
                    return hit, "waited"
        try:
            if (hit := self.get(key)) is not None:
                # Stored between the first look and the lock: by whoever held it.
                return hit, "waited"
            answer = await ask()
            try:
                self.put(answer)
            except OSError as exc:
                # Never lose what was paid for: the answer stands, the failure is told.
                raise Unstored(answer, f"cannot store {where}: {exc.strerror or exc}") from None
            return answer, "asked"
        finally:
            lock.release()
