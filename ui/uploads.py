"""The strings' file input: every file reaches the loader, which says in place why it refuses one, and messages name a
file as the user named it.

- No `file_types` filter: Gradio's own refused a `.bin` with a toast that faded, leaving the page as it was (the
  loader's message stays under the input, with the strings still loaded); the label lists the accepted types.
- Gradio's upload cache renames a file with a Windows device name (`nul.csv`, `con.txt`, `aux.tsv`, ...) to
  `_nul.csv`: the value handed to a handler carries the name the browser sent (`given_name`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr


class NamedFile(gr.File):
    """gr.File (the same component on the page; type="filepath") whose value, a path in Gradio's cache, carries
    `orig_name`: the file's name as the browser sent it."""

    is_template = True  # the page draws it with gr.File's own front end (no __init__ of its own: Gradio reads a
    # component's settings for the page from its __init__ signature)

    def preprocess(self, payload: Any) -> Any:
        value = super().preprocess(payload)
        files = getattr(payload, "root", None) or [payload]  # a ListFiles or one FileData
        orig = getattr(files[0], "orig_name", None)
        if isinstance(value, str) and orig:
            try:
                value.orig_name = str(orig)  # gradio's NamedString takes attributes; a plain str would not
            except AttributeError:
                pass
        return value


def given_name(path: Any) -> str | None:
    """The name the user gave an uploaded file, where Gradio's cache only put a "_" before it (a Windows device name
    such as nul.csv); None otherwise, when the cached name is the one to show (a name stripped of characters a file
    name cannot hold stays stripped: the browser's own name is never shown with them)."""
    orig, cached = getattr(path, "orig_name", None), Path(str(path or "")).name
    return orig if orig and "_" + orig == cached else None
