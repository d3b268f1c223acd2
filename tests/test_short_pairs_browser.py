"""Short pairs (issue 60) in a real browser: an acronym list (expansions, and acronyms that repeat: one acronym with
several expansions) uploaded as a new user would is paired without a hand pick, and the page says so and why; a
category column with a few values is not, and the page names it and says why.

The real app (tests/server.py: `python app.py` in a subprocess) on the tiny BERT, headless Chromium (conftest's
`browser`). Nothing is trained: what is asserted is what the load shows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.test_browser import review_shot, shot_on_failure, upload_file
from tests.test_short_pairs import acronym_rows, write_csv

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_bert) -> Iterator[str]:
    from tests.server import serve

    env = {"MIRROR_MODEL_ROOTS": str(tiny_bert), "MIRROR_GENERAL_CHECKS": "0"}
    with serve(tmp_path_factory.mktemp("short_pairs"), env) as served:
        yield served.url


def test_an_acronym_list_is_paired_without_a_hand_pick_and_a_category_is_named(server, browser, tmp_path):
    from playwright.sync_api import expect

    rows = acronym_rows(300)
    distinct = len({a for _, a in rows})
    acronyms = write_csv(tmp_path / "acronyms.csv", "expansion,acronym", rows)
    kinds = write_csv(
        tmp_path / "kinds.csv", "name,kind", [(f"{e} item", f"kind {i % 4}") for i, (e, _) in enumerate(rows)]
    )
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with shot_on_failure(page, "short_pairs_failure.png", closing=context):
        page.goto(server)
        upload_file(page, acronyms)
        shown = page.locator("#mx-input")
        expect(shown).to_contain_text("300 strings loaded from acronyms.csv")
        expect(shown).to_contain_text("each expansion is tuned with its acronym as its positive")
        expect(shown).to_contain_text(f"{distinct:,} distinct acronym values for 300 rows")
        expect(shown).to_contain_text("300 of 300 strings have a partner")
        review_shot(page, "short_pairs_1_acronyms.png")
        # the Search tab's header is redrawn by the load: the column searched and its partner, before any run
        page.get_by_role("tab", name="② Search").click()
        expect(page.locator("#mx-served")).to_contain_text("Searching the expansion column")
        expect(page.locator("#mx-served")).to_contain_text("type an acronym to find its expansion")
        page.get_by_role("tab", name="① Tune").click()

        upload_file(page, kinds)
        expect(shown).to_contain_text("300 strings loaded from kinds.csv")
        expect(shown).to_contain_text("Pairs: none (no other text column to pair the strings with")
        expect(shown).to_contain_text("kind: only 4 distinct values for 300 rows: a category, not a pair")
        review_shot(page, "short_pairs_2_category.png")
    assert not errors, errors
