"""The OpenAPI 3.1 description of the server's APIs, answered at `GET /spec` (LibreTranslate's address for its own).

It is made of the request and answer models of `vaswani.serve.schema`, the models that check every request, so that
it describes what the endpoints really take: each body with its fields, their types, ranges and examples, each
answer, and each refusal (`{"error": "..."}` with its status: 400 a bad request, 403 a missing or wrong API key, 408
past the time limit, 413 a body over the size limit, 429 over the rate limit). tests/serve/test_spec.py checks it
with openapi-spec-validator and sends every documented field and refusal to the endpoints.
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from vaswani.serve.schema import (
    DetectedLanguage,
    DetectRequest,
    ErrorAnswer,
    FrontendSettings,
    Health,
    Language,
    LibreTranslateRequest,
    LibreTranslateResponse,
    NativeRequest,
    NativeResponse,
)

REQUESTS = (LibreTranslateRequest, DetectRequest, NativeRequest)
ANSWERS = (LibreTranslateResponse, DetectedLanguage, Language, NativeResponse, Health, FrontendSettings, ErrorAnswer)
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")  # LibreTranslate's bodies besides JSON
REFUSALS = {
    400: "a bad request: the body cannot be read, or a field is missing or wrong (the message names it)",
    403: "a missing or wrong API key (on a server started with --api_keys)",
    408: "the translation took longer than the server's --max_request_seconds",
    413: "the body is larger than the server's --max_request_bytes",
    429: "more requests than the rate limit allows (on a server with --rate_limit or keys with their own)",
}


def _ref(model: type[BaseModel]) -> dict:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _refusals(*statuses: int) -> dict:
    answers = {
        str(status): {"description": REFUSALS[status], "content": _json(_ref(ErrorAnswer))} for status in statuses
    }
    if "429" in answers:
        answers["429"]["headers"] = {"Retry-After": {"description": "seconds until a request is allowed again",
                                                     "schema": {"type": "integer"}}}  # fmt: skip
    return answers


def _operation(summary: str, answer: dict, *refusals: int, body: type[BaseModel] | None = None, forms: bool = False,
               tag: str) -> dict:  # fmt: skip
    operation = {
        "summary": summary,
        "tags": [tag],
        "responses": {"200": {"description": "the answer", "content": _json(answer)}, **_refusals(*refusals)},
    }
    if body is not None:
        content = _json(_ref(body))
        if forms:
            content.update({media: {"schema": _ref(body)} for media in FORMS})
        operation["requestBody"] = {"required": True, "content": content}
    return operation


def openapi_document(*, web_ui: bool = True) -> dict:
    """The OpenAPI 3.1 document of a server (`web_ui`: whether it serves the translation page at /)."""
    _, definitions = models_json_schema(
        [(model, "validation") for model in REQUESTS] + [(model, "serialization") for model in ANSWERS],
        ref_template="#/components/schemas/{model}",
    )
    translate = "the LibreTranslate API"
    paths = {
        "/translate": {"post": _operation(
            "Translate a text or a list of texts (split into sentences)", _ref(LibreTranslateResponse),
            400, 403, 408, 413, 429, body=LibreTranslateRequest, forms=True, tag=translate)},
        "/languages": {"get": _operation(
            "The languages of the loaded pairs", {"type": "array", "items": _ref(Language)}, 413, tag=translate)},
        "/detect": {"post": _operation(
            "The one source language of the server (it has no detector)",
            {"type": "array", "items": _ref(DetectedLanguage)}, 400, 403, 413, 429, body=DetectRequest, forms=True,
            tag=translate)},
        "/v1/translate": {"post": _operation(
            "Translate sentences with vaswani translate's options (one translation per item, never split)",
            _ref(NativeResponse), 400, 403, 408, 413, 429, body=NativeRequest, tag="the native API")},
        "/frontend/settings": {"get": _operation(
            "What the translation page needs: the pairs, whether keys are required, the character limit",
            _ref(FrontendSettings), 413, tag="the server")},
        "/health": {"get": _operation("Whether the server is up, and its pairs", _ref(Health), 413, tag="the server")},
        "/spec": {"get": _operation("This description", {"type": "object"}, 413, tag="the server")},
        "/metrics": {"get": {
            "summary": "Prometheus metrics (text format)", "tags": ["the server"],
            "responses": {"200": {"description": "the metrics",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}, **_refusals(413)}}},
    }  # fmt: skip
    if web_ui:
        paths["/"] = {"get": {
            "summary": "The translation page", "tags": ["the server"],
            "responses": {"200": {"description": "an HTML page", "content": {"text/html": {"schema": {"type": "string"}}}},
                          **_refusals(413)}}}  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "vaswani serve",
            "version": "1",
            "description": "Translation with the LibreTranslate API and a native one (docs/serving.md). The API key "
            "goes in the body (`api_key`) or in an `Authorization: Bearer KEY` header.",
        },
        "paths": paths,
        "components": {
            "schemas": definitions["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "the API key"}},
        },
    }
