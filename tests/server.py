"""The real app as a subprocess for tests: `python app.py --port N` with its own work folder and environment."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
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

    def rss(self) -> int:
        """The server process's resident memory in bytes (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(workdir: Path, env: dict[str, str] | None = None, timeout: float = 180.0) -> Iterator[Served]:
    """Start the app with `env` on top of the test environment; yield it once it answers HTTP 200."""
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
            [sys.executable, "app.py", "--port", str(port)],
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


@contextlib.contextmanager
def serve_app(workdir: Path, timeout: float = 180.0) -> Iterator[str]:
    """`serve` with the environment as it is (tests set MIRROR_* with monkeypatch); yields the URL."""
    with serve(workdir, timeout=timeout) as served:
        yield served.url
