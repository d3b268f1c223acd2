"""Shared fixtures: offline mode, one torch thread, tiny random BERT/RoBERTa models built here, and the app's
service (`explorer.MirrorApp`) on the tiny BERT with the helpers its tests share (WORDS, TINY, train, tuned)."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # explorer is imported by the fixtures, not here: index and engine tests never load it
    from explorer import MirrorApp, Session
    from explorer.events import Event

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'-")
VOCAB_WORDS = ["cat", "dog", "car", "bus", "the", "a", "is", "on", "red", "blue", "big", "small", "man", "woman"]
# What the app's tests tune on, and the settings that keep a run to a couple of tiny steps.
# short sentences of a shared small vocabulary (the tiny tokenizer's words): the unit tests' sentence-mode strings
SENTENCES = [
    "a man is riding a big red bus to the city",
    "the small dog is sleeping on the blue car",
    "two women are walking under the moon tonight",
    "a cat sits on a rock near the old tree",
    "the sun is shining on the quiet river bank",
    "children play football in the park after school",
    "a red car is parked next to the big blue bus",
    "the old man reads a book under the tree",
]
WORDS = ["cat", "dog", "car", "bus", "red", "blue", "big", "small", "man", "woman", "sun", "moon", "tree", "rock"]
TINY = {"batch_size": 8, "max_steps": 2, "lr": 1e-3, "device": "cpu"}
ENDLESS = {**TINY, "batch_size": 4, "max_steps": 0, "epochs": 1000}  # no step limit of its own: a stop ends it


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)
    # ./test.sh runs the files on as many processes as the machine has cores (pytest-xdist): then every process
    # the tests start (the app's server, the CLI) computes on one thread too, so no core is asked for twice (torch's
    # threads spin while they wait: two 2-thread processes on 2 cores took a third more CPU for the same work).
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Gradio copies every file it serves from outside its temp folder (the model zips of the test servers, ~90 MB
    # each) into GRADIO_TEMP_DIR, <tmp>/gradio by default, and a test server ends before its delete_cache runs: a
    # run of the suite left ~2 GB there each time, until a full disk failed a blend (OSError). The session's own
    # folder instead, removed at its end (a value set outside the tests wins).
    if "GRADIO_TEMP_DIR" not in os.environ:
        import tempfile

        os.environ["GRADIO_TEMP_DIR"] = config._mirror_gradio_tmp = tempfile.mkdtemp(prefix="mirror-tests-gradio-")
    # Every server the tests talk to is http:// on this machine (the app, the fake Hub; nothing else is reachable), yet
    # each httpx client (one per gradio_client event, per httpx.get) loads a CA bundle into a new SSL context: ~13 ms
    # on a fast core (these machines set SSL_CERT_FILE to the system's 144 certificates), ~1,300 times a run, ~17 s
    # of CPU. For the tests and what they start: no bundle, an empty certificate folder (read on demand: never).
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist); workers inherit it
        import tempfile

        os.environ.pop("SSL_CERT_FILE", None)
        os.environ["SSL_CERT_DIR"] = config._mirror_no_certs = tempfile.mkdtemp(prefix="mirror-tests-no-certs-")


def pytest_collection_finish(session):
    freeze_garbage()


def freeze_garbage() -> None:
    """Keep what is alive now (the modules, the collected tests, session fixtures) out of the garbage collector's
    full passes: every run and calibration ends with one (explorer.resources.models.release_memory), and in a test
    process holding torch, gradio and transformers each pass took ~0.4 s, ~100 s of CPU over the suite's runs. What
    dies later is still freed (reference counts); only a reference cycle among these objects would stay. The
    server (app.py) freezes its own start the same way."""
    import gc
    import sys

    global _modules_frozen
    gc.collect()
    gc.freeze()
    _modules_frozen = len(sys.modules)


def pytest_runtest_logfinish(nodeid, location):
    """After each test (its fixtures torn down): FastAPI's caches let go of the apps the test built. Every gr.Blocks
    makes a FastAPI app as it closes and again in .queue(), and FastAPI keeps each route's endpoint in lru_caches of
    4,096 entries (fastapi.dependencies.models), closures over the whole demo: a server builds one, but a test process
    builds dozens (build_demo), and kept alive they were ~25,000 objects each, ~750,000 in one process, which every
    run's full garbage-collector pass scanned (release_memory: ~0.4 s a run, ~58 s of CPU over the suite)."""
    import sys

    models = sys.modules.get("fastapi.dependencies.models")
    for name in ("_is_gen_callable_cached", "_is_async_gen_callable_cached", "_is_coroutine_callable_cached"):
        cached = getattr(models, name, None)
        if cached is not None:
            cached.cache_clear()
    # modules imported since the last freeze (umap, numba, sklearn, pyarrow... on a test's first map or export): kept
    # out of the later passes too, as the start's are
    global _modules_frozen
    if len(sys.modules) - _modules_frozen >= 100:
        freeze_garbage()


_modules_frozen = 0


def pytest_collection_modifyitems(config, items):
    """The browser files first, then the other slow ones (the bundled model), then the rest, each group in file
    order: spread over processes file by file (`--dist loadfile`), the longest go first and the short ones fill the
    gaps, so no process is left with one long file at the end while the other waits."""

    def rank(item) -> int:
        marks = {m.name for m in item.iter_markers()}
        return 0 if "browser" in marks else 1 if "slow" in marks else 2

    group = {}
    for item in items:  # a file's rank: its slowest test's
        group[item.path] = min(group.get(item.path, 2), rank(item))
    items.sort(key=lambda item: group[item.path])  # stable: file order, and test order within a file


# Test files that share one server (`bundled_server`): each maps to the file whose scope it joins, so that pytest-xdist
# runs them on one process, one after the other (a server's start, ~12 s of CPU, once).
SHARED_SERVER_FILES = {"tests/test_api_client.py": "tests/test_browser.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (./test.sh) with the files of SHARED_SERVER_FILES in one work unit; other modes as xdist
    makes them."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedServerScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SHARED_SERVER_FILES.get(scope, scope)

    return SharedServerScheduling(config, log)


def pytest_unconfigure(config):
    import shutil

    for name in ("_mirror_gradio_tmp", "_mirror_no_certs"):
        folder = getattr(config, name, None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def random_bert(
    folder: Path, hidden: int = 32, intermediate: int = 64, positions: int = 128, vocab_size: int = 0
) -> Path:
    """A 2-layer random BERT in `folder` (a plain HF folder) with a WordPiece vocab of the test words and characters,
    padded to `vocab_size` tokens (w0, w1, ...) when that is larger."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + VOCAB_WORDS + LETTERS + ["##" + c for c in LETTERS]
    vocab += [f"w{i}" for i in range(vocab_size - len(vocab))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True).save_pretrained(folder)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=intermediate,
        max_position_embeddings=positions,
    )
    import torch

    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 random BERT with a WordPiece vocab written here (a plain HF folder)."""
    folder = random_bert(tmp_path_factory.mktemp("tiny_bert"))
    freeze_garbage()  # transformers is loaded now: its modules too
    return folder


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    """A tiny random RoBERTa with a byte-level BPE vocab of single characters (mask token `<mask>`)."""
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    folder = tmp_path_factory.mktemp("tiny_roberta")
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "Ġ"] + LETTERS + [c.upper() for c in LETTERS if c.isalpha()]
    RobertaTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, merges=[]).save_pretrained(folder)
    config = RobertaConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=1,
    )
    import torch

    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def bundled_server(tmp_path_factory) -> Iterator[str]:
    """`python app.py` on the bundled model with the general checks off (nothing its tests read needs them; each
    run and blend saves encoding ~1,200 check texts, ~8-18 s on 2 loaded cores; tests/test_verdict_browser.py runs
    them), shared by test_browser.py and test_api_client.py: its URL."""
    from tests.server import serve

    # one probe of the machine's speed prices every plan of a test (the .txt and .csv of one list, two sessions):
    # estimates on CI's busy cores then differ only where the plans do
    env = {"MIRROR_GENERAL_CHECKS": "0", "MIRROR_SPEED_PROBE_S": "900"}
    with serve(tmp_path_factory.mktemp("bundled_app"), env=env) as served:
        yield served.url


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Debian's, driven by Playwright) for a browser test file. Per file, not per session: while
    Playwright's sync API is open its event loop runs in this thread, and a later file's `asyncio.run` fails ("cannot
    be called from a running event loop"). Assertions on the page wait up to 30 s (Playwright's default is 5): a
    Gradio event's round trip on 2 loaded cores takes longer than 5 s at times, and a test that waits too little
    fails at random."""
    from tests.test_browser import CHROMIUM_ARGS, ON_CI, chromium_or_skip

    exe = chromium_or_skip()
    if ON_CI:
        from playwright.sync_api import expect, sync_playwright
    else:
        sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
        expect, sync_playwright = sync_api.expect, sync_api.sync_playwright
    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


# ------------------------------------------------------------------------------ the app's service on the tiny BERT


@pytest.fixture
def app(request, tmp_path, tiny_bert) -> MirrorApp:
    """The service (no Gradio) with its own work folder; local models only from the tiny BERT's folder. The general
    checks after each run and blend only for a test marked `checks`: on the tiny BERT they tokenize ~1,200 bundled
    documents character by character (~2 s of CPU a model, in a thread that outlives the test), which was a fifth
    of the suite's CPU when every service test ran them."""
    from explorer import MirrorApp, Settings

    settings = Settings(
        work_dir=tmp_path / "sessions",
        model_roots=(Path(tiny_bert).resolve(),),
        max_strings=1000,
        general_checks=request.node.get_closest_marker("checks") is not None,
    )
    return MirrorApp(settings)


def train(app: MirrorApp, session: Session, model: str | Path, **overrides: Any) -> list[Event]:
    """`app.trainer.train` on the session's strings with TINY settings (plus `overrides`), run to its end: its events."""
    return list(app.trainer.train(session, str(model), "auto", {**TINY, **overrides}))


def blend(app: MirrorApp, session: Session, alpha: float) -> tuple[Any, list[Event], Any]:
    """A blend of the session's run at `alpha`, run to its end, which must serve it: (its parent, its events, it)."""
    parent = session.run
    events = list(app.saved.blend_run(session, alpha))
    assert events[-1].kind == "done", events[-1]
    return parent, events, session.run


def tuned_session(app: MirrorApp, model: str | Path) -> Session:
    """A new session with WORDS loaded, tuned (TINY) and indexed: it serves a run."""
    s = app.session()
    app.loader.load_pasted(s, "\n".join(WORDS))
    events = train(app, s, model)
    assert events[-1].kind == "done", events[-1]
    return s


@pytest.fixture
def tuned(app, tiny_bert) -> Session:
    """A session of `app` with the tiny model tuned on WORDS and indexed."""
    return tuned_session(app, tiny_bert)


def tree(folder: Path) -> list[str]:
    """Every path under `folder`, relative and sorted ([] when it does not exist)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def digest(folder: Path) -> dict[str, str]:
    """Each file under `folder` with the SHA-256 of its bytes: equal digests, untouched files."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ------------------------------------------------------------------------------ faults, injected where they happen


def half_written_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make saving a model write half of its weights file, then fail as a full disk does."""
    from transformers import PreTrainedModel

    real = PreTrainedModel.save_pretrained

    def save_pretrained(self, folder, *args, **kwargs):
        real(self, folder, *args, **kwargs)
        weights = Path(folder) / "model.safetensors"
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)


def inject_oom(monkeypatch: pytest.MonkeyPatch, first_n: int, when: str = "training") -> dict[str, int]:
    """Raise CUDA's OutOfMemoryError (it can be built on CPU) from the encoder's forward pass: the first `first_n`
    training forwards (when="training") or inference forwards (when="inference"). Returns the count so far."""
    import torch

    from mirror.encoder import Encoder

    real = Encoder.embed
    calls = {"oom": 0}

    def embed(self, batch, padded=None):
        if self.model.training == (when == "training") and calls["oom"] < first_n:
            calls["oom"] += 1
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return real(self, batch, padded)

    monkeypatch.setattr(Encoder, "embed", embed)
    return calls
