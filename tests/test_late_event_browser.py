"""A plan event of a page with no session yet that ends after an upload made the page's session (a real browser).

The base model typed, then a file uploaded at once: the model's plan event was sent before the page had a session
and, on a loaded machine, ended after the upload. It sent back a fresh empty session over the upload's: the page
showed the strings loaded, and Launch said "Load at least 2 strings first", or the upload's plan found no strings and
said "Planning the run…" for good (a fresh clone's browser test, once). A page's events sent before it had a session
now share one (explorer.resources.sessions.SessionStore.get). The server here runs the real app with one seam: the
model's event ends 5 s after its handler returns, so the order is certain whatever the machine's speed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.conftest import VOCAB_WORDS
from tests.server import page_errors
from tests.test_browser import shot_on_failure, upload_file

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# `python -c LAUNCHER --port N`: app.py's main, its model-changed event held 5 s after its handler returns
LAUNCHER = """
import sys, time
import mirror  # the thread policy before torch (mirror.cores)
import app

built = app.build_demo


def build_demo(a=None):
    demo = built(a)
    held = [f for f in demo.fns.values() if f.name == "on_model"]
    if len(held) != 1:  # no event held: no race, and a test that passes on any code
        raise SystemExit(f"the model's event not found to hold ({len(held)} named on_model)")
    handler = held[0].fn

    def late(*args):
        out = handler(*args)
        time.sleep(5)
        return out

    held[0].fn = late
    return demo


app.build_demo = build_demo
sys.exit(app.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def late_server(tmp_path_factory, tiny_bert) -> Iterator[str]:
    from tests.server import serve

    work = tmp_path_factory.mktemp("late_event")
    env = {"MIRROR_MODEL_ROOTS": str(tiny_bert), "MIRROR_GENERAL_CHECKS": "0"}
    with serve(work, env, command=["-c", LAUNCHER]) as served:
        yield served.url


def test_a_late_plan_event_of_a_page_without_a_session_keeps_the_uploads_strings(
    late_server, browser, tiny_bert, tmp_path
):
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors = page_errors(page)
    words = tmp_path / "words.txt"
    words.write_text("\n".join(VOCAB_WORDS) + "\n", encoding="utf-8")
    with shot_on_failure(page, "late_event_failure.png", closing=context):
        page.goto(late_server)
        model = page.locator("#mx-model input")
        model.fill(str(tiny_bert))
        model.press("Enter")  # its plan event is sent now, with no session, and ends 5 s later
        upload_file(page, words)
        expect(page.locator("#mx-input")).to_contain_text(f"{len(VOCAB_WORDS)} strings loaded")
        expect(page.locator("#mx-estimate")).to_contain_text("Plan:", timeout=120_000)
        page.wait_for_timeout(7_000)  # the model's event has ended by now
        page.get_by_role("button", name=re.compile(r"^Advanced settings")).click()
        box = page.locator("#mx-set-max_steps input").first
        box.fill("2")
        box.press("Tab")
        expect(page.locator("#mx-estimate")).to_contain_text("Plan: 2 steps")  # the session still holds the strings
        page.locator("#mx-launch").click()
        expect(page.locator("#mx-result")).to_contain_text("Done", timeout=300_000)
        assert "Load at least 2 strings" not in page.locator("#mx-status").inner_text()
        assert not errors, errors
