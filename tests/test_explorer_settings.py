"""explorer.settings: the server's limits and folders from MIRROR_* variables, and their defaults."""

from __future__ import annotations

import os

import pytest

from explorer.settings import Settings
from mirror.errors import MirrorError
from mirror.memory import host_train_budget


def test_settings_from_env(tmp_path):
    s = Settings.from_env({})
    assert s.max_upload_bytes == 20 * 1024 * 1024 and s.max_strings == 20_000
    assert s.max_steps == 1000 and s.max_run_seconds == 1800  # public-Space caps
    # the training plan is sized to this machine (or container) after the loaded models, at most 8 GB
    assert s.train_memory_bytes == host_train_budget(s.loaded_bytes) <= 8 * 2**30
    small = Settings.from_env({"MIRROR_LOADED_MB": "12000"}).train_memory_bytes
    assert small == host_train_budget(12000 * 2**20) and (small < s.train_memory_bytes or small == 256 * 2**20)
    assert Settings.from_env({"MIRROR_TRAIN_MEMORY_MB": "0"}).train_memory_bytes is None  # half of what is free
    assert Settings.from_env({"MIRROR_MAX_STEPS": "0", "MIRROR_MAX_RUN_SECONDS": "0"}).max_steps is None
    assert s.train_concurrency == 1 and s.allow_hub and s.model_roots == ()
    env = {
        "MIRROR_WORK_DIR": str(tmp_path),
        "MIRROR_SESSION_TTL": "120",
        "MIRROR_MAX_UPLOAD_MB": "1.5",
        "MIRROR_MAX_STRINGS": "50",
        "MIRROR_MAX_STEPS": "7",
        "MIRROR_MODEL_ROOTS": os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]),
        "MIRROR_ALLOW_HUB": "0",
        "MIRROR_TRAIN_CONCURRENCY": "2",
        "MIRROR_ABANDONED_S": "5",
    }
    s = Settings.from_env(env)
    assert s.work_dir == tmp_path.resolve() and s.session_ttl == 120 and s.max_upload_bytes == int(1.5 * 1024 * 1024)
    assert s.max_strings == 50 and s.max_steps == 7 and len(s.model_roots) == 2 and not s.allow_hub
    assert s.train_concurrency == 2 and s.abandoned_s == 5.0
    # the job reads the same variable at import; a bad value is the settings' to refuse, the job keeps its default
    from explorer.runs.jobs import abandoned_seconds

    assert (
        abandoned_seconds(env) == 5.0 and abandoned_seconds({}) == abandoned_seconds({"MIRROR_ABANDONED_S": "x"}) == 20
    )
    assert abandoned_seconds({"MIRROR_ABANDONED_S": "nan"}) == 20
    for bad in ("0.5", "nan"):
        with pytest.raises(MirrorError, match="MIRROR_ABANDONED_S must be >= 1"):
            Settings.from_env({"MIRROR_ABANDONED_S": bad})
    with pytest.raises(MirrorError, match="MIRROR_MAX_STRINGS"):
        Settings.from_env({"MIRROR_MAX_STRINGS": "lots"})
    with pytest.raises(MirrorError, match="MIRROR_SESSION_TTL must be >= 60"):
        Settings.from_env({"MIRROR_SESSION_TTL": "5"})


def test_settings_default_to_limits_suited_to_a_cpu_space():
    s = Settings.from_env({})
    assert s.max_upload_bytes == 20 * 1024**2 and s.max_strings == 20_000 and s.train_concurrency == 1
    assert s.max_model_bytes == 600 * 1024**2 and s.model_roots == () and s.loaded_runs == 32
    assert (
        s.max_hub_bytes == 2 * 1024**3
        and s.loaded_bytes == 3 * 1024**3
        and Settings.from_env({"MIRROR_LOADED_MB": "1.5"}).loaded_bytes == 1572864
    )


# Attack review, disk: the API's files are hard links from the work folder into Gradio's cache (one copy on disk).
def test_the_served_zips_live_in_gradios_upload_folder_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "g"))
    assert (
        Settings.from_env({"GRADIO_TEMP_DIR": str(tmp_path / "g")}).work_dir
        == (tmp_path / "g" / "mirror-explorer").resolve()
    )
