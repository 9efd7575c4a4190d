"""What a request may ask for, who may ask, and how often: the server's limits, API keys and rate limits.

- `Limits`: the request body's size (413 above it, checked by `BodyLimit` before any parsing), the characters and
  sentences of one request (400, as LibreTranslate answers an over-long `q`), the decoding time of one request (408:
  the request is dropped from the queue, or its results are thrown away if its batch was already decoding), and the
  decoding options a request may choose (beams, n-best, new tokens).
- `ApiKeys`: `--api_keys FILE`, one key per line, optionally followed by that key's own rate limit in requests per
  minute (`KEY 120`); blank lines and `#` comments are skipped. A request's key is compared with every key with
  `hmac.compare_digest` (constant time, and never stopping at the first match), so the time of a refusal tells
  nothing about the keys. A missing or wrong key is a 403.
- `RateLimiter`: a token bucket per key (per client address when the server has no keys): `rate` requests per minute
  on average, bursts of up to `rate` requests; a request over it is a 429 that says when to come back.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from vaswani.errors import UsageError


class RequestError(Exception):
    """A request the server refuses: `status` (a 4xx) and a message for the client (LibreTranslate's error shape,
    `{"error": message}`); `headers` go with the answer (Retry-After of a 429). What the message quotes of a request
    is escaped where it is not Unicode text (a lone surrogate: `\\ud800`), so that the answer can always be
    encoded."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


# The decoding options a request may choose (the same on every server: they bound the work of one sentence).
MAX_NUM_BEAMS = 16
MAX_NEW_TOKENS = 1024
MAX_TOP_K = 1_000_000  # sampling's top_k: more than any vocabulary (over it: every token)


@dataclass(frozen=True)
class Limits:
    """The limits of one request (see the module docstring); `MAX_NUM_BEAMS` and `MAX_NEW_TOKENS` bound the decoding
    options (the request models of `vaswani.serve.schema` check them)."""

    max_request_bytes: int = 1 << 20
    max_request_characters: int = 10000
    max_request_sentences: int = 200
    max_request_seconds: float = 30.0

    def check_characters(self, texts: list[str]) -> None:
        """A 400 when `texts` have more characters than one request may have (checked before they are parsed)."""
        characters = sum(len(text) for text in texts)
        if characters > self.max_request_characters:
            raise RequestError(400, f"Invalid request: request ({characters}) exceeds text limit "
                                    f"({self.max_request_characters} characters); send less text per request")  # fmt: skip

    def check_sentences(self, sentences: int) -> None:
        """A 400 when a request makes more `sentences` than one request may have."""
        if sentences > self.max_request_sentences:
            raise RequestError(400, f"Invalid request: request ({sentences} sentences) exceeds the limit of "
                                    f"{self.max_request_sentences} sentences; send fewer sentences per request")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# API keys and rate limits
# ---------------------------------------------------------------------------------------------------------------------
class ApiKeys:
    """The keys of `--api_keys FILE` and the rate limit of each (None: the server's `--rate_limit`)."""

    def __init__(self, keys: dict[str, float | None]):
        if not keys:
            raise UsageError("the --api_keys file holds no key: write one key per line (optionally `KEY RATE`)")
        self._keys = [(key.encode("utf-8"), rate) for key, rate in keys.items()]

    @classmethod
    def from_file(cls, path: Path) -> ApiKeys:
        try:
            text = path.read_text(encoding="utf-8-sig")  # without the byte-order mark an editor may put first
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"--api_keys {path} cannot be read: {error}") from None
        keys: dict[str, float | None] = {}
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) > 2 or (len(fields) == 2 and not _is_rate(fields[1])):
                raise UsageError(f"--api_keys {path} line {number}: expected `KEY` or `KEY REQUESTS_PER_MINUTE` "
                                 "(a positive number)")  # fmt: skip
            keys[fields[0]] = float(fields[1]) if len(fields) == 2 else None
        return cls(keys)

    def check(self, given: str | None) -> tuple[str, float | None]:
        """(an identity for the rate limiter, the key's own rate) of the key `given`, or a 403. Every key is
        compared, in constant time each."""
        if not given:
            raise RequestError(403, "Please provide an API key: this server needs one (api_key)")
        given_bytes, found = given.encode("utf-8"), None
        for index, (key, rate) in enumerate(self._keys):
            if hmac.compare_digest(given_bytes, key) and found is None:
                found = (f"key-{index}", rate)
        if found is None:
            raise RequestError(403, "Invalid API key")
        return found


def _is_rate(text: str) -> bool:
    try:
        return math.isfinite(value := float(text)) and value > 0
    except ValueError:
        return False


class RateLimiter:
    """A token bucket per identity: `rate` requests per minute, bursts of up to `rate` requests."""

    def __init__(self, clock=time.monotonic):
        self._buckets: dict[str, tuple[float, float]] = {}  # identity -> (tokens, time of the last update)
        self._clock = clock

    def take(self, identity: str, rate: float) -> None:
        """Count one request of `identity`, or a 429 with the seconds until the next one is allowed."""
        now = self._clock()
        tokens, last = self._buckets.get(identity, (rate, now))
        tokens = min(rate, tokens + (now - last) * rate / 60)
        if tokens < 1:
            wait = math.ceil((1 - tokens) * 60 / rate)
            self._buckets[identity] = (tokens, now)
            raise RequestError(429, f"Slowdown: more than {rate:g} requests per minute; retry in {wait} s",
                               headers={"Retry-After": str(wait)})  # fmt: skip
        self._buckets[identity] = (tokens - 1, now)
        if len(self._buckets) > 100_000:  # forget identities quiet for a minute (their buckets are full again)
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 60}


# ---------------------------------------------------------------------------------------------------------------------
# The body size, before anything parses the body
# ---------------------------------------------------------------------------------------------------------------------
class BodyLimit:
    """ASGI middleware: a request body larger than `max_bytes` (by its Content-Length, or as it streams in) is
    answered with 413 before the application sees it; a smaller one is read whole and replayed to the application.

    (FastAPI's own `max_body_size` answers some of these refusals with a plain-text "Content Too Large", not the
    LibreTranslate error shape that clients of this server parse.)"""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and not length.isdigit():
            return await _refuse(send, 400, "Invalid request: the Content-Length header is not a number")
        if length is not None and int(length) > self.max_bytes:
            return await _refuse(send, 413, self._message(length.decode("ascii")))
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await _refuse(send, 413, self._message(f"more than {len(body)}"))
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # the disconnect, when the client goes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    def _message(self, size: str) -> str:
        return (f"Invalid request: the body ({size} bytes) exceeds the limit of {self.max_bytes} bytes; send less "
                "text per request")  # fmt: skip


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
