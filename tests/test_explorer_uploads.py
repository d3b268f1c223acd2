"""explorer.share.uploads through MirrorApp: a model zip handed out is taken back and served again; hostile zips
(unsafe paths, links, module paths out of the zip, zip bombs) are refused before anything is unpacked; an upload's
file name never becomes a path; the per-client upload quota (ASGI middleware: ui.web.quota) counts and forgets.

(The quota over HTTP, against the real server: tests/test_app_ui.py.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from explorer import MirrorApp, Settings
from explorer.resources import runfacts
from explorer.share.uploads import display_name
from tests.conftest import WORDS, train, tree, tuned_session
from tests.upload_corpus import rewrite_zip
from ui.web.held import HeldRequests
from ui.web.quota import UploadQuota, sign_visitor

# ---------------------------------------------------------------------------------------------- model zips


def test_a_downloaded_model_zip_can_be_served_again(app, tuned, tiny_bert):
    zip_path = tuned.run.model_zip
    s = app.session()
    assert [e.kind for e in app.saved.use_saved_model(s, str(zip_path))] == ["error"]  # no strings loaded yet
    app.loader.load_pasted(s, "\n".join(WORDS[:8]))
    events = list(app.saved.use_saved_model(s, str(zip_path)))
    assert events[-1].kind == "done", events[-1]
    assert s.run.base_model == str(tiny_bert) and s.run.n_texts == 8
    assert app.searcher.search(s, "cat", 3)[0]["tuned"][0]["text"] == "cat"


def test_a_reused_zip_of_a_blend_is_served_as_that_blend(app, tuned, tiny_bert):
    """A newcomer pass: the model zip of a blend, reused, was served as a tuned model ("Loaded and indexed", the
    column "tuned", a blend slider starting at 1 that then blended the blend again): its folder records the blend,
    so the reused run is that blend (α and the run it blends), and a blend of it is α of the tuned weights again."""
    from mirror.encoder import load_encoder
    from ui import render

    parent = tuned.run.folder.name
    assert list(app.saved.blend_run(tuned, 0.5))[-1].kind == "done"
    made = tuned.run
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS[:8]))
    assert list(app.saved.use_saved_model(s, str(made.model_zip)))[-1].kind == "done"
    run = s.run
    assert run.stats["uploaded"] == made.model_zip.name and runfacts.blend_of(run) == (0.5, parent[:8])
    with zipfile.ZipFile(made.model_zip) as z:  # shared with others maybe: no full run id, which would open the run
        assert parent[:8] in z.read("mirror-model/mirror_config.json").decode() and not any(
            parent in z.read(n).decode("utf-8", "replace") for n in z.namelist()
        )
    assert render.done_status(run).startswith(f"Loaded a blend (α = 0.5 of run `{parent[:8]}`) and indexed")
    assert runfacts.served_label(run) == "blend α=0.5" and render.default_alpha(run) == 0.5
    assert "blend α=0.5 of 8 strings from" in app.saved.list_runs([run.folder.name])[0]["label"]

    assert list(app.saved.blend_run(s, 0.5))[-1].kind == "done"  # the same α again: the same weights as the first
    again, first = load_encoder(s.run.folder / "model"), load_encoder(made.folder / "model")
    probe = ["cat", "dog on a bus"]
    np.testing.assert_allclose(again.encode(probe, precision="fp32"), first.encode(probe, precision="fp32"), atol=1e-5)


def test_unsafe_or_wrong_zips_are_refused(app, tmp_path):
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../escape.txt", "x")
    last = list(app.saved.use_saved_model(s, str(evil)))[-1]
    assert last.kind == "error" and "unsafe path" in last.text
    assert not (tmp_path / "escape.txt").exists()
    notzip = tmp_path / "model.zip"
    notzip.write_text("hello")
    assert "not a valid zip" in list(app.saved.use_saved_model(s, str(notzip)))[-1].text
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("readme.txt", "x")
    assert "does not contain a model folder" in list(app.saved.use_saved_model(s, str(empty)))[-1].text
    assert s.run is None and not any(app.runs.root.glob("*"))


def link_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16) | 0  # a symbolic link
    return info


def test_unsafe_model_zips_never_write_outside_the_session(app, tmp_path):
    """Zip entries with absolute paths, `..`, drive letters or links are refused before anything is unpacked."""
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    for name, make in [
        ("abs.zip", lambda zf: zf.writestr("/tmp/evil_abs.txt", "x")),
        ("dots.zip", lambda zf: zf.writestr("m/../../../evil_dots.txt", "x")),
        ("drive.zip", lambda zf: zf.writestr("C:/evil_drive.txt", "x")),
        ("link.zip", lambda zf: zf.writestr(link_entry("m/config.json"), "/etc/passwd")),
    ]:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as zf:
            make(zf)
        last = list(app.saved.use_saved_model(s, str(path)))[-1]
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
    app.loader.load_pasted(attacker, "\n".join(WORDS))
    last = list(app.saved.use_saved_model(attacker, str(evil)))[-1]
    assert last.kind == "error" and "outside" in last.text, last
    assert str(app.settings.work_dir) not in last.text and attacker.run is None


def test_a_zip_bomb_under_the_header_limit_is_refused(app, tmp_path):
    small = MirrorApp(Settings(work_dir=app.settings.work_dir, max_model_bytes=10 * 2**20))
    s = small.session()
    small.loader.load_pasted(s, "\n".join(WORDS))
    for name, size in (("over.zip", 12 * 2**20), ("padded.zip", 5 * 2**20)):  # over the limit; 1000x inflation
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("m/config.json", "{}")
            zf.writestr("m/model.safetensors", b"\0" * size)
        assert path.stat().st_size < 100_000
        last = list(small.saved.use_saved_model(s, str(path)))[-1]
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
        info = app.loader.load_file(s, str(path))
        assert info["source"] == name and s.texts == ["cat", "dog", "car"]
        assert train(app, s, tiny_bert)[-1].kind == "done"
        assert not [p for p in s.folder.rglob("*") if "evil" in str(p.relative_to(s.folder))]
    assert display_name("../../evil.txt") == "evil.txt" and display_name("/etc/passwd") == "passwd"
    new = set(tree(tmp_path)) - set(outside_before)
    assert all(p.startswith(("sessions", "uploads")) for p in new), new  # nothing written anywhere else
    assert not any(Path(p).name == "pwned" for p in new)


# Attack review, disk: what one visitor, one address and everyone may park through Gradio's upload route is bounded;
# the bytes are counted as they arrive (no Content-Length needed), and an address is the peer unless it is a proxy
# named in MIRROR_TRUSTED_PROXIES. (Over HTTP, against the real server: tests/test_abuse.py.)


async def read_body(receive) -> bytes:
    """A request's whole body, as an ASGI app reads it."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


class FakeGradioUpload:
    """Gradio's upload route as far as the middleware sees it: reads the body, writes it to a file, answers the
    file's path as a JSON list."""

    def __init__(self, folder: Path):
        self.folder, self.calls = folder, 0

    async def __call__(self, scope, receive, send):
        body = await read_body(receive)
        self.calls += 1
        path = self.folder / hashlib.sha256(body + bytes([self.calls])).hexdigest() / f"up{self.calls}.bin"
        path.parent.mkdir()
        path.write_bytes(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(path)]).encode()})


def post(
    quota: UploadQuota,
    chunks: list[bytes],
    peer: str = "1.1.1.1",
    headers: dict | None = None,
    path: str = "/gradio_api/upload",
) -> int:
    """One upload through the middleware, its body in `chunks` with no Content-Length (chunked); the status."""
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": (peer, 1),
    }
    asyncio.run(quota(scope, receive, send))
    return sent[0]["status"]


def test_upload_quota_counts_the_bytes_that_arrive_and_keeps_nothing_of_a_refused_body(tmp_path):
    inner = FakeGradioUpload(tmp_path)
    quota = UploadQuota(inner, quota=1000, address_quota=1500, total_quota=10_000)
    assert post(quota, [b"x" * 300, b"x" * 300]) == 200
    assert post(quota, [b"x" * 300] * 3) == 429  # chunked, no Content-Length: cut off at the 4th hundred
    assert inner.calls == 1 and quota.used("@1.1.1.1") == 600  # nothing of the refused body reached Gradio
    # a file removed (consumed, swept) gives its bytes back
    next(tmp_path.rglob("up1.bin")).unlink()
    assert post(quota, [b"x" * 900]) == 200 and quota.used("@1.1.1.1") == 900


def test_upload_quota_believes_x_forwarded_for_only_from_trusted_proxies(tmp_path):
    inner = FakeGradioUpload(tmp_path)
    quota = UploadQuota(inner, quota=1000, address_quota=1000, trusted=["10.0.0.0/8"])
    spoofs = [post(quota, [b"x" * 400], headers={"X-Forwarded-For": f"9.9.9.{i}"}) for i in range(5)]
    assert spoofs == [200, 200, 429, 429, 429]  # the peer 1.1.1.1 is no proxy: its header proves nothing
    assert set(quota.by_address) == {"1.1.1.1"}
    # through the trusted proxy the client is the right-most address that is not a proxy, whatever comes first
    via = [
        post(quota, [b"x" * 400], "10.0.0.2", {"X-Forwarded-For": f"6.6.6.{i}, 5.5.5.5, 10.0.0.9"}) for i in range(3)
    ]
    assert via == [200, 200, 429] and quota.by_address["5.5.5.5"] == 800


def test_upload_quota_is_per_visitor_so_one_does_not_lock_out_an_address(tmp_path):
    inner = FakeGradioUpload(tmp_path)
    quota = UploadQuota(inner, quota=1000, address_quota=2500, total_quota=10_000)
    alice, bob, carol = ({"Cookie": f"mirror_visitor={sign_visitor(c * 32, quota.key)}"} for c in "abc")
    assert post(quota, [b"x" * 1000], headers=alice) == 200
    assert post(quota, [b"x"], headers=alice) == 429  # alice is spent
    assert post(quota, [b"x" * 1000], headers=bob) == 200  # bob, behind the same address, is not
    assert post(quota, [b"x" * 600], headers=carol) == 429  # but the address as a whole is bounded (2,500)


def test_upload_quota_forgets_and_removes_uploads_after_the_window_and_bounds_its_bookkeeping(tmp_path):
    inner = FakeGradioUpload(tmp_path)
    quota = UploadQuota(inner, quota=1000, window=0.2, max_entries=3)
    assert post(quota, [b"x" * 600]) == 200
    assert post(quota, [b"x" * 600]) == 429
    time.sleep(0.3)
    assert post(quota, [b"x" * 600]) == 200
    assert not list(tmp_path.rglob("up1.bin")) and len(list(tmp_path.iterdir())) == 1  # aged out: removed, folder too
    for i in range(4):  # 4 more addresses: the fourth entry waits for the oldest to age out
        post(quota, [b"x"], f"2.2.2.{i}")
    assert len(quota.uploads) <= 3 and post(quota, [b"x"], "3.3.3.3") == 429


def test_an_invented_visitor_cookie_is_no_new_visitor(tmp_path):
    """Issue 37: any 32-hex cookie was a new visitor with a fresh quota (60 of 60 accepted, 24 MB against 1 MiB);
    only a cookie the server signed is one now, and a forged one counts as none (the address's anonymous visitor)."""
    inner = FakeGradioUpload(tmp_path)
    quota = UploadQuota(inner, quota=1000, address_quota=10_000, total_quota=100_000)
    codes = [post(quota, [b"x" * 400], headers={"Cookie": f"mirror_visitor={i:032x}"}) for i in range(6)]
    assert codes == [200, 200, 429, 429, 429, 429] and set(quota.by_visitor) == {"@1.1.1.1"}
    forged = sign_visitor("f" * 32, b"not the server's key")
    assert post(quota, [b"x" * 400], headers={"Cookie": f"mirror_visitor={forged}"}) == 429
    signed = sign_visitor("e" * 32, quota.key)
    assert post(quota, [b"x" * 400], headers={"Cookie": f"mirror_visitor={signed}"}) == 200  # a real one is


def test_refused_uploads_hold_no_place_and_one_address_cannot_fill_the_table(tmp_path):
    """Issue 37: 10,050 one-byte POSTs in 36 s gave every visitor 429 for an hour: the table admitted an entry before
    the body came, and kept refused ones. Now an upload takes a place with its first bytes, a refused one gives it
    back, and one address holds at most a quarter of the table."""
    inner = FakeGradioUpload(tmp_path)
    quota = UploadQuota(inner, quota=10_000, address_quota=10_000, total_quota=100_000, max_entries=8)
    assert post(quota, [b"x" * 10_001]) == 429  # over the quota: refused, forgotten
    assert post(quota, [b""]) == 200 and len(quota.uploads) == 0  # no body: never tracked
    assert [post(quota, [b"x"]) for _ in range(4)] == [200, 200, 429, 429]  # 2 = 8 // 4 places for 1.1.1.1
    assert len(quota.uploads) == 2
    assert post(quota, [b"x"], peer="2.2.2.2") == 200  # others still upload


def test_every_request_body_is_bounded_and_every_request_knows_its_visitor(tmp_path):
    """Issue 37: a 400 MB POST to /gradio_api/queue/join was read into memory (+1.8 GB RSS). Bodies outside the
    upload route are read whole within `max_request` before the app sees them; a larger declared one is refused
    unread."""
    seen: list[dict] = []

    async def app(scope, receive, send):
        body = await read_body(receive)
        seen.append({"body": body, "state": dict(scope.get("state") or {})})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    quota = UploadQuota(app, quota=1000, max_request=1000)
    join = "/gradio_api/queue/join"
    declared = {"Content-Length": str(400 * 2**20)}
    assert post(quota, [b"x" * 10], headers=declared, path=join) == 413 and not seen  # refused unread
    assert post(quota, [b"x" * 600, b"x" * 600], path=join) == 413 and not seen  # chunked: cut off as it passes
    assert post(quota, [b"x" * 600, b"y" * 300], path=join) == 200
    assert seen[-1]["body"] == b"x" * 600 + b"y" * 300
    assert seen[-1]["state"] == {"mirror_visitor": "@1.1.1.1", "mirror_address": "1.1.1.1"}
    signed = sign_visitor("a" * 32, quota.key)
    assert post(quota, [b"{}"], headers={"Cookie": f"mirror_visitor={signed}"}, path=join) == 200
    assert seen[-1]["state"]["mirror_visitor"] == "a" * 32


def test_large_bodies_are_held_within_the_visitor_address_and_server_accounts(tmp_path):
    """Issue 49, High row 1: 20 MB /train bodies from fresh visitors were parsed and held while they waited (30 at
    once: 4.1 -> 9.6 GB). A body over `small` bytes is charged from its first byte (its declared length at once) until
    its handler says it read it or its event is over; past a visitor's, an address's or the server's bytes it is
    refused (429) before it is read."""
    live: set[str] = set()
    states: list[dict] = []

    async def app(scope, receive, send):
        await read_body(receive)
        event = f"e{len(states)}"
        live.add(event)
        states.append(scope["state"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps({"event_id": event}).encode()})

    held = HeldRequests(per_visitor=1000, per_address=2000, total=2500, live=live.__contains__, small=100)
    quota = UploadQuota(app, quota=10**6, max_request=2000, held=held)
    join, big = "/gradio_api/queue/join", [b"x" * 400, b"x" * 400]
    cookie = {"Cookie": f"mirror_visitor={sign_visitor('b' * 32, quota.key)}"}
    assert post(quota, [b"x" * 100], path=join) == 200 and held.held() == 0  # ordinary events: never counted
    assert post(quota, big, path=join) == 200 and held.held("@1.1.1.1") == 800  # held while its event lives
    calls = len(states)
    assert post(quota, big, path=join) == 429 and held.held() == 800  # the same visitor: cut off as it arrives
    declared = {"Content-Length": "800"}
    assert post(quota, big, headers=declared, path=join) == 429 and len(states) == calls  # declared: refused unread
    assert post(quota, big, headers=cookie, path=join) == 200  # another visitor at the same address
    assert post(quota, big, peer="2.2.2.2", path=join) == 200 and held.held() == 2400
    assert post(quota, big, peer="3.3.3.3", path=join) == 429  # the server's 2,500 bytes
    assert post(quota, big, headers={**cookie, "Content-Length": "900"}, peer="2.2.2.2", path=join) == 429
    states[1]["mirror_release"]()  # the first one's handler read it (ui.handlers.consume_request)
    assert held.held() == 1600
    live.discard("e2")  # the second one's event is over (done, failed or cancelled)
    assert held.held() == 800
    assert post(quota, big, peer="3.3.3.3", path=join) == 200
    assert post(quota, big, path="/gradio_api/run/predict") == 200 and held.held() == 1600  # answered: given back


def test_a_zip_of_a_run_that_blended_its_own_records_that_alpha_for_its_blends():
    """A zip holds model/ only, at its run's own blend (the words preset's 0.75, or a pairs run's choice): its page
    serves that α, and a blend of it takes it into account (runfacts.own_blend), as for the run itself. A zip of a
    blend keeps its recorded blend (mirror.blend.recorded_blend), whatever its config says."""
    from types import SimpleNamespace

    from explorer.resources.runfacts import own_blend
    from explorer.runs.saved import uploaded_made
    from ui import render

    def made(info):
        record = uploaded_made(SimpleNamespace(info=info, pooling="mean"), "m.zip", []).record
        return SimpleNamespace(record=record)

    words = made({"config": {"mode": "words", "blend_alpha": 0.75}, "stats": {"steps": 4}})
    assert words.record.training.run_alpha == 0.75 and own_blend(words) == 0.75 and render.default_alpha(words) == 0.75
    trained = made({"config": {"mode": "words", "blend_alpha": 1.0}, "stats": {}})
    assert own_blend(trained) is None and render.default_alpha(trained) == 1.0
    of_blend = made({"config": {"mode": "words", "blend_alpha": 0.75}, "blend": {"alpha": 0.5, "of": "abcd1234"}})
    assert render.default_alpha(of_blend) == 0.5  # the blend it is
