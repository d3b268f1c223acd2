"""The model card of a tuned model: a sentence-transformers style README.md (YAML front matter the Hub reads, then
the recipe, its settings, data, training, checks and a usage snippet), written into the model folder so the
model zip and a Hub push carry it. It lives in the engine so that `python -m mirror train` and `blend` write the
same card as the app (explorer.share.card re-exports it).

What it says comes from the folder's mirror_config.json (the config and stats `mirror.train.save_result` wrote,
the blend `mirror.blend` recorded) and, when given, the run's stats (the app's: forgetting check, blend α).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mirror.config import BUNDLED_MODEL, MIRROR_CONFIG_FILE
from mirror.names import HUB_ID, shown_model

CARD_FILE = "README.md"
BUNDLED_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the bundled package ships
TAGS = ("sentence-transformers", "sentence-similarity", "mirror-bert")
SETTINGS = (  # MirrorConfig fields worth a reader's time, in the order they are shown
    ("mode", "preset"),
    ("pooling", "pooling"),
    ("temperature", "temperature τ"),
    ("epochs", "epochs"),
    ("max_steps", "max steps"),
    ("batch_size", "batch size (strings)"),
    ("lr", "learning rate"),
    ("weight_decay", "weight decay"),
    ("max_length", "training max length (tokens)"),
    ("mask_span", "masked span (characters)"),
    ("mask_min_chars", "span masking from (characters)"),
    ("dropout", "dropout"),
    ("grad_clip", "gradient clip"),
    ("seed", "seed"),
    ("precision", "precision"),
    ("distill", "distillation to the base (λ)"),
    ("l2_base", "L2 to the base weights (λ)"),
    ("freeze_layers", "frozen lower layers"),
    ("freeze_embeddings", "frozen embeddings"),
    ("blend_alpha", "blend with the base after training (α)"),
    ("retry_anchor", "pairs: a second training's general anchor, where the checks held the blend down (λ)"),
    ("join_views", "strings joined per training view"),
    ("mix_general", "general text mixed into each batch (fraction)"),
    ("lora_rank", "LoRA rank (adapters merged into the weights)"),
    ("guide_margin", "guided negatives margin"),
    ("long_anchor", "long texts held near the base (λ)"),
    ("general_anchor", "general text held near the base (λ)"),
    ("pair_max_length", "pairs: max length of either side (tokens)"),
    ("pair_mask", "partners span-masked too"),
    ("pair_loss", "pairs: loss form"),
    ("pair_distill_own", "pairs: partners distilled toward themselves"),
    ("pair_holdout", "share of pairs held out"),
)
PAIR_SETTINGS = (
    "pair_max_length",
    "pair_mask",
    "pair_loss",
    "pair_holdout",
    "pair_distill_own",
    "retry_anchor",
)  # shown for a run on pairs only


def hub_base_model(name: str | None) -> str | None:
    """The Hub id of a base model, for the card's `base_model`: the bundled model's id, a hub id as it is, None for
    a local folder (never a server path)."""
    name = str(name or "").strip()
    if name == BUNDLED_MODEL:
        return BUNDLED_HUB_ID
    if name and HUB_ID.match(name) and ".." not in name and not name.startswith((".", "/", "~")):
        return name
    return None


def read_mirror_config(folder: Path) -> dict[str, Any]:
    """The folder's mirror_config.json ({} when missing or unreadable)."""
    try:
        data = json.loads((Path(folder) / MIRROR_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_card(
    folder: str | Path,
    stats: Mapping[str, Any] | None = None,
    base_model: str | None = None,
    repo_id: str | None = None,
) -> str:
    """The card's text for the tuned model in `folder`; `stats`: the run's (the app's), `repo_id`: where it goes."""
    info = read_mirror_config(Path(folder))
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    saved = info.get("stats") if isinstance(info.get("stats"), dict) else {}
    stats = {**saved, **dict(stats or {})}
    base = str(base_model or config.get("model") or BUNDLED_MODEL)
    hub_base = hub_base_model(base)
    blend = info.get("blend") if isinstance(info.get("blend"), dict) else {}
    alpha = stats.get("blend_alpha", blend.get("alpha"))

    front = ["---", "library_name: sentence-transformers"]
    if hub_base:
        front.append(f"base_model: {hub_base}")
    front += ["tags:", *(f"- {t}" for t in TAGS), "pipeline_tag: sentence-similarity", "---", ""]

    shown_base = hub_base or shown_model(base)
    name = repo_id or "this model"
    out = [
        f"# {repo_id.split('/')[-1] if repo_id else 'A mirror-tuned encoder'}",
        "",
        f"`{shown_base}` fine-tuned with **Mirror-BERT** (Liu et al., *Fast, Effective, and Self-Supervised: "
        "Transforming Masked Language Models into Universal Lexical and Sentence Encoders*, EMNLP 2021) on the "
        "user's own strings, without labels, by Mirror Explorer. Every string is duplicated "
        "into two views (one with a random span of characters replaced by the mask token, both with dropout on) and "
        "an InfoNCE loss pulls each view towards its twin and away from the other views in the batch. The result "
        "is a sentence-transformers model: cosine similarity of its embeddings ranks strings by meaning.",
        "",
    ]
    if alpha is not None and float(alpha) != 1.0:
        out += [
            f"**Blended with its base:** the weights are α = {float(alpha):g} of the tuned model and "
            f"{1 - float(alpha):g} of `{shown_base}` (keeps more of what the base knew).",
            "",
        ]
    out += ["## Training", ""]
    unset = {"max_steps": "none (every epoch)"}  # a None that means something: never an empty cell
    rows = [
        (label, _value(config[k]) if config[k] is not None else unset.get(k, ""))
        for k, label in SETTINGS
        if k in config and (config.get("pairs") or k not in PAIR_SETTINGS)
    ]
    out += _table(["setting", "value"], rows)
    data = [("strings", _strings(stats))]
    if stats.get("steps") is not None:
        data.append(("steps", f"{stats.get('steps')} of {stats.get('total_steps', stats.get('steps'))}"))
    if stats.get("seconds") is not None:
        data.append(("training time", f"{float(stats['seconds']):.1f} s on {stats.get('device', '?')}"))
    if stats.get("first_loss") is not None or stats.get("final_loss") is not None:
        data.append(("loss (first → final)", f"{_value(stats.get('first_loss'))} → {_value(stats.get('final_loss'))}"))
    out += ["", *_table(["data and run", "value"], [(k, v) for k, v in data if v not in ("", "None")])]
    out += _pairs(stats.get("pairs"))
    out += _evaluation(stats.get("eval"))
    out += _forgetting(stats.get("forgetting"))
    out += [
        "",
        "## Usage",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{repo_id or "path/to/this/folder"}")',
        'emb = model.encode(["a string", "another string"], normalize_embeddings=True)',
        "print(emb @ emb.T)  # cosine similarities",
        "```",
        "",
        f"The pooling {name} was trained with is saved with it (`1_Pooling/config.json`); the mirror config and "
        "run stats are in `mirror_config.json`.",
        "",
    ]
    return "\n".join(front + out)


def write_card(
    folder: str | Path,
    stats: Mapping[str, Any] | None = None,
    base_model: str | None = None,
    repo_id: str | None = None,
) -> Path:
    """Write README.md (the model card) into the model folder, atomically: a new file replaces the old, so a card
    hard-linked from another run's folder is never changed in place."""
    path = Path(folder) / CARD_FILE
    tmp = path.with_name(f".{CARD_FILE}.tmp-{os.getpid()}")
    tmp.write_text(model_card(folder, stats, base_model, repo_id), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _table(head: list[str], rows: list[tuple[Any, ...]]) -> list[str]:
    if not rows:
        return []
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows),
    ]


def _evaluation(rows: Any) -> list[str]:
    """An evaluation table, when the run kept one: [{name, base, tuned, ...}] (Spearman ×100)."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return []
    keys = [k for k in rows[0] if not isinstance(rows[0][k], list | dict)]
    return ["", "## Evaluation", "", *_table(keys, [tuple(_value(r.get(k)) for k in keys) for r in rows])]


def _forgetting(check: Any) -> list[str]:
    """The general checks (mirror.checks, run by explorer.compare.forgetting): base -> tuned on general sets, each change with
    its 95% interval and its word (better, same, worse)."""
    from mirror.checks import word_of

    if isinstance(check, dict) and check.get("skipped"):
        return ["", "## Did tuning forget anything?", "", f"Not checked: {check['skipped']}."]
    if not isinstance(check, dict) or not check.get("checks"):
        return []
    rows = []
    for r in check["checks"]:
        ci = r.get("ci")
        rows.append(
            (
                r.get("name", "?"),
                r.get("what", ""),
                r.get("metric", "Spearman ×100"),
                r.get("items", r.get("pairs", "")),
                _value(r.get("base")),
                _value(r.get("tuned")),
                f"{float(r.get('delta', 0)):+.1f}" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else ""),
                word_of(r),
            )
        )
    head = ["general check", "what it tests", "score", "items", "base", "tuned", "change [95% CI]", "verdict"]
    out = ["", "## Did tuning forget anything?", "", "Base and tuned model on the bundled general checks.", ""]
    out += _table(head, rows)
    if check.get("verdict"):
        out += ["", str(check["verdict"])]
    return out


def _strings(stats: dict[str, Any]) -> str:
    """The strings of the run: those it trained on, and for a pairs run that held rows out the strings its index
    holds with how many were held out, as the app's page counts them ("12,640 (12,140 trained on, 500 held out…)")."""
    strings, pairs = stats.get("strings"), stats.get("pairs")
    held = pairs.get("held_out") if isinstance(pairs, dict) else None
    if not isinstance(strings, int) or not isinstance(held, int) or held <= 0:
        return _value(strings)
    return f"{strings + held:,} ({strings:,} trained on, {held:,} held out to measure the gain)"


def _pairs(pairs: Any) -> list[str]:
    """A run on pairs (mirror.pairs): the columns paired, the counts, and the gain on the held-out rows."""
    if not isinstance(pairs, dict) or not pairs:
        return []
    string_col, partner_col = (list(pairs.get("columns") or []) + ["string", "partner"])[:2]
    out = [
        "",
        "## Pairs",
        "",
        f"Trained on pairs from the user's file: each `{string_col}` with its `{partner_col}` as its positive in the "
        f"loss ({_value(pairs.get('paired'))} strings had one; {_value(pairs.get('held_out'))} of those rows were held "
        "out of training to measure the gain).",
    ]
    gain = pairs.get("gain")
    if isinstance(gain, dict):
        rows = [
            (
                label,
                f"{gain['base'][k]:.1f}",
                f"{gain['tuned'][k]:.1f}",
                f"[{gain['low'][k]:+.1f}, {gain['high'][k]:+.1f}]",
            )
            for k, label in (("mrr10", "MRR@10 ×100"), ("r1", "recall@1 %"), ("r10", "recall@10 %"))
        ]
        out += [
            "",
            f"Finding a held-out row's `{string_col}` among all the strings from its `{partner_col}` "
            f"({gain['rows']} rows never trained on):",
            "",
            *_table(["figure", "base", "tuned", "95% CI of the change"], rows),
            "",
            str(gain.get("sentence", "")),
        ]
    return out
