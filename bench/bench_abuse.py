"""Abuse probe (issue 37): a hostile visitor against the real server, with the bundled model and the probe's limits,
and what the server holds afterwards. `python app.py` is started on a free port with MIRROR_SESSION_DISK_MB=300
(the per-visitor budget's older name), MIRROR_DISK_MB=1500, X-Forwarded-For believed from 127.0.0.1 (so the victims
speak from another address than the attacker) and a fake Hub (tests/fake_hub.py) on 127.0.0.1.

    .venv/bin/python bench/bench_abuse.py [--runs 45] [--victims 3] [--keepalive 120]

1. disk: a victim at 10.0.0.1 makes `--victims` runs (each then marked unused for an hour, well within its 7 days);
   the attacker at 10.0.0.66 asks for `--runs` runs, each from a fresh visitor (a new gradio_client Client: its own
   signed cookie), while a keep-alive thread searches every run that exists every `--keepalive` seconds (a use, the
   strongest keep-alive there is). Reported: runs done and refused (and why), the runs folder's bytes at its largest
   and at the end against MIRROR_DISK_MB + one run, and whether every victim run is intact.
2. a 34 MB model zip that unpacks to ~555 MB (16x, under the 20x rule), sent 8 times from fresh visitors: what the
   runs folder gains.
3. a ~210 kB model zip whose config.json declares a 1.3 B-parameter model (one small weight shipped): the answer, and
   how much the server's peak RSS (VmHWM, reset just before) grew.
4. a Hub id on the fake Hub whose 0.7 MB download declares ~0.9 B parameters: the answer, the peak RSS, and the files
   the Hub was asked for.
5. a POST to /gradio_api/queue/join declaring a 400 MB body: the status, how long it took, the peak RSS.

Prints a table; JSON: bench/out/abuse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import common  # puts the project on sys.path

from tests.fake_hub import FakeHub  # noqa: E402
from tests.server import Page, serve  # noqa: E402

MB = 2**20
WORDS = [w.strip() for w in (common.EXAMPLES / "small_words.txt").read_text().splitlines() if w.strip()][:200]
SETTINGS = {"max_steps": 2, "batch_size": 16, "device": "cpu"}


def du(folder: Path) -> int:
    files = {(s.st_dev, s.st_ino): s.st_size for p in folder.rglob("*") if p.is_file() for s in [p.stat()]}
    return sum(files.values())


def train_at(url: str, address: str) -> tuple[str, str | None]:
    """One /train from a fresh visitor at `address`: ("done", run id) or (its error, None)."""
    from gradio_client import Client

    try:
        client = Client(url, verbose=False, headers={"X-Forwarded-For": address})
        out = client.predict(texts="\n".join(WORDS), model="bundled", settings=SETTINGS, api_name="/train")
        return "done", out[0]["run_id"]
    except Exception as exc:
        return str(exc), None


def bundled_files() -> dict[str, bytes]:
    """The bundled model's tokenizer files (a real vocabulary: what makes a config bomb ~210 kB)."""
    from mirror.encoder import bundled_model_path

    folder = bundled_model_path()
    names = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")
    return {n: (folder / n).read_bytes() for n in names if (folder / n).is_file()}


def one_weight() -> bytes:
    import torch
    from safetensors.torch import save as save_tensors

    return save_tensors({"embeddings.LayerNorm.weight": torch.ones(8)})


def big_config(hidden: int, layers: int, inter: int) -> bytes:
    from transformers import BertConfig

    cfg = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=16, intermediate_size=inter)
    return cfg.to_json_string().encode()


def disk_attack(served, runs: Path, n_runs: int, n_victims: int, keepalive: float) -> dict:
    from gradio_client import Client

    victims = []
    for _ in range(n_victims):
        result, run_id = train_at(served.url, "10.0.0.1")
        assert result == "done", result
        victims.append(runs / run_id)
    hour_ago = time.time() - 3600
    for v in victims:
        os.utime(v / ".last_used", (hour_ago, hour_ago))
    kept = {v: {p.relative_to(v): p.stat().st_size for p in v.rglob("*") if p.is_file()} for v in victims}
    one = max(du(v) for v in victims)
    stop, largest, searches = threading.Event(), [du(runs)], [0]

    def keep_alive() -> None:
        client = Client(served.url, verbose=False, headers={"X-Forwarded-For": "10.0.0.99"})
        while not stop.wait(keepalive):
            for folder in list(runs.iterdir()):
                try:
                    client.predict(queries="cat", k=1, hide_query=False, run=folder.name, api_name="/search")
                    searches[0] += 1
                except Exception:
                    pass

    def watch() -> None:
        while not stop.wait(1.0):
            largest[0] = max(largest[0], du(runs))

    threads = [threading.Thread(target=keep_alive, daemon=True), threading.Thread(target=watch, daemon=True)]
    for t in threads:
        t.start()
    started, results = time.perf_counter(), []
    for i in range(n_runs):
        result, _ = train_at(served.url, "10.0.0.66")
        results.append(result)
        print(f"  attack run {i + 1}/{n_runs}: {result[:100]}", flush=True)
    seconds = time.perf_counter() - started
    time.sleep(1.5)
    stop.set()
    intact = all(v.is_dir() and {p.relative_to(v): p.stat().st_size for p in v.rglob("*") if p.is_file()} == kept[v]
                 for v in victims)  # fmt: skip
    refused = [r for r in results if r != "done"]
    reasons = sorted({r.split(";")[0][:90] for r in refused})
    return {
        "runs asked": n_runs,
        "done": results.count("done"),
        "refused": len(refused),
        "refusals": reasons,
        "seconds": round(seconds, 1),
        "one run MB": round(one / MB, 1),
        "largest MB": round(max(largest[0], du(runs)) / MB, 1),
        "end MB": round(du(runs) / MB, 1),
        "limit MB (MIRROR_DISK_MB + one run)": round(1500 + one / MB, 1),
        "victim runs intact": f"{sum(v.is_dir() for v in victims)} of {len(victims)}, files unchanged: {intact}",
        "keep-alive searches": searches[0],
    }


def zip_attack(served, runs: Path, tmp: Path, times: int = 8) -> dict:
    import numpy as np

    pad = 540 * MB
    noise = (np.random.default_rng(0).random(pad) < 0.07).astype(np.uint8).tobytes()  # ~16x deflated
    path = tmp / "model.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mirror-model/config.json", big_config(384, 6, 1536))
        for name, data in bundled_files().items():
            zf.writestr(f"mirror-model/{name}", data)
        zf.writestr("mirror-model/padding.bin", noise)
    with zipfile.ZipFile(path) as zf:
        unpacked = sum(i.file_size for i in zf.infolist())
    before, answers = du(runs), []
    for i in range(times):
        page = Page(served.url, headers={"X-Forwarded-For": f"10.0.1.{i + 1}"})
        page.event("on_paste", {0: "\n".join(WORDS)})
        out = json.dumps(page.event("on_saved_zip", {0: page.upload(path)}).get("output"))
        answers.append(out.split('"data": ["', 1)[-1].split('"', 1)[0][:140])
    return {
        "zip MB": round(path.stat().st_size / MB, 1),
        "unpacks to MB": round(unpacked / MB, 1),
        "sent": times,
        "runs folder gained MB": round((du(runs) - before) / MB, 1),
        "answer": sorted(set(answers)),
    }


def bomb_zip(served, tmp: Path) -> dict:
    path = tmp / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mirror-model/config.json", big_config(2048, 24, 8192))
        for name, data in bundled_files().items():
            if name != "tokenizer.json":
                zf.writestr(f"mirror-model/{name}", data)
        zf.writestr("mirror-model/model.safetensors", one_weight())
    page = Page(served.url, headers={"X-Forwarded-For": "10.0.2.1"})
    page.event("on_paste", {0: "\n".join(WORDS)})
    served.reset_peak()  # the peak from here on
    peak, started = served.rss("VmHWM"), time.perf_counter()
    out = json.dumps(page.event("on_saved_zip", {0: page.upload(path)}).get("output"))
    return {
        "zip kB": round(path.stat().st_size / 1024),
        "seconds": round(time.perf_counter() - started, 2),
        "peak RSS grew MB": round((served.rss("VmHWM") - peak) / MB, 1),
        "answer": out.split('"data": ["', 1)[-1].split('"', 1)[0][:200],
    }


def hub_id(served, hub: FakeHub) -> dict:
    from gradio_client import Client

    files = {**bundled_files(), "config.json": big_config(2048, 17, 8192), "model.safetensors": one_weight()}
    files.pop("tokenizer.json", None)
    hub.models["org/huge"] = files
    served.reset_peak()  # the peak from here on
    peak, started = served.rss("VmHWM"), time.perf_counter()
    try:
        Client(served.url, verbose=False, headers={"X-Forwarded-For": "10.0.3.1"}).predict(
            texts="\n".join(WORDS), model="org/huge", settings=SETTINGS, api_name="/train"
        )
        answer = "accepted"
    except Exception as exc:
        answer = str(exc)
    fetched = sorted({r["path"].rsplit("/", 1)[-1] for r in hub.requests if "/resolve/" in r["path"]})
    return {
        "download MB": round(sum(len(b) for b in files.values()) / MB, 2),
        "seconds": round(time.perf_counter() - started, 2),
        "peak RSS grew MB": round((served.rss("VmHWM") - peak) / MB, 1),
        "files fetched": fetched,
        "answer": answer[:200],
    }


def big_body(served) -> dict:
    from urllib.parse import urlsplit

    host, port = urlsplit(served.url).hostname, urlsplit(served.url).port
    served.reset_peak()  # the peak from here on
    peak, started = served.rss("VmHWM"), time.perf_counter()
    with socket.create_connection((host, port), timeout=60) as sock:
        head = f"POST /gradio_api/queue/join HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        sock.sendall((head + f"Content-Length: {400 * MB}\r\n\r\n").encode() + b"[" * MB)
        answer = b""
        while b"at most" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    text = answer.decode("latin-1")
    return {
        "status": text.split("\r\n", 1)[0],
        "seconds": round(time.perf_counter() - started, 3),
        "peak RSS grew MB": round((served.rss("VmHWM") - peak) / MB, 1),
        "answer": text.rsplit("\r\n\r\n", 1)[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=45)
    parser.add_argument("--victims", type=int, default=3)
    parser.add_argument("--keepalive", type=float, default=120.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-abuse-"))
    with FakeHub() as hub:
        env = {
            "MIRROR_SESSION_DISK_MB": "300",
            "MIRROR_DISK_MB": "1500",
            "MIRROR_GENERAL_CHECKS": "0",
            "MIRROR_TRUSTED_PROXIES": "127.0.0.1",
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(tmp / "hf"),
            "GRADIO_TEMP_DIR": str(tmp / "gradio"),
        }
        with serve(tmp / "server", env) as served:
            runs = tmp / "server" / "sessions" / "runs"
            results = {"env": env}
            print("1. disk", flush=True)
            results["disk"] = disk_attack(served, runs, args.runs, args.victims, args.keepalive)
            print("2. zip", flush=True)
            results["zip"] = zip_attack(served, runs, tmp)
            print("3. config bomb", flush=True)
            results["bomb"] = bomb_zip(served, tmp)
            print("4. hub id", flush=True)
            results["hub"] = hub_id(served, hub)
            print("5. body", flush=True)
            results["body"] = big_body(served)
            results["tracebacks in the log"] = served.log.read_text().count("Traceback")
    for name in ("disk", "zip", "bomb", "hub", "body"):
        print(f"\n{name}")
        common.print_table([{"what": k, "value": v} for k, v in results[name].items()], ["what", "value"])
    print(f"\ntracebacks in the server's log: {results['tracebacks in the log']}")
    common.write_json("abuse.json", results)


if __name__ == "__main__":
    main()
