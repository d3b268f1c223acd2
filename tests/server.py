"""The real app as a subprocess for tests: `python app.py --port N` with its own work folder and environment."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Served:
    url: str
    proc: subprocess.Popen
    log: Path

    def reset_peak(self) -> None:
        """Start the process's peak resident memory (VmHWM) again from what it holds now (Linux clear_refs)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def cpu(self) -> float:
        """The server process's CPU seconds so far (user + system, all its threads; Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss(self, field: str = "VmRSS") -> int:
        """The server process's resident memory in bytes (Linux); field="VmHWM": its peak so far."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {field}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(
    workdir: Path, env: dict[str, str] | None = None, timeout: float = 180.0, command: list[str] | None = None
) -> Iterator[Served]:
    """Start the app with `env` on top of the test environment; yield it once it answers HTTP 200. `command`: what
    the interpreter runs instead of app.py (given `--port N` after it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "PYTHONUNBUFFERED": "1",
        "MIRROR_WORK_DIR": str(workdir / "sessions"),
        "MIRROR_WARM_UP": "0",  # no background scoring and numba compiling competing with the tests for 2 cores
        **(env or {}),
    }
    log_path = workdir / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, *(command or ["app.py"]), "--port", str(port)],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"app.py exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"app.py did not answer on {url} within {timeout:.0f} s:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
        yield Served(url, proc, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Page:
    """One browser page as the server sees it, over plain HTTP: its cookie jar (the signed visitor cookie comes with
    the first answer), its session hash, and events joined by their function's index, as the page's own JavaScript
    joins them, private ones too (`api_visibility="private"` keeps an event out of the API docs and gradio_client,
    not out of reach: the abuse tests send what a hand-written client can)."""

    def __init__(self, url: str, cookies: bool = True, headers: dict | None = None):
        import httpx

        self.url = url
        jar = {} if cookies else {"cookies": _NoCookies()}
        self.http = httpx.Client(timeout=120, headers=headers or {}, **jar)
        self.hash = uuid.uuid4().hex[:11]
        self.config = self.http.get(url + "config").json()
        self.ids = {c["id"]: c for c in self.config["components"]}

    def fn(self, name: str) -> tuple[int, int | None]:
        """(fn_index, trigger id) of the event whose handler is `name` (e.g. "on_other") or whose API name it is."""
        for i, dep in enumerate(self.config["dependencies"]):
            if dep.get("api_name") == name:  # a private event's is its handler's name
                targets = dep.get("targets") or [[None]]
                return i, targets[0][0]
        raise KeyError(name)

    def upload(self, path: Path) -> dict:
        """A file sent to the upload route, as the value of a file input (a FileData)."""
        with open(path, "rb") as f:
            r = self.http.post(self.url + "gradio_api/upload", files={"files": (path.name, f)})
        r.raise_for_status()
        return {"path": r.json()[0], "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}

    def event(self, name: str, data: list | dict, timeout: float = 120, params: dict | None = None) -> dict:
        """Join event `name` with input values `data` (a list; or a dict {input number: value} over the inputs'
        values as the page starts, None for a gr.State) and read the queue's stream until it completes: its last
        message (`success`, `output`). `params`: the page's own query (`{"run": id}`: a link)."""
        import json

        fn_index, trigger = self.fn(name)
        if isinstance(data, dict):
            inputs = self.config["dependencies"][fn_index]["inputs"]
            start = [None if self.ids[i]["type"] == "state" else self.ids[i]["props"].get("value") for i in inputs]
            data = [data.get(n, value) for n, value in enumerate(start)]
        body = {
            "data": data,
            "event_data": None,
            "fn_index": fn_index,
            "trigger_id": trigger,
            "session_hash": self.hash,
        }
        r = self.http.post(self.url + "gradio_api/queue/join", json=body, params=params or {})
        if r.status_code != 200:
            return {"status": r.status_code, "text": r.text, "success": False}
        event_id = r.json()["event_id"]
        last: dict = {}
        with self.http.stream(
            "GET", self.url + "gradio_api/queue/data", params={"session_hash": self.hash}, timeout=timeout
        ) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, event_id):
                    continue
                last = msg
                if msg.get("msg") == "process_completed":
                    return msg
        return last


class _NoCookies:
    """An httpx cookie jar that keeps nothing: a client that never sends the visitor cookie back."""

    def __new__(cls):
        import http.cookiejar

        import httpx

        class Policy(http.cookiejar.DefaultCookiePolicy):
            def set_ok(self, cookie, request):  # noqa: ARG002
                return False

        jar = http.cookiejar.CookieJar(policy=Policy())
        return httpx.Cookies(jar)


# Gradio's line plot (its AltairPlot component) measures its container `S` in a ResizeObserver callback
# (`S.offsetWidth`); when the container is gone by the time the callback runs (the plot hidden or drawn anew, as the
# loss curve is at a new run's start, while a resize is pending) it throws this. Gradio's race, in its own bundle;
# the page goes on (the next draw measures again). Seen in full suites on 2 loaded cores (the reload tests: the page
# reloaded while the loss curve is drawn), never alone; every browser test of the app's page ignores exactly this.
GRADIO_PLOT_RACE = "Cannot read properties of null (reading 'offsetWidth')"


def page_errors(page, errors: list[str] | None = None) -> list[str]:
    """The page's uncaught script errors as they come (into `errors` when given), but Gradio's own plot race
    (GRADIO_PLOT_RACE)."""
    errors = [] if errors is None else errors
    page.on("pageerror", lambda exc: None if str(exc) == GRADIO_PLOT_RACE else errors.append(str(exc)))
    return errors
