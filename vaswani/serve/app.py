"""The HTTP application of `vaswani serve` (FastAPI on Starlette, run by uvicorn): the LibreTranslate API, the native
API, /health and /metrics. docs/serving.md is the user's description; this is how it is built.

    POST /translate      LibreTranslate: q (a text or a list), source (a code or "auto"), target, format (text|html),
                         alternatives (n-best), api_key -> {"translatedText", ["alternatives"], ["detectedLanguage"]}
    GET  /languages      LibreTranslate: [{"code", "name", "targets"}] of the loaded pairs
    POST /detect         LibreTranslate: the one source language the server translates from (no detector: see below)
    POST /v1/translate   native: one sentence per item, vaswani translate's options (target prefixes and
                         terminology constraints too) and its jsonl output format
    GET  /health         {"status": "ok", "pairs": [...]}
    GET  /metrics        Prometheus text (`vaswani.serve.metrics`)
    GET  /spec           the OpenAPI description of all of these (`vaswani.serve.spec`)
    GET  /frontend/settings, /, /static/...   the translation page and what it needs (`vaswani.serve.page`;
                         the page itself not with --no_web_ui)

Bodies are JSON or forms (urlencoded or multipart), parsed here, strictly: a body that is not UTF-8, JSON that does
not parse or is not an object, or another content type is a 400; then the fields are checked by the request models of
`vaswani.serve.schema` (a field missing or wrong, a lone surrogate in a text: a 400 naming the field), and an unknown
pair is a 400 too, all with LibreTranslate's error shape `{"error": "..."}` (the native API's too). The order of the checks: body size (413), body parsing (400),
API key (403), rate limit (429), parameters and limits (400), decoding time (408).

`auto` and /detect: the server has no language detector and invents none. `source: "auto"` is the one source
language that translates into the requested target (400 when several do, naming them); /detect answers the one
source language of the loaded models (confidence 100: the only language this server reads), and 400 when there are
several.

Texts are split into sentences (`vaswani.inference.text`), the sentences of concurrent requests are decoded together
(`vaswani.serve.batching`) in worker threads (a CTranslate2 model's `parallel_batches` batches at once, PyTorch's
one at a time), and the translations are glued back into each text's shape.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import time
from collections.abc import Hashable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from vaswani.errors import UsageError
from vaswani.inference.outputs import JsonlOutput
from vaswani.inference.text import HtmlText, SplitText, nonbreaking_prefixes, split_text
from vaswani.inference.translator import Sampling, TranslateError, find_language_code, missing_constraints
from vaswani.serve.batching import Batcher, DecodingOptions
from vaswani.serve.limits import MAX_NEW_TOKENS, ApiKeys, BodyLimit, Limits, RateLimiter, RequestError
from vaswani.serve.metrics import CONTENT_TYPE, ServerMetrics
from vaswani.serve.models import ServedPair
from vaswani.serve.page import PAGE_FILES, PAGE_HEADERS, frontend_settings, page_files
from vaswani.serve.schema import DetectRequest, LibreTranslateRequest, NativeRequest, shown, validate, validate_api_key
from vaswani.serve.spec import openapi_document

logger = logging.getLogger("vaswani.serve")
ENDPOINTS = ("/translate", "/languages", "/detect", "/v1/translate", "/health", "/metrics", "/frontend/settings", "/spec",
             *PAGE_FILES)  # fmt: skip


@dataclass
class ServerSettings:
    """How the server batches, decodes by default, and whom it answers (the options of `vaswani serve`)."""

    limits: Limits = field(default_factory=Limits)
    # a batch's budget: its sentences x the source tokens of its longest; None: the models' own default batch
    # (`Translator.batch_tokens`: 512 per decoding thread on a CPU, at most 4,096; 4,096 on a GPU), the smallest
    max_tokens: int | None = None
    max_wait: float = 0.0  # seconds a batch may wait for more requests while a worker is free
    num_beams: int = 4  # LibreTranslate requests (the native API chooses its own)
    length_penalty: float = 0.6
    api_keys: ApiKeys | None = None
    rate_limit: float | None = None  # requests per minute, per key (per client address without keys)
    cors_origins: list[str] = field(default_factory=list)
    log_texts: bool = False
    web_ui: bool = True  # the translation page at /


class Segment(NamedTuple):
    """One sentence as the batcher carries it: its text, the native API's target prefix and constraints, and the
    language a multilingual model translates it into (its pair's `ServedPair.target_language`)."""

    text: str
    prefix: str | None = None
    constraints: list[str] | None = None
    target_language: str | None = None


# ---------------------------------------------------------------------------------------------------------------------
# Reading a body
# ---------------------------------------------------------------------------------------------------------------------
async def read_fields(request: Request) -> dict:
    """The fields of a JSON object or form body (`{}` for an empty body), or a 400 that says what is wrong."""
    body = await request.body()
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not body and media_type in ("", "application/json", "application/x-www-form-urlencoded"):
        return {}
    if media_type == "application/json":
        try:
            fields = json.loads(_utf8(body))
        except ValueError as error:
            raise RequestError(400, f"Invalid request: malformed JSON ({error})") from None
        except RecursionError:
            raise RequestError(400, "Invalid request: malformed JSON (nested too deeply)") from None
        if not isinstance(fields, dict):
            raise RequestError(400, "Invalid request: the JSON body must be an object of parameters")
        return fields
    if media_type == "application/x-www-form-urlencoded":
        try:
            pairs = parse_qsl(_utf8(body), keep_blank_values=True, encoding="utf-8", errors="strict",
                              max_num_fields=1000)  # fmt: skip
        except UnicodeDecodeError:
            raise RequestError(400, "Invalid request: a form value is not UTF-8 once decoded") from None
        except ValueError as error:
            raise RequestError(400, f"Invalid request: malformed form body ({error})") from None
        return _form_fields(pairs)
    if media_type == "multipart/form-data":
        return _form_fields(_multipart_pairs(request, body))
    raise RequestError(400, f"Invalid request: unsupported content type {media_type or '(none)'!r}; send "
                            "application/json, application/x-www-form-urlencoded or multipart/form-data")  # fmt: skip


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(400, f"Invalid request: the body is not UTF-8 (byte {body[error.start]:#04x} at "
                                f"position {error.start})") from None  # fmt: skip


def _form_fields(pairs: list[tuple[str, str]]) -> dict:
    """A form's fields: the last value of each name, except `q`, which is a list when given several times."""
    fields: dict = {}
    for name, value in pairs:
        if name == "q" and "q" in fields:
            fields["q"] = [*(fields["q"] if isinstance(fields["q"], list) else [fields["q"]]), value]
        else:
            fields[name] = value
    return fields


def _multipart_pairs(request: Request, body: bytes) -> list[tuple[str, str]]:
    """The fields of a multipart body (python-multipart's parser, fed the whole body, which `BodyLimit` bounded);
    a file part is refused, and is kept in memory until then (never written to disk)."""
    from python_multipart import create_form_parser
    from python_multipart.exceptions import FormParserError

    pairs, files = [], []
    headers = {"Content-Type": request.headers["content-type"].encode("latin-1")}
    config = {"MAX_MEMORY_FILE_SIZE": len(body) + 1}
    try:
        parser = create_form_parser(headers, lambda f: pairs.append((f.field_name, f.value)), files.append, config)
        parser.write(body)
        parser.finalize()
    except (FormParserError, ValueError) as error:
        raise RequestError(400, f"Invalid request: malformed multipart body ({error})") from None
    if files:
        raise RequestError(400, "Invalid request: files are not accepted; send the text in a field")
    return [(_utf8(name or b""), _utf8(value or b"")) for name, value in pairs]


# ---------------------------------------------------------------------------------------------------------------------
# The server's state: models, batcher, limits, keys, metrics
# ---------------------------------------------------------------------------------------------------------------------
class Server:
    """What every endpoint uses: the table of pairs, the batcher, the limits, the keys and the metrics."""

    def __init__(self, models: dict[tuple[str, str], ServedPair], settings: ServerSettings):
        self.models, self.settings, self.limits = models, settings, settings.limits
        self.metrics = ServerMetrics()
        self.rate_limiter = RateLimiter()
        # the batcher's models are the translators, each shared by the pairs it serves (a multilingual model's:
        # `ServedPair.model`); a CTranslate2 translator decodes `parallel_batches` batches at once (each whole, on its
        # own cores)
        self.translators = {served.model: served.translator for served in models.values()}
        slots = {model: translator.parallel_batches for model, translator in self.translators.items()}
        self.max_tokens = settings.max_tokens or min(served.translator.batch_tokens for served in models.values())
        self.batcher = Batcher(self._decode, max_tokens=self.max_tokens, max_wait=settings.max_wait,
                               on_batch=self.metrics.observe_batch, slots=slots)  # fmt: skip
        self.sources = sorted({source for source, _ in models})
        for source in self.sources:  # each language's abbreviations, read now rather than by the first request
            nonbreaking_prefixes(source)

    def authorize(self, request: Request, fields: dict) -> None:
        """A 403 for a missing or wrong API key (when the server has keys), a 429 over the rate limit."""
        given = validate_api_key(fields.get("api_key"))
        authorization = request.headers.get("authorization", "")
        if not given and authorization.lower().startswith("bearer "):
            given = authorization[7:].strip()
        identity, rate = (request.client.host if request.client else "unknown"), None
        if self.settings.api_keys is not None:
            identity, rate = self.settings.api_keys.check(given)
        rate = rate or self.settings.rate_limit
        if rate:
            self.rate_limiter.take(identity, rate)

    def pair(self, source: str, target: str) -> tuple[tuple[str, str], bool]:
        """The loaded pair for `source` (a code or "auto") and `target`, and whether `auto` chose it; else a 400. A code
        in another spelling than the pair's (`es` for a pair served as `spa`: `find_language_code`) finds it."""
        targets = {t for _, t in self.models}
        target = find_language_code(target, targets) or target
        if source != "auto":
            source = find_language_code(source, self.sources) or source
        if target not in targets:
            raise RequestError(
                400, f"{shown(target)} is not supported: this server translates into {', '.join(sorted(targets))}"
            )
        if source == "auto":
            sources = sorted(s for s, t in self.models if t == target)
            if len(sources) > 1:
                raise RequestError(400, f"source 'auto': this server has no language detector and translates into "
                                        f"{target} from {', '.join(sources)}; give the source language")  # fmt: skip
            return (sources[0], target), True
        if source not in self.sources:
            raise RequestError(
                400, f"{shown(source)} is not supported: this server translates from {', '.join(self.sources)}"
            )
        if (source, target) not in self.models:
            raise RequestError(400, f"{target} is not available as a target language from {source}")
        return (source, target), False

    async def translate(self, pair: tuple[str, str], sentences: Sequence[str | Segment], options: DecodingOptions,
                        ) -> list:  # fmt: skip
        """The hypotheses of each sentence (a text, or a `Segment` with a prefix and constraints), decoded in a batch
        with other requests'; a 408 past the time limit."""
        served = self.models[pair]
        segments = [(Segment(s) if isinstance(s, str) else s)._replace(target_language=served.target_language)
                    for s in sentences]  # fmt: skip
        lengths = served.count_tokens([s.text for s in segments]) if segments else []
        self.metrics.queued.set(self.batcher.queued_sentences() + len(sentences))
        try:
            results = await asyncio.wait_for(self.batcher.translate(served.model, segments, lengths, options),
                                             self.limits.max_request_seconds)  # fmt: skip
        except asyncio.TimeoutError:  # noqa: UP041 (Python 3.10's wait_for raises asyncio's own)
            raise RequestError(408, f"Translation took longer than the limit of {self.limits.max_request_seconds:g} "
                                    "s; send less text per request, or retry when the server is less busy") from None  # fmt: skip
        finally:
            self.metrics.queued.set(self.batcher.queued_sentences())
        self.metrics.sentences.labels(f"{pair[0]}-{pair[1]}").inc(len(sentences))
        return results

    def _decode(self, model: Hashable, segments: list[Segment], options: DecodingOptions) -> list:
        """One batch of `model` (`ServedPair.model`: the pairs of a multilingual model share its batches), in the
        decoding thread. (The requests' prefixes and constraints were checked before they joined it:
        `native_translate`.) Unmet constraints are logged by count only: the phrases are request text."""
        return self.translators[model].translate_hypotheses(
            [s.text for s in segments], num_beams=options.num_beams, length_penalty=options.length_penalty,
            max_new_tokens=options.max_new_tokens, paper_decoding=options.paper_decoding,
            batch_tokens=self.max_tokens, nbest=options.nbest, scores=options.scores,
            alignment=options.alignment, on_truncated=lambda indices: logger.warning(
                "%d sentence(s) longer than the model's max_source_length were truncated", len(indices)),
            prefixes=[s.prefix for s in segments], constraints=[s.constraints for s in segments],  # None: none
            on_unmet=lambda index, missing: logger.warning(
                "a translation lacks %d of its constraint phrase(s) (the output length did not allow them)",
                len(missing)),
            sampling=options.sampling, target_languages=[s.target_language for s in segments],
        )  # fmt: skip

    def log_texts(self, texts, translations) -> None:
        if self.settings.log_texts:
            logger.info("texts %s -> %s", json.dumps(texts, ensure_ascii=False),
                        json.dumps(translations, ensure_ascii=False))  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# The LibreTranslate API
# ---------------------------------------------------------------------------------------------------------------------
async def libretranslate_fields(request: Request) -> dict:
    """A LibreTranslate body's fields, an empty value taken as none (forms send the fields nobody filled in)."""
    return {name: value for name, value in (await read_fields(request)).items() if value not in ("", [], None)}


async def libretranslate_translate(server: Server, request: Request) -> dict:
    fields = await libretranslate_fields(request)
    server.authorize(request, fields)
    body = validate(LibreTranslateRequest, fields)
    q, alternatives = body.q, body.alternatives
    pair, detected = server.pair(body.source, body.target)
    texts = q if isinstance(q, list) else [q]
    server.limits.check_characters(texts)
    source = pair[0]  # whose abbreviations do not end a sentence
    documents = [HtmlText(text, source) for text in texts] if body.format == "html" else None
    splits: list[SplitText] = (
        [s for d in documents for s in d.texts()] if documents else [split_text(t, source) for t in texts]
    )
    sentences = [sentence for split in splits for sentence in split.sentences]
    server.limits.check_sentences(len(sentences))
    nbest = alternatives + 1
    options = DecodingOptions(num_beams=max(server.settings.num_beams, nbest),
                              length_penalty=server.settings.length_penalty, nbest=nbest)  # fmt: skip
    hypotheses = await server.translate(pair, sentences, options)
    versions = [_glue(splits, hypotheses, documents, rank) for rank in range(nbest)]  # best, then alternatives
    server.log_texts(texts, versions[0])
    answer: dict = {"translatedText": versions[0] if isinstance(q, list) else versions[0][0]}
    if alternatives:
        by_text = [[version[i] for version in versions[1:]] for i in range(len(texts))]
        answer["alternatives"] = by_text if isinstance(q, list) else by_text[0]
    if detected:
        language = {"confidence": 100.0, "language": pair[0]}
        answer["detectedLanguage"] = [language] * len(texts) if isinstance(q, list) else language
    return answer


def _glue(splits, hypotheses, documents, rank: int) -> list[str]:
    """Each text with its sentences replaced by their `rank`-th hypothesis (the best where a sentence has fewer)."""
    chosen, start, joined = [], 0, []
    for split in splits:
        found = hypotheses[start : start + len(split.sentences)]
        chosen.append([(h[rank] if rank < len(h) else h[0]).text if h else "" for h in found])
        start += len(split.sentences)
    if documents is None:
        return [split.join(sentences) for split, sentences in zip(splits, chosen, strict=True)]
    for document in documents:
        count = len(document.texts())
        joined.append(document.render(chosen[:count]))
        chosen = chosen[count:]
    return joined


def languages(server: Server) -> list[dict]:
    from babel import Locale, UnknownLocaleError

    def name(code: str) -> str:
        try:
            return Locale.parse(code).get_display_name("en") or code
        except (ValueError, UnknownLocaleError):
            return code

    codes = sorted({code for pair in server.models for code in pair})
    return [{"code": c, "name": name(c), "targets": sorted(t for s, t in server.models if s == c)} for c in codes]


async def detect(server: Server, request: Request) -> list[dict]:
    fields = await libretranslate_fields(request)
    server.authorize(request, fields)
    validate(DetectRequest, fields)
    if len(server.sources) > 1:
        raise RequestError(400, f"this server has no language detector: it translates from "
                                f"{', '.join(server.sources)}; give the source language")  # fmt: skip
    return [{"confidence": 100.0, "language": server.sources[0]}]


# ---------------------------------------------------------------------------------------------------------------------
# The native API
# ---------------------------------------------------------------------------------------------------------------------
async def native_translate(server: Server, request: Request) -> dict:
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise RequestError(400, "Invalid request: /v1/translate takes a JSON body (Content-Type: application/json)")
    fields = await read_fields(request)
    server.authorize(request, fields)
    body = validate(NativeRequest, fields)
    limits = server.limits
    sampling, num_beams = _sampling(body)
    if sampling is None and body.nbest > num_beams:
        raise RequestError(400, f"Invalid request: nbest must be at most num_beams (got num_beams={num_beams}, "
                                f"nbest={body.nbest})")  # fmt: skip
    pair, _ = server.pair(body.source, body.target)
    sentences = body.text if isinstance(body.text, list) else [body.text]
    prefixes, constraints = _per_sentence(body, len(sentences))
    limits.check_characters(sentences + [p or "" for p in prefixes] + [" ".join(c or []) for c in constraints])
    limits.check_sentences(len(sentences))
    translator = server.models[pair].translator
    try:
        translator.check_requests(len(sentences), prefixes, constraints, body.max_new_tokens or MAX_NEW_TOKENS)
        if sampling is not None:  # prefixes, constraints, an ensemble: beam search only
            translator.check_sampling(num_beams, prefixes, constraints)
    except TranslateError as error:  # an empty phrase, a prefix too long, constraints on a CTranslate2 model
        raise RequestError(400, f"Invalid request: {error}") from None
    options = DecodingOptions(num_beams, body.length_penalty, body.max_new_tokens, body.paper_decoding, body.nbest,
                              body.scores, body.alignment, constrained=any(constraints), sampling=sampling)  # fmt: skip
    segments = [Segment(text, prefix or None, phrases or None)
                for text, prefix, phrases in zip(sentences, prefixes, constraints, strict=True)]  # fmt: skip
    hypotheses = await server.translate(pair, segments, options)
    output = JsonlOutput(scores=body.scores, alignment=body.alignment)
    translations = [json.loads(output.lines(i, found)[0]) for i, found in enumerate(hypotheses)]
    for segment, translation in zip(segments, translations, strict=True):
        if segment.constraints and translation["hypotheses"]:  # what the best translation lacks, as translate warns
            translation["unmet_constraints"] = missing_constraints(segment.constraints,
                                                                   translation["hypotheses"][0]["text"])  # fmt: skip
    server.log_texts(sentences, [[h["text"] for h in t["hypotheses"]] for t in translations])
    return {"source": pair[0], "target": pair[1], "translations": translations}


def _sampling(body: NativeRequest) -> tuple[Sampling | None, int]:
    """The request's `Sampling` (None: beam search) and its beam size: 1 with sampling, which no other fits."""
    if body.sampling is None:
        return None, body.num_beams
    if "num_beams" in body.model_fields_set and body.num_beams != 1:
        raise RequestError(400, f"Invalid request: sampling draws each token at random instead of searching: "
                                f"num_beams must be 1 (its default with sampling), not {body.num_beams}")  # fmt: skip
    if body.paper_decoding:
        raise RequestError(400, "Invalid request: sampling does not go with paper_decoding (the paper's beam search)")
    return Sampling(body.sampling.top_k, body.sampling.top_p, body.sampling.temperature), 1


def _per_sentence(body: NativeRequest, count: int) -> tuple[list, list]:
    """The request's prefixes and constraints, one of each per sentence (None where none was given): with one `text`,
    a `prefix` string and a `constraints` list of phrases; with a list of texts, a list of each, one per text."""
    prefix, constraints = body.prefix, body.constraints
    if isinstance(body.text, str):
        if isinstance(prefix, list):
            raise RequestError(400, "Invalid request: prefix: with one text, give one prefix (a string)")
        if constraints is not None and not all(isinstance(phrase, str) for phrase in constraints):
            raise RequestError(400, "Invalid request: constraints: with one text, give a list of phrases")
        return [prefix], [constraints]
    if prefix is not None and (not isinstance(prefix, list) or len(prefix) != count):
        raise RequestError(400, f"Invalid request: prefix: with a list of {count} texts, give a list of {count} "
                                "prefixes (null for none)")  # fmt: skip
    if constraints is not None and (len(constraints) != count or any(isinstance(c, str) for c in constraints)):
        raise RequestError(400, f"Invalid request: constraints: with a list of {count} texts, give a list of {count} "
                                "lists of phrases (null or [] for none)")  # fmt: skip
    return prefix or [None] * count, constraints or [None] * count


# ---------------------------------------------------------------------------------------------------------------------
# The application
# ---------------------------------------------------------------------------------------------------------------------
def create_app(models: dict[tuple[str, str], ServedPair], settings: ServerSettings | None = None) -> FastAPI:
    """The ASGI application serving `models` (the table of `vaswani.serve.models.load_models`)."""
    settings = settings or ServerSettings()
    server = Server(models, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        server.batcher.start()
        yield
        await server.batcher.stop()  # uvicorn has answered every request by now (graceful shutdown)

    app = FastAPI(title="vaswani serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:  # 404, 405
        return JSONResponse({"error": error.detail}, status_code=error.status_code, headers=error.headers)

    @app.post("/translate")
    async def translate(request: Request):
        return await libretranslate_translate(server, request)

    @app.api_route("/languages", methods=["GET", "POST"])
    async def get_languages():
        return languages(server)

    @app.post("/detect")
    async def post_detect(request: Request):
        return await detect(server, request)

    @app.post("/v1/translate")
    async def v1_translate(request: Request):
        return await native_translate(server, request)

    @app.get("/health")
    async def health():
        return {"status": "ok", "pairs": [f"{s}-{t}" for s, t in server.models]}

    @app.get("/metrics")
    async def metrics():
        return Response(server.metrics.text(), media_type=CONTENT_TYPE)

    @app.get("/frontend/settings")
    async def settings_of_the_page():
        names = {language["code"]: language["name"] for language in languages(server)}
        return frontend_settings(list(server.models), names, server.limits, server.settings.api_keys is not None)

    document = openapi_document(web_ui=server.settings.web_ui)

    @app.get("/spec")
    async def spec():
        return document

    if server.settings.web_ui:
        for path, (content, media_type) in page_files().items():
            app.add_api_route(path, _static(content, media_type), methods=["GET"], include_in_schema=False)

    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "Authorization"])  # fmt: skip
    app.add_middleware(BodyLimit, max_bytes=server.limits.max_request_bytes)
    app.add_middleware(RequestLog, metrics=server.metrics)  # outermost: sees every answer, refusals included
    return app


def _static(content: bytes, media_type: str):
    """An endpoint that answers `content` (a file of the page), with the page's headers."""

    async def answer():
        return Response(content, media_type=media_type, headers=PAGE_HEADERS)

    return answer


class RequestLog:
    """ASGI middleware: each request's endpoint, status, sizes and time go to the metrics and the log, nothing else
    of it (not its path beyond the known endpoints, its address, its headers or its text)."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
        started, sizes, status = time.monotonic(), {"in": 0, "out": 0}, [500]

        async def counting_receive():
            message = await receive()
            sizes["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                sizes["out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            seconds = time.monotonic() - started
            if endpoint != "/metrics":
                self.metrics.observe_request(endpoint, status[0], seconds, sizes["in"])
            logger.info("%s %s %d: %d bytes in, %d bytes out, %.1f ms", scope["method"], endpoint, status[0],
                        sizes["in"], sizes["out"], seconds * 1000)  # fmt: skip


def http_stack() -> tuple[str, str]:
    """uvicorn's HTTP parser and event loop: the C ones the `serve` extra installs (httptools, uvloop; what uvicorn's
    own `standard` install adds for speed), else its pure-Python parser (h11) and asyncio's own loop. The same choice
    as uvicorn's `auto`, made here so that the log can say which."""
    try:
        import httptools  # noqa: F401  (only whether it is installed)

        http = "httptools"
    except ImportError:
        http = "h11"
    try:
        import uvloop  # noqa: F401  (as above; not built for Windows)

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    return http, loop


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 5000, *, graceful_seconds: float,
                  log_level: str = "info"):  # fmt: skip
    """uvicorn's settings for `app`: no access log (`RequestLog` logs sizes and timings), no server header, the
    lifespan events that start and stop the batcher, and the HTTP stack of `http_stack()`."""
    import uvicorn

    http, loop = http_stack()
    return uvicorn.Config(app, host=host, port=port, access_log=False, server_header=False, log_level=log_level,
                          timeout_graceful_shutdown=graceful_seconds, lifespan="on", http=http, loop=loop)  # fmt: skip


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound to `host`:`port` as uvicorn binds it (IPv6 when the host has a ":",
    SO_REUSEADDR), before the models load: an address in use or not on this machine is a `UsageError` at once,
    not uvicorn's log line and exit status 3 after the loading."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        reason = error.strerror or str(error)
        if error.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: {host}:{port} is already in use ({reason}): stop what listens there, "
                             "or choose another --port") from None  # fmt: skip
        if error.errno == errno.EACCES:
            raise UsageError(f"--port {port}: listening on {host}:{port} is not allowed ({reason}): ports below "
                             "1024 need administrator rights; choose a --port from 1024 up") from None  # fmt: skip
        raise UsageError(f"--host {host}: cannot listen on {host}:{port} ({reason}): give an address of this machine "
                         "(127.0.0.1 for this machine only, 0.0.0.0 for every network)") from None  # fmt: skip
    sock.set_inheritable(True)
    return sock


def run_server(app: FastAPI, sock: socket.socket, *, graceful_seconds: float, log_level: str = "info") -> None:
    """Serve `app` on `sock` (`listening_socket`) until SIGINT or SIGTERM; then stop accepting connections and finish
    the requests in flight (at most `graceful_seconds`) before the process exits."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    config = server_config(app, host, port, graceful_seconds=graceful_seconds, log_level=log_level)
    logger.info("HTTP: uvicorn with the %s parser and the %s event loop", config.http, config.loop)
    uvicorn.Server(config).run(sockets=[sock])
