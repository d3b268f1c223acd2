"""Issue 58, Low row "server paths in API answers": what the API's file answers say of where the server keeps its
files, through the real server with the work folder where it is by default (inside Gradio's cache).

/train's zips and /export's file came back as `/gradio_api/file=<work folder>/<session>/runs/<id>/…`, naming the
server's folders; now they are Gradio's cache form (`<Gradio's cache>/<64 hex>/<name>`: ui.web.served), still
download, and leave Gradio's cache when their run is removed (they outlived it by hours, uncharged). Gradio's own
upload answer names a path in its cache (`<cache>/<hash>/<name>`), not ours: the client hands it back to name the
file it sent. It names the folder the work folder lies in by default, and Gradio's file route served any file there
(the visitor cookies' key, other sessions' files), and took one as a file input: the work folder is blocked now.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import ROOT, Page, Served, serve

WORDS = (ROOT / "examples" / "small_words.txt").read_text().split()[:40]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_layout(tmp_path_factory) -> Iterator[tuple[Served, Path, Path]]:
    """A server whose work folder is where it is by default: `$GRADIO_TEMP_DIR/mirror-explorer`."""
    root = tmp_path_factory.mktemp("api_paths")
    cache = root / "gradio"
    work = cache / "mirror-explorer"
    env = {"GRADIO_TEMP_DIR": str(cache), "MIRROR_WORK_DIR": str(work), "MIRROR_GENERAL_CHECKS": "0"}
    with serve(root, env) as served:
        yield served, work.resolve(), cache.resolve()


def strings(value) -> Iterator[str]:
    """Every string in a JSON answer."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def files(answer: dict) -> list[dict]:
    """The FileData values of an event's output."""
    out = (answer.get("output") or {}).get("data") or []
    return [v for v in out if isinstance(v, dict) and v.get("meta", {}).get("_type") == "gradio.FileData"]


def assert_names_nothing_of_ours(answer: dict, work: Path, cache: Path) -> None:
    for text in strings(answer.get("output")):
        assert str(work) not in text and "mirror-explorer" not in text and "/runs/" not in text, text
    for f in files(answer):
        assert re.fullmatch(re.escape(str(cache)) + r"/[0-9a-f]{64}/[^/]+", f["path"]), f["path"]


def test_train_and_export_answer_files_in_gradios_cache_form(default_layout):
    served, work, cache = default_layout
    page = Page(served.url)
    settings = {"max_steps": 2, "batch_size": 16}
    answer = page.event("train", {0: "\n".join(WORDS), 5: settings})
    assert answer.get("success"), answer
    zips = files(answer)
    assert len(zips) == 2, answer
    assert_names_nothing_of_ours(answer, work, cache)
    for f, member in zip(zips, ("mirror-model/modules.json", "mirror-index/texts.json"), strict=True):
        assert f["url"].startswith(served.url + "gradio_api/file=" + str(cache) + "/"), f["url"]
        body = page.http.get(f["url"])  # Gradio serves it: what gradio_client downloads
        assert body.status_code == 200, (f, body.status_code)
        with zipfile.ZipFile(io.BytesIO(body.content)) as zf:
            assert member in zf.namelist()
        served_file = Path(f["path"])
        run_file = next(work.rglob(served_file.name))
        assert served_file.samefile(run_file)  # a hard link (one file system here): no second copy on disk
    again = page.event("train", {0: "\n".join(WORDS), 5: {**settings, "seed": 3}})  # another run: its own files
    assert again.get("success") and {f["path"] for f in files(again)}.isdisjoint(f["path"] for f in zips)

    export = page.event("export", {0: "neighbours"})
    assert export.get("success"), export
    assert len(files(export)) == 1
    assert_names_nothing_of_ours(export, work, cache)
    twice = page.event("export", {0: "neighbours"})  # the same file asked again: the same served path
    assert [f["path"] for f in files(twice)] == [f["path"] for f in files(export)]


def test_an_upload_answer_names_a_path_in_gradios_cache_not_ours(default_layout, tmp_path):
    served, work, cache = default_layout
    table = tmp_path / "terms.csv"
    table.write_text("term\n" + "".join(w + "\n" for w in WORDS))
    uploaded = Page(served.url).upload(table)["path"]
    assert re.fullmatch(re.escape(str(cache)) + r"/[0-9a-f]+/terms\.csv", uploaded), uploaded
    assert str(work) not in uploaded


def test_a_removed_runs_served_files_leave_gradios_cache_with_it(default_layout):
    """A run's files handed out by the API are another name of the run's own (charged to its visitor): once the run
    is removed (here: unused past MIRROR_RUN_TTL, swept before the next run writes) they go with it, not hours later
    with Gradio's delete_cache, uncharged, holding its bytes on disk."""
    served, work, cache = default_layout
    page = Page(served.url)
    answer = page.event("train", {0: "\n".join(WORDS[:30]), 5: {"max_steps": 2, "batch_size": 16}})
    assert answer.get("success"), answer
    links = [Path(f["path"]) for f in files(answer)]
    run = answer["output"]["data"][0]["run_id"]
    folder = work / "runs" / run
    assert folder.is_dir() and all(p.is_file() for p in links), (folder, links)
    long_ago = 1_000_000_000  # 2001: past any run TTL
    for p in (folder / ".last_used", folder):
        if p.exists():
            os.utime(p, (long_ago, long_ago))
    other = Page(served.url).event("train", {0: "\n".join(WORDS[10:]), 5: {"max_steps": 2, "batch_size": 16}})
    assert other.get("success"), other
    assert not folder.exists()  # swept before the other run wrote
    left = [str(p) for p in links if p.exists() or p.parent.exists()]
    assert not left, f"the removed run's served files are still in Gradio's cache: {left}"


def test_gradios_file_route_serves_nothing_of_the_work_folder(default_layout, tmp_path):
    """Gradio's file route serves any file under its upload folder, and the work folder is inside it by default
    (Gradio's own upload answer names that folder; the work folder's name is the documented default): the key the
    visitor cookies are signed with, other visitors' session files and runs were a GET away, and a file input naming
    one was read as if uploaded. Now the work folder is one of Gradio's blocked paths: neither served nor taken."""
    served, work, cache = default_layout
    page = Page(served.url)
    key = (work / ".visitor-key").read_text().strip()
    for route in ("gradio_api/file=", "gradio_api/file/"):
        r = page.http.get(served.url + route + str(work / ".visitor-key"))
        assert r.status_code == 403 and key not in r.text, (route, r.status_code, r.text[:200])
    secret = work / "someone-elses-session" / "strings.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("a secret\nanother secret\n")
    r = page.http.get(served.url + "gradio_api/file=" + str(secret))
    assert r.status_code == 403 and "secret" not in r.text, (r.status_code, r.text[:200])
    named = {"path": str(secret), "orig_name": "strings.txt", "meta": {"_type": "gradio.FileData"}}
    answer = page.event("train", {1: named, 5: {"max_steps": 1, "batch_size": 4}})
    assert not answer.get("success") and "not uploaded to it" in str(answer), answer  # refused, not trained on
    # what Gradio's own uploads still do: sent, named by their path in its cache, taken as an input
    table = tmp_path / "terms.txt"
    table.write_text("".join(w + "\n" for w in WORDS))
    upload = page.upload(table)
    assert Path(upload["path"]).parent.parent == cache
    assert page.http.get(served.url + "gradio_api/file=" + upload["path"]).status_code == 200
