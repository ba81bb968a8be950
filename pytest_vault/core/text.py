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


# Where the providers' keys live, and what a key looks like.
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_SECRET_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{4,}|sk-ant-[A-Za-z0-9_\-*]{4,})")


def redact(text: str) -> str:
    """Remove the providers' keys (and anything shaped like one) from text bound for rows,
    reports or logs. The keys are read from the environment here, so no function of
    ours ever holds one as an argument that a traceback could print."""
    for name in KEY_ENV.values():
        secret = os.environ.get(name, "")
        if len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _SECRET_SHAPES.sub("[redacted]", text)


def safe(text: str) -> str:
    """Text that may quote a secret (an exception's message: a provider's, your agent's,
    your guard's) for rows, reports and logs: no key, no URL credentials or query
    strings, nothing that does not print."""
    return shown(scrub_urls(redact(text)))
