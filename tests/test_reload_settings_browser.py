"""Issue 59's High row in a real browser: a page reloaded during a run shows, once the run has ended, the settings
it was launched with (the pairs preset's, and the one changed by hand), not the words preset's defaults; its plan is
the one shown before the launch, and a second Launch runs exactly the first run's config.

The server runs the real app (tests/server.py) with one seam: its training waits at its third step while a `hold`
file exists and no `go` file does, so the reload lands mid-run whatever the machine's speed (no timing assumed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import VOCAB_WORDS
from tests.server import page_errors
from tests.test_browser import review_shot, shot_on_failure, upload_file

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# `python -c LAUNCHER --port N`: app.py's main, its AdamW waiting at the third step of a run while the gate holds
LAUNCHER = """
import os, pathlib, sys, time
import mirror  # the thread policy before torch (mirror.cores)
import torch

GATE = pathlib.Path(os.environ["MIRROR_TEST_GATE"])


class Gated(torch.optim.AdamW):
    def step(self, *args, **kwargs):
        out = super().step(*args, **kwargs)
        self.steps_done = getattr(self, "steps_done", 0) + 1
        if self.steps_done == 3:
            while (GATE / "hold").exists() and not (GATE / "go").exists():
                time.sleep(0.05)
        return out


torch.optim.AdamW = Gated
import app

sys.exit(app.main(sys.argv[1:]))
"""

# every Advanced setting (#mx-set-<name>), the preset and the model as the page shows them
READ_SETTINGS = """() => {
  const out = {};
  for (const el of document.querySelectorAll('[id^="mx-set-"]')) {
    const box = el.querySelector('input[type=checkbox]');
    const input = el.querySelector('input, textarea');
    out[el.id.slice(7)] = box ? box.checked : input ? input.value : null;
  }
  out["(model)"] = document.querySelector('#mx-model input').value;
  const mode = document.querySelector('#mx-mode input[type=radio]:checked');
  out["(preset)"] = mode ? mode.value : null;
  return out;
}"""


@pytest.fixture(scope="module")
def gated_server(tmp_path_factory, tiny_bert) -> Iterator[tuple[str, Path, Path]]:
    """The app on the tiny BERT (general checks off), its training gated: (url, gate folder, runs folder)."""
    from tests.server import serve

    work = tmp_path_factory.mktemp("reload_settings")
    gate = work / "gate"
    gate.mkdir()
    env = {"MIRROR_MODEL_ROOTS": str(tiny_bert), "MIRROR_GENERAL_CHECKS": "0", "MIRROR_TEST_GATE": str(gate)}
    with serve(work, env, command=["-c", LAUNCHER]) as served:
        yield served.url, gate, work / "sessions" / "runs"


def glossary(tmp_path: Path) -> Path:
    """48 rows of two text columns: a name and its longer summary (the pairs preset applies)."""
    rows = [
        f"{a} {b}-{i},{a} {b} is on the {c} with {VOCAB_WORDS[i % 14]}"
        for i, (a, b, c) in enumerate((a, b, c) for a in VOCAB_WORDS[:8] for b in ("red", "blue", "big") for c in "xy")
    ]
    path = tmp_path / "glossary.csv"
    path.write_text("name,summary\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def open_settings(page) -> dict:
    """The Advanced settings opened, and what they, the preset and the model show."""
    from playwright.sync_api import expect

    page.get_by_role("button", name=re.compile(r"^Advanced settings")).click()
    expect(page.locator("#mx-set-temperature input").first).to_be_visible()
    return page.evaluate(READ_SETTINGS)


def plan_line(page) -> str:
    found = re.search(r"Plan: [^)]*\)", page.locator("#mx-estimate").inner_text())
    assert found, page.locator("#mx-estimate").inner_text()
    return found[0]


def run_config(runs: Path, page) -> dict:
    """The config the run the page serves trained with (its tuned model's mirror_config.json)."""
    link = page.locator("#mx-result a", has_text="Link to this run").get_attribute("href")
    folder = runs / link.split("run=")[1]
    tuned = folder / "tuned_model" if (folder / "tuned_model").is_dir() else folder / "model"
    return json.loads((tuned / "mirror_config.json").read_text(encoding="utf-8"))["config"]


def test_a_reload_during_a_run_keeps_the_settings_launch_runs(gated_server, browser, tiny_bert, tmp_path):
    from playwright.sync_api import expect

    url, gate, runs = gated_server
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors = page_errors(page)  # (but Gradio's own plot race: tests/server.py)
    with shot_on_failure(page, "reload_settings_failure.png", closing=context):
        page.goto(url)
        model = page.locator("#mx-model input")
        model.fill(str(tiny_bert))
        model.press("Enter")
        upload_file(page, glossary(tmp_path))
        expect(page.locator("#mx-input")).to_contain_text("48 strings loaded")
        expect(page.locator("#mx-input")).to_contain_text("is tuned with its name")
        expect(page.locator("#mx-estimate")).to_contain_text("Plan:", timeout=180_000)
        shown = open_settings(page)
        assert shown["temperature"] == "0.05" and shown["epochs"] == "1", shown  # the pairs preset
        box = page.locator("#mx-set-max_steps input").first  # one setting of the user's own
        box.fill("20")
        box.press("Tab")
        expect(page.locator("#mx-estimate")).to_contain_text("Plan: 20 steps")
        before, plan = page.evaluate(READ_SETTINGS), plan_line(page)
        assert before["max_steps"] == "20" and before["(model)"] == str(tiny_bert), before

        (gate / "hold").touch()  # the run waits at its third step until `go`
        page.locator("#mx-launch").click()
        expect(page.locator("#mx-status")).to_contain_text("step", timeout=120_000)
        page.reload()  # mid-run: the page reattaches to it
        expect(page.locator("#mx-input")).to_contain_text("Your run in progress tunes 48 strings")
        # the plan it runs, shown again (a newcomer's reload lost it: steps, time, held-out rows)
        expect(page.locator("#mx-estimate")).to_contain_text(
            "A run of these strings is going on, with the plan it runs below (made and timed at its Launch"
        )
        expect(page.locator("#mx-estimate")).to_contain_text(plan)
        expect(page.locator("#mx-estimate")).to_contain_text("Pairs: ")  # and what it says of the pairs
        during = open_settings(page)
        assert during == before, {k: (before[k], during.get(k)) for k in before if during.get(k) != before[k]}
        (gate / "go").touch()
        expect(page.locator("#mx-result")).to_contain_text("Done", timeout=300_000)
        expect(page.locator("#mx-input")).to_contain_text("loaded again")
        # after the end: the plan is the one shown before the launch, and so are the settings Launch would use
        expect(page.locator("#mx-estimate")).to_contain_text(plan, timeout=120_000)
        after = page.evaluate(READ_SETTINGS)
        assert after == before, {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
        review_shot(page, "reload_settings_after_end.png")

        # and Launch runs them: the second run's config is the first one's
        first = run_config(runs, page)
        first_link = page.locator("#mx-result a", has_text="Link to this run").get_attribute("href")
        page.locator("#mx-launch").click()
        other = page.locator(f'#mx-result a[href*="run="]:not([href="{first_link}"])')  # the second run's link
        expect(other.first).to_be_visible(timeout=300_000)
        expect(page.locator("#mx-result")).to_contain_text("Done", timeout=300_000)
        second = run_config(runs, page)
        assert second == first, {k: (first[k], second.get(k)) for k in first if second.get(k) != first[k]}
        assert first["temperature"] == 0.05 and first["max_steps"] == 20
        assert not errors, errors
