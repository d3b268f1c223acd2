"""The one exception type users see: a clear message, never a traceback."""

from __future__ import annotations


class MirrorError(Exception):
    """Bad input, bad settings or an unreachable model: the message says what and how to fix it.

    The CLIs turn it into exit code 2; the web app shows the message.
    """


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
