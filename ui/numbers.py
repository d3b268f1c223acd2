"""Number inputs that refuse what is not a finite number (or, for a whole-number field, not whole) with a message: gr.Number and gr.Slider as the page
shows them, but a raw API call's NaN, Infinity, "ten" or true gets "k must be a number" instead of an unhandled
ValueError / OverflowError / TypeError in Gradio's own preprocessing (`{"error": null}` and a traceback in the log).
And a text input that refuses what is not text (gr.Textbox made a JSON list `["cat"]` the query "['cat']").
"""

from __future__ import annotations

import math
from typing import Any

import gradio as gr


def finite(payload: Any, label: str | None) -> float | int | None:
    """`payload` when it is a finite int or float (None passes: the handler's default), else gr.Error."""
    name = label or "a number field"
    if payload is None:
        return None
    if isinstance(payload, bool) or not isinstance(payload, (int, float)):
        raise gr.Error(f"{name} must be a number, not {str(payload)[:40]!r}", print_exception=False)
    if not math.isfinite(payload):
        raise gr.Error(f"{name} must be a finite number, not {payload}", print_exception=False)
    return payload


class Number(gr.Number):
    """gr.Number (the same component on the page) that checks its payload first."""

    is_template = True  # the page draws it with gr.Number's own front end

    def preprocess(self, payload: Any) -> float | int | None:
        value = finite(payload, self.label)
        if self.precision == 0 and value is not None and not float(value).is_integer():  # not rounded: refused
            raise gr.Error(
                f"{self.label or 'a number field'} must be a whole number, not {value}", print_exception=False
            )
        return super().preprocess(value)


class Slider(gr.Slider):
    """gr.Slider (the same component on the page) that checks its payload first."""

    is_template = True

    def preprocess(self, payload: Any) -> float:
        value = finite(payload, self.label)
        return super().preprocess(self.value if value is None else value)


class Text(gr.Textbox):
    """gr.Textbox (the same component on the page) that refuses a payload that is not text."""

    is_template = True

    def preprocess(self, payload: Any) -> str | None:
        if payload is not None and not isinstance(payload, str):
            name = self.label or "a text field"
            raise gr.Error(
                f"{name} are text, one per line, not {type(payload).__name__} (join a list with line breaks)"
                if name == "queries"
                else f"{name} must be text, not {type(payload).__name__}",
                print_exception=False,
            )
        return super().preprocess(payload)
