"""The screenshot of `vaswani serve`'s translation page in docs/serving.md (issue 42), and the browser both it and
tests/serve/test_page.py drive: Debian's chromium, headless, through chromedriver and selenium.

The script starts `vaswani serve` for `--model` as a user does (its own process, a free loopback port), opens the page
in chromium, types `--sentence`, waits for its translation and saves the window as a PNG:

    python benchmarks/screenshot_serve.py --model en-de=demo-output --sentence "I have three cats." \\
        --output docs/images/serve-page.png

`make test` installs chromium and chromium-driver where they are missing (Debian's packages; the Makefile's
`browser` target).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common` when run as a script

import common  # noqa: E402

# What Debian's chromium needs to start headless here: no sandbox (root), no GPU, and none of its own connections to
# Google's services (a closed network refuses them, many at a time, at every start).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--disable-extensions")  # fmt: skip


def chromium(user_data_dir: Path, width: int = 1100, height: int = 520, log_network: bool = False):
    """A selenium driver of Debian's chromium (/usr/bin/chromium, /usr/bin/chromedriver), headless, with a new empty
    profile in `user_data_dir`; `log_network`: keep the browser's own network log (`driver.get_log("performance")`).
    Raises RuntimeError when the browser or its driver is missing or does not start."""
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        raise RuntimeError("chromium and chromedriver are not installed: `make browser` (or apt-get install chromium "
                           "chromium-driver) installs them")  # fmt: skip
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    if log_network:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    try:
        return webdriver.Chrome(options=options, service=Service(executable_path=driver))
    except WebDriverException as error:
        raise RuntimeError(f"chromium did not start: {error.msg}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, metavar="[SRC-TGT=]DIR", help="what `vaswani serve --model` takes")
    parser.add_argument("--sentence", default="I have three cats.", help="the text typed into the page")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "images" / "serve-page.png",
                        help="the PNG to write (default: docs/images/serve-page.png)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.output.suffix != ".png":
        parser.error(f"--output {args.output}: give a .png file")
    return args


def main(argv: list[str] | None = None) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    args = parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="screenshot-serve-") as scratch,
        common.vaswani_serve(["--model", args.model], Path(scratch) / "server.log") as port,
    ):
        driver = chromium(Path(scratch) / "profile")
        try:
            driver.get(f"http://127.0.0.1:{port}/")
            WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#pair option"))
            driver.find_element(By.ID, "source").send_keys(args.sentence)
            WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "translation").text.strip())
            args.output.parent.mkdir(parents=True, exist_ok=True)
            partial = args.output.with_name(args.output.name + ".partial")
            partial.write_bytes(driver.get_screenshot_as_png())
            partial.replace(args.output)  # complete, or not there
        finally:
            driver.quit()
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
