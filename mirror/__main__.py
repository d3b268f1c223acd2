"""`python -m mirror train|eval|check|export|blend ...`: the command line over mirror_tune, evaluate_pairs, the
general checks (mirror.checks), the exports and blend_folder."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirror.cli import add_limit_flags, check_out_dir, load_input, load_pairs_input, model_arg, run_cli
from mirror.config import (
    BUNDLED_MODEL,
    MIRROR_CONFIG_FILE,
    MODEL_FOLDER,
    PAIR_LOSSES,
    POOLINGS,
    PRECISIONS,
    PRESETS,
    REMEDY_HELP,
    MirrorConfig,
)
from mirror.errors import MirrorError
from mirror.names import check_model_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mirror", description="Mirror fine-tuning of BERT-family encoders.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="mirror-fine-tune an encoder on a list of strings")
    train.add_argument("input", help="a .txt (one string per line), .csv/.tsv or .jsonl file")
    train.add_argument(
        "--out", help="folder for the tuned model: new, empty, or a model mirror wrote (replaced); not with --plan"
    )
    train.add_argument(
        "--plan",
        action="store_true",
        help="print the run's plan (steps, epochs, batches split for memory, held-out rows) and exit without training",
    )
    train.add_argument("--mode", default="auto", choices=["auto", "words", "sentences"], help="preset (default: auto)")
    train.add_argument("--model", default=BUNDLED_MODEL, help="'bundled' (default), a hub id or a local folder")
    train.add_argument("--column", help="text column of a .csv/.tsv, or field of a .jsonl")
    train.add_argument(
        "--pair-column",
        help="another column (or field) whose text is each string's partner (a definition, a description): tuned as "
        "its positive, with --pair-holdout of the rows held out to measure the gain; 'auto' detects one",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument(
        "--index",
        action="store_true",
        help="also index the strings with the base and the tuned encoder: --out gets model/, base_index/, tuned_index/",
    )
    train.add_argument(
        "--memory-mb",
        type=int,
        help="memory (MB) the run may add to the loaded model; batches of long strings are split to fit "
        "(default: half of the available RAM, or 80%% of the GPU's free memory)",
    )
    add_limit_flags(train)
    defaults = MirrorConfig()
    for f in dataclasses.fields(MirrorConfig):
        if f.name in ("mode", "model", "pairs"):  # pairs: --pair-column
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = {"float": float, "int": int}.get(type(getattr(defaults, f.name)).__name__, str)
        if f.name == "max_steps":
            kind = int
        default = getattr(defaults, f.name)
        if isinstance(default, bool):
            lead = f"{REMEDY_HELP[f.name]} " if f.name in REMEDY_HELP else ""
            train.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=f"{lead}(default: {default})"
            )
            continue
        extra = {"choices": POOLINGS} if f.name == "pooling" else {}
        extra |= {"choices": PRECISIONS} if f.name == "precision" else {}
        extra |= {"choices": PAIR_LOSSES} if f.name == "pair_loss" else {}
        w, snt = getattr(PRESETS["words"], f.name), getattr(PRESETS["sentences"], f.name)
        note = f"default: {w}" if w == snt else f"default: {w} for words, {snt} for sentences"
        lead = f"{REMEDY_HELP[f.name]} " if f.name in REMEDY_HELP else ""
        train.add_argument(flag, type=kind, default=None, help=f"{lead}({note})", **extra)

    ev = sub.add_parser("eval", help="Spearman correlation of cosine similarity with gold scores")
    ev.add_argument("model", help="'bundled', a tuned model folder or a hub id")
    ev.add_argument("pairs", nargs="+", help="pairs file(s): `w1 w2 score`, `s1<TAB>s2<TAB>score` or STS-B csv")
    ev.add_argument("--pooling", default="auto", choices=POOLINGS)
    ev.add_argument("--device", default="auto")
    ev.add_argument("--json", action="store_true", help="print JSON")
    add_check_parser(sub)
    add_export_parser(sub)

    bl = sub.add_parser("blend", help="blend a tuned model with its base: (1 - alpha) base + alpha tuned weights")
    bl.add_argument("tuned", help="a tuned model folder written by mirror (`train --out`)")
    bl.add_argument(
        "--alpha", required=True, help="weight of the tuned model, 0 (the base) to 1 (the tuned model as trained)"
    )
    bl.add_argument("--out", required=True, help="folder for the blend: new, empty, or a model mirror wrote (replaced)")
    bl.add_argument("--base", help="the base model (default: the one the tuned folder names)")
    return parser


def cmd_train(args: argparse.Namespace) -> int:
    if not args.out and not args.plan:
        raise MirrorError("--out is required: the folder for the tuned model (or --plan to print the plan only)")
    if args.plan:  # writes nothing
        pass
    elif args.index:  # a run folder: model/ + base_index/ + tuned_index/
        check_out_dir(args.out, (f"model/{MIRROR_CONFIG_FILE}",), "a run folder written by mirror (model/, indexes)")
    else:
        check_out_dir(args.out, (MIRROR_CONFIG_FILE,), MODEL_FOLDER)  # before the input and the training, not after
    args.model = model_arg(args.model)
    if args.memory_mb is not None and args.memory_mb <= 0:
        raise MirrorError(f"--memory-mb must be > 0, got {args.memory_mb}")
    budget = args.memory_mb * 1024**2 if args.memory_mb else None
    partners, pair_stats, columns = None, None, ("string", "partner")
    if args.pair_column:
        texts, partners, stats, pair_stats, columns = load_pairs_input(
            args.input, args.column, args.pair_column, args.max_mb, args.max_strings
        )
    else:
        texts, stats = load_input(args.input, args.column, args.max_mb, args.max_strings)
    if len(texts) < 2:
        raise MirrorError(f"{args.input}: need at least 2 distinct non-empty strings, found {len(texts)}")
    skip = ("mode", "pairs")
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(MirrorConfig) if f.name not in skip}
    config, reason = MirrorConfig.for_texts(texts, args.mode, pairs=partners is not None or None, **overrides)
    pairs_line = f"\npairs: {columns[0]} with {columns[1]}: {pair_stats.summary(len(texts))}" if pair_stats else ""
    if args.plan:
        print(f"input: {stats.summary()}{pairs_line}\npreset: {reason}")
        return print_plan(texts, config, budget, partners)
    if args.index:
        print(f"input: {stats.summary()}{pairs_line}\npreset: {reason}")
        return train_and_index(args, texts, config, budget, partners, columns)
    from mirror import distributed
    from mirror.card import write_card
    from mirror.train import add_stats, mirror_tune, save_result

    rank, world_size = distributed.init_from_env()  # torchrun: one process per GPU (or CPU, gloo)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"input: {stats.summary()}{pairs_line}")
    say(f"preset: {reason}" + (f"; {world_size} processes, global batch {config.batch_size}" if world_size > 1 else ""))
    held, encoder, base_ranks = None, None, None
    if partners is not None:  # the base's ranks of the held-out rows before training: the encoder is tuned in place
        from mirror.encoder import load_encoder
        from mirror.pairs import HeldOut

        held = HeldOut.for_run(texts, partners, config, columns)
        encoder = load_encoder(config.model, config.pooling, config.device, config.dropout)
        if held.rows:
            say(f"held out: {len(held.rows):,} rows never train; measuring the base on them")
            base_ranks = held.ranks(encoder)
        texts, partners = held.training()

    bar = None
    if not args.quiet and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=None, unit="step", dynamic_ncols=True, file=sys.stderr)

    def on_step(step: int, total: int, loss: float) -> None:
        if bar is not None:
            bar.total = total
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}")

    try:
        result = mirror_tune(texts, config, on_step=on_step, memory_budget=budget, encoder=encoder, pairs=partners)
    finally:
        if bar is not None:
            bar.close()
    if rank == 0:  # only rank 0 writes; the others wait so the folder is complete when all exit
        try:
            out = save_result(result, args.out)
            if held is not None:
                pairs_stats = {**dataclasses.asdict(pair_stats), "columns": list(columns), "held_out": len(held.rows)}
                if base_ranks is not None and not result.cancelled:
                    gain = held.gain(base_ranks, held.ranks(result.encoder))
                    pairs_stats["gain"] = gain.to_dict()
                    say(gain_lines(gain))
                add_stats(out, pairs=pairs_stats)
            write_card(out)  # the model card the app writes too (README.md), from the folder's mirror_config.json
        except OSError as exc:  # disk full, permissions: save_result wrote to a temp folder, now removed
            raise MirrorError(
                f"could not save the model to {args.out} ({exc.strerror or exc}); nothing was changed there"
            ) from None
        say(result.summary())
        for note in result.notes:
            say(f"note: {note}")
        say(f"saved: {out}  (load with SentenceTransformer({str(out)!r}))")
    del result
    distributed.shutdown()  # torchrun: garbage, a barrier, then destroy (mirror.distributed.shutdown says why)
    return 0


def print_plan(
    texts: list[str], config: MirrorConfig, budget: int | None, partners: list[str | None] | None = None
) -> int:
    """`train --plan`: the plan `train` runs (mirror.plan.plan_run: its steps, epochs, batches split to fit the memory
    budget, the held-out rows of a pairs file), on one process, without training."""
    from mirror.encoder import load_encoder
    from mirror.plan import plan_run

    encoder = load_encoder(config.model, config.pooling, config.device, config.dropout)
    plan = plan_run(texts, config, encoder, budget, partners, hold_out=partners is not None)
    for line in plan.lines():
        print(line)
    print(
        "time: not timed here (timing needs a few real steps of this model on this machine: the app's plan does that; "
        "the run's progress bar shows its time left)"
    )
    return 0


def gain_lines(gain: Any) -> str:
    """A pairs run's held-out gain for the terminal: its sentence and the three figures base -> tuned [CI]."""
    rows = [
        f"  {label:<12} {gain.base[k]:5.1f} -> {gain.tuned[k]:5.1f}  [{gain.low[k]:+.1f}, {gain.high[k]:+.1f}]"
        for k, label in (("mrr10", "MRR@10"), ("r1", "recall@1 %"), ("r10", "recall@10 %"))
    ]
    return "\n".join([f"held-out pairs ({gain.verdict}): {gain.sentence()}", *rows])


def train_and_index(
    args: argparse.Namespace,
    texts: list[str],
    config: MirrorConfig,
    budget: int | None,
    partners: list[str | None] | None = None,
    columns: tuple[str, str] = ("string", "partner"),
) -> int:
    """`train --index`: the web app's job (mirror.job) in one process: tune, save model/, and index the
    strings with the base and the tuned encoder (base_index/, tuned_index/), for `python -m index query`."""
    from index.store import FolderIndexes
    from mirror.card import write_card
    from mirror.job import Finished, Phase, Step, Stopped, tune_and_index

    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    last: list = []

    def show(ev) -> None:
        if isinstance(ev, Phase) and not ev.done and not args.quiet:
            print(f"{ev.text}…", file=sys.stderr)
        elif isinstance(ev, Step) and not args.quiet and (ev.step == ev.total or ev.step % 10 == 0):
            print(f"step {ev.step}/{ev.total} loss {ev.loss:.4f}", file=sys.stderr)
        elif isinstance(ev, Finished | Stopped):
            last.append(ev)

    tune_and_index(
        texts, config, out, indexes=FolderIndexes(), emit=show, memory=budget, pairs=partners, columns=columns
    )
    if not last or isinstance(last[-1], Stopped):
        raise MirrorError("the run stopped before its end; nothing was saved")
    write_card(out / "model")
    print(last[-1].stats["summary"])
    gain = (last[-1].stats.get("pairs") or {}).get("gain")
    if gain:
        from mirror.pairs import PairGain

        print(gain_lines(PairGain.from_dict(gain)))
    for note in last[-1].stats.get("notes") or []:
        print(f"note: {note}")
    print(f"saved: {out}/model, {out}/base_index, {out}/tuned_index")
    print(f"search: python -m index query {out / 'tuned_index'} 'your query' --encoder {out / 'model'}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from mirror.encoder import load_encoder
    from mirror.evaluate import evaluate_pairs, read_pairs

    pair_sets = [(Path(p).name, read_pairs(p)) for p in args.pairs]
    encoder = load_encoder(model_arg(args.model), pooling=args.pooling, device=args.device)
    results = [evaluate_pairs(encoder, pairs, name) for name, pairs in pair_sets]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) | {"model": args.model, "pooling": encoder.pooling} for r in results]))
    else:
        for r in results:
            print(f"{r}  [{args.model}, {encoder.pooling} pooling]")
    return 0


def add_check_parser(sub: Any) -> None:
    ck = sub.add_parser(
        "check", help="the general checks: a tuned model against its base on bundled word, sentence and document sets"
    )
    ck.add_argument("tuned", help="a tuned model folder (mirror train --out), or any model to compare with --base")
    ck.add_argument("--base", help="the base model (default: the one the tuned folder's mirror_config.json names)")
    ck.add_argument("--half", default="check", choices=["check", "dev"], help="(default: check; dev chose defaults)")
    ck.add_argument("--device", default="auto")
    ck.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of {check, what, base, tuned, low, high, verdict}: low/high bound the 95%% interval "
        "of tuned - base, verdict is better, same or worse",
    )


def cmd_check(args: argparse.Namespace) -> int:
    """`check`: every general check, base -> tuned with its interval and a word; exit 0 whatever the verdict."""
    from mirror import checks
    from mirror.blend import recorded_blend
    from mirror.encoder import load_encoder

    tuned = load_encoder(model_arg(args.tuned), device=args.device)
    base_name = args.base or tuned.base_model
    if not base_name:
        raise MirrorError(f"{Path(args.tuned).name}: the folder does not name its base model; give --base")
    base = load_encoder(check_model_name(base_name), pooling=tuned.pooling, device=args.device)
    rows = checks.run_checks(base, tuned, half=args.half)
    if args.json:
        print(json.dumps(checks.json_rows(rows)))
        return 0
    width = max(len(r["name"]) for r in rows)
    blended = recorded_blend(tuned.info)  # a blend folder says so: its numbers are the blend's, not the tuned model's
    shown = args.tuned + (f" (a blend: alpha={blended[0]:g} of the tuned weights)" if blended else "")
    print(f"base: {base_name}   tuned: {shown}   ({args.half} half)")
    for r in rows:
        ci = f"[{r['ci'][0]:+.1f}, {r['ci'][1]:+.1f}]" if r["ci"] else ""
        print(
            f"{r['name']:<{width}}  {r['base']:5.1f} -> {r['tuned']:5.1f}  {r['delta']:+5.1f} {ci:<15} {r['verdict']:<6}"
            f"  {r['metric']}, {r['items']} {r['unit']}: {r['what']}"
        )
    print(checks.blend_summary(rows) if blended else checks.summary(rows))  # a blend is not told to blend
    return 0


EXPORT_FORMATS = ("projector", "parquet", "neighbours", "all")


def add_export_parser(sub: Any) -> None:
    ex = sub.add_parser(
        "export", help="embed strings with a tuned model and its base, for Embedding Projector, Parquet or a CSV"
    )
    ex.add_argument("model", help="a tuned model folder (mirror train --out, or model/ of a run folder)")
    ex.add_argument("--input", required=True, help="the strings: .txt (one per line), .csv/.tsv or .jsonl")
    ex.add_argument("--column", help="text column of a .csv/.tsv, or field of a .jsonl")
    ex.add_argument("--base", help="the base model to compare with (default: the one the tuned folder names)")
    ex.add_argument("--format", default="all", choices=EXPORT_FORMATS, help="(default: all, one zip of the three)")
    ex.add_argument("--out", required=True, help="folder for the export (made if missing; same-named files replaced)")
    ex.add_argument("--device", default="auto")
    add_limit_flags(ex)


def cmd_export(args: argparse.Namespace) -> int:
    """`export`: the Explore tab's exports (mirror.exports) from the command line, without a map (no x, y)."""
    from mirror.encoder import load_encoder
    from mirror.exports import download_name, export_bundle
    from mirror.moved import neighbour_changes

    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise MirrorError(f"--out {args.out} is a file; give a folder")
    texts, stats = load_input(args.input, args.column, args.max_mb, args.max_strings)
    if len(texts) < 2:
        raise MirrorError(f"{args.input}: need at least 2 distinct non-empty strings, found {len(texts)}")
    tuned = load_encoder(model_arg(args.model), device=args.device)
    base_name = args.base or tuned.base_model
    if not base_name:
        raise MirrorError(f"{Path(args.model).name}: the folder does not name its base model; give --base")
    base = load_encoder(check_model_name(base_name), pooling=tuned.pooling, device=args.device)
    print(f"input: {stats.summary()}", file=sys.stderr)
    tv, bv = tuned.encode(texts), base.encode(texts)
    rows = neighbour_changes(texts, bv, tv)
    moved = {r["i"]: round(float(r["moved"]), 4) for r in rows}
    prefix = download_name(base_name, Path(args.model).resolve().name, "export").removesuffix("-export.zip")
    path = export_bundle(
        texts,
        bv,
        tv,
        out,
        fmt=args.format,
        metadata={"moved": [moved.get(i, 0.0) for i in range(len(texts))]},
        coords=None,
        prefix=prefix,
    )
    print(path)
    return 0


def cmd_blend(args: argparse.Namespace) -> int:
    from mirror.blend import blend_folder, check_alpha
    from mirror.card import write_card

    alpha = check_alpha(args.alpha)  # every check before the models load
    tuned = Path(args.tuned).expanduser()
    if not (tuned / MIRROR_CONFIG_FILE).is_file():
        what = "a model folder written by mirror (no mirror_config.json)" if tuned.is_dir() else "an existing folder"
        raise MirrorError(f"{args.tuned}: not {what}; give the --out folder of `python -m mirror train`")
    check_out_dir(args.out, (MIRROR_CONFIG_FILE,), MODEL_FOLDER)
    base = check_model_name(args.base) if args.base is not None else None
    # α of the tuned weights as trained, as the app's Blend: a folder `train` blended after training (the presets'
    # blend_alpha, 0.75 / 0.25 on a sentence encoder) is that blend of them, its config says at which α
    own = (json.loads((tuned / MIRROR_CONFIG_FILE).read_text(encoding="utf-8")).get("config") or {}).get("blend_alpha")
    out = blend_folder(base, tuned, alpha, args.out, blended_at=own if isinstance(own, int | float) else None)
    write_card(out)  # names the blend and its alpha
    print(f"saved: {out}  (blend alpha={alpha:g}: {alpha:g} tuned, {1 - alpha:g} base)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    commands = {"train": cmd_train, "eval": cmd_eval, "check": cmd_check, "export": cmd_export, "blend": cmd_blend}
    return run_cli(build_parser(), commands, argv)


if __name__ == "__main__":
    sys.exit(main())
