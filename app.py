"""Mirror Explorer web app (placeholder until the app issue lands): python app.py serves on 127.0.0.1:7860."""

from __future__ import annotations

import gradio as gr


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="Mirror Explorer") as demo:
        gr.Markdown("# Mirror Explorer\nMirror fine-tuning of BERT-family encoders. The full app is on its way.")
    return demo


if __name__ == "__main__":
    build_demo().launch(server_name="127.0.0.1", server_port=7860)
