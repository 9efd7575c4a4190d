"""vaswani/serve/page.py (issue 42): the translation page, driven in a real browser (Debian's chromium, headless,
through chromedriver and selenium) against a served model. The page types a sentence and shows exactly what
`vaswani translate` prints for it (run as a user runs it), as it is typed and on its button; it switches the pair,
shows alternatives, shows the 403 in words when the server needs a key and none is typed; and the browser's own
network log shows no request to anything but the server.

`make test` installs the browser where it is missing (the Makefile's `browser` target). Without it the browser tests
are skipped, except under CI=true, where they fail: CI must not pass without the browser having run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")

from test_app import LEARNED, request, running  # noqa: E402

from vaswani.serve.limits import ApiKeys, Limits  # noqa: E402
from vaswani.serve.models import ModelSpec, load_models  # noqa: E402
from vaswani.serve.page import FRONTEND_TIMEOUT_MS, PAGE_HEADERS, frontend_settings  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from screenshot_serve import chromium  # noqa: E402

GERMAN = "die Katze sitzt auf der Matte"  # the de-en pair's sentence (the tiny model learned both directions)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless chromium; skipped where it cannot start, except under CI=true."""
    pytest.importorskip("selenium", reason="the dev extra is not installed")
    try:
        driver = chromium(tmp_path_factory.mktemp("profile"), log_network=True)
    except RuntimeError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the browser cannot start: {error}")
        pytest.skip(str(error))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def models(model_folder):
    from vaswani.inference.translator import Translator

    translator = Translator(model_folder, device="cpu")
    return load_models([ModelSpec(model_folder, ("en", "de")), ModelSpec(model_folder, ("de", "en"))],
                       lambda folders: translator)  # fmt: skip


@pytest.fixture(scope="module")
def translated(model_folder):
    """What `vaswani translate` prints for each sentence the test types (the installed command's code, run as a user
    runs it: its own process, the sentences on stdin)."""
    sentences = [LEARNED[0], GERMAN, LEARNED[1]]
    result = subprocess.run([sys.executable, "-m", "vaswani.cli", "translate", "--model", str(model_folder),
                             "--no_progress"], input="\n".join(sentences) + "\n", capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=300, check=True)  # fmt: skip
    return dict(zip(sentences, result.stdout.splitlines(), strict=True))


def wait_until(driver, condition, seconds: float = 30):
    """Until `condition(driver)` holds; an element the page replaced meanwhile is read again at the next poll."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    waiting = WebDriverWait(driver, seconds, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException])
    return waiting.until(condition)


def element(driver, id_: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, id_)


def choose(driver, id_: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(element(driver, id_)).select_by_value(value)


def network_requests(driver) -> list[dict]:
    """The requests the browser sent since the last call (its DevTools log: Network.requestWillBeSent)."""
    sent = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            sent.append(message["params"]["request"])
    return sent


def open_page(driver, address) -> str:
    """Open the page of the server at `address` and wait until it has its pairs; the network log starts here (what the
    browser loaded before, its own new-tab page, is dropped)."""
    base = f"http://{address[0]}:{address[1]}/"
    network_requests(driver)
    driver.get(base)
    wait_until(driver, lambda d: element(d, "pair").get_attribute("length") not in (None, "0"))
    return base


def test_the_page_translates_as_vaswani_translate_does_and_calls_only_the_server(browser, models, translated):
    with running(models) as address:
        base = open_page(browser, address)
        assert [o.text for o in element(browser, "pair").find_elements("tag name", "option")] == [
            "English → German", "German → English"]  # fmt: skip
        assert element(browser, "key-field").is_displayed() is False
        assert element(browser, "spec").get_attribute("href") == base + "spec"

        element(browser, "source").send_keys(LEARNED[0])  # as it is typed: no button
        wait_until(browser, lambda d: element(d, "translation").text == translated[LEARNED[0]])

        choose(browser, "pair", "de|en")
        element(browser, "source").clear()
        element(browser, "source").send_keys(GERMAN)
        element(browser, "translate").click()
        wait_until(browser, lambda d: element(d, "translation").text == translated[GERMAN])

        choose(browser, "pair", "en|de")
        choose(browser, "alternatives", "2")
        element(browser, "source").clear()
        element(browser, "source").send_keys(LEARNED[1])
        element(browser, "translate").click()
        expected = models[("en", "de")].translator.translate_hypotheses([LEARNED[1]], num_beams=4, nbest=3)[0]
        alternatives = [h.text for h in expected[1:]]
        wait_until(browser, lambda d: [li.text for li in d.find_elements("css selector", "#alternative-list li")]
                   == alternatives)  # fmt: skip
        assert element(browser, "translation").text == translated[LEARNED[1]] == expected[0].text

        sent = network_requests(browser)
    assert all(r["url"].startswith(base) or r["url"].startswith("data:") for r in sent), [r["url"] for r in sent]
    translations = [json.loads(r["postData"]) for r in sent if r["url"] == base + "translate"]
    assert {(t["source"], t["target"]) for t in translations} == {("en", "de"), ("de", "en")}
    assert {"frontend/settings", "languages", "static/page.js", "static/page.css"} <= {
        r["url"].removeprefix(base) for r in sent}  # fmt: skip


def test_refusals_are_shown_in_words_a_missing_key_first(browser, models, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("secret 2\n", encoding="utf-8")  # two requests a minute
    with running(models, api_keys=ApiKeys.from_file(keys), limits=Limits(max_request_characters=40)) as address:
        base = open_page(browser, address)
        assert element(browser, "key-field").is_displayed()
        element(browser, "source").send_keys(LEARNED[0])
        element(browser, "translate").click()
        wait_until(browser, lambda d: "This server needs an API key: type yours in the API key field"
                   in element(d, "error").text)  # fmt: skip
        assert element(browser, "translation").text == ""

        element(browser, "api-key").send_keys("secret")
        element(browser, "translate").click()
        wait_until(browser, lambda d: element(d, "translation").text != "" and not element(d, "error").is_displayed())

        element(browser, "translate").click()  # the third request of the minute
        wait_until(browser, lambda d: "Too many requests: wait" in element(d, "error").text)

        element(browser, "source").send_keys(" and more words than forty")
        element(browser, "translate").click()
        wait_until(browser, lambda d: "this server translates at most 40 at a time" in element(d, "error").text)
        sent = network_requests(browser)
    assert all(r["url"].startswith(base) or r["url"].startswith("data:") for r in sent), [r["url"] for r in sent]


def test_the_page_is_served_with_a_policy_that_allows_this_server_only_and_can_be_turned_off(models):
    with running(models) as address:
        status, page, headers = request(address, "GET", "/")
        assert status == 200 and headers["content-type"].startswith("text/html") and 'src="static/page.js"' in page
        assert headers["content-security-policy"] == PAGE_HEADERS["Content-Security-Policy"]
        assert "default-src 'none'" in headers["content-security-policy"]
        assert "://" not in page  # no address of another server: every path is relative to this one
        status, settings, _ = request(address, "GET", "/frontend/settings")
        assert status == 200 and settings["pairs"] == [
            {"source": "en", "target": "de"},
            {"source": "de", "target": "en"},
        ]
        assert (settings["keyRequired"], settings["charLimit"], settings["frontendTimeout"]) == (False, 10000, 500)
    with running(models, web_ui=False) as address:
        assert [request(address, "GET", path)[0] for path in ("/", "/static/page.js")] == [404, 404]
        assert request(address, "GET", "/frontend/settings")[0] == 200  # LibreTranslate's API still answers it


def test_frontend_settings_say_what_the_page_needs():
    settings = frontend_settings([("en", "de"), ("de", "fr")], {"en": "English"}, Limits(max_request_characters=99),
                                 keys_required=True)  # fmt: skip
    assert settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "de", "name": "de"},
    }
    assert (settings["keyRequired"], settings["apiKeys"], settings["charLimit"]) == (True, True, 99)
    assert settings["frontendTimeout"] == FRONTEND_TIMEOUT_MS and settings["maxAlternatives"] == 15
