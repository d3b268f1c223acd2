"""Server settings: limits, folders and caps from MIRROR_* environment variables; ZeroGPU detection.

Defaults suit a public CPU Space (see the README's table):
  MIRROR_WORK_DIR           per-session folders (default: $GRADIO_TEMP_DIR/mirror-explorer, i.e. <tmp>/gradio/...)
  MIRROR_SESSION_TTL        seconds an idle session's folder and state are kept (default: 7200)
  MIRROR_RUN_TTL            seconds a finished run (its model, indexes, link) is kept after its last use (default: 7 days)
  MIRROR_MAX_UPLOAD_MB      largest text/pairs upload or paste (default: 20)
  MIRROR_MAX_MODEL_MB       largest model zip upload, packed and unpacked (default: 600)
  MIRROR_MAX_STRINGS        strings kept from one input (default: 20000)
  MIRROR_MAX_STEPS          cap on training steps per run, 0 = none (default: 1000)
  MIRROR_MAX_RUN_SECONDS    a run of any kind (a training, a model upload, a blend) not served this long after it
                            began is stopped, nothing saved, 0 = none (default: 1800)
  MIRROR_TRAIN_MEMORY_MB    memory a training step may plan for, at most half of what is free; 0 = that half (default:
                            half of the machine's or container's memory after MIRROR_LOADED_MB and 1.5 GB for the
                            process, at most 8192: 5.75 GB on a 16 GB CPU Space; mirror.memory.host_train_budget)
  MIRROR_DISK_MB            disk for everything the app writes (runs, blends, model zips unpacked, exports, other
                            corpora, sessions); past it new work is refused, nobody's runs are removed (default: 10240)
  MIRROR_VISITOR_DISK_MB    ... for one visitor (a browser's signed cookie, or an address without one), all its sessions
                            together; past it its own least recently used runs make room (default: 2048; the older name
                            MIRROR_SESSION_DISK_MB is read when this one is unset)
  MIRROR_ADDRESS_DISK_MB    ... for one client address, all its visitors together; past it new work is refused
                            (default: 4096)
  MIRROR_UPLOAD_QUOTA_MB    upload bytes one visitor (browser) may have on disk, uploaded in the last hour (default: 1024)
  MIRROR_UPLOAD_ADDRESS_MB  ... one client address, all its visitors together (default: 4096)
  MIRROR_UPLOAD_DISK_MB     ... everyone together (default: 8192); uploads are removed an hour after they arrive
  MIRROR_TRUSTED_PROXIES    addresses or CIDRs (comma-separated) of the proxies whose X-Forwarded-For is believed,
                            "*" for any (default: none: the client is the peer)
  MIRROR_MAX_MAP_POINTS     most strings drawn on the Explore tab's maps, a seeded sample beyond (default: 200000:
                            every string of a run)
  MIRROR_MODEL_ROOTS        folders (os.pathsep-separated) from which local models may be loaded (default: none)
  MIRROR_ALLOW_HUB          1/0: allow Hugging Face Hub model ids (default: 1)
  MIRROR_MAX_HUB_MB         largest hub model download, asked of the hub before downloading (default: 2048)
  MIRROR_HUB_DISK_MB        hub models kept on this server's disk (under the work folder, in MIRROR_DISK_MB), least
                            recently used removed for the next download (default: 4096)
  MIRROR_TRAIN_CONCURRENCY  training runs at once (default: 1, one per GPU)
  MIRROR_LOADED_RUNS        tuned models kept in memory across sessions, LRU (default: 32)
  MIRROR_LOADED_MB          ... and at most this much memory for them: weights + vectors (default: 3072)
  MIRROR_GENERAL_CHECKS     1/0: after each run and blend, the general checks on bundled word pairs, sentence pairs
                            and real long documents (~7 s on 2 free CPU cores for the bundled model, mirror/checks.py)
                            (default: 1)
  MIRROR_CHECK_ITEMS        score at most this many items of each general check (default: 0 = all: 200-1,000 a
                            check); a small host's checks in less time, with wider intervals
  MIRROR_WARM_UP            1/0: at start, in the background, score the base side of the general checks and compile
                            UMAP's kernels, so the first run and the first map do not wait for them (default: 1)
  MIRROR_ABANDONED_S        seconds a run goes on once nobody follows it (its page closed, its API client gone)
                            before it stops; a reload within them follows the same run (default: 20)
  MIRROR_TRAIN_QUEUE        runs, blends and model uploads waiting for a training slot, one per visitor (default: 16)
  MIRROR_QUEUE_SIZE         events waiting in Gradio's queue, all kinds (default: 64)
  MIRROR_VISITOR_CPU_S      CPU seconds one visitor's jobs (runs with their checks, blends, model uploads, map layouts,
                            exports, evaluations) may spend in an hour; past it new ones are refused until the oldest
                            spending is an hour old (default: 1800, a quarter of a 2-core machine's hour; 0 = none)
  MIRROR_ADDRESS_CPU_S      ... one client address, all its visitors together (default: 3600; 0 = none)
  MIRROR_REQUEST_MEMORY_MB  memory request bodies over 256 kB may cost at once, until their handler has read them (a
                            paste sent to /train), each charged 4x its size (6x, 10x for text of wide characters:
                            ui.web.held): past it, or past one largest request per visitor and two per address, a
                            request is refused before it is read (default: 160)
  MIRROR_MAX_PAIRS          pairs scored in one evaluation (default: 5000; the bundled sets have at most 1,500)
  MIRROR_MAX_CONNECTIONS_PER_ADDRESS  open connections one client address may hold; more are refused (429) as they
                            are made; a trusted proxy's address is exempt (default: 64)
  MIRROR_MAX_CONNECTIONS    open connections in all, 0 = three quarters of the open-files limit (default: 0)
  MIRROR_HEADER_TIMEOUT_S   a connection that has not sent a whole request's headers this long after it opened or
                            after its last answer is closed (default: 10)
  MIRROR_MIN_BODY_KBPS      a request body slower than this on average after its first MIRROR_HEADER_TIMEOUT_S is
                            dropped (408) and what it reserved given back (default: 4)
  MIRROR_LOG_KB_PER_MINUTE  the server's output (its log): at most this much a minute, a write cut at 4 kB; past it
                            output is dropped and counted (default: 256)
  MIRROR_SEARCH_CONCURRENCY searches encoding at once, the others wait in arrival order (default: 4; on 2 cores
                            20 parallel searches ran ~1.3x faster with p99 -30% than unlimited, bench/RESULTS.md)
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.errors import MirrorError

try:  # Hugging Face Spaces helper; on ZeroGPU it must be imported before torch touches CUDA
    import spaces  # type: ignore[import-not-found]
except ImportError:  # everywhere else: training runs in-process
    spaces = None


@dataclass(frozen=True)
class Settings:
    """Server-side limits and folders, from MIRROR_* environment variables (see this module's docstring)."""

    work_dir: Path = Path(tempfile.gettempdir()) / "gradio" / "mirror-explorer"
    session_ttl: float = 7200.0
    run_ttl: float = 7 * 86400.0  # a finished run unused for this long is removed (its link stops working)
    max_upload_bytes: int = 20 * 1024 * 1024
    max_model_bytes: int = 600 * 1024 * 1024
    max_strings: int = 20_000
    max_steps: int | None = 1000  # 10k words take 100 steps; a public Space should not train for hours
    max_run_seconds: float | None = 1800.0
    # What a training step may plan for, and never more than half the memory available when the run starts: the
    # default sentences run on the bundled model plans ~6 GB in fp32; a 1,300-token attack string stays bounded.
    train_memory_bytes: int | None = 8 * 1024**3
    # Disk accounts (explorer.resources.accounts): everything written under work_dir, charged to the visitor who wrote it
    disk_bytes: int = 10 * 1024**3  # everyone together
    visitor_disk_bytes: int = 2 * 1024**3  # one visitor, all its sessions
    address_disk_bytes: int = 4 * 1024**3  # one client address, all its visitors
    # Gradio's upload route (ui.web.quota.UploadQuota): bytes uploaded in the last hour and still on disk
    upload_quota_bytes: int = 1024**3  # per visitor (a browser's cookie; a model zip is at most 600 MB)
    upload_address_bytes: int = 4 * 1024**3  # per client address (all its visitors: a NAT, a proxy)
    upload_disk_bytes: int = 8 * 1024**3  # everyone together
    trusted_proxies: tuple[str, ...] = ()  # whose X-Forwarded-For is believed (addresses or CIDRs)
    max_map_points: int = 200_000  # every string of a run (MIRROR_MAX_STRINGS); a cap for a small host
    model_roots: tuple[Path, ...] = ()
    allow_hub: bool = True
    max_hub_bytes: int = 2048 * 1024 * 1024  # bert-large (1.3 GB) fits; a 7B checkpoint does not
    hub_disk_bytes: int = 4096 * 1024 * 1024  # hub models kept, LRU (explorer.resources.hubcache)
    train_concurrency: int = 1
    loaded_runs: int = 32  # 20 active sessions on the bundled model (~95 MB each) stay loaded (bench/RESULTS.md)
    loaded_bytes: int = 3072 * 1024 * 1024  # ... but only ~6 runs of a bert-base-sized model
    search_concurrency: int = 4
    train_queue: int = 16  # places waiting for a training slot (one per visitor)
    queue_size: int = 64  # Gradio's queue, every kind of event
    request_memory_bytes: int = 160 * 2**20  # large request bodies held at once (ui.web.held)
    visitor_cpu_s: float = (
        1800.0  # CPU seconds a visitor's jobs may spend in an hour (explorer.resources.cpu), 0 = none
    )
    address_cpu_s: float = 3600.0  # ... an address's
    max_pairs: int = 5000  # pairs in one evaluation
    general_checks: bool = True  # the forgetting check after each run (explorer.compare.forgetting); off saves seconds
    warm_up: bool = True  # at start: the general checks' base scores and UMAP's kernels (a background thread)
    check_items: int = 0  # at most this many items of each general check (mirror.checks reads it at import), 0 = all
    abandoned_s: float = 20.0  # a run nobody follows stops after this long (explorer.runs.jobs reads it at import)
    max_connections_per_address: int = 64  # open connections of one client address (ui.web.connections)
    max_connections: int = 0  # ... of everyone, 0 = from the open-files limit
    header_timeout_s: float = 10.0  # a request's headers must be whole this long after the connection is made
    min_body_bytes_s: float = 4096.0  # a body's minimum average pace after header_timeout_s
    log_bytes_minute: int = 256 * 1024  # the server's output a minute (ui.web.logbound)
    speed_probe_s: float = 15.0  # one probe of the machine's speed prices every plan made within this long (estimate)

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        d = Settings()

        def number(name: str, default: float, minimum: float, kind: type = int) -> Any:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = kind(float(raw)) if kind is int else kind(raw)
            except ValueError:
                raise MirrorError(f"{name}={raw!r} is not a number") from None
            if not value >= minimum:  # NaN too
                raise MirrorError(f"{name} must be >= {minimum}, got {raw}")
            return value

        roots = tuple(
            Path(p).expanduser().resolve() for p in env.get("MIRROR_MODEL_ROOTS", "").split(os.pathsep) if p.strip()
        )
        max_steps = number("MIRROR_MAX_STEPS", d.max_steps, 0)
        max_run_s = number("MIRROR_MAX_RUN_SECONDS", d.max_run_seconds, 0, float)
        from mirror.memory import host_train_budget  # torch: only when a server reads its settings

        # the per-visitor budget's older name (it was per session) still works where the new one is unset
        visitor_var = (
            "MIRROR_VISITOR_DISK_MB" if env.get("MIRROR_VISITOR_DISK_MB", "").strip() else "MIRROR_SESSION_DISK_MB"
        )
        loaded_bytes = int(number("MIRROR_LOADED_MB", d.loaded_bytes / 2**20, 1, float) * 2**20)
        train_mb = number("MIRROR_TRAIN_MEMORY_MB", host_train_budget(loaded_bytes) / 2**20, 0, float)
        return Settings(
            work_dir=Path(env.get("MIRROR_WORK_DIR") or default_work_dir(env)).expanduser().resolve(),
            session_ttl=number("MIRROR_SESSION_TTL", d.session_ttl, 60, float),
            run_ttl=number("MIRROR_RUN_TTL", d.run_ttl, 60, float),
            max_upload_bytes=int(number("MIRROR_MAX_UPLOAD_MB", 20, 0.001, float) * 1024 * 1024),
            max_model_bytes=int(number("MIRROR_MAX_MODEL_MB", 600, 1, float) * 1024 * 1024),
            max_strings=number("MIRROR_MAX_STRINGS", d.max_strings, 2),
            max_steps=max_steps or None,
            max_run_seconds=max_run_s or None,
            train_memory_bytes=int(train_mb * 2**20) or None,
            # (fractions of a MB are for tests with tiny models; a real server wants hundreds)
            disk_bytes=int(number("MIRROR_DISK_MB", d.disk_bytes / 2**20, 0.1, float) * 2**20),
            visitor_disk_bytes=int(number(visitor_var, d.visitor_disk_bytes / 2**20, 0.1, float) * 2**20),
            address_disk_bytes=int(number("MIRROR_ADDRESS_DISK_MB", d.address_disk_bytes / 2**20, 0.1, float) * 2**20),
            upload_quota_bytes=int(number("MIRROR_UPLOAD_QUOTA_MB", d.upload_quota_bytes / 2**20, 1, float) * 2**20),
            upload_address_bytes=int(
                number("MIRROR_UPLOAD_ADDRESS_MB", d.upload_address_bytes / 2**20, 1, float) * 2**20
            ),
            upload_disk_bytes=int(number("MIRROR_UPLOAD_DISK_MB", d.upload_disk_bytes / 2**20, 1, float) * 2**20),
            trusted_proxies=trusted_proxies(env.get("MIRROR_TRUSTED_PROXIES", "")),
            max_map_points=number("MIRROR_MAX_MAP_POINTS", d.max_map_points, 10),
            model_roots=roots,
            allow_hub=env.get("MIRROR_ALLOW_HUB", "1").strip().lower() not in ("0", "false", "no", "off"),
            max_hub_bytes=int(number("MIRROR_MAX_HUB_MB", d.max_hub_bytes / 2**20, 1, float) * 2**20),
            hub_disk_bytes=int(number("MIRROR_HUB_DISK_MB", d.hub_disk_bytes / 2**20, 0.1, float) * 2**20),
            train_concurrency=number("MIRROR_TRAIN_CONCURRENCY", d.train_concurrency, 1),
            loaded_runs=number("MIRROR_LOADED_RUNS", d.loaded_runs, 1),
            loaded_bytes=loaded_bytes,
            search_concurrency=number("MIRROR_SEARCH_CONCURRENCY", d.search_concurrency, 1),
            train_queue=number("MIRROR_TRAIN_QUEUE", d.train_queue, 1),
            queue_size=number("MIRROR_QUEUE_SIZE", d.queue_size, 4),
            visitor_cpu_s=number("MIRROR_VISITOR_CPU_S", d.visitor_cpu_s, 0, float),
            address_cpu_s=number("MIRROR_ADDRESS_CPU_S", d.address_cpu_s, 0, float),
            request_memory_bytes=int(
                number("MIRROR_REQUEST_MEMORY_MB", d.request_memory_bytes / 2**20, 1, float) * 2**20
            ),
            max_pairs=number("MIRROR_MAX_PAIRS", d.max_pairs, 10),
            general_checks=env.get("MIRROR_GENERAL_CHECKS", "1").strip().lower() not in ("0", "false", "no", "off"),
            warm_up=env.get("MIRROR_WARM_UP", "1").strip().lower() not in ("0", "false", "no", "off"),
            check_items=number("MIRROR_CHECK_ITEMS", d.check_items, 0),
            abandoned_s=number("MIRROR_ABANDONED_S", d.abandoned_s, 1, float),
            speed_probe_s=number("MIRROR_SPEED_PROBE_S", d.speed_probe_s, 1, float),
            max_connections_per_address=number("MIRROR_MAX_CONNECTIONS_PER_ADDRESS", d.max_connections_per_address, 1),
            max_connections=number("MIRROR_MAX_CONNECTIONS", d.max_connections, 0),
            header_timeout_s=number("MIRROR_HEADER_TIMEOUT_S", d.header_timeout_s, 0.1, float),
            min_body_bytes_s=number("MIRROR_MIN_BODY_KBPS", d.min_body_bytes_s / 1024, 0, float) * 1024,
            log_bytes_minute=int(number("MIRROR_LOG_KB_PER_MINUTE", d.log_bytes_minute / 1024, 1, float) * 1024),
        )


def trusted_proxies(raw: str) -> tuple[str, ...]:
    """MIRROR_TRUSTED_PROXIES as a tuple of addresses/CIDRs ("*": any), each checked (MirrorError if not one)."""
    items = tuple(x.strip() for x in raw.split(",") if x.strip())
    parse_proxies(items)
    return items


def parse_proxies(raw: str | Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Trusted proxies from `MIRROR_TRUSTED_PROXIES` ("10.0.0.0/8, 127.0.0.1"): addresses or CIDRs; "*" (every
    address) is 0.0.0.0/0 and ::/0. MirrorError for anything else."""
    items = [x.strip() for x in (raw.split(",") if isinstance(raw, str) else raw) if x.strip()]
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for item in items:
        if item == "*":
            nets += [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise MirrorError(f"MIRROR_TRUSTED_PROXIES: {item!r} is not an address or a CIDR (10.0.0.0/8)") from None
    return tuple(nets)


def default_work_dir(env: dict[str, str]) -> Path:
    """Inside Gradio's upload folder (its GRADIO_TEMP_DIR rule), so the files the API hands out are hard links in
    Gradio's cache (ui.web.served), not copies: one copy on disk, not two. Gradio serves only the files a handler
    returned, never the rest of the folder."""
    return Path(env.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio") / "mirror-explorer"


def zero_gpu() -> bool:
    """True on a Hugging Face ZeroGPU Space, where CUDA exists only inside `spaces.GPU` functions."""
    if spaces is None:
        return False
    try:
        return bool(spaces.config.Config.zero_gpu)
    except AttributeError:  # pragma: no cover - older spaces releases
        return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true")


def inference_device() -> str:
    """Where the web process runs encoders: CPU on ZeroGPU (no CUDA outside the GPU worker), else auto."""
    return "cpu" if zero_gpu() else "auto"
