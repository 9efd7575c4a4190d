"""vaswani/serve/spec.py (issue 42): the OpenAPI description at /spec is valid (openapi-spec-validator, an independent
reference) and true: every documented field of every request body is sent with its documented example and accepted,
every answer matches its documented schema, and every documented refusal (400, 403, 408, 413, 429) is produced on
every endpoint that documents it, in the documented `{"error": ...}` shape."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
openapi_spec_validator = pytest.importorskip("openapi_spec_validator", reason="the dev extra is not installed")

from openapi_schema_validator import OAS31Validator  # noqa: E402
from test_app import request, running  # noqa: E402

from vaswani.serve.limits import ApiKeys, Limits  # noqa: E402
from vaswani.serve.models import ModelSpec, load_models  # noqa: E402
from vaswani.serve.spec import openapi_document  # noqa: E402

KEY, SLOW_KEY = "my-key", "slow-key"  # the documented example key, and one allowed a single request a minute
MAX_BYTES = 20_000


@pytest.fixture(scope="module")
def models(model_folder):
    from vaswani.inference.translator import Translator

    translator = Translator(model_folder, device="cpu")
    return load_models([ModelSpec(model_folder, ("en", "de"))], lambda folders: translator)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(f"{KEY}\n{SLOW_KEY} 1\n", encoding="utf-8")
    return ApiKeys.from_file(path)


@pytest.fixture(scope="module")
def address(models, keys):
    with running(models, api_keys=keys, limits=Limits(max_request_bytes=MAX_BYTES)) as address:
        yield address


@pytest.fixture(scope="module")
def spec(address):
    status, document, _ = request(address, "GET", "/spec")
    assert status == 200
    return document


def operations(spec: dict):
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            yield path, method.upper(), operation


def body_schema(spec: dict, operation: dict) -> dict:
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]]


def assert_matches(instance, schema: dict, spec: dict) -> None:
    """`instance` is valid against `schema` of the document (its $refs resolved in the document)."""
    OAS31Validator({**schema, "components": spec["components"]}).validate(instance)


def send(address, method: str, path: str, payload=None, media: str = "application/json", headers=None):
    if payload is None:
        return request(address, method, path, headers=headers)
    body = json.dumps(payload).encode() if media == "application/json" else urlencode(payload, doseq=True).encode()
    return request(address, method, path, body, {"Content-Type": media, **(headers or {})})


def example_body(schema: dict) -> dict:
    """The required fields with their documented examples, and the key."""
    body = {name: schema["properties"][name]["examples"][0] for name in schema.get("required", [])}
    return {**body, "api_key": KEY}


def test_the_description_is_valid_openapi_and_covers_every_endpoint(spec, models):
    openapi_spec_validator.validate(spec)
    assert spec == openapi_document()
    from vaswani.serve.app import ENDPOINTS

    documented = set(spec["paths"])
    assert documented == {path for path in ENDPOINTS if not path.startswith("/static/")}
    with running(models, web_ui=False) as address:
        status, document, _ = request(address, "GET", "/spec")
        assert status == 200 and "/" not in document["paths"]
        openapi_spec_validator.validate(document)
        assert request(address, "GET", "/")[0] == 404


def test_every_documented_field_is_accepted_with_its_example_and_every_answer_matches(address, spec):
    exercised = []
    for path, method, operation in operations(spec):
        answer = operation["responses"]["200"]["content"]
        if "requestBody" not in operation:
            status, got, _ = send(address, method, path)
            assert status == 200, (path, got)
            if "application/json" in answer:
                assert_matches(got, answer["application/json"]["schema"], spec)
            continue
        schema = body_schema(spec, operation)
        base = example_body(schema)
        for name, field in schema["properties"].items():
            for media in operation["requestBody"]["content"]:
                if media == "multipart/form-data":
                    continue  # test_app.py sends multipart bodies; urlencoded forms stand for both here
                status, got, _ = send(address, method, path, {**base, name: field["examples"][0]}, media)
                assert status == 200, (path, media, name, got)
                assert_matches(got, answer["application/json"]["schema"], spec)
            exercised.append(f"{path}:{name}")
    assert len(exercised) == len(set(exercised)) >= 2 + 6 + 13  # /detect, /translate, /v1/translate


def test_an_undocumented_field_is_refused_where_the_description_says_so(address, spec):
    for path, method, operation in operations(spec):
        if "requestBody" not in operation:
            continue
        schema = body_schema(spec, operation)
        status, got, _ = send(address, method, path, {**example_body(schema), "colour": "blue"})
        assert (status == 400) == (schema.get("additionalProperties") is False), (path, got)
        if status == 400:
            assert "unknown field colour" in got["error"]


def test_every_documented_refusal_is_what_the_endpoint_answers(address, spec, models):
    produced = []
    for path, method, operation in operations(spec):
        body = example_body(body_schema(spec, operation)) if "requestBody" in operation else None
        for status in sorted(int(code) for code in operation["responses"] if code != "200"):
            headers = {}
            if status == 400:
                first = next(iter(body_schema(spec, operation)["required"]))
                got = send(address, method, path, {**body, first: {"a": "dict"}})
            elif status == 403:
                got = send(address, method, path, {**body, "api_key": None})
            elif status == 413:
                got = request(address, method, path, b"x" * (MAX_BYTES + 1), {"Content-Type": "application/json"})
            elif status == 429:
                send(address, method, path, {**body, "api_key": SLOW_KEY})
                got = send(address, method, path, {**body, "api_key": SLOW_KEY})
                headers = got[2]
                assert int(headers["retry-after"]) >= 1
            else:
                assert status == 408, status
                with running(models, limits=Limits(max_request_seconds=1e-6)) as slow:
                    got = send(slow, method, path, {**body, "api_key": None})
            assert got[0] == status, (path, status, got[1])
            assert_matches(got[1], operation["responses"][str(status)]["content"]["application/json"]["schema"], spec)
            produced.append(f"{path} {status}")
    assert {"/translate 408", "/v1/translate 408", "/detect 429", "/languages 413", "/translate 403"} <= set(produced)
