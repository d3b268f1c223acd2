"""Real-browser end-to-end test: `python app.py` in a subprocess, driven by Playwright with Debian's chromium.

upload 50 words -> tune the bundled model for a few steps -> search, asserting what the page shows.
Screenshots go to tests/artifacts/. Without a chromium executable the test skips (on CI, CI=true, it fails).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import urljoin

import pytest

from tests.server import ROOT, serve_app

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ON_CI = os.environ.get("CI", "").lower() == "true"
WORDS = (ROOT / "examples" / "small_words.txt").read_text().split()[:50]

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def chromium_or_skip() -> str:
    exe = next((p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)), None)
    if exe is None:
        reason = "no chromium executable (apt-get install chromium, or scripts/ensure_chromium.sh)"
        if ON_CI:
            pytest.fail(reason + ": the browser test is required on CI")
        pytest.skip(reason)
    return exe


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    with serve_app(tmp_path_factory.mktemp("browser_app")) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    exe = chromium_or_skip()
    if ON_CI:
        from playwright.sync_api import sync_playwright
    else:
        sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
        sync_playwright = sync_api.sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


def test_upload_tune_search_in_a_real_browser(server, browser, tmp_path):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    words = tmp_path / "fifty_words.txt"
    words.write_text("\n".join(WORDS) + "\n\n" + WORDS[0] + "\n")  # an empty line and a duplicate, dropped
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(60_000)
    try:
        page.goto(server)
        page.wait_for_selector("#mx-launch")
        page.screenshot(path=ARTIFACTS / "browser_1_start.png", full_page=True)

        # 1. upload: counts and the detected preset appear
        page.locator("#mx-upload input[type=file]").set_input_files(str(words))
        summary = page.locator("#mx-input")
        expect(summary).to_contain_text("50 strings loaded")
        text = summary.inner_text()
        assert "1 empty dropped" in text and "1 duplicate removed" in text and "words preset" in text
        expect(page.locator("#mx-estimate")).to_contain_text("Plan:")

        # 2. a few steps: batch 16, max 3 steps (set in the Advanced accordion)
        page.get_by_text("Advanced settings").click()
        for name, value in (("batch_size", "16"), ("max_steps", "3")):
            box = page.locator(f"#mx-set-{name} input").first
            box.fill(value)
            box.press("Tab")
        expect(page.locator("#mx-estimate")).to_contain_text("Plan: 3 steps")

        # 3. tune: a progress bar or status while it runs, then the summary, loss curve and downloads
        page.locator("#mx-launch").click()
        expect(page.locator("#mx-result")).to_contain_text("Done: your tuned model is served", timeout=240_000)
        result = page.locator("#mx-result").inner_text()
        assert "3 / 3" in result and "cpu" in result and "bundled" in result
        assert "Tuned and indexed" in page.locator("#mx-status").inner_text()
        assert page.locator("#mx-loss").is_visible()
        # the downloads are served: the index zip is a real zip, the model link answers
        model_href = page.locator("#mx-model-zip a[href]").first.get_attribute("href")
        index_href = page.locator("#mx-index-zip a[href]").first.get_attribute("href")
        assert model_href.endswith("mirror-model.zip") and index_href.endswith("mirror-index.zip")
        index_zip = page.request.get(urljoin(server, index_href))
        assert index_zip.ok and index_zip.body()[:2] == b"PK"
        assert page.request.head(urljoin(server, model_href)).ok
        page.screenshot(path=ARTIFACTS / "browser_2_tuned.png", full_page=True)

        # 4. search: tuned and base hits side by side
        page.get_by_role("tab", name="② Search").click()
        expect(page.locator("#mx-served")).to_contain_text("Searching 50 strings")
        page.locator("#mx-queries textarea").fill("kitten\npuppy")
        page.locator("#mx-search-btn").click()
        expect(page.locator("#mx-results .mx-query")).to_have_count(2)
        queries = page.locator("#mx-results .mx-query")
        assert queries.count() == 2
        first = queries.nth(0).inner_text()
        assert "kitten" in first and "Tuned (mirror)" in first and "Base · bundled" in first
        assert queries.nth(0).locator("tbody tr").count() == 20  # k=10 hits on each side
        page.screenshot(path=ARTIFACTS / "browser_3_search.png", full_page=True)
        assert not errors, errors
    except Exception:
        page.screenshot(path=ARTIFACTS / "browser_failure.png", full_page=True)
        raise
    finally:
        page.close()
