"""The translation page of `vaswani serve` at `/`: plain HTML, CSS and JavaScript shipped in the package
(`vaswani/serve/static/`), no build step and nothing from another server, so that it works offline.

The page learns what it needs from `GET /frontend/settings` (as LibreTranslate's own page does: the language pairs,
whether an API key is required, the character limit, how long to wait after typing) and the language names from
`GET /languages`, then translates through `POST /translate` as any client does: as the text is typed (after the
settings' `frontendTimeout` without typing) and on its button, with alternatives on request. Refusals are shown in
words (a missing key, the rate limit, a text over the limits). Its answers carry a Content-Security-Policy that
lets the page load and call nothing but this server.
"""

from __future__ import annotations

from importlib import resources

from vaswani.serve.limits import MAX_NUM_BEAMS, Limits

PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
              "/static/page.css": ("page.css", "text/css; charset=utf-8")}  # fmt: skip
# The page may load and call this server only (no CDN, no analytics, no fonts from elsewhere).
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's: the page translates after half a second without typing


def page_files() -> dict[str, tuple[bytes, str]]:
    """Each path of the page and (its content, its media type), read once from the package."""
    folder = resources.files("vaswani.serve") / "static"
    return {path: ((folder / name).read_bytes(), media) for path, (name, media) in PAGE_FILES.items()}


def frontend_settings(pairs: list[tuple[str, str]], names: dict[str, str], limits: Limits, keys_required: bool,
                      spec: str = "spec") -> dict:  # fmt: skip
    """What `GET /frontend/settings` answers: LibreTranslate's fields (those that mean something here) and `pairs`,
    every loaded language pair, which the page offers."""
    source, target = pairs[0]
    return {
        "apiKeys": keys_required,
        "keyRequired": keys_required,
        "charLimit": limits.max_request_characters,
        "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "suggestions": False,
        "filesTranslation": False,
        "supportedFilesFormat": [],
        "language": {
            "source": {"code": source, "name": names.get(source, source)},
            "target": {"code": target, "name": names.get(target, target)},
        },  # fmt: skip
        "pairs": [{"source": s, "target": t} for s, t in pairs],
        "maxAlternatives": MAX_NUM_BEAMS - 1,
        "spec": spec,
    }
