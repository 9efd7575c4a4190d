"""vaswani/serve/app.py (issue 31): the LibreTranslate API spoken to the real `libretranslatepy` client, the native API,
every limit and bad input over plain HTTP, API keys and rate limits, CORS, a bounded load test. (The command, its
options and SIGTERM: tests/cli/test_serve.py; batching and text: test_batching_dynamic.py, test_text_splitting.py.)

The servers run on loopback, on a port the operating system picks, in a thread of this process (uvicorn's own
`Server`), with the tiny trained translator of test_pipeline.py loaded once for both directions (en-de, de-en). The
reference for every translation is `Translator.translate(_hypotheses)` called directly.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install -e '.[serve]'")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="the dev extra is not installed")

from vaswani.inference.outputs import format_alignment  # noqa: E402
from vaswani.serve.app import ServerSettings, create_app, http_stack, server_config  # noqa: E402
from vaswani.serve.limits import ApiKeys, Limits, RequestError  # noqa: E402
from vaswani.serve.models import ModelSpec, load_models  # noqa: E402

LEARNED = ["the cat sat on the mat", "a dog runs in the park", "the weather is nice today", "we read a book at home"]


# ---------------------------------------------------------------------------------------------------------------------
# A server in a thread, and a plain HTTP client
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def translator(model_folder):
    from vaswani.inference.translator import Translator

    return Translator(model_folder, device="cpu")


@pytest.fixture(scope="module")
def models(model_folder, translator):
    """en-de and de-en, both the same tiny translator (it learned both directions)."""
    specs = [ModelSpec(model_folder, ("en", "de")), ModelSpec(model_folder, ("de", "en"))]
    return load_models(specs, lambda folders: translator)


@contextlib.contextmanager
def running(models, **settings):
    """A server for `models` on a free loopback port: yields (host, port), stops it afterwards."""
    import uvicorn

    app = create_app(models, ServerSettings(**settings))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(server_config(app, graceful_seconds=10, log_level="warning"))  # as `vaswani serve` runs
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
    assert not thread.is_alive()


@pytest.fixture(scope="module")
def address(models):
    with running(models) as address:
        yield address


def request(address, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """(status, parsed JSON or the text, headers) of one request on a new connection."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        content_type = response.getheader("content-type", "")
        parsed = json.loads(data) if content_type.startswith("application/json") else data.decode()
        return response.status, parsed, dict(response.getheaders())
    finally:
        connection.close()


def post_json(address, path: str, payload, headers: dict | None = None):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return request(address, "POST", path, body, {"Content-Type": "application/json", **(headers or {})})


def url(address) -> str:
    return f"http://{address[0]}:{address[1]}"


# ---------------------------------------------------------------------------------------------------------------------
# The LibreTranslate API, through the real client
# ---------------------------------------------------------------------------------------------------------------------
def test_libretranslatepy_translates_lists_languages_and_detects(models, translator):
    one_source = {("en", "de"): models[("en", "de")]}
    with running(one_source) as address:
        client = libretranslatepy.LibreTranslateAPI(url(address))
        for sentence in LEARNED:
            assert client.translate(sentence, "en", "de") == translator.translate([sentence])[0]
        assert client.languages() == [{"code": "de", "name": "German", "targets": []},
                                      {"code": "en", "name": "English", "targets": ["de"]}]  # fmt: skip
        assert client.detect("the cat sat on the mat") == [{"confidence": 100.0, "language": "en"}]
        assert client.translate(LEARNED[0], "auto", "de") == translator.translate([LEARNED[0]])[0]


def test_a_ctranslate2_export_is_served_as_vaswani_translate_runs_it(model_folder, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed")
    import torch

    from vaswani.export.ctranslate2 import export_ctranslate2
    from vaswani.inference.translator import Translator

    export = export_ctranslate2(model_folder, tmp_path / "ct2", quantization="int8")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # two CTranslate2 workers (their threads are fixed when the translators are made)
    try:
        reference = Translator(export, device="cpu")  # as vaswani translate runs it
        translator = Translator(export, device="cpu", split_batches=False)  # as vaswani serve does
    finally:
        torch.set_num_threads(threads)
    assert translator.parallel_batches == 2
    assert translator.backend == "ctranslate2"
    with running(load_models([ModelSpec(translator.folder, ("en", "de"))], lambda folders: translator)) as address:
        client = libretranslatepy.LibreTranslateAPI(url(address))
        assert [client.translate(s, "en", "de") for s in LEARNED] == [reference.translate([s])[0] for s in LEARNED]
        # concurrent requests: up to two whole batches decode at once, each request gets its own answer
        texts = [f"{LEARNED[i % 4]} {i}" for i in range(24)]
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda t: client.translate(t, "en", "de"), texts))
        assert answers == reference.translate(texts)
        # prefixes: CTranslate2's target_prefix; constraints: refused, never ignored
        payload = {"source": "en", "target": "de", "text": LEARNED[0], "prefix": "die"}
        status, answer, _ = post_json(address, "/v1/translate", payload)
        expected = reference.translate_hypotheses([LEARNED[0]], prefixes=["die"])[0][0].text
        assert status == 200 and answer["translations"][0]["hypotheses"][0]["text"] == expected
        status, answer, _ = post_json(address, "/v1/translate", {**payload, "prefix": None, "constraints": ["Hund"]})
        assert status == 400 and "CTranslate2" in answer["error"], answer


def test_without_max_tokens_the_server_batches_as_vaswani_translate_does(models, translator, monkeypatch):
    """The default budget is the models' own default batch (`Translator.batch_tokens`: on a CPU 512 source tokens per
    decoding thread), resolved when the server starts, for the batcher and for each batch's decoding; --max_tokens
    replaces it."""
    import torch

    decoded_with = []
    original = translator.translate_hypotheses

    def recording(*args, **kwargs):
        decoded_with.append(kwargs["batch_tokens"])
        return original(*args, **kwargs)

    monkeypatch.setattr(translator, "translate_hypotheses", recording)
    threads = torch.get_num_threads()
    try:
        for torch_threads, given, expected in ((1, None, 512), (2, None, 1024), (2, 300, 300)):
            torch.set_num_threads(torch_threads)
            assert create_app(models, ServerSettings(max_tokens=given)).state.server.batcher.max_tokens == expected
            with running(models, max_tokens=given) as address:
                status, answer, _ = post_json(address, "/translate", {"q": LEARNED[0], "source": "en", "target": "de"})
            assert status == 200 and decoded_with[-1] == expected, (torch_threads, given, decoded_with)
    finally:
        torch.set_num_threads(threads)


def test_paragraphs_and_sentences_are_translated_one_by_one_and_glued_back(address, translator):
    text = f"{LEARNED[0]}. The weather is nice today!\n\n  {LEARNED[3]}\n"
    expected = translator.translate([f"{LEARNED[0]}.", "The weather is nice today!", LEARNED[3]])
    status, answer, _ = post_json(address, "/translate", {"q": text, "source": "en", "target": "de"})
    assert status == 200
    assert answer == {"translatedText": f"{expected[0]} {expected[1]}\n\n  {expected[2]}\n"}


def test_the_abbreviations_of_the_pairs_source_language_do_not_end_a_sentence(address, translator):
    """German writes ordinals "3." (a non-breaking prefix of its Moses list), English does not: the same text is cut
    by the source language of the pair asked for, in plain text and in HTML."""
    text = "Am 3. Oktober kommt Dr. Weber. Dann geht er."
    for source, target, sentences in (("de", "en", ["Am 3. Oktober kommt Dr. Weber.", "Dann geht er."]),
                                      ("en", "de", ["Am 3.", "Oktober kommt Dr. Weber.", "Dann geht er."])):  # fmt: skip
        expected = " ".join(translator.translate(sentences))
        for format, q, answer_of in (("text", text, str), ("html", f"<p>{text}</p>", lambda t: f"<p>{t}</p>")):
            status, answer, _ = post_json(address, "/translate", {"q": q, "source": source, "target": target,
                                                                  "format": format})  # fmt: skip
            assert status == 200 and answer["translatedText"] == answer_of(expected), (source, format, answer)


def test_a_list_of_texts_gives_a_list_and_alternatives_are_the_n_best(address, translator):
    status, answer, _ = post_json(address, "/translate", {"q": LEARNED[:2], "source": "en", "target": "de",
                                                          "alternatives": 2})  # fmt: skip
    assert status == 200
    hypotheses = translator.translate_hypotheses(LEARNED[:2], num_beams=4, nbest=3)
    assert answer["translatedText"] == [found[0].text for found in hypotheses]
    assert answer["alternatives"] == [[h.text for h in found[1:]] for found in hypotheses]


def test_html_keeps_the_markup_and_translates_the_text_nodes(address, translator):
    page = f'<p class="x">{LEARNED[0]}</p><!-- c --><script>if (a<b) {{}}</script><br/><code>a &lt; b</code>'
    status, answer, _ = request(address, "POST", "/translate",
                                urlencode({"q": page, "source": "en", "target": "de", "format": "html"}).encode(),
                                {"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert status == 200
    expected = translator.translate([LEARNED[0]])[0]
    assert answer["translatedText"] == page.replace(LEARNED[0], expected)


def test_auto_picks_the_only_source_into_the_target_and_refuses_to_guess_otherwise(address, models, translator):
    status, answer, _ = post_json(address, "/translate", {"q": LEARNED[1], "source": "auto", "target": "de"})
    assert status == 200
    assert answer == {"translatedText": translator.translate([LEARNED[1]])[0],
                      "detectedLanguage": {"confidence": 100.0, "language": "en"}}  # fmt: skip
    status, answer, _ = request(address, "POST", "/detect", b"q=hello",
                                {"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert status == 400 and "no language detector" in answer["error"] and "de, en" in answer["error"]
    both_into_de = {("en", "de"): models[("en", "de")], ("fr", "de"): models[("en", "de")]}
    with running(both_into_de) as other:
        status, answer, _ = post_json(other, "/translate", {"q": "x", "source": "auto", "target": "de"})
        assert status == 400 and "from en, fr" in answer["error"]


# ---------------------------------------------------------------------------------------------------------------------
# The native API
# ---------------------------------------------------------------------------------------------------------------------
def test_the_native_api_gives_n_best_lists_scores_and_alignments_per_sentence(address, translator):
    payload = {"source": "en", "target": "de", "text": [LEARNED[2], "", LEARNED[0]], "num_beams": 3, "nbest": 2,
               "scores": True, "alignment": True}  # fmt: skip
    status, answer, _ = post_json(address, "/v1/translate", payload)
    assert status == 200
    expected = translator.translate_hypotheses(payload["text"], num_beams=3, nbest=2, scores=True, alignment=True)
    assert answer["source"] == "en" and answer["target"] == "de"
    assert [t["line"] for t in answer["translations"]] == [0, 1, 2]
    for got, hypotheses in zip(answer["translations"], expected, strict=True):
        assert [h["text"] for h in got["hypotheses"]] == [h.text for h in hypotheses]
        assert [h["score"] for h in got["hypotheses"]] == pytest.approx([h.score for h in hypotheses], abs=1e-5)
        assert [h["alignment"] for h in got["hypotheses"]] == [format_alignment(h.alignment) for h in hypotheses]


def test_the_native_api_takes_prefixes_and_constraints_per_sentence_as_the_translator_does(address, translator):
    from vaswani.inference.translator import missing_constraints

    texts = [LEARNED[0], LEARNED[1], LEARNED[2]]
    prefixes, constraints = ["die Ka", None, None], [None, ["Hund"], ["Wetter", "Katze"]]
    payload = {"source": "en", "target": "de", "text": texts, "prefix": prefixes, "constraints": constraints}
    status, answer, _ = post_json(address, "/v1/translate", payload)
    assert status == 200, answer
    expected = translator.translate_hypotheses(texts, prefixes=prefixes, constraints=constraints)
    got = answer["translations"]
    assert [t["hypotheses"][0]["text"] for t in got] == [h[0].text for h in expected]
    assert got[0]["hypotheses"][0]["text"].startswith("die Ka")
    assert "unmet_constraints" not in got[0]  # no constraints given for it
    for translation, phrases in zip(got[1:], constraints[1:], strict=True):
        assert translation["unmet_constraints"] == missing_constraints(phrases, translation["hypotheses"][0]["text"])
    # one text: a prefix string and a list of phrases
    status, answer, _ = post_json(address, "/v1/translate", {"source": "en", "target": "de", "text": LEARNED[3],
                                                             "prefix": "wir", "constraints": ["Buch"]})  # fmt: skip
    assert status == 200, answer
    (expected,) = translator.translate_hypotheses([LEARNED[3]], prefixes=["wir"], constraints=[["Buch"]])
    assert answer["translations"][0]["hypotheses"][0]["text"] == expected[0].text


def test_the_native_api_samples_as_the_translator_does(address, translator):
    """`sampling`: from the top token alone it is greedy search; plain sampling gives `nbest` samples per sentence
    of the learnt phrases' translations (the model is sure of them), and is refused where it cannot be honoured."""
    texts = [LEARNED[0], LEARNED[1]]
    payload = {"source": "en", "target": "de", "text": texts, "sampling": {"top_k": 1}}
    status, answer, _ = post_json(address, "/v1/translate", payload)
    assert status == 200, answer
    greedy = translator.translate(texts, num_beams=1)
    assert [t["hypotheses"][0]["text"] for t in answer["translations"]] == greedy
    status, answer, _ = post_json(address, "/v1/translate", {**payload, "sampling": {}, "nbest": 3, "scores": True})
    assert status == 200, answer
    assert [len(t["hypotheses"]) for t in answer["translations"]] == [3, 3]
    assert all(isinstance(h["score"], float) for t in answer["translations"] for h in t["hypotheses"])
    for extra, problem in (
        ({"num_beams": 4}, "num_beams must be 1 (its default with sampling), not 4"),
        ({"paper_decoding": True}, "sampling does not go with paper_decoding"),
        ({"prefix": ["die", None]}, "sampling does not take prefixes or constraints"),
        ({"sampling": {"top_k": -1}}, "sampling.top_k: input should be greater than or equal to 0"),
        ({"sampling": {"top_p": "high"}}, "sampling.top_p must be a number"),
        ({"sampling": {"temperature": 0}}, "sampling.temperature: input should be greater than 0"),
        ({"sampling": {"seed": 1}}, "sampling: unknown field seed: the fields are top_k, top_p, temperature"),
        ({"sampling": True}, "sampling must be an object or null"),
    ):
        status, answer, _ = post_json(address, "/v1/translate", {**payload, **extra})
        assert status == 400 and problem in answer["error"], (extra, answer)
    status, answer, _ = post_json(address, "/v1/translate", {**payload, "num_beams": 1})  # 1 is what it takes
    assert status == 200, answer


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"source": "en", "target": "de", "text": "x", "beams": 3}, "unknown field beams: the fields are"),
        ({"source": "en", "target": "de", "text": "x", "prefix": ["a"]}, "with one text, give one prefix"),
        ({"source": "en", "target": "de", "text": "x", "constraints": [["a"]]}, "with one text, give a list of"),
        ({"source": "en", "target": "de", "text": ["x", "y"], "prefix": ["a"]}, "give a list of 2 prefixes"),
        ({"source": "en", "target": "de", "text": ["x", "y"], "prefix": "a"}, "give a list of 2 prefixes"),
        ({"source": "en", "target": "de", "text": ["x", "y"], "constraints": ["a", "b"]}, "give a list of 2 lists"),
        ({"source": "en", "target": "de", "text": ["x"], "constraints": [["a"], ["b"]]}, "give a list of 1 lists"),
        ({"source": "en", "target": "de", "text": "x", "constraints": ["a", " "]}, "has an empty constraint"),
        (
            {"source": "en", "target": "de", "text": "x", "prefix": "a b c d e f g", "max_new_tokens": 3},
            "does not fit max_new_tokens=3",
        ),
        ({"source": "en", "target": "de", "text": "x", "num_beams": 0}, "num_beams"),
        ({"source": "en", "target": "de", "text": "x", "num_beams": 99}, "num_beams: input should be less than"),
        ({"source": "en", "target": "de", "text": "x", "nbest": 5}, "nbest must be at most num_beams"),
        ({"source": "en", "target": "de", "text": "x", "max_new_tokens": 10**6}, "max_new_tokens: input"),
        ({"source": "en", "target": "de", "text": 3}, "text"),
        ({"source": "en", "target": "de", "text": "x", "length_penalty": float("nan")}, "length_penalty"),
        ({"source": "en", "target": "fr", "text": "x"}, "fr is not supported"),
    ],
)
def test_the_native_api_refuses_bad_options_with_400(address, payload, problem):
    status, answer, _ = post_json(address, "/v1/translate", payload)
    assert status == 400 and problem in answer["error"], answer


# ---------------------------------------------------------------------------------------------------------------------
# Bad input and limits: a clear 4xx each, in LibreTranslate's error shape
# ---------------------------------------------------------------------------------------------------------------------
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "problem"),
    [
        ("/translate", b'{"q": "caf\xe9", "source": "en", "target": "de"}', JSON, 400, "not UTF-8"),
        ("/translate", b"q=caf%E9&source=en&target=de", FORM, 400, "not UTF-8"),
        ("/translate", b"q=caf\xe9&source=en&target=de", FORM, 400, "not UTF-8"),
        ("/translate", b"the cat", {"Content-Type": "text/plain"}, 400, "unsupported content type 'text/plain'"),
        ("/translate", b"q=x&source=en&target=de", {}, 400, "unsupported content type '(none)'"),
        ("/v1/translate", b'{"source": "en"}', FORM, 400, "takes a JSON body"),
        ("/translate", b'{"q": "x", "source": "en",', JSON, 400, "malformed JSON"),
        ("/translate", b'["x"]', JSON, 400, "must be an object"),
        ("/translate", b"[" * 100000 + b"]" * 100000, JSON, 400, "malformed JSON"),
        ("/translate", b"source=en&target=de", FORM, 400, "missing q parameter"),
        ("/translate", b'{"q": 3, "source": "en", "target": "de"}', JSON, 400, "q must be a string or a list"),
        ("/translate", b"q=x&target=de", FORM, 400, "missing source parameter"),
        ("/translate", b"q=x&source=fr&target=de", FORM, 400, "fr is not supported"),
        ("/translate", b"q=x&source=en&target=fr", FORM, 400, "fr is not supported"),
        ("/translate", b"q=x&source=de&target=de", FORM, 400, "not available as a target language from de"),
        ("/translate", b"q=x&source=en&target=de&format=xml", FORM, 400, "format must be text or html"),
        ("/translate", b"q=x&source=en&target=de&alternatives=-1", FORM, 400, "alternatives: input should be"),
        ("/detect", b"", FORM, 400, "missing q parameter"),
        ("/nowhere", b"", FORM, 404, "Not Found"),
    ],
)
def test_bad_requests_get_a_clear_4xx(address, path, body, headers, status, problem):
    got, answer, _ = request(address, "POST", path, body, headers)
    assert got == status and problem in answer["error"], answer


def test_a_multipart_form_works_and_a_file_in_it_is_refused(address, translator):
    boundary = "b0undary"

    def multipart(*parts: str) -> bytes:
        return ("".join(f"--{boundary}\r\n{part}\r\n" for part in parts) + f"--{boundary}--\r\n").encode()

    fields = [f'Content-Disposition: form-data; name="{k}"\r\n\r\n{v}' for k, v in
              (("q", LEARNED[3]), ("source", "en"), ("target", "de"))]  # fmt: skip
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    status, answer, _ = request(address, "POST", "/translate", multipart(*fields), headers)
    assert status == 200 and answer == {"translatedText": translator.translate([LEARNED[3]])[0]}
    upload = 'Content-Disposition: form-data; name="file"; filename="../../etc/passwd"\r\n\r\nx'
    status, answer, _ = request(address, "POST", "/translate", multipart(*fields, upload), headers)
    assert status == 400 and "files are not accepted" in answer["error"]


def test_every_limit_is_a_clear_4xx_and_the_server_goes_on(models, translator):
    limits = Limits(max_request_bytes=300, max_request_characters=60, max_request_sentences=2, max_request_seconds=0.3)
    with running(models, limits=limits, max_wait=1.0) as address:  # a lone request waits 1 s for company
        status, answer, _ = request(address, "POST", "/translate", b"q=" + b"a" * 400 + b"&source=en&target=de", FORM)
        assert status == 413 and "exceeds the limit of 300 bytes" in answer["error"]
        status, answer, _ = post_json(address, "/translate", {"q": ["a" * 40, "b" * 40], "source": "en",
                                                              "target": "de"})  # fmt: skip
        assert status == 400 and "request (80) exceeds text limit (60 characters)" in answer["error"]
        status, answer, _ = post_json(address, "/translate", {"q": "A b. C d. E f.", "source": "en", "target": "de"})
        assert status == 400 and "3 sentences" in answer["error"]
        status, answer, _ = post_json(address, "/v1/translate", {"source": "en", "target": "de", "text": ["a"] * 3})
        assert status == 400 and "3 sentences" in answer["error"]
        status, answer, _ = post_json(address, "/v1/translate", {"source": "en", "target": "de", "text": "a" * 61})
        assert status == 400 and "request (61) exceeds text limit" in answer["error"]
        status, answer, _ = post_json(address, "/translate", {"q": LEARNED[0], "source": "en", "target": "de"})
        assert status == 408 and "longer than the limit of 0.3 s" in answer["error"]
    with running(models, limits=Limits(max_request_bytes=300)) as address:  # the same server settings, no wait
        status, answer, _ = post_json(address, "/translate", {"q": LEARNED[0], "source": "en", "target": "de"})
        assert status == 200 and answer["translatedText"] == translator.translate([LEARNED[0]])[0]


def test_a_body_streamed_past_the_limit_is_refused_while_it_streams(models):
    with running(models, limits=Limits(max_request_bytes=1000)) as address:
        connection = http.client.HTTPConnection(*address, timeout=30)
        chunks = (b"q=" + b"a" * 600, b"b" * 600, b"&source=en&target=de")
        connection.request("POST", "/translate", body=iter(chunks), headers=FORM)  # chunked: no Content-Length
        response = connection.getresponse()
        assert response.status == 413 and "exceeds the limit of 1000 bytes" in json.loads(response.read())["error"]
        connection.close()


def test_a_slow_client_does_not_hold_up_the_others(address, translator):
    with socket.create_connection(address, timeout=30) as slow:  # a body promised and never sent
        slow.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 500\r\n\r\n{\"q\": ")  # fmt: skip
        started = time.monotonic()
        status, answer, _ = post_json(address, "/translate", {"q": LEARNED[2], "source": "en", "target": "de"})
        assert status == 200 and answer["translatedText"] == translator.translate([LEARNED[2]])[0]
        assert time.monotonic() - started < 10


@pytest.mark.parametrize("log_texts", [False, True])
def test_texts_are_logged_only_when_asked(models, log_texts, caplog):
    caplog.set_level("INFO", logger="vaswani.serve")
    with running(models, log_texts=log_texts) as address:
        assert post_json(address, "/translate", {"q": LEARNED[1], "source": "en", "target": "de"})[0] == 200
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "POST /translate 200" in logged and "127.0.0.1" not in logged
    assert (LEARNED[1] in logged) == log_texts


# ---------------------------------------------------------------------------------------------------------------------
# API keys, rate limits, CORS
# ---------------------------------------------------------------------------------------------------------------------
def test_api_keys_are_required_and_each_key_has_its_rate_limit(models, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# our keys\nsecret-one\nsecret-two 2  # two requests a minute\n", encoding="utf-8")
    with running(models, api_keys=ApiKeys.from_file(keys), rate_limit=100) as address:
        payload = {"q": LEARNED[0], "source": "en", "target": "de"}
        status, answer, _ = post_json(address, "/translate", payload)
        assert status == 403 and "provide an API key" in answer["error"]
        for wrong in ("secret", "secret-one2", "SECRET-ONE", ""):
            status, answer, _ = post_json(address, "/translate", {**payload, "api_key": wrong or None})
            assert status == 403, wrong
        client = libretranslatepy.LibreTranslateAPI(url(address), api_key="secret-one")
        assert client.translate(LEARNED[0], "en", "de")
        assert post_json(address, "/translate", payload, {"Authorization": "Bearer secret-one"})[0] == 200
        assert post_json(address, "/v1/translate", {"source": "en", "target": "de", "text": "x"},
                         {"Authorization": "Bearer secret-two"})[0] == 200  # fmt: skip
        assert post_json(address, "/translate", {**payload, "api_key": "secret-two"})[0] == 200
        status, answer, headers = post_json(address, "/translate", {**payload, "api_key": "secret-two"})
        assert status == 429 and "more than 2 requests per minute" in answer["error"]
        assert 1 <= int(headers["retry-after"]) <= 30
        assert post_json(address, "/translate", {**payload, "api_key": "secret-one"})[0] == 200  # its own bucket
        assert request(address, "GET", "/languages")[0] == 200  # no key needed, as LibreTranslate


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_the_first_api_key_of_a_file_an_editor_started_with_a_byte_order_mark_is_accepted(tmp_path, bom):
    """Notepad and PowerShell start a UTF-8 file with a byte-order mark: it is not part of the first key."""
    keys = tmp_path / "keys.txt"
    keys.write_bytes(bom + b"secret-one 5\r\nsecret-two\r\n")
    api_keys = ApiKeys.from_file(keys)
    assert api_keys.check("secret-one")[1] == 5.0
    assert api_keys.check("secret-two")[1] is None
    with pytest.raises(RequestError):
        api_keys.check("\ufeffsecret-one")


def test_a_rate_limit_without_keys_counts_per_client_address(models):
    with running(models, rate_limit=3) as address:
        statuses = [post_json(address, "/detect", {"q": "x"})[0] for _ in range(4)]
        assert statuses == [400, 400, 400, 429]  # two source languages: /detect is a 400, but it counts


def test_cors_is_off_unless_origins_are_named(models, address):
    asked = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"}
    _, _, headers = request(address, "OPTIONS", "/translate", headers=asked)
    assert "access-control-allow-origin" not in headers
    with running(models, cors_origins=["https://example.org"]) as allowed:
        status, _, headers = request(allowed, "OPTIONS", "/translate", headers=asked)
        assert status == 200 and headers["access-control-allow-origin"] == "https://example.org"
        status, _, headers = request(allowed, "OPTIONS", "/translate", headers={**asked, "Origin": "https://x.org"})
        assert status == 400 and "access-control-allow-origin" not in headers


# ---------------------------------------------------------------------------------------------------------------------
# Load: batches form, nothing is lost or mixed up
# ---------------------------------------------------------------------------------------------------------------------
def test_under_load_every_request_gets_its_own_answer_once_and_batches_form(models, translator):
    texts = [[LEARNED[(i + j) % 4] + ("" if j else f" {i}") for j in range(1 + i % 3)] for i in range(64)]
    flat = iter(translator.translate([sentence for batch in texts for sentence in batch]))
    expected = [[next(flat) for _ in batch] for batch in texts]
    with running(models, max_wait=0.05) as address:

        def ask(index):
            status, answer, _ = post_json(address, "/translate", {"q": texts[index], "source": "en", "target": "de"})
            assert status == 200
            return index, answer["translatedText"]

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, range(len(texts))))
        metrics = request(address, "GET", "/metrics")[1]
    assert [index for index, _ in answers] == list(range(len(texts)))
    assert [answer for _, answer in answers] == expected
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines() if line[:1] != "#"}
    sentences = sum(len(batch) for batch in texts)
    assert values['vaswani_sentences_total{pair="en-de"}'] == sentences
    assert values['vaswani_requests_total{endpoint="/translate",status="200"}'] == len(texts)
    assert values["vaswani_batch_sentences_sum"] == sentences
    assert values["vaswani_batch_sentences_count"] < len(texts) / 2  # mean batch size above 2 requests' worth


# ---------------------------------------------------------------------------------------------------------------------
# The HTTP stack: the serve extra's C parser and event loop, the pure-Python ones without them
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not built for Windows")
def test_the_server_runs_the_serve_extras_c_parser_and_loop_and_falls_back_without_them(models, monkeypatch):
    app = create_app(models, ServerSettings())
    config = server_config(app, graceful_seconds=1)
    config.load()
    assert (config.http, config.loop) == http_stack() == ("httptools", "uvloop")  # what the serve extra installs
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"  # every server of this file runs on it

    monkeypatch.setitem(sys.modules, "httptools", None)  # as if not installed: importing it fails
    monkeypatch.setitem(sys.modules, "uvloop", None)
    config = server_config(app, graceful_seconds=1)
    config.load()
    assert (config.http, config.loop) == http_stack() == ("h11", "asyncio")
    assert config.http_protocol_class.__name__ == "H11Protocol"
