"""Helpers shared by the command lines (`python -m mirror`, `python -m index`): limits, output folders, exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mirror import folders
from mirror.data import CleanStats, clean_texts, read_texts
from mirror.errors import MirrorError
from mirror.pairs import PairStats


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """`--max-mb` / `--max-strings` on an argparse parser (no limit unless given: the CLI runs on your machine)."""
    parser.add_argument(
        "--max-mb", type=float, help="refuse an input file larger than this many MiB (default: no limit)"
    )
    parser.add_argument("--max-strings", type=int, help="refuse more distinct strings than this (default: no limit)")


def load_input(
    path: str | Path, column: str | None = None, max_mb: float | None = None, max_strings: int | None = None
) -> tuple[list[str], CleanStats]:
    """Read and clean an input file for the CLIs, refusing one over `max_mb` MiB or `max_strings` (None: no limit)."""
    if max_mb is not None and not max_mb > 0:
        raise MirrorError(f"--max-mb must be > 0, got {max_mb}")
    if max_strings is not None and max_strings < 1:
        raise MirrorError(f"--max-strings must be >= 1, got {max_strings}")
    notes: list[str] = []
    max_bytes = None if max_mb is None else max_mb * 2**20
    texts, stats = clean_texts(read_texts(path, column, max_bytes=max_bytes, notes=notes), notes)
    if max_strings is not None and len(texts) > max_strings:
        raise MirrorError(f"{Path(path).name}: {len(texts):,} distinct strings is over the limit of {max_strings:,}")
    return texts, stats


def load_pairs_input(
    path: str | Path,
    column: str | None,
    pair_column: str,
    max_mb: float | None = None,
    max_strings: int | None = None,
) -> tuple[list[str], list[str | None], CleanStats, PairStats, tuple[str, str]]:
    """`load_input` with each string's partner from `pair_column` ("auto": the detected one): the strings, their
    partners (mirror.pairs.clean_pairs), both stats and the two columns' names. MirrorError for a file without
    such a column, a partner column that is empty or the strings again, ragged rows."""
    from mirror.data import read_file
    from mirror.pairs import clean_pairs

    if max_mb is not None and not max_mb > 0:
        raise MirrorError(f"--max-mb must be > 0, got {max_mb}")
    notes: list[str] = []
    max_bytes = None if max_mb is None else max_mb * 2**20
    read = read_file(path, column, max_bytes, name=str(path), notes=notes, pair_column=pair_column)
    if read.partners is None:
        raise MirrorError(f"{path}: {read.pair_note or 'no column to pair with'}; name one with --pair-column")
    texts, partners, stats, pair_stats = clean_pairs(read.strings, read.partners, notes)
    if max_strings is not None and len(texts) > max_strings:
        raise MirrorError(f"{Path(path).name}: {len(texts):,} distinct strings is over the limit of {max_strings:,}")
    return texts, partners, stats, pair_stats, (read.column or "string", read.pair_column or "partner")


def model_arg(name: str) -> str:
    """A model named on the command line: the bundled model, a hub id, or a folder that exists (MirrorError naming it
    as given: on the user's own machine the path is theirs, `/data/models/x: no such model folder`, where a server
    shows only its last part)."""
    from mirror.names import check_model_name, looks_local

    name = check_model_name(name)
    try:
        missing = looks_local(name) and not Path(name).expanduser().is_dir()
    except OSError:  # a name too long for a file name: the load says what is wrong with it
        return name
    if missing:
        raise MirrorError(f"{name}: no such model folder")
    return name


def check_out_dir(path: str | Path, markers: Sequence[str], what: str, flag: str = "--out") -> Path:
    """mirror.folders.check_out_dir, its messages naming the command line's `flag` (default --out)."""
    return folders.check_out_dir(path, markers, what, flag)


def run_cli(
    parser: argparse.ArgumentParser,
    commands: Mapping[str, Callable[[argparse.Namespace], int]],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse argv and run `commands[args.command](args)`; a MirrorError becomes `error: ...` and exit 2.

    argparse itself reports a bad flag value (`--seed 1e20` for an integer) as `error: ...` and exit 2.
    """
    args = parser.parse_args(argv)
    try:
        return commands[args.command](args)
    except MirrorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was saved", file=sys.stderr)
        return 130
