"""Abuse probe (issue 49): what costs before an account is asked, or that no account covered, against the real server
(`python app.py`, the bundled model, default limits but those named) and a fake Hub on 127.0.0.1.

    .venv/bin/python bench/bench_abuse49.py [--requests 30] [--mb 20] [--map-strings 20000]

1. requests: `--requests` simultaneous /train requests of `--mb` MB of pasted text each, from fresh visitors at as
   many addresses (X-Forwarded-For, believed from 127.0.0.1), through Gradio's queue as a client sends them: the
   answers and the server's peak RSS (VmHWM, reset just before) against its RSS before.
2. hub: the server's disk full (a filler file in the work folder), then 5 Hub ids of ~70 MB each asked for by 5
   fresh visitors: the answers, the bytes of Hugging Face's own cache (HF_HOME) and of the work folder's `.hub`.
3. maps: a run of `--map-strings` strings (words and STS-B sentences, 1 step), then /map of every string and of 3
   smaller counts: the server's CPU seconds for each.
4. weightless zip: a model zip whose config declares 331 M parameters (BERT-large, 1.3 GB in fp32, under the default
   MIRROR_LOADED_MB of 3 GB) and ships one small weight: the answer, the peak RSS growth.

Prints a table; JSON: bench/out/abuse49.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import common
from bench_abuse import MB, bundled_files, du, one_weight

from tests.fake_hub import FakeHub  # noqa: E402
from tests.server import Page, serve  # noqa: E402


def requests(served, n: int, mb: int, refuse_runs: bool = False) -> dict:
    line = "a real sentence of some length, with words in it and a number at its end: "
    bodies = ["\n".join(f"{line}{k}-{i}" for i in range(mb * MB // (len(line) + 8))) for k in range(n)]
    pages = [Page(served.url, headers={"X-Forwarded-For": f"10.4.{k // 200}.{k % 200 + 1}"}) for k in range(n)]
    time.sleep(1)
    before = served.rss()
    served.reset_peak()
    answers: list = [None] * n

    def train(k: int) -> None:
        fn_index, trigger = pages[k].fn("train")
        # --refuse-runs: settings that are no object: each run refused once its text is read (the bodies' memory
        # alone, no training beside it)
        settings = [1] if refuse_runs else {"max_steps": 1}
        data = [bodies[k], None, "", "bundled", "auto", settings, "", None]
        body = {"data": data, "event_data": None, "fn_index": fn_index, "trigger_id": trigger}
        try:
            r = pages[k].http.post(served.url + "gradio_api/queue/join", json={**body, "session_hash": pages[k].hash})
            answers[k] = r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:80]}"
        except Exception as exc:  # noqa: BLE001 - reported
            answers[k] = repr(exc)[:80]

    threads = [threading.Thread(target=train, args=(k,)) for k in range(n)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(20)  # the handlers parse, load and join the training queue (one trains, the rest wait)
    kinds: dict[str, int] = {}
    for a in answers:
        kinds[str(a).split(" (")[0][:90]] = kinds.get(str(a).split(" (")[0][:90], 0) + 1
    return {
        "requests": n,
        "MB each": mb,
        "answers": kinds,
        "RSS before MB": round(before / MB),
        "peak RSS MB": round(served.rss("VmHWM") / MB),
        "peak grew MB": round((served.rss("VmHWM") - before) / MB),
        "seconds": round(time.perf_counter() - started, 1),
    }


def hub(served, work: Path, hf: Path, fake: FakeHub) -> dict:
    from gradio_client import Client

    files, config = bundled_files(), _bundled_config()
    for i in range(5):  # ~70 MB each: a weights file the fake Hub lists with its size
        fake.models[f"org/model{i}"] = {**files, "config.json": config, "model.safetensors": b"\0" * (70 * MB)}
    filler = work / "filler.bin"  # the server's disk, full: the account reads the work folder's bytes (sizes)
    with open(filler, "wb") as f:
        f.truncate(max(0, 2000 * MB - du(work) - MB // 2))
    answers = []
    for i in range(5):
        try:
            Client(served.url, verbose=False, headers={"X-Forwarded-For": f"10.5.0.{i + 1}"}).predict(
                texts="cat\ndog\nbus\ncar", model=f"org/model{i}", settings={"max_steps": 1}, api_name="/train"
            )
            answers.append("done")
        except Exception as exc:  # noqa: BLE001 - the refusal
            answers.append(str(exc)[:120])
    filler.unlink()
    return {
        "asked": 5,
        "answers": sorted(set(answers)),
        "Hugging Face cache MB": round(du(hf) / MB, 1) if hf.exists() else 0.0,
        "work/.hub MB": round(du(work / ".hub") / MB, 1) if (work / ".hub").exists() else 0.0,
        "weights requested": sum("/resolve/" in r["path"] and "safetensors" in r["path"] for r in fake.requests),
    }


def _bundled_config() -> bytes:
    from mirror.encoder import bundled_model_path

    return (bundled_model_path() / "config.json").read_bytes()


def maps(served, n: int) -> dict:
    from bench_concurrency import sentences, words
    from gradio_client import Client

    client = Client(served.url, verbose=False, headers={"X-Forwarded-For": "10.6.0.1"})
    corpus = words(n // 2) + sentences(n - n // 2)
    run = client.predict(texts="\n".join(corpus), settings={"max_steps": 1}, api_name="/train")[0]
    rows = []
    for count in (0, run["strings"] - 1, run["strings"] - 2, run["strings"] - 3):
        cpu = served.cpu()
        t = time.perf_counter()
        data = client.predict(n=count, queries="", run=run["run_id"], api_name="/map")
        rows.append(
            {"n": data["n_shown"], "wall s": round(time.perf_counter() - t, 1), "CPU s": round(served.cpu() - cpu, 1)}
        )
    return {"strings": run["strings"], "maps": rows}


def weightless(served, tmp: Path) -> dict:
    from bench_abuse import big_config

    path = tmp / "weightless.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mirror-model/config.json", big_config(1024, 24, 4096))  # BERT-large: 335 M parameters
        for name, data in bundled_files().items():
            if name != "tokenizer.json":
                zf.writestr(f"mirror-model/{name}", data)
        zf.writestr("mirror-model/model.safetensors", one_weight())
    page = Page(served.url, headers={"X-Forwarded-For": "10.7.0.1"})
    page.event("on_paste", {0: "cat\ndog\nbus\ncar"})
    served.reset_peak()
    peak, started = served.rss("VmHWM"), time.perf_counter()
    out = json.dumps(page.event("on_saved_zip", {0: page.upload(path)}).get("output"))
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "peak RSS grew MB": round((served.rss("VmHWM") - peak) / MB, 1),
        "answer": out.split('"data": ["', 1)[-1].split('"', 1)[0][:220],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--mb", type=int, default=20)
    parser.add_argument("--map-strings", type=int, default=20_000)
    parser.add_argument("--only", default="requests,hub,maps,weightless")
    parser.add_argument("--refuse-runs", action="store_true", help="requests: runs refused once read (no training)")
    args = parser.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="mirror-abuse49-") as tmp, FakeHub() as fake:
        tmp = Path(tmp)
        env = {
            "MIRROR_TRUSTED_PROXIES": "127.0.0.1",
            "MIRROR_DISK_MB": "2000",
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
            "HF_ENDPOINT": fake.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(tmp / "hf"),
            "MIRROR_WARM_UP": "1",
        }
        with serve(tmp / "app", env, timeout=300) as served:
            work = tmp / "app" / "sessions"
            for name in args.only.split(","):
                print(f"{name}...", flush=True)
                if name == "requests":
                    out[name] = requests(served, args.requests, args.mb, args.refuse_runs)
                elif name == "hub":
                    out[name] = hub(served, work, tmp / "hf", fake)
                elif name == "maps":
                    out[name] = maps(served, args.map_strings)
                elif name == "weightless":
                    out[name] = weightless(served, tmp)
                print(f"  {out[name]}", flush=True)
            out["tracebacks in the log"] = served.log.read_text().count("Traceback")
    print(json.dumps(out, indent=2))
    common.write_json("abuse49.json", out)


if __name__ == "__main__":
    main()
