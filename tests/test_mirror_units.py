"""Fast unit tests of the mirror engine: config, readers, augmentation, loss, batching."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest
import torch

from mirror.augment import make_views, mask_span
from mirror.config import MirrorConfig, detect_mode, steps_per_epoch
from mirror.data import clean_texts, decode, read_texts
from mirror.errors import MirrorError
from mirror.evaluate import parse_pairs, spearman
from mirror.loss import nt_xent, one_way
from mirror.train import plan_batches

# ---------------------------------------------------------------- loss


def test_nt_xent_matches_hand_computed_case():
    # Two strings, two 2-d views each. Unit vectors at known angles make every cosine explicit.
    a1, b1 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    a2 = torch.tensor([math.cos(0.3), math.sin(0.3)])
    b2 = torch.tensor([math.cos(1.2), math.sin(1.2)])
    tau = 0.5
    views = [a1, b1, a2, b2]  # order of cat([z1, z2])
    positive = {0: 2, 1: 3, 2: 0, 3: 1}
    expected = 0.0
    for i, v in enumerate(views):
        others = [float(v @ u) / tau for j, u in enumerate(views) if j != i]
        expected += -(float(v @ views[positive[i]]) / tau - math.log(sum(math.exp(x) for x in others)))
    expected /= 4
    got = nt_xent(torch.stack([a1, b1]), torch.stack([a2, b2]), tau)
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_nt_xent_is_scale_invariant_and_fp32_at_low_temperature():
    torch.manual_seed(0)
    z1, z2 = torch.randn(8, 16), torch.randn(8, 16)
    base = nt_xent(z1, z2, 0.04)
    assert nt_xent(z1 * 100, z2 * 3, 0.04).item() == pytest.approx(base.item(), rel=1e-4)
    half = nt_xent(z1.half(), z2.half(), 0.04)  # logits up to 25 would overflow exp() in fp16
    assert half.dtype == torch.float32 and torch.isfinite(half)
    assert half.item() == pytest.approx(base.item(), rel=1e-2)


def test_nt_xent_prefers_aligned_views():
    torch.manual_seed(1)
    z = torch.randn(6, 10)
    assert nt_xent(z, z + 0.01 * torch.randn(6, 10), 0.2) < nt_xent(z, torch.randn(6, 10), 0.2)
    with pytest.raises(ValueError):
        nt_xent(torch.randn(3, 4), torch.randn(2, 4), 0.2)


def test_one_way_is_mnrl_a_partner_against_the_strings_with_masked_negatives_left_out():
    """pair_loss "one-way" (issue 60, the peer's loss form): row i of z2 (a partner) scores every row of z1 (the
    strings); cross-entropy toward its own. No string-string or partner-partner term, unlike nt_xent's 2B views."""
    torch.manual_seed(2)
    z1, z2 = torch.randn(5, 8), torch.randn(5, 8)
    tau = 0.1
    a, s = torch.nn.functional.normalize(z2, dim=-1), torch.nn.functional.normalize(z1, dim=-1)
    expected = sum(-(float(a[i] @ s[i]) / tau - math.log(sum(math.exp(float(a[i] @ s[j]) / tau) for j in range(5))))
                   for i in range(5)) / 5  # fmt: skip
    assert one_way(z1, z2, tau).item() == pytest.approx(expected, rel=1e-5)
    assert one_way(z1, z2, tau).item() != pytest.approx(nt_xent(z1, z2, tau).item(), rel=1e-3)
    # a masked pair (rows 0 and 1 share a partner: not each other's negatives) drops from both rows' sums
    masked = torch.zeros(5, 5, dtype=torch.bool)
    masked[0, 1] = masked[1, 0] = True
    keep = [[j for j in range(5) if not masked[i, j]] for i in range(5)]
    expected = sum(-(float(a[i] @ s[i]) / tau - math.log(sum(math.exp(float(a[i] @ s[j]) / tau) for j in keep[i])))
                   for i in range(5)) / 5  # fmt: skip
    assert one_way(z1, z2, tau, masked).item() == pytest.approx(expected, rel=1e-5)
    # a model that knows nothing (every view alike) scores log(B), not nt_xent's log(2B - 1)
    same = torch.ones(5, 8)
    assert one_way(same, same, tau).item() == pytest.approx(math.log(5), rel=1e-5)
    with pytest.raises(ValueError):
        one_way(torch.randn(3, 4), torch.randn(2, 4), 0.2)
    with pytest.raises(MirrorError, match="pair loss must be one of"):
        MirrorConfig(pair_loss="mnrl").validated()


# ---------------------------------------------------------------- augmentation


@pytest.mark.parametrize("mask", ["[MASK]", "<mask>"])
def test_mask_span_replaces_the_drawn_position(mask):
    text = "abcde" * 8  # the span's text also occurs earlier: a str.replace would mask the wrong place
    for seed in range(20):
        start = random.Random(seed).randrange(len(text) - 5 + 1)
        got = mask_span(text, mask, 5, random.Random(seed))
        assert got == text[:start] + mask + text[start + 5 :]
    assert any(random.Random(s).randrange(36) > 0 for s in range(20))  # positions other than the first drawn


def test_mask_span_leaves_short_strings_alone():
    rng = random.Random(0)
    assert mask_span("international", "[MASK]", 5, rng) == "international"
    assert mask_span("x" * 29, "[MASK]", 5, rng) == "x" * 29
    assert mask_span("x" * 30, "[MASK]", 5, rng).count("[MASK]") == 1
    assert mask_span("x" * 40, "[MASK]", 0, rng) == "x" * 40


def test_make_views_without_mask_token_gives_dropout_only_views():
    texts = ["a sentence that is long enough to be masked here"]
    v1, v2 = make_views(texts, None, 5, random.Random(0))
    assert v1 == v2 == texts
    v1, v2 = make_views(texts, "<mask>", 5, random.Random(0))
    assert v1 == texts and "<mask>" in v2[0] and len(v2[0]) == len(texts[0]) - 5 + len("<mask>")


# ---------------------------------------------------------------- config


def test_presets_follow_the_paper_for_a_plain_mlm():
    words = MirrorConfig.preset("words", model="bert-base-uncased")
    sents = MirrorConfig.preset("sentences", model="roberta-base")
    assert (words.temperature, words.epochs, words.max_length) == (0.2, 2, 25)
    assert (sents.temperature, sents.epochs, sents.max_length) == (0.04, 1, 50)
    for c in (words, sents):
        assert (c.lr, c.batch_size, c.dropout, c.mask_span, c.weight_decay) == (2e-5, 200, 0.1, 5, 0.01)
    assert MirrorConfig.preset("words", epochs=3, lr=None).epochs == 3


def test_sentences_on_a_sentence_encoder_use_the_dev_chosen_settings(tmp_path):
    st_folder, mlm_folder = tmp_path / "st", tmp_path / "mlm"
    st_folder.mkdir()
    mlm_folder.mkdir()
    (st_folder / "modules.json").write_text("[]")
    for model in ("bundled", "sentence-transformers/all-mpnet-base-v2", str(st_folder)):
        sents = MirrorConfig.preset("sentences", model=model)
        assert (sents.temperature, sents.lr, sents.epochs, sents.blend_alpha) == (0.1, 1e-5, 1, 0.25)
        words = MirrorConfig.preset("words", model=model)  # words keep the paper's τ and lr, blended at 0.75
        assert (words.temperature, words.lr, words.blend_alpha) == (0.2, 2e-5, 0.75)
    mlm = MirrorConfig.preset("sentences", model=str(mlm_folder))
    assert (mlm.temperature, mlm.blend_alpha) == (0.04, 1.0)  # no blend back toward a base that is no sentence encoder
    assert MirrorConfig.preset("words", model=str(mlm_folder)).blend_alpha == 1.0
    assert MirrorConfig.preset("words", blend_alpha=1.0).blend_alpha == 1.0
    assert MirrorConfig.preset("sentences", blend_alpha=1.0).blend_alpha == 1.0  # an explicit value wins
    # explicit values always win over the adjustment
    assert MirrorConfig.preset("sentences", temperature=0.05).temperature == 0.05
    assert MirrorConfig.preset("sentences", lr=3e-5).lr == 3e-5


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("epochs", 0, "epochs"),
        ("epochs", -1, "epochs"),
        ("batch_size", 1, "batch size"),
        ("temperature", 0, "temperature"),
        ("pooling", "max", "pooling"),
        ("lr", -1.0, "learning rate"),
        ("dropout", 1.0, "dropout"),
        ("device", "tpu", "device"),
    ],
)
def test_bad_settings_are_clear_errors(field, value, needle):
    with pytest.raises(MirrorError, match=needle):
        MirrorConfig.preset("words", **{field: value})


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("lr", float("inf"), "learning rate must be a finite number, got inf"),
        ("lr", float("nan"), "learning rate must be a finite number, got nan"),
        ("lr", 1e30, "learning rate must be <= 1, got 1e+30"),
        ("lr", 0.0, "learning rate must be > 0, got 0.0"),
        ("lr", -1.0, "learning rate must be > 0, got -1.0"),
        ("dropout", 1.5, "dropout must be in [0, 1), got 1.5"),
        ("dropout", -0.1, "dropout must be >= 0, got -0.1"),
        ("temperature", 1e-30, "temperature must be >= 0.001, got 1e-30"),
        ("temperature", 11.0, "temperature must be <= 10, got 11.0"),
        ("weight_decay", float("inf"), "weight decay must be a finite number, got inf"),
        ("dropout", float("nan"), "dropout must be a finite number, got nan"),
        ("grad_clip", float("-inf"), "grad clip must be a finite number, got -inf"),
        ("seed", 10**20, "seed must be <= 4294967295, got 100000000000000000000"),
        ("seed", 1e20, "seed must be a whole number, got 1e+20"),
        ("seed", -1, "seed must be >= 0, got -1"),
        pytest.param("seed", 10**5000, "seed must be <= 4294967295, got a number too large to print", id="huge"),
        ("epochs", 10**9, "epochs must be <= 1000, got 1000000000"),
        ("epochs", 2.5, "epochs must be a whole number, got 2.5"),
        ("epochs", "3", "epochs must be a number, got '3'"),
        ("epochs", True, "epochs must be a number, got True"),
        ("batch_size", 100_001, "batch size must be <= 100000, got 100001"),
        ("max_length", 3, "max length must be >= 4, got 3"),
        ("max_length", 8193, "max length must be <= 8192, got 8193"),
        ("max_steps", 0, "max steps must be >= 1, got 0"),
        ("mask_span", 1001, "mask span must be <= 1000, got 1001"),
    ],
)
def test_numeric_settings_must_be_finite_and_in_range(field, value, message):
    with pytest.raises(MirrorError) as exc:
        MirrorConfig.preset("words", **{field: value})
    assert str(exc.value) == message


def test_numeric_settings_at_their_bounds_are_accepted():
    edge = dict(lr=1.0, temperature=1e-3, epochs=1000, batch_size=100_000, max_length=8192, seed=2**32 - 1)
    assert MirrorConfig.preset("words", **edge, mask_span=1000, max_steps=1).seed == 2**32 - 1
    assert MirrorConfig.preset("words", temperature=10.0, epochs=1, batch_size=2, max_length=4, seed=0).seed == 0
    assert MirrorConfig.preset("words").max_steps is None  # unset: run all epochs


def test_unknown_field_and_mode():
    with pytest.raises(MirrorError, match="unknown config field"):
        MirrorConfig.preset("words", colour="red")
    with pytest.raises(MirrorError, match="unknown mode"):
        MirrorConfig.preset("paragraphs")


def test_config_round_trips_through_dict():
    c = MirrorConfig.preset("sentences", seed=7, max_steps=3)
    assert MirrorConfig.from_dict(c.to_dict()) == c


def test_for_texts_detects_or_takes_the_mode():
    config, reason = MirrorConfig.for_texts(["a man is walking", "two dogs play in snow"], epochs=3)
    assert (config.mode, config.temperature, config.epochs) == ("sentences", 0.1, 3) and "sentences preset" in reason
    config, reason = MirrorConfig.for_texts(["a man is walking", "two dogs play"], "words")
    assert config.mode == "words" and "explicitly" in reason
    with pytest.raises(MirrorError):
        MirrorConfig.for_texts(["x"], "paragraphs")


def test_detect_mode():
    assert detect_mode(["cat", "dog", "hot dog"])[0] == "words"
    mode, reason = detect_mode(["a man is walking", "two dogs play in snow", "cat"])
    assert mode == "sentences" and "67%" in reason


# ---------------------------------------------------------------- input


def test_clean_texts_strips_drops_and_dedupes_in_order():
    texts, stats = clean_texts(["  cat ", "", "dog", "cat", "   ", "a  b\tc", "dog"])
    assert texts == ["cat", "dog", "a b c"]
    assert (stats.lines, stats.empty, stats.duplicates, stats.kept) == (7, 2, 2, 3)
    assert "3 strings" in stats.summary()


def test_readers(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffcat\r\ndog\n\nmouse\n".encode())
    assert read_texts(tmp_path / "a.txt") == ["cat", "dog", "", "mouse"]
    (tmp_path / "b.csv").write_text('id,text,score\n1,"hello, world",3\n2,bye,4\n')
    assert read_texts(tmp_path / "b.csv") == ["hello, world", "bye"]
    assert read_texts(tmp_path / "b.csv", column="id") == ["1", "2"]
    (tmp_path / "c.tsv").write_text("n\tphrase_col\n1\tred car\n2\tblue bus\n")
    assert read_texts(tmp_path / "c.tsv") == ["red car", "blue bus"]  # first mostly non-numeric column
    (tmp_path / "d.jsonl").write_text('{"text": "alpha"}\n\n{"text": "beta", "x": 1}\n"gamma"\n')
    assert read_texts(tmp_path / "d.jsonl") == ["alpha", "beta", "gamma"]
    (tmp_path / "e.txt").write_bytes("caf\u00e9\nna\u00efve\n".encode("utf-16"))
    assert read_texts(tmp_path / "e.txt") == ["caf\u00e9", "na\u00efve"]


@pytest.mark.parametrize(
    "name,content,needle",
    [
        ("x.txt", "日本語\nテスト\n".encode("shift_jis"), "x.txt: is not UTF-8"),
        ("x.pdf", b"%PDF", "unsupported file type"),
        ("x", b"cat", "unsupported file type"),
        ("x.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "PNG image, not a text file"),
        ("x.bin.txt", b"\x00\x01\x02\x00ab" * 300, "binary"),
        ("x.jsonl", b'{"text": "ok"}\n{"text": \n', "line 2 is not valid JSON"),
        ("x.jsonl", b'{"title": "no text"}\n', "no string field 'text'"),
        ("x.csv", b"a,b\n1,2\n3,4\n", "no text column"),
        ("x.csv", b"", "empty"),
    ],
)
def test_reader_errors_name_the_file_and_problem(tmp_path, name, content, needle):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(MirrorError, match=needle):
        read_texts(tmp_path / name)


def test_stray_nul_and_control_characters_are_cleaned_not_fatal(tmp_path):
    (tmp_path / "x.txt").write_bytes(
        b"caf\xc3\xa9\x00 au lait\nbell\x07 tower\n\x1b[31mred\x1b[0m\n" + b"plain line\n" * 200
    )
    texts, stats = clean_texts(read_texts(tmp_path / "x.txt"))
    assert texts[:3] == ["caf\u00e9 au lait", "bell tower", "[31mred [0m"] and stats.duplicates == 199


def test_missing_file_and_missing_column(tmp_path):
    with pytest.raises(MirrorError, match="no such file"):
        read_texts(tmp_path / "nope.txt")
    (tmp_path / "b.csv").write_text("text\nhi\n")
    with pytest.raises(MirrorError, match="no column 'body'"):
        read_texts(tmp_path / "b.csv", column="body")


def test_decode_bom_variants():
    assert decode(b"\xef\xbb\xbfhi", "f") == "hi"
    assert decode("hi".encode("utf-16-le").join([b"\xff\xfe", b""]), "f") == "hi"


# ---------------------------------------------------------------- batching


@pytest.mark.parametrize("n,b", [(5, 200), (200, 200), (201, 200), (399, 200), (401, 200), (2, 2), (3, 2)])
def test_plan_batches_covers_everything_without_singletons(n, b):
    batches = plan_batches(n, b, random.Random(0))
    flat = sorted(i for batch in batches for i in batch)
    assert flat == list(range(n))
    assert all(len(batch) >= 2 for batch in batches)
    assert len(batches) == steps_per_epoch(n, b)


# ---------------------------------------------------------------- evaluation helpers


def test_parse_pairs_formats():
    words = parse_pairs("# header\nold new 1.58\ncat\tdog\t7\nbig large 9.1\n")
    assert words == [("old", "new", 1.58), ("cat", "dog", 7.0), ("big", "large", 9.1)]
    sents = parse_pairs("a man walks\ta person walks\t4.5\nx y\tz\t1\nq\tr\t0\n")
    assert sents[0] == ("a man walks", "a person walks", 4.5)
    stsb = parse_pairs("g\tf\t2012\t0001\t5.000\tA man.\tA person.\textra\n" * 3)
    assert stsb[0] == ("A man.", "A person.", 5.0)
    with pytest.raises(MirrorError, match="line 3"):
        parse_pairs("a b 1\nc d 2\ne f\n")
    with pytest.raises(MirrorError, match="at least 3"):
        parse_pairs("a b 1\n")


def test_spearman_matches_scipy_with_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(3)
    x = [rng.randint(0, 5) for _ in range(50)]
    y = [xi + rng.random() * 3 for xi in x]
    assert spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_length_buckets_cut_padding_but_keep_batches_random():
    rng = random.Random(0)
    lengths = [rng.randint(1, 100) for _ in range(20_000)]
    plain = plan_batches(len(lengths), 200, random.Random(1))
    bucketed = plan_batches(len(lengths), 200, random.Random(1), lengths=lengths)
    assert sorted(i for b in bucketed for i in b) == list(range(len(lengths)))

    def padding(batches):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)

    assert padding(bucketed) < 0.2 * padding(plain)
    firsts = [lengths[b[0]] for b in bucketed]
    assert firsts != sorted(firsts)  # batch order is shuffled, not one global sort


# ---------------------------------------------------------------- model names


@pytest.fixture
def model_roots(tmp_path, tiny_bert) -> Path:
    """An allowed root holding a copy of the tiny model, a symlink out of it and a folder beside it."""
    import shutil

    root = tmp_path / "allowed"
    shutil.copytree(tiny_bert, root / "team" / "tiny")
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")
    return root


@pytest.mark.parametrize(
    "model,says",
    [
        ("", "choose a base model"),
        ("https://huggingface.co/bert-base-uncased", "is not a model name"),
        ("bad\nid", "is not a model name"),
        ("a" * 1001, f"`{'a' * 80}…` is not a model name"),
        ("bert base uncased", "is not a valid Hugging Face model id"),
        ("org/..", "is not a valid Hugging Face model id"),
        ("org/na..me", "is not a valid Hugging Face model id"),
        ("a" * 97, "is not a valid Hugging Face model id"),  # the stricter id: at most 96 characters a part
        ("-rf", "is not a valid Hugging Face model id"),
        ("/etc", "only accepted under the allowed directories"),
        ("../../etc", "only accepted under the allowed directories"),
        ("org/name/extra", "only accepted under the allowed directories"),  # a path, not an id
        ("C:\\models\\bert", "only accepted under the allowed directories"),
        ("{root}/escape", "only accepted under the allowed directories"),  # a symlink out of the root
        ("{root}/../outside", "only accepted under the allowed directories"),
    ],
)
def test_check_model_name_refuses(model_roots, model, says):
    from mirror.names import check_model_name

    with pytest.raises(MirrorError, match=re.escape(says)):
        check_model_name(model.replace("{root}", str(model_roots)), roots=[model_roots])


def test_check_model_name_roots_and_hub_switches(model_roots):
    from mirror.names import check_model_name

    inside = str(model_roots / "team" / "tiny")
    assert check_model_name(f"  {inside} ", roots=[model_roots]) == inside
    assert check_model_name("/etc") == "/etc"  # roots=None: the CLI takes folders anywhere (not loaded here)
    with pytest.raises(MirrorError, match="this server does not load models from local folders"):
        check_model_name(inside, roots=())
    assert check_model_name("org/name.v2") == "org/name.v2" and check_model_name("bert-base-uncased", roots=())
    with pytest.raises(MirrorError, match=r"'bert-base-uncased': this server only offers the bundled model"):
        check_model_name("bert-base-uncased", allow_hub=False)
    assert check_model_name("bundled", allow_hub=False, roots=()) == "bundled"


def test_looks_local_and_is_under(model_roots, tmp_path, monkeypatch):
    from mirror.names import HUB_ID, is_under, looks_local

    monkeypatch.chdir(tmp_path)
    assert looks_local("./m") and looks_local("~/m") and looks_local("a/b/c") and looks_local("allowed")
    assert not looks_local("org/name") and not looks_local("bert-base-uncased") and looks_local("a" * 300)
    assert is_under(model_roots / "team" / "tiny", model_roots) and is_under(model_roots, model_roots)
    assert not is_under(model_roots / "escape", model_roots) and not is_under(model_roots / "..", model_roots)
    assert HUB_ID.match("a" * 96 + "/" + "b" * 96) and not HUB_ID.match("a/b/c")


def test_load_encoder_takes_the_same_roots(tiny_bert, model_roots):
    from mirror.encoder import load_encoder

    inside = model_roots / "team" / "tiny"
    assert load_encoder(inside, allowed_roots=[model_roots]).dim == 32
    with pytest.raises(MirrorError, match="only accepted under the allowed directories"):
        load_encoder(tiny_bert, allowed_roots=[model_roots])
    with pytest.raises(MirrorError, match="does not load models from local folders"):
        load_encoder(inside, allowed_roots=[])


def test_only_mirror_names_defines_the_model_id_pattern():
    import re

    from tests.conftest import ROOT

    for path in [*ROOT.glob("mirror/*.py"), *ROOT.glob("index/*.py")]:
        if path.name != "names.py":
            text = path.read_text()
            assert not re.search(r"^HUB_ID\s*=", text, re.M) and "def _is_under" not in text, path


# ---------------------------------------------------------------- loading a model folder safely


def st_copy(tiny_bert: Path, folder: Path, modules: list) -> Path:
    """A copy of the tiny model with the given modules.json."""
    import json
    import shutil

    shutil.copytree(tiny_bert, folder)
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


@pytest.mark.parametrize("escape", ["absolute", "dotdot", "symlink"])
def test_a_modules_json_naming_a_folder_outside_the_model_is_refused(tiny_bert, tmp_path, escape):
    """An uploaded model whose modules.json names another model on the machine must not load that one."""
    from mirror.encoder import load_encoder

    other = st_copy(tiny_bert, tmp_path / "sessions" / "other" / "model", [])
    upload = tmp_path / "sessions" / "mine" / "upload"
    path = {"absolute": str(other), "dotdot": "../../other/model", "symlink": "0_Transformer"}[escape]
    st_copy(
        tiny_bert, upload, [{"idx": 0, "name": "0", "path": path, "type": "sentence_transformers.models.Transformer"}]
    )
    if escape == "symlink":
        (upload / "0_Transformer").symlink_to(other)
    with pytest.raises(MirrorError) as exc:
        load_encoder(upload)
    message = str(exc.value)
    assert message == "upload: the model's modules.json names a module outside its folder; refusing to load it"
    assert str(tmp_path) not in message


def test_a_module_inside_the_folder_loads(tiny_bert, tmp_path):
    from mirror.encoder import load_encoder

    folder = st_copy(tiny_bert, tmp_path / "m", [{"path": "", "type": "sentence_transformers.models.Transformer"}])
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    modules = [{"path": "", "type": "x.Transformer"}, {"path": "1_Pooling", "type": "x.Pooling"}]
    st_copy(folder, tmp_path / "n", modules)
    assert load_encoder(tmp_path / "n").pooling == "mean"
    st_copy(folder, tmp_path / "bad", ["0_Transformer"])
    with pytest.raises(MirrorError, match="^bad: the model's modules.json is malformed; refusing to load it$"):
        load_encoder(tmp_path / "bad")


def test_load_errors_never_show_a_server_path(tiny_bert, tmp_path):
    import shutil

    from mirror.encoder import load_encoder

    broken = tmp_path / "srv" / "runs" / "broken"
    shutil.copytree(tiny_bert, broken)
    (broken / "config.json").write_text("{}")  # transformers names the folder in its error
    no_weights = tmp_path / "srv" / "runs" / "no_weights"
    shutil.copytree(tiny_bert, no_weights)
    (no_weights / "model.safetensors").unlink()
    cases = [
        (tmp_path / "srv" / "missing", "missing: no such model folder"),
        (tmp_path / "srv", "srv: not a model folder (no config.json or modules.json)"),
        (broken, "broken: could not load the model ("),
        (no_weights, "no_weights: could not load the model ("),
    ]
    for folder, says in cases:
        with pytest.raises(MirrorError) as exc:
            load_encoder(str(folder))
        assert str(exc.value).startswith(says) and str(tmp_path) not in str(exc.value), exc.value


def test_the_base_model_a_tuned_folder_names_is_only_a_string(tiny_bert, tmp_path):
    import json

    from mirror.encoder import load_encoder, save_encoder
    from mirror.names import check_model_name

    saved = save_encoder(load_encoder(tiny_bert), tmp_path / "tuned", extra={"config": {"model": "/etc/secret"}})
    encoder = load_encoder(saved)  # loads the tuned weights only: the base named in the file is not touched
    assert encoder.base_model == "/etc/secret" and encoder.dim == 32
    with pytest.raises(MirrorError, match="does not load models from local folders"):
        check_model_name(encoder.base_model, roots=())
    (saved / "mirror_config.json").write_text(json.dumps({"config": ["not", "a", "dict"]}))
    assert load_encoder(saved).base_model is None


def test_counting_a_long_strings_tokens_logs_no_indexing_errors_warning(tiny_bert):
    """Counting tokens past the model's length is what token_lengths (and the checks' lengths) ask for: transformers'
    "Token indices sequence length is longer than … will result in indexing errors" is not logged for it (a server's
    log said so at every start). Its warning comes once a tokenizer: a fresh one here."""
    import logging

    from mirror.encoder import load_encoder, tokenized

    enc = load_encoder(str(tiny_bert), device="cpu")
    enc.tokenizer.model_max_length = 64  # the tiny BERT's folder sets none (a bundled model's: 512)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("transformers.tokenization_utils_base")
    logger.addHandler(handler)
    try:
        long = " ".join(["word"] * (enc.tokenizer.model_max_length + 50))
        assert enc.token_lengths([long])[0] > enc.tokenizer.model_max_length
        tokenized(enc.tokenizer, [long], add_special_tokens=False, truncation=False)
        assert not [m for m in seen if "indexing errors" in m], seen
        enc.tokenizer([long])  # the same call without tokenized's default: the warning this test would catch
        assert [m for m in seen if "indexing errors" in m], "transformers no longer warns: this test checks nothing"
    finally:
        logger.removeHandler(handler)
