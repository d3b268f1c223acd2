"""Words-preset ablations behind the "Choosing the defaults" table (bench/RESULTS.md): one tuning run on the
10k words with config overrides, optionally with frozen parameters, other batch plans, pooling or a prompt
template, then scores of the tuned model (and of variants of it: weight line, post-processing, pooling).

    .venv/bin/python bench/bench_words_ablation.py --alphas 0.5,0.75,1.25,1.5,2      # weight interpolation
    .venv/bin/python bench/bench_words_ablation.py --set mask_min_chars=5 --set mask_span=2
    .venv/bin/python bench/bench_words_ablation.py --freeze embeddings.
    .venv/bin/python bench/bench_words_ablation.py --linear-decay --set lr=4e-5      # lr decayed to 0
    .venv/bin/python bench/bench_words_ablation.py --batches diverse:400             # k-means-spread batches
    .venv/bin/python bench/bench_words_ablation.py --batches hard:50:0.5             # half the words in same-cluster batches
    .venv/bin/python bench/bench_words_ablation.py --pool max                        # train (and score) with max pooling
    .venv/bin/python bench/bench_words_ablation.py --abtt 2,3,5 --eval-pool max,mean+max,cls+mean
    .venv/bin/python bench/bench_words_ablation.py --prompt 'This word : "' --prompt-views both
    .venv/bin/python bench/bench_words_ablation.py --prompt 'This word : "' --prompt-views second
    .venv/bin/python bench/bench_words_ablation.py --eval-layers 0-6,5-6,4-6,0-4 --eval-prompt '"' --eval-prompt 'the word '
    .venv/bin/python bench/bench_words_ablation.py --ensemble 'This word : "'          # tuned ‖ base with template

Prints one JSON line per model: SimLex-999 / WS353 Spearman ×100, whole and even-pair dev halves.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable

import numpy as np
import torch
from bench_quality import parse_overrides
from common import data_path

import mirror.train as train
from mirror import MirrorConfig, read_texts
from mirror.encoder import Encoder, load_encoder
from mirror.evaluate import evaluate_pairs, read_pairs

GOLD = {name: read_pairs(data_path(name)) for name in ("simlex", "ws353")}
ORIGINAL = Encoder.tokenize, Encoder.embed
POOLS = ("mean", "cls", "mean_inner", "max", "mean+max", "cls+mean")
Transform = Callable[[np.ndarray], np.ndarray]


def scores(encoder: Encoder) -> dict[str, float]:
    encoder.model.eval()
    out = {}
    for name, pairs in GOLD.items():
        out[name] = round(100 * evaluate_pairs(encoder, pairs).spearman, 1)
        out[name + "_dev"] = round(100 * evaluate_pairs(encoder, pairs[::2]).spearman, 1)
    return out


class PostProcessed:
    """An encoder whose vectors go through `transform` before they are normalised (for `evaluate_pairs`)."""

    def __init__(self, encoder: Encoder, transform: Transform) -> None:
        self.encoder, self.model, self.transform = encoder, encoder.model, transform

    def encode(self, texts, batch_size: int = 128, normalize: bool = True) -> np.ndarray:
        x = self.transform(self.encoder.encode(texts, batch_size, normalize=False).astype(np.float64))
        return (x / np.linalg.norm(x, axis=1, keepdims=True) if normalize else x).astype(np.float32)


class Ensemble:
    """Several (encoder, template) members scored as one: their normalised vectors concatenated, so a pair's
    cosine is the mean of the members' cosines. `use(prompt)` switches the template before each member."""

    def __init__(self, members: list[tuple[Encoder, str]], use: Callable[[str], None]) -> None:
        self.members, self.use, self.model = members, use, members[0][0].model
        for encoder, _ in members:
            encoder.model.eval()

    def encode(self, texts, batch_size: int = 128, normalize: bool = True) -> np.ndarray:
        parts = []
        for encoder, prompt in self.members:
            self.use(prompt)
            parts.append(encoder.encode(texts, batch_size, normalize=True))
        self.use("")
        x = np.concatenate(parts, 1)
        return x / np.linalg.norm(x, axis=1, keepdims=True) if normalize else x


def abtt(fit_on: np.ndarray, drop: int) -> Transform:
    """All-but-the-top (Mu & Viswanath 2018): remove the mean and the top `drop` principal directions."""
    mean = fit_on.mean(0)
    top = np.linalg.svd(fit_on - mean, full_matrices=False)[2][:drop].T
    return lambda x: (x - mean) - ((x - mean) @ top) @ top.T


class Variant:
    """Monkeypatches Encoder.tokenize/embed for a pooling and an optional prompt template.

    The prompt is put before every string (`views="both"`, also at scoring) or only before the second view
    of a training batch (`views="second"`: the plain word learns to match the word in context); pooling
    skips [CLS] and the prompt's tokens of prompted rows. Set `pool` to score with another pooling, `layers`
    (first, last) to pool the mean of those hidden layers (0 = the embedding layer) instead of the last one.
    """

    def __init__(self, pool: str, prompt: str, views: str) -> None:
        self.pool, self.layers = pool, None
        self.training, self.split = False, 0
        self.use(prompt, views)
        Encoder.tokenize = lambda enc, texts, max_length=None: self._tokenize(enc, texts, max_length)
        Encoder.embed = lambda enc, batch: self._embed(enc, batch)
        # concatenated poolings (mean+max) are twice as wide
        Encoder.dim = property(lambda enc: int(enc.model.config.hidden_size) * len(self.pool.split("+")))

    def use(self, prompt: str, views: str = "both") -> None:
        """Switch the template (its token count is measured again on the next batch)."""
        self.prompt, self.views, self.prompt_tokens = prompt, views, 0

    @property
    def prompting(self) -> bool:
        return bool(self.prompt) and (self.views == "both" or self.training)

    def _tokenize(self, encoder: Encoder, texts, max_length=None):
        if self.prompt and not self.prompt_tokens:
            self.prompt_tokens = len(encoder.tokenizer(self.prompt)["input_ids"]) - 1  # [CLS] + prompt
        # rows [split:] carry the prompt: all of them, or the second views of a training batch
        self.split = len(texts) // 2 if self.views == "second" else 0
        if self.prompting:
            texts = list(texts[: self.split]) + [self.prompt + t for t in texts[self.split :]]
            max_length = (max_length or encoder.max_seq_length) + self.prompt_tokens
        return ORIGINAL[0](encoder, texts, max_length)

    def _embed(self, encoder: Encoder, batch):
        prompted = self.prompting
        if self.pool == "mean" and not prompted and not self.layers:  # the encoder's own pooling
            return ORIGINAL[1](encoder, batch)
        if self.layers:
            hidden = encoder.model(**batch, output_hidden_states=True).hidden_states
            out = torch.stack(hidden[self.layers[0] : self.layers[1] + 1]).mean(0)
        else:
            out = encoder.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
        if self.pool == "mean_inner" or prompted:
            mask = mask.clone()
            if prompted:
                mask[self.split :, : self.prompt_tokens] = 0
            if self.pool == "mean_inner":  # drop [CLS] and the closing [SEP]
                mask[:, 0] = 0
                mask[torch.arange(len(mask)), batch["attention_mask"].sum(1) - 1] = 0
        mean = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        parts = {
            "mean": mean,
            "mean_inner": mean,
            "cls": out[:, 0],
            "max": out.masked_fill(mask == 0, -1e4).max(1).values,
        }
        return torch.cat([parts[p] for p in self.pool.split("+")], 1)


def cluster_plan(words: list[str], model: str, spec: str, seed: int) -> Callable:
    """A `plan_batches` replacement from k-means clusters of the base embeddings. `diverse:K`: batches take
    one word per cluster in turn; `hard:K[:FRACTION]`: that share of the words in same-cluster batches."""
    import faiss

    kind, clusters, *rest = spec.split(":")
    share = float(rest[0]) if rest else 1.0
    x = load_encoder(model, pooling="mean").encode(words, batch_size=256)
    kmeans = faiss.Kmeans(x.shape[1], int(clusters), niter=20, seed=seed, spherical=True)
    kmeans.train(x)
    label = kmeans.index.search(x, 1)[1][:, 0]

    def plan(n: int, batch_size: int, rng: random.Random, min_size: int = 2, lengths=None) -> list[list[int]]:
        order = list(range(n))
        rng.shuffle(order)
        if kind == "diverse":
            groups: dict[int, list[int]] = {}
            for i in order:
                groups.setdefault(int(label[i]), []).append(i)
            spread = []
            while groups:
                for key in list(groups):
                    spread.append(groups[key].pop())
                    if not groups[key]:
                        del groups[key]
            runs = [spread]
        else:
            hard = sorted(order[: int(share * n)], key=lambda i: label[i])
            runs = [hard, order[int(share * n) :]]
        batches = [run[i : i + batch_size] for run in runs for i in range(0, len(run), batch_size)]
        batches = [b for b in batches if len(b) >= min_size]
        rng.shuffle(batches)
        return batches

    return plan


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", action="append", default=[], help="config override, e.g. temperature=0.15")
    parser.add_argument("--freeze", action="append", default=[], help="parameter name prefix kept frozen")
    parser.add_argument("--alphas", default="", help="also score base + α·(tuned − base) for these α")
    parser.add_argument("--linear-decay", action="store_true", help="lr decays linearly to 0 over the run")
    parser.add_argument("--batches", default="", help="diverse:K or hard:K[:FRACTION] (k-means on base vectors)")
    parser.add_argument("--pool", default="mean", choices=POOLS, help="pooling for training and scoring")
    parser.add_argument("--eval-pool", default="", help="also score the tuned model with these poolings")
    parser.add_argument("--abtt", default="", help="also score after removing the mean and top D components")
    parser.add_argument("--prompt", default="", help="template put before the strings, e.g. 'This word : \"'")
    parser.add_argument("--prompt-views", default="both", choices=("both", "second"))
    parser.add_argument("--eval-layers", default="", help="also score with the mean of hidden layers A-B, e.g. 0-6")
    parser.add_argument("--eval-prompt", action="append", default=[], help="also score with this template")
    parser.add_argument("--ensemble", action="append", default=[], help="also score tuned ‖ base with this template")
    args = parser.parse_args()
    if args.ensemble and args.prompt:
        parser.error("--ensemble scores a plain-trained model: leave out --prompt")
    config = MirrorConfig.preset("words", **parse_overrides(args.set))
    words = read_texts(data_path("words"))
    variant = Variant(args.pool, args.prompt, args.prompt_views)
    if args.linear_decay:  # mirror_tune keeps lr constant (the paper's recipe): scale it inside AdamW.step
        total = config.max_steps or config.epochs * -(-len(words) // config.batch_size)
        step, done = torch.optim.AdamW.step, [0]

        def decayed(self, *a, **k):
            for group in self.param_groups:
                group["lr"] = config.lr * max(0.0, 1 - done[0] / total)
            done[0] += 1
            return step(self, *a, **k)

        torch.optim.AdamW.step = decayed
    if args.freeze:  # mirror_tune loads its own encoder: freeze on the way out of the loader
        load = train.load_encoder

        def load_frozen(*a, **k) -> Encoder:
            encoder = load(*a, **k)
            for name, param in encoder.model.named_parameters():
                param.requires_grad_(not name.startswith(tuple(args.freeze)))
            return encoder

        train.load_encoder = load_frozen
    if args.batches:
        import mirror.plan  # where the epochs' batches are planned

        mirror.plan.plan_batches = cluster_plan(words, config.model, args.batches, config.seed)
    if args.prompt and args.prompt_views == "both":
        base = load_encoder(config.model, pooling="mean")
        print(json.dumps({"model": "base", "prompt": args.prompt, **scores(base)}))
    variant.training = True
    result = train.mirror_tune(words, config)
    variant.training = False
    skip = {"alphas", "abtt", "eval_pool", "eval_layers", "eval_prompt", "ensemble"} | (
        set() if args.prompt else {"prompt_views"}
    )
    tag = {k: v for k, v in vars(args).items() if v and k not in skip}
    print(json.dumps({**tag, "seconds": round(result.seconds, 1), **scores(result.encoder)}))
    if args.abtt:
        fit_on = result.encoder.encode(words, batch_size=256, normalize=False).astype(np.float64)
        for drop in (int(d) for d in args.abtt.split(",")):
            print(json.dumps({**tag, "abtt": drop, **scores(PostProcessed(result.encoder, abtt(fit_on, drop)))}))
    for pool in filter(None, args.eval_pool.split(",")):
        variant.pool = pool
        print(json.dumps({**tag, "eval_pool": pool, **scores(result.encoder)}))
    variant.pool = args.pool
    for span in filter(None, args.eval_layers.split(",")):
        first, last = (int(x) for x in span.split("-"))
        variant.layers = (first, last)
        print(json.dumps({**tag, "eval_layers": span, **scores(result.encoder)}))
    variant.layers = None
    for prompt in args.eval_prompt:  # a plain-trained model scored with a template (pooled over the word)
        variant.use(prompt)
        print(json.dumps({**tag, "eval_prompt": prompt, **scores(result.encoder)}))
    variant.use(args.prompt, args.prompt_views)
    if args.ensemble or args.alphas:
        base = load_encoder(config.model, pooling=result.encoder.pooling)
    for prompt in args.ensemble:  # two encoders at search time: a measure of the headroom, not a default
        both = Ensemble([(result.encoder, ""), (base, prompt)], variant.use)
        print(json.dumps({**tag, "ensemble": f"tuned + base with {prompt!r}", **scores(both)}))
    if args.alphas:  # last: it overwrites the base weights
        start = {k: v.clone() for k, v in base.model.state_dict().items()}
        tuned = result.encoder.model.state_dict()
        for alpha in (float(a) for a in args.alphas.split(",")):
            with torch.no_grad():
                base.model.load_state_dict(
                    {
                        k: start[k] + alpha * (tuned[k] - start[k]) if start[k].is_floating_point() else start[k]
                        for k in start
                    }
                )
            print(json.dumps({**tag, "alpha": alpha, **scores(base)}))


if __name__ == "__main__":
    main()
