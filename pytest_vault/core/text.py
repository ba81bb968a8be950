"""The rules for text that leaves pytest-vault: one place, used by every writer.

Corpus lines and model answers are hostile: they can carry ESC and BEL, bidi
overrides, and lone surrogates (`"\\ud800"` is valid JSON but not valid UTF-8). So:

* `shown` is the one rule for human-facing output (terminal, summary, progress lines,
  failure messages, test ids, JUnit properties, HTML, CSV, error messages): every
  character that is not printable (controls, format and invisible characters, lone
  surrogates) becomes a Python-style backslash escape, `\\x1b`, `\\u202e`, `\\ud800`.
* `stored` is for machine-facing text columns (Parquet): exact when it is valid
  UTF-8; lone surrogates become backslash escapes, which is all that cannot be stored.
* `json_text` is JSON that is exact and valid UTF-8: non-ASCII stays readable, and a
  lone surrogate stays the `\\uXXXX` escape it arrived as, so it reads back the same.
* `scrub_url` drops userinfo, query and fragment: what may hold a secret.
* `redact` (`redacted`, `redacted_json` for a JSON-like value) is the one redaction of
  secrets: the providers' keys (by value, as the environment holds them, and by shape)
  and URLs' userinfo. Every text a run writes that a model, an agent, a guard or an
  exception made passes through it, in the results row (`harness.events.row`), where
  the results file, the reports, JUnit and the terminal all read it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any
from urllib.parse import urlsplit

_SURROGATE = re.compile("[\ud800-\udfff]")
# Characters that `str.isprintable()` passes but that draw nothing: the Unicode
# Default_Ignorable_Code_Point characters of a printable category (Hangul fillers, the
# combining grapheme joiner, variation selectors, Khmer and Mongolian vowel marks), and
# the blank Braille cell. `rent@aport-vault.com\u3164` looks like the real payee.
BLANK = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
# A URL's userinfo (`scheme://user:password@`), as `urlsplit` reads it: everything from
# `//` to the netloc's last `@` (the netloc ends at `/`, `?` or `#`).
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s'\"<>]+@")


def visible(text: str) -> bool:
    """Every character draws something: printable, and none of the blank ones."""
    return text.isprintable() and (text.isascii() or BLANK.search(text) is None)


def _seen(char: str) -> str:
    return char if char.isprintable() and BLANK.match(char) is None else _escape(char)


def _escape(char: str) -> str:
    text = repr(char)[1:-1]
    # repr keeps a printable character as it is: the blank ones get their code point.
    if text == char:
        return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
    return text


def shown(value: object) -> str:
    """Text for people: non-printable and blank characters as backslash escapes."""
    text = value if type(value) is str else str(value)
    if visible(text):
        return text
    return "".join(map(_seen, text))


def valid_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def stored(text: str) -> str:
    """Text for a UTF-8 column: exact, but for lone surrogates (backslash escapes)."""
    if valid_utf8(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def utf8_json(text: str) -> str:
    """JSON text made valid UTF-8, exactly: lone surrogates as their `\\uXXXX` escapes.

    A surrogate can only stand inside a JSON string (a key or a value), where its
    escape is valid JSON that decodes to the very same character.
    """
    return text if valid_utf8(text) else _SURROGATE.sub(_json_escape, text)


def json_text(value: Any, **dumps: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)` that is always valid UTF-8, and exact."""
    return utf8_json(json.dumps(value, ensure_ascii=False, **dumps))


def scrub_url(url: str) -> str:
    """`scheme://host:port/path`: no userinfo, no query string, no fragment."""
    # The userinfo goes first, as text: `urlsplit` refuses some (`[redacted]@`, which
    # `redact` writes, reads as a bracketed IPv6 host).
    url = _USERINFO.sub(r"\1", url)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "[unreadable URL]"
    if ":" in host:  # an IPv6 literal goes back in brackets
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return shown(f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else parts.path)


def scrub_urls(text: str) -> str:
    """Every URL in a message (an SDK's error, say) scrubbed as `scrub_url` does."""
    return _URL.sub(lambda m: scrub_url(m.group()), text)


# Where the providers' keys live: the variable a provider spec reads its key from
# (`openai:MODEL` reads OPENAI_API_KEY, `anthropic:MODEL` ANTHROPIC_API_KEY).
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
# What a key looks like, wherever it came from (`sk-...`, `sk-ant-...`, and the masked
# `sk-proj-****abcd` a provider's error quotes).
_SECRET_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{4,}|sk-ant-[A-Za-z0-9_\-*]{4,})")
# The shortest key value redacted where it stands. A shorter value is no provider's key
# (a local server's placeholder, `test`, `x`), and replacing it would rewrite ordinary
# words of every transcript ("rent" in rent@aport-vault.com); a key of any length that
# has a key's shape is still redacted by its shape.
MIN_SECRET = 8
REDACTED = "[redacted]"


def _keys() -> list[str]:
    """The providers' keys as the environment holds them now, longest first (so a key
    inside another never leaves the rest of the longer one behind).

    Read at the point of writing, from `os.environ`, never kept: no registry of secrets,
    and none passed down through our signatures (where a traceback could print it). The
    rows are made in the run's own process (a worker's, under xdist), whose environment
    the models read their keys from, so the keys found are the keys in use."""
    values = {os.environ.get(name, "").strip() for name in KEY_ENV.values()}
    return sorted((v for v in values if len(v) >= MIN_SECRET), key=len, reverse=True)


def _redact(text: str, keys: list[str]) -> str:
    for key in keys:
        if key in text:
            text = text.replace(key, REDACTED)
    if "sk-" in text:
        text = _SECRET_SHAPES.sub(REDACTED, text)
    if "://" in text:
        text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    return text


def redact(text: str) -> str:
    """Text bound for rows, reports or logs without a secret: the providers' keys (by
    value, `MIN_SECRET` characters or more; and anything shaped like one) and URLs'
    userinfo become `[redacted]`. Anything else is left exactly as it was."""
    return _redact(text, _keys())


def redacted(value: Any) -> Any:
    """A JSON-like value (a call log, a transcript) with `redact` applied to every string
    in it, keys of objects too, before it is written as JSON: a key is found as the text
    it is, whatever escapes JSON would give it. The environment is read once."""
    keys = _keys()

    def walk(item: Any) -> Any:
        if type(item) is str:
            return _redact(item, keys)
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        return item

    return walk(value)


def redacted_json(value: Any) -> str:
    """`json_text(redacted(value))`: the JSON text of a call log or a transcript bound for
    a row, with no secret. Nearly always there is none, found at the cost of one dump:
    each string of `value` stands in the text as JSON writes it, so a key, a key's shape
    (`sk-`) or a URL (`://`) that the text lacks is in none of them."""
    text = json_text(value)
    if "sk-" in text or "://" in text or any(_as_json(k) in text for k in _keys()):
        return json_text(redacted(value))
    return text


def _as_json(text: str) -> str:
    """A string as it stands inside `json_text`'s quotes."""
    plain = text.isascii() and text.isprintable() and '"' not in text and "\\" not in text
    return text if plain else json_text(text)[1:-1]


def safe(text: str) -> str:
    """Text that may quote a secret (an exception's message: a provider's, your agent's,
    your guard's) for rows, reports and logs: no key, no URL credentials or query
    strings, nothing that does not print."""
    return shown(scrub_urls(redact(text)))
