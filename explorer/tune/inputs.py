"""What a user can ask for, checked: the examples and gold sets on offer, run settings, queries and k.

Plain values in, plain values (or MirrorError) out; the UI and the API build their inputs from these tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from explorer.tune.guess import planned_steps
from mirror.bundled import DATA_DIR
from mirror.config import BUNDLED_MODEL, DEVICES, PAIR_LOSSES, POOLINGS, PRECISIONS, MirrorConfig
from mirror.errors import MirrorError

EXAMPLES_DIR = DATA_DIR  # the bundled examples (mirror.bundled)
EXAMPLES: dict[str, tuple[str, str]] = {
    "small": ("Small demo list: 411 everyday words in 20 themes (tunes in seconds)", "small_words.txt"),
    "words10k": ("10,000 most frequent English words (MirrorBERT's word setting)", "en_top10k.txt"),
    "sentences10k": ("10.5k STS-B training sentences (MirrorBERT's sentence setting)", "stsb_train_sentences.txt"),
}
GOLD_SETS: dict[str, str] = {
    "SimLex-999": "gold/simlex999.txt",
    "WordSim-353": "gold/wordsim353.tsv",
    "STS-B dev": "gold/sts-dev.csv",
}
HUB_MODELS = [
    (f"{BUNDLED_MODEL} · all-MiniLM-L6-v2 (offline default)", BUNDLED_MODEL),
    ("bert-base-uncased", "bert-base-uncased"),
    ("bert-base-cased", "bert-base-cased"),
    ("roberta-base", "roberta-base"),
    ("distilbert-base-uncased", "distilbert-base-uncased"),
    ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ("sentence-transformers/all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"),
]
MODES = [("Auto (from the strings)", "auto"), ("Words", "words"), ("Sentences", "sentences")]
# Labels of the engine's settings in the Advanced accordion; a field added to MirrorConfig later still
# appears there (and in the API's settings), labelled by its name.
LABELS: dict[str, str] = {
    "pooling": "Pooling",
    "temperature": "Temperature τ",
    "epochs": "Epochs",
    "batch_size": "Batch size",
    "lr": "Learning rate",
    "weight_decay": "Weight decay",
    "max_length": "Max length (tokens)",
    "mask_span": "Mask span k (characters)",
    "mask_min_chars": "Mask strings from (characters)",
    "dropout": "Dropout",
    "grad_clip": "Gradient clipping (0 = off)",
    "seed": "Seed",
    "device": "Device",
    "precision": "Precision",
    "max_steps": "Max steps (empty = all epochs)",
    "min_steps": "Min steps (a small upload trains more epochs; 0 = off)",
    "bucket_by_length": "Bucket batches by length",
    "log_every": "Loss read-back every N steps",
    "compile": "torch.compile the encoder",
    "distill": "Keep embeddings near the base: distillation λ (0 = off)",
    "l2_base": "Keep weights near the base: L2-SP λ (0 = off)",
    "freeze_layers": "Frozen lower layers (0 = none)",
    "freeze_embeddings": "Freeze the embeddings",
    "blend_alpha": "Blend with the base after training: α (1 = off)",
    "blend_choose": "Pairs: choose the blend α per run (held-out rows + general checks)",
    "retry_anchor": "Pairs: if the checks hold the blend down, train again with general text near the base: λ (0 = never)",
    "join_views": "Longer views: strings joined per view (1 = off)",
    "mix_general": "Mix general text into each batch: its fraction (0 = off)",
    "lora_rank": "LoRA: adapter rank on attention, merged at the end (0 = off)",
    "guide_margin": "Guided negatives: mask those the base finds within this margin (0 = off)",
    "long_anchor": "Keep long texts near the base: λ (0 = off)",
    "general_anchor": "Keep general text (Wikipedia) near the base: λ (0 = off)",
    "pair_max_length": "Pairs: max length of either side (tokens)",
    "pair_mask": "Pairs: span-mask the partners too",
    "pair_loss": "Pairs: loss (views = InfoNCE over all 2B views; one-way = a partner against the strings, as MNRL)",
    "pair_holdout": "Pairs: share of rows held out to measure the gain (0 = all train)",
    "pair_distill_own": "Pairs: distil each partner toward the base's embedding of itself (off: of its string)",
}
CHOICE_FIELDS = {"pooling": POOLINGS, "device": DEVICES, "precision": PRECISIONS, "pair_loss": PAIR_LOSSES}
_DEFAULTS = MirrorConfig()
# name -> "choice" | "bool" | "int" | "float" | "str", for every MirrorConfig field but mode and model.
ADVANCED: dict[str, str] = {
    f.name: (
        "choice"
        if f.name in CHOICE_FIELDS
        else "int"
        if f.name == "max_steps"
        else {bool: "bool", int: "int", float: "float"}.get(type(getattr(_DEFAULTS, f.name)), "str")
    )
    for f in dataclasses.fields(MirrorConfig)
    if f.name not in ("mode", "model", "pairs")  # pairs: the strings have partners or not (the file says)
}


def label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " ").capitalize())


def preset_overrides(mode: str, pairs: bool = False) -> dict[str, Any]:
    """Every Advanced setting's value in the `mode` preset ("words" or "sentences"; with `pairs`, the pairs preset on
    top), as the page shows them: the bundled model's (mirror.config.MirrorConfig.preset)."""
    preset = MirrorConfig.preset(mode, pairs=pairs or None)
    return {name: getattr(preset, name) for name in ADVANCED}


def recorded_overrides(config: Any) -> dict[str, Any]:
    """The Advanced settings of a run's recorded config (mirror_config.json's `config`): those it names, plain values;
    {} when it is no mapping."""
    if not isinstance(config, dict):
        return {}
    return {name: config[name] for name in ADVANCED if name in config}


MAX_QUERIES = 20
MAX_QUERY_CHARS = 500
# a queries text (a search's, a map's, a point's neighbours'): room for MAX_QUERIES queries of MAX_QUERY_CHARS twice
# over (spaces, blank lines); past it refused by its length alone, before it is split or copied (issue 58)
MAX_QUERIES_TEXT = 2 * MAX_QUERIES * MAX_QUERY_CHARS
# a short text field (a name, an id, a column, a filter, a token): what the web layer takes there (ui.handlers)
MAX_SHORT_TEXT = 1_000
MAX_K = 50


def coerce_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """UI/API values -> MirrorConfig overrides: blanks dropped, ints made ints, max_steps 0 = no limit."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in ADVANCED:
            raise MirrorError(f"unknown setting {name!r}; settings are {', '.join(ADVANCED)}")
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        kind, title = ADVANCED[name], label(name).split(" (")[0]
        if kind in ("choice", "str"):
            out[name] = str(value).strip()
            continue
        if kind == "bool":
            if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
                value = value.strip().lower() in ("true", "1")
            if not isinstance(value, (bool, int)):
                raise MirrorError(f"{title} must be true or false, got {value!r}")
            out[name] = bool(value)
            continue
        if isinstance(value, bool):  # JSON's true is no number (it read as 1: a LoRA of rank 1)
            raise MirrorError(f"{title} must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise MirrorError(f"{title}: {value!r} is not a number") from None
        if not math.isfinite(number):
            raise MirrorError(f"{title} must be a finite number, got {value!r}")
        if kind == "int":
            if number != int(number):
                raise MirrorError(f"{title} must be a whole number, got {value}")
            number = int(number)
        if name == "max_steps" and number == 0:
            continue
        out[name] = number
    return out


def trained_rows(texts: Sequence[str], config: MirrorConfig, partners: Sequence[str | None] | None) -> int:
    """How many of `texts` a run of `config` trains on: all, less a pairs run's held-out rows (mirror.pairs)."""
    if partners is None or len(partners) != len(texts):
        return len(texts)
    from mirror.pairs import held_out_rows

    return max(2, len(texts) - len(held_out_rows(partners, config)))


def build_config(
    texts: Sequence[str],
    model: str,
    mode: str,
    overrides: dict[str, Any],
    max_steps_cap: int | None = None,
    pairs: bool = False,
    partners: Sequence[str | None] | None = None,
) -> tuple[MirrorConfig, list[str]]:
    """The validated run config for these strings (with `pairs`, the pairs preset on top: mirror.config), plus
    notes for the user (e.g. the server's step cap). `partners`: a pairs run's, whose held-out rows do not train:
    its epochs are scheduled on the rows that do, as the run schedules them (mirror.train)."""
    config, _ = MirrorConfig.for_texts(
        texts, mode or "auto", model=model, pairs=pairs or None, **coerce_overrides(overrides)
    )
    rows = trained_rows(texts, config, partners if pairs else None)
    config = config.scheduled(-(-rows // config.join_views))  # the epochs it runs: the plan shows them
    notes: list[str] = []
    if max_steps_cap:
        total = planned_steps(rows, config)
        if total > max_steps_cap:
            config = dataclasses.replace(config, max_steps=max_steps_cap)
            notes.append(f"this server caps a run at {max_steps_cap} steps (MIRROR_MAX_STEPS); {total} were planned")
    return config, notes


def split_queries(text: str) -> list[str]:
    """One query per line (blank lines dropped), at most MAX_QUERIES of at most MAX_QUERY_CHARS each, in a text of at
    most MAX_QUERIES_TEXT characters."""
    if text is not None and not isinstance(text, str):  # a JSON list was searched as its repr, "['cat']"
        raise MirrorError(f"queries are text, one per line, not {type(text).__name__} (join a list with line breaks)")
    if text is not None and len(text) > MAX_QUERIES_TEXT:  # refused by its length: no copy of megabytes split
        raise MirrorError(
            f"the queries are {len(text):,} characters long; search at most {MAX_QUERIES} queries of "
            f"{MAX_QUERY_CHARS} characters, at most {MAX_QUERIES_TEXT:,} characters in all"
        )
    queries = [" ".join(line.split()) for line in str(text or "").splitlines()]
    queries = [q for q in queries if q]
    if not queries:
        raise MirrorError("type a query (one per line) to search for")
    if len(queries) > MAX_QUERIES:
        raise MirrorError(f"{len(queries)} queries; search at most {MAX_QUERIES} at a time")
    for q in queries:
        if len(q) > MAX_QUERY_CHARS:
            raise MirrorError(f"a query is {len(q):,} characters long; a query takes at most {MAX_QUERY_CHARS:,}")
    return queries


def clamp_k(k: Any) -> int:
    try:
        value = int(float(k))
    except (TypeError, ValueError, OverflowError):
        raise MirrorError(f"k must be a whole number between 1 and {MAX_K}, got {k!r}") from None
    if not 1 <= value <= MAX_K:
        raise MirrorError(f"k must be between 1 and {MAX_K}, got {value}")
    return value
