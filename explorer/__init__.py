"""The app's service layer, without Gradio: sessions and runs, jobs and typed progress events, model caches,
the tune -> index pipeline, uploads and rendering. `MirrorApp` (explorer.service) is what the UI calls."""

from explorer.events import Cancelled, Done, Failed, Note, Phase, Step, Tick
from explorer.service import MirrorApp
from explorer.sessions import RunHandle, RunInfo, Session
from explorer.settings import Settings

__all__ = [
    "Cancelled",
    "Done",
    "Failed",
    "MirrorApp",
    "Note",
    "Phase",
    "RunHandle",
    "RunInfo",
    "Session",
    "Settings",
    "Step",
    "Tick",
]
