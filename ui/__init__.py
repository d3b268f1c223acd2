"""The app's Gradio-side pieces beyond app.py: custom components and their value builders."""

from __future__ import annotations

from ui.twinmap import TwinMap, twin_map_value

__all__ = ["TwinMap", "twin_map_value"]
