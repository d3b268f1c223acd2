"""explorer.uploads through MirrorApp: a model zip handed out is taken back and served again; hostile zips
(unsafe paths, links, module paths out of the zip, zip bombs) are refused before anything is unpacked; an upload's
file name never becomes a path; the per-client upload quota (ASGI middleware) counts and forgets.

(The quota over HTTP, against the real server: tests/test_app_ui.py.)
"""

from __future__ import annotations

import asyncio
import json
import time
import zipfile
from pathlib import Path

import pytest

from explorer import MirrorApp, Settings
from explorer.uploads import UploadQuota, display_name
from tests.conftest import WORDS, train, tree, tuned_session
from tests.upload_corpus import rewrite_zip

# ---------------------------------------------------------------------------------------------- model zips


def test_a_downloaded_model_zip_can_be_served_again(app, tuned, tiny_bert):
    zip_path = tuned.run.model_zip
    s = app.session()
    assert [e.kind for e in app.use_saved_model(s, str(zip_path))] == ["error"]  # no strings loaded yet
    app.load_pasted(s, "\n".join(WORDS[:8]))
    events = list(app.use_saved_model(s, str(zip_path)))
    assert events[-1].kind == "done", events[-1]
    assert s.run.base_model == str(tiny_bert) and s.run.n_texts == 8
    assert app.search(s, "cat", 3)[0]["tuned"][0]["text"] == "cat"


def test_unsafe_or_wrong_zips_are_refused(app, tmp_path):
    s = app.session()
    app.load_pasted(s, "\n".join(WORDS))
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../escape.txt", "x")
    last = list(app.use_saved_model(s, str(evil)))[-1]
    assert last.kind == "error" and "unsafe path" in last.text
    assert not (tmp_path / "escape.txt").exists()
    notzip = tmp_path / "model.zip"
    notzip.write_text("hello")
    assert "not a valid zip" in list(app.use_saved_model(s, str(notzip)))[-1].text
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("readme.txt", "x")
    assert "does not contain a model folder" in list(app.use_saved_model(s, str(empty)))[-1].text
    assert s.run is None and not any(app.runs.root.glob("*"))


def link_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16) | 0  # a symbolic link
    return info


def test_unsafe_model_zips_never_write_outside_the_session(app, tmp_path):
    """Zip entries with absolute paths, `..`, drive letters or links are refused before anything is unpacked."""
    s = app.session()
    app.load_pasted(s, "\n".join(WORDS))
    for name, make in [
        ("abs.zip", lambda zf: zf.writestr("/tmp/evil_abs.txt", "x")),
        ("dots.zip", lambda zf: zf.writestr("m/../../../evil_dots.txt", "x")),
        ("drive.zip", lambda zf: zf.writestr("C:/evil_drive.txt", "x")),
        ("link.zip", lambda zf: zf.writestr(link_entry("m/config.json"), "/etc/passwd")),
    ]:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as zf:
            make(zf)
        last = list(app.use_saved_model(s, str(path)))[-1]
        assert last.kind == "error" and "unsafe path" in last.text, (name, last)
    assert not list(tmp_path.rglob("evil_*")) and not Path("/tmp/evil_abs.txt").exists()
    assert s.run is None and tree(app.runs.root) == []


# Attack review, uploaded model zips: what one anonymous visitor could do with a zip, and why they no longer can.


@pytest.mark.parametrize("where", ["absolute", "escaping"])
def test_a_module_path_outside_the_zip_is_refused(app, tiny_bert, tmp_path, where):
    """modules.json used to be followed anywhere: an uploaded zip loaded another session's tuned model."""
    victim = tuned_session(app, tiny_bert)
    target = str(victim.run.folder / "model") if where == "absolute" else "../../../" + victim.id + "/x"

    def edit(name: str, data: bytes):
        if name.endswith("modules.json"):
            modules = json.loads(data)
            modules[0]["path"] = target
            return json.dumps(modules)
        return data

    evil = rewrite_zip(victim.run.model_zip, tmp_path / f"{where}.zip", edit)
    attacker = app.session()
    app.load_pasted(attacker, "\n".join(WORDS))
    last = list(app.use_saved_model(attacker, str(evil)))[-1]
    assert last.kind == "error" and "outside" in last.text, last
    assert str(app.settings.work_dir) not in last.text and attacker.run is None


def test_a_zip_bomb_under_the_header_limit_is_refused(app, tmp_path):
    small = MirrorApp(Settings(work_dir=app.settings.work_dir, max_model_bytes=10 * 2**20))
    s = small.session()
    small.load_pasted(s, "\n".join(WORDS))
    for name, size in (("over.zip", 12 * 2**20), ("padded.zip", 5 * 2**20)):  # over the limit; 1000x inflation
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("m/config.json", "{}")
            zf.writestr("m/model.safetensors", b"\0" * size)
        assert path.stat().st_size < 100_000
        last = list(small.use_saved_model(s, str(path)))[-1]
        assert last.kind == "error" and ("unpacks to" in last.text or "inflates" in last.text), last
    assert not any((s.folder / "runs").glob("*/*"))


# ---------------------------------------------------------------------------------------------- text uploads


def test_uploaded_file_names_never_become_paths(app, tiny_bert, tmp_path):
    """The handler gets a path from Gradio; only its base name is ever shown, and nothing is written under it."""
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    names = ["..evil.txt", "evil$(touch pwned);.txt", "<b>evil<b>.txt", "evil\nname.txt", " evil .csv"]
    outside_before = tree(tmp_path)
    for name in names:
        path = uploads / name
        path.write_text("text\ncat\ndog\ncar\n" if name.endswith(".csv") else "cat\ndog\ncar\n")
        s = app.session()
        info = app.load_file(s, str(path))
        assert info["source"] == name and s.texts == ["cat", "dog", "car"]
        assert train(app, s, tiny_bert)[-1].kind == "done"
        assert not [p for p in s.folder.rglob("*") if "evil" in str(p.relative_to(s.folder))]
    assert display_name("../../evil.txt") == "evil.txt" and display_name("/etc/passwd") == "passwd"
    new = set(tree(tmp_path)) - set(outside_before)
    assert all(p.startswith(("sessions", "uploads")) for p in new), new  # nothing written anywhere else
    assert not any(Path(p).name == "pwned" for p in new)


# Attack review, disk: what one client may send through Gradio's upload route in an hour is bounded.
def test_upload_quota_counts_per_client_and_forgets_after_the_window():
    calls = []

    async def inner(scope, receive, send):
        calls.append(scope["path"])

    quota = UploadQuota(inner, quota=1000, window=0.2)
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    def post(length: int, client: str = "1.1.1.1") -> None:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/gradio_api/upload",
            "headers": [(b"content-length", str(length).encode())],
            "client": (client, 1),
        }
        asyncio.run(quota(scope, None, send))

    post(600)
    post(600)  # over 1000 for this client
    post(600, "2.2.2.2")
    assert len(calls) == 2 and sent[0]["status"] == 429
    time.sleep(0.3)
    post(600)
    assert len(calls) == 3
