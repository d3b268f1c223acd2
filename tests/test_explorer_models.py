"""explorer.resources.models: the model-name policy as this server applies it (roots, hub switch, hub download size), the
tuned runs kept in memory (count and memory limits), and remote code never trusted, whatever loads the model.
All through `explorer`, without Gradio, on the tiny random BERT.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from explorer import MirrorApp, Settings
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from tests.conftest import ROOT, TINY, WORDS, train, tuned_session
from tests.upload_corpus import rewrite_zip

# ---------------------------------------------------------------------------------------------- model names


def test_bad_model_ids_are_an_error_event(app):
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    for model, says in [
        ("no-such-org/no-such-model", "looks offline"),
        ("../../etc", "only accepted under the allowed directories"),
        ("https://evil.example/model", "is not a model name"),
        ("bert base uncased", "is not a valid Hugging Face model id"),
    ]:
        last = train(app, s, model)[-1]
        assert last.kind == "error" and says in last.text, (model, last)
    assert s.run is None and not any(app.runs.root.glob("*"))


@pytest.fixture
def roots(tmp_path, tiny_bert) -> tuple[MirrorApp, Path]:
    """An app whose one model root holds team/tiny and a symlink `escape` pointing out of the root."""
    root = tmp_path / "allowed"
    shutil.copytree(tiny_bert, root / "team" / "tiny")
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")
    return MirrorApp(Settings(work_dir=tmp_path / "w", model_roots=(root.resolve(),), general_checks=False)), root


@pytest.mark.parametrize(
    "model, says",
    [
        ("../../etc", "only accepted under the allowed directories"),
        ("/etc", "only accepted under the allowed directories"),
        ("/etc/passwd", "only accepted under the allowed directories"),
        ("~/.ssh", "only accepted under the allowed directories"),
        ("{root}/../outside", "only accepted under the allowed directories"),
        ("{root}/escape", "only accepted under the allowed directories"),  # a symlink out of the root
        ("https://huggingface.co/bert-base-uncased", "is not a model name"),
        ("hf://org/name", "is not a model name"),
        ("org/name/extra", "only accepted under the allowed directories"),  # a path, not an id
        ("C:\\models\\bert", "only accepted under the allowed directories"),
        ("bert base uncased", "is not a valid Hugging Face model id"),
        ("org/na;me", "is not a valid Hugging Face model id"),
        ("-rf", "is not a valid Hugging Face model id"),
        ("org/..", "is not a valid Hugging Face model id"),
        ("..", "only accepted under the allowed directories"),
        ("a" * 97, "is not a valid Hugging Face model id"),
        ("bad\x00id", "is not a model name"),
        ("bad\nid", "is not a model name"),
        ("", "choose a base model"),
    ],
)
def test_model_ids_are_validated(roots, model, says):
    app, root = roots
    with pytest.raises(MirrorError, match=re.escape(says)):
        app.check_model(model.replace("{root}", str(root)))


def test_valid_model_ids_and_allowed_folders_pass(roots):
    app, root = roots
    for model in ["bundled", "bert-base-uncased", "org/name", "sentence-transformers/all-MiniLM-L6-v2", "a" * 96]:
        assert app.check_model(f"  {model} ") == model
    assert app.check_model(str(root / "team" / "tiny")) == str(root / "team" / "tiny")
    no_hub = MirrorApp(dataclasses.replace(app.settings, allow_hub=False, model_roots=()))
    with pytest.raises(MirrorError, match="only offers the bundled model"):
        no_hub.check_model("bert-base-uncased")
    with pytest.raises(MirrorError, match="does not load models from local folders"):
        no_hub.check_model(str(root / "team" / "tiny"))
    assert no_hub.check_model("bundled") == "bundled"


# ---------------------------------------------------------------------------------------------- hub download size


def test_hub_models_over_the_download_limit_are_refused_before_downloading(app, monkeypatch):
    import huggingface_hub
    from huggingface_hub.hf_api import RepoSibling

    from mirror.encoder import hub_download_bytes

    GB = 1024**3
    repos = {  # what the hub would answer (model_info with files_metadata): file names and sizes
        "org/huge": [("model.safetensors", 3 * GB), ("config.json", 700), ("vocab.txt", 230_000)],
        "org/fits": [("model.safetensors", GB), ("pytorch_model.bin", GB), ("onnx/model.onnx", GB), ("README.md", 9)],
    }
    asked = []

    def model_info(self, repo_id, files_metadata=False, timeout=None):
        asked.append(repo_id)
        if repo_id not in repos:
            import httpx
            from huggingface_hub.errors import RepositoryNotFoundError

            response = httpx.Response(404, request=httpx.Request("GET", f"https://huggingface.co/api/models/{repo_id}"))
            raise RepositoryNotFoundError("no such repo", response=response)
        return SimpleNamespace(siblings=[RepoSibling(rfilename=n, size=b) for n, b in repos[repo_id]])

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded before the size check")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    assert hub_download_bytes("org/huge") == 3 * GB + 230_700
    assert hub_download_bytes("org/fits") == GB  # only the files a load fetches: not .bin, .onnx or README
    with pytest.raises(MirrorError, match="'org/missing': no such model on the Hugging Face Hub"):
        hub_download_bytes("org/missing")  # said before anything queues (issue 52: it failed after the slot's wait)

    with pytest.raises(
        MirrorError,
        match=re.escape(
            "`org/huge` is a 3.1 GiB download; this server loads hub models up to 2.0 GiB (MIRROR_MAX_HUB_MB)"
        ),
    ):
        app.models.check_download("org/huge")
    assert app.models.check_download("org/fits") == "org/fits" and app.models.check_download("org/fits") == "org/fits"
    assert asked.count("org/fits") == 2  # once by hub_download_bytes above, once by the app (then cached)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    events = list(app.trainer.train(s, "org/huge", "auto", dict(TINY)))
    assert events[-1].kind == "error" and "MIRROR_MAX_HUB_MB" in events[-1].text, events[-1]
    assert s.run is None and s.texts == WORDS  # nothing started, nothing lost
    small = MirrorApp(dataclasses.replace(app.settings, max_hub_bytes=512 * 1024**2))
    with pytest.raises(
        MirrorError, match=re.escape("is a 1.0 GiB download; this server loads hub models up to 512.0 MiB")
    ):
        small.models.check_download("org/fits")
    assert small.models.check_download("bundled") == "bundled" and asked.count("bundled") == 0


# Attack review, uploaded model zips: the base model a zip names is checked like one a user typed.
def test_the_base_model_named_in_a_zip_gets_the_hub_size_check(app, tiny_bert, tmp_path, monkeypatch):
    from mirror import hub

    zip_path = tuned_session(app, tiny_bert).run.model_zip

    def edit(name: str, data: bytes):
        if name.endswith("mirror_config.json"):
            info = json.loads(data)
            info["config"]["model"] = "big-org/huge-model"
            return json.dumps(info)
        return data

    named = rewrite_zip(zip_path, tmp_path / "named.zip", edit)
    asked = []
    monkeypatch.setattr(hub, "hub_download_bytes", lambda model: asked.append(model) or 50 * 2**30)
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    events = list(app.saved.use_saved_model(s, str(named)))
    assert asked == ["big-org/huge-model"], events[-1]
    assert events[-1].kind == "done", events[-1]
    assert any("MIRROR_MAX_HUB_MB" in n for n in events[-1].notes)
    assert s.run.base_model == "bundled"  # compared with the bundled model instead; nothing was downloaded


# ---------------------------------------------------------------------------------------------- tuned runs in memory


def test_tuned_models_kept_in_memory_stay_within_the_count_and_memory_limits(tmp_path, tiny_bert):
    def app_with(**limits) -> MirrorApp:
        work = tmp_path / "-".join(f"{k}{v}" for k, v in limits.items())
        return MirrorApp(
            Settings(work_dir=work, model_roots=(Path(tiny_bert).resolve(),), general_checks=False, **limits)
        )

    app = app_with(loaded_runs=2)
    sessions = [tuned_session(app, tiny_bert) for _ in range(3)]
    first = [app.searcher.search(s, "cat", k=3)[0]["tuned"] for s in sessions]
    assert list(app.models.runs) == [str(s.run.folder) for s in sessions[1:]]  # least recently used went first
    one = app.models.runs[str(sessions[2].run.folder)]
    weights = sum(p.numel() * 4 for p in one.tuned.model.parameters())
    assert one.nbytes >= weights + 2 * len(WORDS) * one.tuned.dim * 4  # tuned weights + base and tuned vectors
    assert app.searcher.search(sessions[0], "cat", k=3)[0]["tuned"] == first[0]  # an evicted run reloads from disk
    assert list(app.models.runs) == [str(s.run.folder) for s in (sessions[2], sessions[0])]

    app = app_with(loaded_runs=10, loaded_bytes=int(one.nbytes * 2.5))  # memory for two runs, count for ten
    sessions = [tuned_session(app, tiny_bert) for _ in range(3)]
    for s in sessions:
        app.searcher.search(s, "cat", k=3)
    assert list(app.models.runs) == [str(s.run.folder) for s in sessions[1:]]
    # too small for any run (its model alone fits: a model past MIRROR_LOADED_MB is refused before it loads): the
    # run being searched still loads
    app = app_with(loaded_runs=10, loaded_bytes=one.nbytes - 1)
    s = tuned_session(app, tiny_bert)
    assert app.searcher.search(s, "cat", k=3)[0]["tuned"] and len(app.models.runs) == 1


# ---------------------------------------------------------------------------------------------- remote code


@pytest.fixture
def loader_calls(monkeypatch) -> list[tuple[str, dict]]:
    """Every transformers / sentence-transformers loader call, with its keyword arguments (the real loaders run)."""
    import sentence_transformers
    import transformers

    calls: list[tuple[str, dict]] = []
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModel):
        real = cls.from_pretrained

        def record(*args, _real=real, _name=cls.__name__, **kwargs):
            calls.append((_name, kwargs))
            return _real(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", record)

    class RecordingST:
        def __init__(self, *args, **kwargs):
            calls.append(("SentenceTransformer", kwargs))

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", RecordingST)
    return calls


def remote_code_model(folder: Path, tiny_bert: Path, model_type: str = "bert") -> Path:
    """A copy of the tiny model whose config asks for custom code (auto_map) that would leave a marker if run."""
    shutil.copytree(tiny_bert, folder)
    (folder / "evil.py").write_text(
        f"open({str(folder / 'PWNED')!r}, 'w').write('ran')\n"
        "from transformers import BertConfig as EvilConfig, BertModel as EvilModel\n"
    )
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type=model_type, auto_map={"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_remote_code_is_never_trusted_whatever_the_model(tmp_path, tiny_bert, loader_calls, monkeypatch):
    import mirror.hub
    from mirror.encoder import load_encoder, load_sentence_transformer, save_encoder

    hub_snapshot = remote_code_model(tmp_path / "hub" / "snapshot", tiny_bert)
    downloads = []
    # (the hub's config.json alone first, to price the model: mirror.hf.check_weights; then the rest)
    monkeypatch.setattr(
        mirror.hub,
        "download",
        lambda repo, patterns=None, cache_dir=None, server=False: downloads.append(repo) or hub_snapshot,
    )
    monkeypatch.setattr(mirror.hub, "hub_download_bytes", lambda repo: 1000)  # the hub answers: priced, small
    roots = tmp_path / "models"
    evil = remote_code_model(roots / "evil", tiny_bert)
    unknown = remote_code_model(roots / "unknown", tiny_bert, model_type="evil-net")
    # no general checks: they would score the bundled model's run (~15 s) and load nothing this test looks at
    app = MirrorApp(Settings(work_dir=tmp_path / "w", model_roots=(roots, Path(tiny_bert)), general_checks=False))
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    for model in ["some-org/remote-code-model", str(evil), str(tiny_bert), BUNDLED_MODEL]:
        events = train(app, s, model)
        assert events[-1].kind == "done", (model, events[-1])
    last = train(app, s, unknown)[-1]  # a model type only custom code defines: refused, nothing run
    assert last.kind == "error" and "(remote code), which Mirror never runs" in last.text, last
    with pytest.raises(MirrorError, match="needs code from its own repository"):
        load_encoder(unknown)
    save_encoder(load_encoder(evil), tmp_path / "saved")
    load_sentence_transformer(tmp_path / "saved")
    assert set(downloads) == {"some-org/remote-code-model"}
    names = {name for name, _ in loader_calls}
    assert names == {"AutoConfig", "AutoTokenizer", "AutoModel", "SentenceTransformer"} and len(loader_calls) > 20
    assert all(kwargs.get("trust_remote_code") is False for _, kwargs in loader_calls), loader_calls
    assert not any(p.name == "PWNED" for p in tmp_path.rglob("*"))  # the custom code never ran


def test_no_source_file_enables_remote_code():
    # all the app can run: the UI, its service layer, the engine and the index
    sources = [ROOT / "app.py", *ROOT.glob("ui/*.py"), *ROOT.glob("explorer/**/*.py"), *ROOT.glob("mirror/*.py")]
    sources += ROOT.glob("index/*.py")
    assert len(sources) > 30
    for path in sources:
        text = path.read_text()
        assert not re.search(r"trust_remote_code\s*=\s*(True|[a-z_]+\b(?<!False))", text), path
        for call in re.findall(r"from_pretrained\([^)]*\)", text):
            assert "trust_remote_code=False" in call, (path, call)
