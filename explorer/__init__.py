"""The app's service layer, without Gradio. `MirrorApp` (explorer.service) is what the UI and the API call:
the shared state, and one object per concern over it (`app.loader`, `app.planner`, `app.trainer`, `app.saved`,
`app.searcher`, `app.explore`). Grouped by concern:

    service.py, settings.py, events.py   the facade, Settings.from_env, progress events
    errors.py, words.py                  what the user reads of an error, and the words the service says itself
    tune/      before a run: strings loaded (loading), inputs checked (inputs), the plan and its estimate
    runs/      a run's life: the live runs and their one status (live), one path for every kind of run
               (execute: slot, disk, folder, serving, checks, packaging), the kinds (training; saved: a model zip,
               a blend), the training job and queue (jobs), a run's typed record (record), sessions, kept runs
               (store), encoders in memory (models)
    compare/   the tuned encoder beside its base: search, evaluation, the Explore tab (maps, health, forgetting)
    share/     files in and out: model zips (uploads), download links, the model card, the Hugging Face Hub

Imports go down only: explorer/ uses mirror/ and index/, never ui/ or app.py (tests/test_layers.py). Pages are drawn
in ui/ (ui.render) and the web server's guards are ui/web's: the service never sees a request.
"""

from explorer.events import Cancelled, Done, Failed, Note, Phase, Served, Step, Tick
from explorer.resources.sessions import RunInfo, Session
from explorer.runs.live import Run, RunRegistry, Status
from explorer.service import MirrorApp
from explorer.settings import Settings

__all__ = [
    "Cancelled",
    "Done",
    "Failed",
    "MirrorApp",
    "Note",
    "Phase",
    "Run",
    "RunInfo",
    "RunRegistry",
    "Served",
    "Session",
    "Settings",
    "Status",
    "Step",
    "Tick",
]
