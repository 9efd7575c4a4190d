"""What the server's endpoints take and answer, as pydantic models: the one description that checks every request
when it arrives (before anything of it is queued) and that the OpenAPI document of /spec is made of
(`vaswani.serve.spec`).

Every field of a request is checked here, its type, its range and its text: JSON can carry half of a surrogate pair
(`"\\ud800"`), which is no Unicode text, so every string field (the texts, the language codes, the format, the API
key, the native API's prefixes and constraints) refuses one, naming the field. A refusal is a 400 that names the
field and says what it takes (`field_error`); values from the request are quoted escaped (`RequestError` makes every
message encodable), so that no request can make its own error message fail.

The LibreTranslate fields come from JSON or from forms (where every value is a string: `alternatives=2`); the native
API takes JSON only and is strict (a number is no string, `"3"` is no number, unknown fields are refused).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from vaswani.fileio import lone_surrogate
from vaswani.serve.limits import MAX_NEW_TOKENS, MAX_NUM_BEAMS, MAX_TOP_K, RequestError

LANGUAGE_CODE_LENGTH = 32  # longer than any code (`zh_Hant`, LibreTranslate's `zh-Hans`): a longer one is refused


def _unicode_text(value: str) -> str:
    if problem := lone_surrogate(value):
        raise PydanticCustomError("lone_surrogate", "holds {problem}; send UTF-8 text", {"problem": problem})
    return value


def _form_number(value: Any) -> Any:
    """A form's value is a string: `"2"` is the number 2 (a JSON number stays one; `true` is no number)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "expected a whole number")
    return value


Text = Annotated[str, AfterValidator(_unicode_text)]
LanguageCode = Annotated[str, Field(min_length=1, max_length=LANGUAGE_CODE_LENGTH), AfterValidator(_unicode_text)]


# ---------------------------------------------------------------------------------------------------------------------
# The LibreTranslate API
# ---------------------------------------------------------------------------------------------------------------------
class LibreTranslateRequest(BaseModel):
    """The body of `POST /translate` (JSON, or a form where `q` may repeat for a list). Unknown fields are ignored,
    as LibreTranslate ignores them."""

    model_config = ConfigDict(extra="ignore")
    q: Text | list[Text] = Field(
        description="the text to translate, or a list of texts; each is split into sentences (at line breaks and "
        "after . ! ? followed by a space and no lower-case letter), translated and glued back",
        examples=["I have three cats. We need two apples."],
    )
    source: LanguageCode = Field(description="the source language code, or auto", examples=["en"])
    target: LanguageCode = Field(description="the target language code", examples=["de"])
    format: Literal["text", "html"] = Field(
        "text", description="text, or html: the text nodes are translated, the markup kept as written",
        examples=["html"],
    )  # fmt: skip
    alternatives: Annotated[int, BeforeValidator(_form_number)] = Field(
        0, ge=0, le=MAX_NUM_BEAMS - 1, description="how many other translations (the n-best list) to add",
        examples=[2],
    )  # fmt: skip
    api_key: Text | None = Field(None, description="the API key, where the server needs one", examples=["my-key"])


class DetectRequest(BaseModel):
    """The body of `POST /detect`."""

    model_config = ConfigDict(extra="ignore")
    q: Text = Field(description="a text (the server has no detector: it answers its one source language)",
                    examples=["I have three cats."])  # fmt: skip
    api_key: Text | None = Field(None, description="the API key, where the server needs one", examples=["my-key"])


class DetectedLanguage(BaseModel):
    language: str = Field(description="a language code")
    confidence: float = Field(description="100: the only language the server reads (it has no detector)")


class LibreTranslateResponse(BaseModel):
    """The answer of `POST /translate`: a text (or a list of texts for a list `q`)."""

    translatedText: str | list[str]  # noqa: N815 (LibreTranslate's spelling)
    alternatives: list[str] | list[list[str]] | None = Field(None, description="with `alternatives`: the others")
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = Field(  # noqa: N815 (as above)
        None, description="with `source: auto`: the language chosen"
    )


class Language(BaseModel):
    code: str
    name: str
    targets: list[str] = Field(description="the languages this one translates into")


# ---------------------------------------------------------------------------------------------------------------------
# The native API
# ---------------------------------------------------------------------------------------------------------------------
class SamplingRequest(BaseModel):
    """`sampling` of `POST /v1/translate`: random sampling instead of beam search (`vaswani translate --do_sample`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    top_k: int = Field(0, ge=0, le=MAX_TOP_K, description="draw each token among the k most probable ones only (0: "
                       "every token)", examples=[10])  # fmt: skip
    top_p: float = Field(1.0, gt=0, le=1, description="draw each token among the fewest most probable ones whose "
                         "probabilities add up to p (nucleus sampling; 1: every token)", examples=[0.9])  # fmt: skip
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False, description="divide the logits by it before drawing "
                               "(below 1: closer to the best token; 1: the model's own distribution)", examples=[0.8])  # fmt: skip


class NativeRequest(BaseModel):
    """The body of `POST /v1/translate`: what `vaswani translate` can be asked for, one sentence per `text` item."""

    model_config = ConfigDict(extra="forbid", strict=True)
    source: LanguageCode = Field(description="the source language code", examples=["en"])
    target: LanguageCode = Field(description="the target language code", examples=["de"])
    text: Text | list[Text] = Field(
        description="one sentence, or a list of sentences (never split: one translation per item)",
        examples=[["I have three cats.", "She bought two books."]],
    )
    num_beams: int = Field(4, ge=1, le=MAX_NUM_BEAMS, description="the beam size", examples=[5])
    length_penalty: float = Field(0.6, ge=-10, le=10, description="alpha of the length normalisation", examples=[1.0])
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, description="at most this many "
                                       "output tokens (default: the model's)", examples=[32])  # fmt: skip
    paper_decoding: bool = Field(False, description="the paper's beam search: the GNMT length penalty and a cap of "
                                 "source length + 50", examples=[True])  # fmt: skip
    nbest: int = Field(1, ge=1, le=MAX_NUM_BEAMS, description="hypotheses per sentence (at most num_beams)",
                       examples=[2])  # fmt: skip
    scores: bool = Field(False, description="add each hypothesis' score", examples=[True])
    alignment: bool = Field(False, description="add each hypothesis' word alignment", examples=[True])
    prefix: Text | list[Text | None] | None = Field(
        None, description="the start of the translation: a string with one text; with a list of texts, a list with "
        "one prefix (or null) per text", examples=[["Ich", None]],
    )  # fmt: skip
    constraints: list[Text] | list[list[Text] | None] | None = Field(
        None, description="phrases the translation must contain (PyTorch models): a list with one text; with a list "
        "of texts, a list with one list (or null) per text", examples=[[["Katzen"], None]],
    )  # fmt: skip
    sampling: SamplingRequest | None = Field(
        None, description="draw each translation at random from the model's distribution instead of beam search ({} "
        "for plain sampling): num_beams 1 (its default with sampling), nbest independent samples; not with prefix, "
        "constraints or paper_decoding", examples=[{"top_k": 10, "temperature": 0.8}],
    )  # fmt: skip
    api_key: Text | None = Field(None, description="the API key, where the server needs one", examples=["my-key"])


class Hypothesis(BaseModel):
    text: str
    score: float | None = Field(None, description="with `scores`")
    alignment: str | None = Field(None, description="with `alignment`: SOURCE-TARGET word pairs")


class SentenceTranslation(BaseModel):
    line: int = Field(description="the sentence's index in `text`")
    hypotheses: list[Hypothesis]
    unmet_constraints: list[str] | None = Field(None, description="with constraints: those the best hypothesis lacks")


class NativeResponse(BaseModel):
    source: str
    target: str
    translations: list[SentenceTranslation]


# ---------------------------------------------------------------------------------------------------------------------
# The rest
# ---------------------------------------------------------------------------------------------------------------------
class Health(BaseModel):
    status: Literal["ok"]
    pairs: list[str] = Field(description="the loaded language pairs, SOURCE-TARGET")


class LanguageName(BaseModel):
    code: str
    name: str


class FrontendLanguages(BaseModel):
    source: LanguageName = Field(description="the language the page starts from")
    target: LanguageName = Field(description="the language the page starts into")


class Pair(BaseModel):
    source: str
    target: str


class FrontendSettings(BaseModel):
    """`GET /frontend/settings`: what the translation page (and LibreTranslate's own) needs to know."""

    apiKeys: bool = Field(description="whether the server takes API keys")  # noqa: N815 (LibreTranslate's spelling)
    keyRequired: bool = Field(description="whether every translation needs a key")  # noqa: N815 (as above)
    charLimit: int = Field(description="the most characters of one request")  # noqa: N815 (as above)
    frontendTimeout: int = Field(description="ms the page waits after typing before it translates")  # noqa: N815
    suggestions: bool = Field(description="always false: no suggestions are taken")
    filesTranslation: bool = Field(description="always false: no files are translated")  # noqa: N815 (as above)
    supportedFilesFormat: list[str] = Field(description="always empty")  # noqa: N815 (as above)
    language: FrontendLanguages
    pairs: list[Pair] = Field(description="every loaded language pair (this server's addition)")
    maxAlternatives: int = Field(description="the most alternatives a request may ask for")  # noqa: N815
    spec: str = Field(description="the address of the OpenAPI description")


class ErrorAnswer(BaseModel):
    """Every refusal, LibreTranslate's shape: 400 a bad request (the field named), 403 a missing or wrong API key,
    408 past the time limit, 413 a body over the size limit, 429 over the rate limit (with Retry-After)."""

    error: str


# ---------------------------------------------------------------------------------------------------------------------
# Checking a request
# ---------------------------------------------------------------------------------------------------------------------
def validate(model: type[BaseModel], fields: dict) -> Any:
    """`fields` as a `model`, or a 400 that names the first field in the way and says what it takes."""
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        raise RequestError(400, f"Invalid request: {field_error(model, error)}") from None


API_KEY = TypeAdapter(Text | None)


def validate_api_key(value: Any) -> str | None:
    """The `api_key` field alone (checked before the rest: a request is authorized before it is read further)."""
    try:
        return API_KEY.validate_python(value)
    except ValidationError as error:
        raise RequestError(400, f"Invalid request: api_key: {_problem(error.errors())}") from None


def field_error(model: type[BaseModel], error: ValidationError) -> str:
    """One line for the first field `error` finds wrong: its name (with the item's index in a list, or the field of
    an object field: `sampling.top_k`), then what is wrong with the value (a lone surrogate, a number out of range, a
    missing field: "missing q parameter", as LibreTranslate says) or else what the field takes (its description)."""
    return _field_error(model, error.errors())


def _field_error(model: type[BaseModel], errors: list[dict]) -> str:
    name = str(errors[0]["loc"][0]) if errors[0]["loc"] else None
    if name is None:  # a field name that is not Unicode text
        return f"a field name: {_problem(errors)}"
    if name not in model.model_fields:
        return f"unknown field {shown(name)}: the fields are {', '.join(model.model_fields)}"
    own = [e for e in errors if e["loc"] and e["loc"][0] == name]
    if any(e["type"] == "missing" for e in own):
        return f"missing {name} parameter"
    inner = _object_model(model, name)
    inside = [{**e, "loc": e["loc"][1:]} for e in own if len(e["loc"]) > 1 and isinstance(e["loc"][1], str)]
    if inner is not None and inside:  # within an object field: its own field named after it
        problem = _field_error(inner, inside)
        return f"{name}: {problem}" if problem.startswith(("unknown field", "a field name")) else f"{name}.{problem}"
    specific = [e for e in own if e["type"] not in TYPE_ERRORS]
    if specific:
        where = name + "".join(f"[{part}]" for part in specific[0]["loc"][1:] if isinstance(part, int))
        return f"{where}: {_problem(specific)}"
    return f"{name} must be {expected(model.model_json_schema()['properties'][name])}"


def _object_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The request model that field `name` of `model` holds (`sampling`: `SamplingRequest`), or None."""
    annotation = model.model_fields[name].annotation
    members = [m for m in getattr(annotation, "__args__", (annotation,)) if isinstance(m, type)]
    return next((m for m in members if issubclass(m, BaseModel)), None)


# a value of the wrong type: the answer says what the field takes rather than what one of its union's types wants
TYPE_ERRORS = {"string_type", "list_type", "int_type", "int_parsing", "float_type", "float_parsing", "bool_type",
               "bool_parsing", "none_required", "literal_error", "int_from_float", "dict_type", "model_type",
               "union_tag_invalid"}  # fmt: skip


def expected(schema: dict) -> str:
    """What a field of this JSON schema takes, in words: "a string or a list of strings", "a whole number from 1 to
    16" (the request models' own schemas, as /spec describes them)."""
    if "anyOf" in schema:
        return " or ".join(dict.fromkeys(expected(option) for option in schema["anyOf"]))
    if "enum" in schema:
        return " or ".join(map(str, schema["enum"]))
    if "$ref" in schema:  # an object field (`sampling`): its own fields are in the description
        return "an object"
    kind = schema.get("type")
    if kind == "array":
        return "a list of " + " or ".join(map(_plural, expected(schema["items"]).split(" or ")))
    words = {"string": "a string", "integer": "a whole number", "number": "a number", "boolean": "true or false",
             "null": "null", "object": "an object"}.get(kind, "a value")  # fmt: skip
    if "minimum" in schema and "maximum" in schema:
        words += f" from {schema['minimum']:g} to {schema['maximum']:g}"
    return words


def _plural(words: str) -> str:
    if words.startswith("a list of "):
        return "lists of " + words.removeprefix("a list of ")
    return words.removeprefix("a ").removeprefix("an ") + "s"


def _problem(errors: list[dict]) -> str:
    error = errors[0]
    if error["type"] == "string_unicode" and isinstance(error["input"], str):  # pydantic's own lone-surrogate check
        return f"holds {lone_surrogate(error['input'])}; send UTF-8 text"
    message = error["msg"]
    return message[0].lower() + message[1:] if message else "invalid"


def shown(value: Any, limit: int = 40) -> str:
    """`value` from a request as a message quotes it: its text (escaped by `RequestError` where it is not Unicode),
    cut to `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
