"""Abuse review (issue 26), each finding reproduced against the real server over HTTP: the upload quota with chunked
bodies, invented X-Forwarded-For addresses and several visitors behind one address; repeated exports of one run by
two sessions; numbers that are not numbers; strings of invisible characters; the server's own log.

The pieces underneath are tested without a server: tests/test_explorer_uploads.py (UploadQuota),
tests/test_explorer_exports.py (exports reused and charged), tests/test_mirror_inputs.py (invisible strings).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import WORDS
from tests.server import Served, serve

API_TINY = {"max_steps": 2, "batch_size": 4, "device": "cpu"}
BODY = b"word\n" * 80_000  # 0.4 MB


def upload_files(root: Path) -> list[Path]:
    """The files Gradio's upload route wrote (each in its own sha256 folder) under its upload folder `root`."""
    return [p for p in root.rglob("*") if p.is_file() and re.fullmatch(r"[0-9a-f]{64}", p.parent.name)]


def chunked_upload(url: str, n_bytes: int, client=None) -> int:
    """A multipart upload sent with Transfer-Encoding: chunked (no Content-Length); the status."""
    import httpx

    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="c.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()

    def body() -> Iterator[bytes]:
        yield head
        for _ in range(n_bytes // 50_000):
            yield b"x" * 50_000
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
    return (client or httpx).post(url + "gradio_api/upload", content=body(), headers=headers, timeout=120).status_code


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory) -> Iterator[tuple[Served, Path]]:
    """A server whose visitors may park 1 MB of uploads, an address 3 MB; Gradio's uploads under our folder."""
    work = tmp_path_factory.mktemp("abuse_quota")
    env = {"MIRROR_UPLOAD_QUOTA_MB": "1", "MIRROR_UPLOAD_ADDRESS_MB": "3", "GRADIO_TEMP_DIR": str(work / "gradio")}
    with serve(work, env) as served:
        yield served, work / "gradio"


@pytest.mark.slow
def test_chunked_and_spoofed_uploads_stay_within_the_quota(quota_server):
    import httpx

    served, uploads = quota_server
    url = served.url + "gradio_api/upload"
    # a new invented X-Forwarded-For on every request: the peer (no trusted proxy) is what counts
    codes = [
        httpx.post(url, files={"files": (f"f{i}.txt", BODY)}, headers={"X-Forwarded-For": f"10.9.8.{i}"}).status_code
        for i in range(5)
    ]
    assert codes == [200, 200, 429, 429, 429], codes
    before = upload_files(uploads)
    # chunked bodies are counted as they arrive: refused, and nothing of them lands on disk
    assert [chunked_upload(served.url, 2_000_000) for _ in range(3)] == [429, 429, 429]
    assert chunked_upload(served.url, 15_000_000) == 429
    assert upload_files(uploads) == before and sum(p.stat().st_size for p in before) <= 2**20


@pytest.mark.slow
def test_a_second_visitor_behind_the_same_address_can_still_upload(quota_server):
    import httpx

    served, _ = quota_server
    url = served.url + "gradio_api/upload"
    alice, bob = httpx.Client(timeout=60), httpx.Client(timeout=60)
    for browser in (alice, bob):
        browser.get(served.url)  # the page gives each browser its visitor cookie
    assert alice.cookies.get("mirror_visitor") != bob.cookies.get("mirror_visitor")
    spent = [alice.post(url, files={"files": (f"a{i}.txt", BODY + bytes([i]))}).status_code for i in range(3)]
    assert spent == [200, 200, 429]  # alice has used her 1 MB
    assert bob.post(url, files={"files": ("b.txt", BODY + b"b")}).status_code == 200  # bob is not locked out
    assert chunked_upload(served.url, 200_000, bob) == 200  # a chunked upload within the quota is accepted


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_bert) -> Iterator[tuple[Served, dict, Path]]:
    """A server with the tiny model allowed and one run trained through /train: (server, summary, runs folder)."""
    from gradio_client import Client

    work = tmp_path_factory.mktemp("abuse_app")
    with serve(work, {"MIRROR_MODEL_ROOTS": str(tiny_bert), "MIRROR_GENERAL_CHECKS": "0"}) as served:
        client = Client(served.url, verbose=False)
        summary = client.predict(texts="\n".join(WORDS), model=str(tiny_bert), settings=API_TINY, api_name="/train")[0]
        yield served, {**summary, "client": client}, work / "sessions" / "runs"


def call(url: str, api: str, data: list) -> str:
    """A raw JSON call of a named endpoint (what a script can send that gradio_client would not): the event text."""
    import httpx

    body = json.dumps({"data": data})  # NaN and Infinity as JSON allows them in JavaScript
    r = httpx.post(f"{url}gradio_api/call/{api}", content=body, headers={"content-type": "application/json"})
    r.raise_for_status()
    with httpx.stream("GET", f"{url}gradio_api/call/{api}/{r.json()['event_id']}", timeout=120) as events:
        return "".join(events.iter_text())


@pytest.mark.slow
def test_numbers_that_are_not_numbers_get_a_message_and_no_traceback(trained):
    served, summary, _ = trained
    run = summary["run_id"]
    cases = {
        ("search", float("nan")): "k must be a finite number",
        ("search", float("inf")): "k must be a finite number",
        ("search", "ten"): "k must be a number",
        ("moved", float("nan")): "limit must be a finite number",
        ("moved", -1): "limit must be a whole number from 1 to",
        ("moved", 1e15): "limit must be a whole number from 1 to",
        ("moved", 2.5): "limit must be a whole number, not 2.5",
    }
    for (api, value), message in cases.items():
        data = ["cat", value, False, run] if api == "search" else ["", value, run]
        text = call(served.url, api, data)
        assert "event: error" in text and message in text, (api, value, text)
    text = call(served.url, "export", ["parquet", [1.5], run])
    assert "whole row numbers" in text, text
    log = served.log.read_text()
    assert "Traceback" not in log and "ValueError" not in log and "OverflowError" not in log, log[-3000:]


@pytest.mark.slow
def test_strings_of_invisible_characters_are_refused_as_empty(trained, tiny_bert):
    served, _, _ = trained
    text = call(served.url, "train", ["\u200b\n\u202e\n\ufeff\n\u200b\u200b", None, "", str(tiny_bert), "auto", {}])
    assert "event: error" in text and "found 0 usable strings" in text and "4 empty" in text, text


@pytest.mark.slow
def test_repeated_all_exports_by_two_sessions_grow_the_disk_by_one_export(trained):
    from gradio_client import Client

    from explorer.runs.accounts import disk_usage

    served, summary, runs = trained
    folder = runs / summary["run_id"]
    own, by_link = summary["client"], Client(served.url, verbose=False)
    before = disk_usage(folder)
    first = own.predict(fmt="all", rows=[], run="", api_name="/export")
    one = disk_usage(folder) - before
    for i in range(7):  # 8 exports in all, alternating the run's own session and one that opened it by its link
        if i % 2:
            own.predict(fmt="all", rows=[], run="", api_name="/export")
        else:
            by_link.predict(fmt="all", rows=[], run=summary["run_id"], api_name="/export")
    assert one > 0 and disk_usage(folder) - before <= 1.1 * one, (one, disk_usage(folder) - before)
    assert len(list((folder / "exports").iterdir())) == 1 and Path(first).name.endswith("-all.zip")


@pytest.mark.slow
def test_library_log_lines_print_cleanly(trained):
    served, _, _ = trained
    log = served.log.read_text()
    assert "Logging error" not in log, log[-3000:]
    # the run built an index: FAISS says which library it loaded through its own logger, as a plain line
    assert re.search(r"^\S+ \S+ INFO faiss\.loader: Successfully loaded faiss", log, re.M), log[-3000:]
