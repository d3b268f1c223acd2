"""The one exception type users see: a clear message, never a traceback."""

from __future__ import annotations


class MirrorError(Exception):
    """Bad input, bad settings or an unreachable model: the message says what and how to fix it.

    The CLIs turn it into exit code 2; the web app shows the message.
    """


def check_out_dir(path, flag: str = "--out"):
    """Fail before the work, not after it: `path` must be a folder (or not exist yet) in a writable place."""
    import os
    import tempfile
    from pathlib import Path

    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise MirrorError(f"{flag} {path}: exists and is not a folder; choose a folder")
    parent = out if out.exists() else out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:  # really try: permission bits do not tell (root, read-only mounts, /proc)
        if not parent.is_dir():
            raise OSError(f"{parent} is not a folder")
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=parent))
    except OSError:
        raise MirrorError(f"{flag} {path}: cannot create or write there ({parent} is not a writable folder)") from None
    return out


def run_cli(parser, commands, argv=None) -> int:
    """Parse argv and run `commands[args.command](args)`; a MirrorError becomes `error: ...` and exit 2."""
    import sys

    args = parser.parse_args(argv)
    try:
        return commands[args.command](args)
    except MirrorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was saved", file=sys.stderr)
        return 130
