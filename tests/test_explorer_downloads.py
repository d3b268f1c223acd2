"""The app's download links (explorer.share.downloads, served by ui.web.downloads): no server path in them, only
registered files served."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from explorer.share.downloads import Downloads
from ui.web.downloads import DownloadRoute


@pytest.fixture
def served(tmp_path):
    downloads = Downloads(max_links=3)
    app = Starlette(
        routes=[Route("/{rest:path}", lambda request: PlainTextResponse("gradio"), methods=["GET", "POST"])],
        middleware=[Middleware(DownloadRoute, downloads=downloads)],
    )
    return downloads, TestClient(app), tmp_path


def test_a_link_names_the_file_not_its_folder_and_serves_it_whole_and_in_ranges(served):
    downloads, client, tmp = served
    f = tmp / "run folder" / "mirror-model é.zip"
    f.parent.mkdir()
    f.write_bytes(b"PK" + bytes(range(256)) * 40)
    link = downloads.link(f)
    assert re.fullmatch(r"download/[\w-]{24}/mirror-model%20%C3%A9\.zip", link) and str(tmp) not in link
    assert downloads.link(f) == link  # offered again (a reload, the run restored): the same link
    r = client.get("/" + link)
    assert r.status_code == 200 and r.content == f.read_bytes()
    assert "attachment" in r.headers["content-disposition"] and "no-store" in r.headers["cache-control"]
    assert client.head("/" + link).status_code == 200
    part = client.get("/" + link, headers={"Range": "bytes=2-5"})
    assert part.status_code == 206 and part.content == f.read_bytes()[2:6]
    assert client.get("/prefix/" + link).content == f.read_bytes()  # under a proxy's path prefix too
    assert client.post("/" + link).text == "gradio"  # only GET and HEAD are answered here


def test_only_registered_existing_files_by_their_own_name_are_served(served):
    downloads, client, tmp = served
    secret = tmp / "secret.txt"
    secret.write_text("TOPSECRET")
    kept = tmp / "a.csv"
    kept.write_text("string\ncat\n")
    link = downloads.link(kept)
    token = link.split("/")[1]
    for bad in [
        f"/download/{token}/secret.txt",  # another file's name under a real token
        "/download/" + "A" * 24 + "/a.csv",  # a guessed token
    ]:
        r = client.get(bad)
        assert r.status_code == 404 and "expired" in r.text, bad
    for bad in [f"/download/{token}/..%2Fsecret.txt", f"/download/{token}/../secret.txt"]:
        assert "TOPSECRET" not in client.get(bad).text  # a path is never a name
    kept.unlink()  # the run or session gone: the link says so
    assert client.get("/" + link).status_code == 404
    assert client.get("/gradio_api/file=" + str(secret)).text == "gradio"  # other paths reach the app untouched


def test_the_oldest_links_are_forgotten_past_the_cap(served):
    downloads, client, tmp = served
    files = [tmp / f"{i}.csv" for i in range(4)]
    for f in files:
        f.write_text("x")
    links = [downloads.link(f) for f in files]  # cap 3: the first is forgotten
    assert client.get("/" + links[0]).status_code == 404
    assert all(client.get("/" + link).status_code == 200 for link in links[1:])
    assert downloads.link(files[0]) != links[0]  # offered again: a new link


def test_one_visitors_links_push_out_only_its_own(tmp_path):
    """Issue 58 (Low): one page made 300 links in 33 s; the shared registry would push out everyone's. A visitor
    past its own cap loses its own oldest link, nobody else's."""
    from explorer.share.downloads import Downloads

    downloads = Downloads(max_links=1000, per_owner=3)
    files = [tmp_path / f"f{i}.csv" for i in range(6)]
    for f in files:
        f.write_text("x")
    victim = downloads.link(files[0], "victim")
    spam = [downloads.link(f, "stranger") for f in files[1:]]
    token = lambda link: link.split("/")[1]  # noqa: E731
    assert downloads.file(token(victim), files[0].name) == files[0].resolve()  # still served
    assert downloads.file(token(spam[0]), files[1].name) is None  # the stranger's oldest went
    assert all(downloads.file(token(s), f.name) is not None for s, f in zip(spam[-3:], files[-3:], strict=True))
    assert len(downloads.by_token) == 4 and set(downloads.by_owner) == {"victim", "stranger"}


# ------------------------------------------------- the API's files in Gradio's cache (ui.web.served, issue 58)


def test_the_apis_cached_names_live_as_long_as_the_runs_files(tmp_path):
    import os

    from ui.web.served import ServedFiles

    cache, run = tmp_path / "cache", tmp_path / "work" / "runs" / "r1"
    (run / "exports").mkdir(parents=True)
    zip_, export = run / "model.zip", run / "exports" / "all.zip"
    zip_.write_bytes(b"weights")
    export.write_bytes(b"rows")
    served = ServedFiles(lambda: cache)
    name = Path(served.serve(zip_))
    assert re.fullmatch(r"[0-9a-f]{64}", name.parent.name) and name.parent.parent == cache and name.name == "model.zip"
    assert name.samefile(zip_) and served.serve(zip_) == str(name)  # a link; the same file asked again: the same name
    old_export = Path(served.serve(export))

    fresh = run / "model.zip.tmp"  # the run writes its zip anew (as packaging does: a new file renamed over it)
    fresh.write_bytes(b"weights, again")
    os.replace(fresh, zip_)
    export.unlink()  # an export dropped to make room
    new = Path(served.serve(zip_))
    assert new != name and new.read_bytes() == b"weights, again"
    assert not name.parent.exists() and not old_export.parent.exists()  # the replaced and the dropped file's names

    os.unlink(new)  # Gradio's delete_cache removed it: asked again, it is made again
    assert Path(served.serve(zip_)).read_bytes() == b"weights, again"

    other = tmp_path / "work" / "runs" / "r2"
    other.mkdir()
    (other / "index.zip").write_bytes(b"index")
    kept = Path(served.serve(other / "index.zip"))
    served.forget(run)  # the run is about to be removed: its names go now, another run's stay
    assert list(cache.iterdir()) == [kept.parent] and kept.is_file()


def test_gradio_is_told_to_serve_nothing_of_the_work_folder(tmp_path):
    from mirror.errors import MirrorError
    from ui.web.served import blocked_paths

    work = tmp_path / "gradio" / "mirror-explorer"  # the default: inside Gradio's upload folder
    assert blocked_paths(work, tmp_path / "gradio", {}) == [str(work.resolve())]
    env = {"GRADIO_BLOCKED_PATHS": "/etc, /root"}  # the operator's own stay blocked
    assert blocked_paths(work, tmp_path / "gradio", env) == [str(work.resolve()), "/etc", "/root"]
    for uploads in (work, work / "gradio"):  # Gradio's uploads in the work folder: blocked, none could be used
        with pytest.raises(MirrorError, match="GRADIO_TEMP_DIR"):
            blocked_paths(work, uploads, {})
