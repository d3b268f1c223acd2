"""Runs not trained here: a kept run opened again by id (`SavedRuns.open_run`), and two kinds of run that go the way
every run goes (explorer.runs.execute): a model zip saved from this app (`Upload`), a blend of the served run's
weights with its base (`Blend`). Both report their index builds as they go (`Run.emit`) and honour a stop between
their phases and within an index build: it ends them Cancelled, the session's served run unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from explorer.events import Event, Failed, Phase
from explorer.resources.models import REBUILT_NOTE, ModelCache
from explorer.resources.record import Checks, Made, Origin, RunInfo, RunRecord, Timing, training_of
from explorer.resources.runfacts import as_trained, blend_name, own_blend
from explorer.resources.sessions import Session
from explorer.resources.store import RunStore, tuned_weights
from explorer.runs.execute import Plan, Producer, Runner, made_info, run_bytes
from explorer.runs.live import Run, RunRegistry
from explorer.settings import Settings, inference_device
from explorer.share.packaging import package_run
from explorer.share.uploads import display_name, extract_model_zip, model_zip_bytes
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from mirror.exports import download_name


class SavedRuns:
    """Runs not trained here: a kept run opened again by id, a model zip saved from this app, a blend of the served
    run. One per MirrorApp (`app.saved`)."""

    def __init__(
        self,
        registry: RunRegistry,
        runner: Runner,
        store: RunStore,
        models: ModelCache,
        forget_figures: Callable[[Path], None],
        settings: Settings,
    ):
        self.registry, self.runner, self.store, self.models = registry, runner, store, models
        self.forget_figures, self.settings = forget_figures, settings  # the Explore tab's figures of a run

    def kept(self, run_id: str) -> RunInfo:
        """A kept run by its id (MirrorError for none): while it is served before its checks, the RunInfo they
        complete (its live run's), so whoever opens or searches it meanwhile sees them land."""
        info = self.store.load(run_id)
        return self.registry.served(info.folder.name) or info

    def open_run(self, session: Session, run_id: str) -> RunInfo:
        """Serve a kept run (by its id: a link, the browser's run list, an API call) to this session."""
        info = self.kept(run_id)
        # a run whose files went bad fails here, and the session keeps what it had
        loaded = self.models.loaded(info)
        if info.checks_unfinished and not info.checks_pending:  # its server stopped during its checks
            info.checks_unfinished = False
            # its card (and a push of it) says the checks did not run, rather than nothing at all
            info.record.checks = Checks(skipped="the server restarted while they ran")
            package_run(info)
            self.store.save(info)
        if loaded.rebuilt and REBUILT_NOTE not in info.record.notes:
            self._after_rebuild(info)
        with session.lock:
            session.run = info
        return info

    def _after_rebuild(self, info: RunInfo) -> None:
        """A kept run whose tuned index was rebuilt on load (made by a version with the stale bf16 copy): its index
        download made again, its old exports dropped (they hold the old vectors), and a note on its page."""
        info.record.notes.append(REBUILT_NOTE)
        shutil.rmtree(info.folder / "exports", ignore_errors=True)
        self.forget_figures(info.folder)  # figures computed from the old index
        # the rebuilt index under a name of its own: a link to the old zip handed out before never serves other bytes
        info.index_zip = info.index_zip.with_name(info.index_zip.stem + "-rebuilt.zip")
        package_run(info, zip_model=False)
        self.store.save(info)

    def list_runs(self, run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """id, label, created of the runs among `run_ids` still kept here, newest first."""
        return self.store.describe(r for r in run_ids if isinstance(r, str))

    def use_saved_model(self, session: Session, zip_path: str | None) -> Iterator[Event]:
        """Serve a model zip saved from this app: index the loaded strings with it and its base. Yields events."""
        if not zip_path:
            yield Failed("no model zip uploaded")
            return
        if len(session.texts) < 2:
            yield Failed("Load the strings to search first (step 1), then upload the model zip.")
            return
        yield from self.runner.launch(session, Upload(session, zip_path, self.models, self.settings)).follow()

    def blend_run(self, session: Session, alpha: Any) -> Iterator[Event]:
        """Serve a blend of the served run's tuned weights with its base (α of the tuned, 1 - α of the base) as a
        new run: no retraining, the strings re-indexed with the blend, its general checks run. Yields events."""
        from mirror.blend import check_alpha

        try:
            alpha = check_alpha(alpha)
        except MirrorError as exc:
            yield Failed(str(exc))
            return
        parent = session.run
        if parent is None:
            yield Failed("Nothing to blend yet: tune a model in tab ① (or open one of your runs) first.")
            return
        yield from self.runner.launch(session, Blend(parent, alpha, self.models)).follow()


class Upload(Producer):
    """A model zip saved from this app, served as a run: unpacked into the run's folder (priced from its directory
    before a byte is written), its base model found, the session's strings indexed with both. No general checks:
    its zip is served as it came."""

    kind, what, checked = "upload", "a model upload", False

    def __init__(self, session: Session, zip_path: str, models: ModelCache, settings: Settings):
        self.session, self.models, self.settings = session, models, settings
        self.zip_path, self.name = Path(zip_path), display_name(zip_path)  # the name as the user gave it

    def prepare(self, run: Run) -> Plan:
        # what it will hold, unpacked, is known before a byte is written: the accounts are asked for that
        self.room = model_zip_bytes(self.zip_path, self.settings.max_model_bytes)
        return Plan(self.room + self.zip_path.stat().st_size)

    def produce(self, run: Run, folder: Path) -> RunInfo:
        from index.store import FolderIndexes
        from mirror.encoder import load_encoder
        from mirror.job import index_with

        started = time.perf_counter()  # this upload's own seconds (its record keeps the training's, done earlier)
        texts, source = list(self.session.texts), self.session.source
        run.emit(Phase("Unpacking the model"))
        limit = self.settings.max_model_bytes
        unpacked = extract_model_zip(self.zip_path, folder / "unpacked", limit, room=self.room)
        os.replace(unpacked, folder / "model")
        shutil.rmtree(folder / "unpacked", ignore_errors=True)
        budget = self.models.weights_budget()
        tuned = load_encoder(folder / "model", device=inference_device(), allowed_roots=[folder], max_weights=budget)
        base_model, base, base_notes = self._base_of(tuned)
        for name, enc in (("base", base), ("tuned", tuned)):
            run.checkpoint()  # stopped meanwhile: it ends here, before this index
            indexed = time.perf_counter()
            # its progress reaches the followers as the index is built; a stop asked meanwhile ends it there
            index_with(
                FolderIndexes(),
                enc,
                texts,
                folder / f"{name}_index",
                f"Indexing your strings with the {name} encoder",
                run.emit,
            )
        tuned_index_s = round(time.perf_counter() - indexed, 1)  # what a blend of it re-encodes
        made = uploaded_made(tuned, self.name, base_notes)
        made.record.timing.tuned_index_seconds = tuned_index_s
        # served as uploaded, not re-zipped
        kept = link_or_copy(self.zip_path, folder / download_name(base_model, folder.name, "model"))
        made.record.timing.load_seconds = round(time.perf_counter() - started, 1)  # unpacked, loaded, indexed now
        return made_info(folder, base_model, texts, source, made, model_zip=kept)

    def _base_of(self, tuned) -> tuple[str, Any, list[str]]:
        """The base model an uploaded tuned model names (checked like one a user typed, hub size included), or
        the bundled model with a note when that one is not available here."""
        base_model = str((tuned.info.get("config") or {}).get("model") or BUNDLED_MODEL)
        try:
            return base_model, self.models.base_encoder(self.models.check_download(base_model), tuned.pooling), []
        except MirrorError as exc:
            note = f"its base model {base_model!r} is not available here ({exc}); comparing with the bundled model"
            # with the tuned model's pooling: the served run reloads its base that way
            return BUNDLED_MODEL, self.models.base_encoder(BUNDLED_MODEL, tuned.pooling), [note]

    def failure(self, exc: Exception) -> str:
        from explorer.errors import incident

        return f"could not use this model (error {incident(exc)} in the server's log); is it a zip saved by this app?"


class Blend(Producer):
    """A blend of a run's tuned weights with its base (α of the tuned, 1 - α of the base), served as a new run of
    its own: no retraining, its parent's files linked (not copied), the strings re-indexed with the blend."""

    kind, what = "blend", "a blend"

    def __init__(self, parent: RunInfo, alpha: float, models: ModelCache):
        self.parent, self.alpha, self.models = parent, alpha, models

    def prepare(self, run: Run) -> Plan:
        self.loaded = self.models.loaded(self.parent)
        # a new run of its own (its model twice, its index; the parent's files are linked, not copied)
        return Plan(run_bytes(self.loaded.tuned, self.parent.n_texts))

    def produce(self, run: Run, folder: Path) -> RunInfo:
        from index.store import FolderIndexes
        from mirror.blend import blend_folder
        from mirror.encoder import load_encoder
        from mirror.job import index_with

        started, parent, alpha = time.perf_counter(), self.parent, self.alpha  # the blend's own seconds
        # a blend of a blend blends the tuned weights of the run they both come from: named as that run's blend
        of = parent.record.origin
        origin = str((of.parent if of.alpha is not None else None) or parent.folder.name)
        of_summary = re.sub(r"^(blend|as trained) α=\S+ of ", "", parent.summary)
        texts = list(self.loaded.main.tuned.texts)
        whole = as_trained(alpha)  # α 1: the tuned weights as trained again, not a blend (said so as it goes)
        if whole:
            run.emit(Phase("Serving the tuned weights as trained (α 1)"))
        else:
            run.emit(Phase(f"Blending the weights: α = {alpha:g} tuned, {1 - alpha:g} base"))
        # the unblended model, for later blends (an uploaded blend has none: its model/, which records its α, and
        # mirror.blend blends it as α of the tuned weights it came from)
        link_tree(tuned_weights(parent.folder), folder / "tuned_model")
        # the record names the parent run, so the blend's zip reads as this blend when it is reused; by its
        # short id only: the zip and a Hub push are shared, and a full run id opens the run (its strings)
        # α of the tuned weights as trained, for a run that blended its own after training too (runfacts.own_blend)
        blended_at = own_blend(parent)
        blend_folder(self.loaded.base, folder / "tuned_model", alpha, folder / "model", origin[:8], blended_at)
        blended = load_encoder(folder / "model", device=inference_device(), allowed_roots=[folder])
        link_tree(parent.folder / "base_index", folder / "base_index")
        run.checkpoint()  # stopped while it blended: it ends here, before its index
        indexed = time.perf_counter()
        # its progress reaches the followers as the index is built; a stop asked meanwhile ends it there
        index_with(
            FolderIndexes(),
            blended,
            texts,
            folder / "tuned_index",
            "Indexing your strings with the tuned weights" if whole else "Indexing your strings with the blend",
            run.emit,
        )
        tuned_index_s = round(time.perf_counter() - indexed, 1)  # what a blend of this blend re-encodes
        # the parent's training, notes and zip; its checks, times and neighbours are not the blend's
        record = RunRecord(
            training=parent.record.training,
            origin=Origin("blend", alpha, origin, zip=of.zip),
            timing=Timing(blend_seconds=round(time.perf_counter() - started, 1), tuned_index_seconds=tuned_index_s),
            notes=list(parent.record.notes),
        )
        made = Made(record, parent.pooling, f"{blend_name(alpha)} of {of_summary}", list(parent.losses))
        return made_info(folder, parent.base_model, texts, parent.corpus, made)


def uploaded_made(tuned: Any, name: str, notes: list[str]) -> Made:
    """What an uploaded model zip makes: the training its folder records (mirror_config.json), its blend when it is
    a zip of one (it reads as that blend, not as a tuned model), the zip's name, and `notes` (its base's)."""
    from mirror.blend import recorded_blend

    saved = dict(tuned.info.get("stats") or {})
    training = training_of(saved)
    config = tuned.info.get("config") or {}
    training.mode = config.get("mode", "?")
    if training.run_alpha is None and isinstance(config.get("blend_alpha"), int | float):
        # its weights are its run's own blend (a zip holds model/ only): what a blend of it starts from (own_blend)
        training.run_alpha = float(config["blend_alpha"])
    blended = recorded_blend(tuned.info)
    alpha, parent = blended if blended is not None else (None, None)
    origin = Origin("uploaded", alpha, parent, zip=name)
    summary = f"uploaded model {name}" + (f" ({saved['summary']})" if saved.get("summary") else "")
    return Made(RunRecord(training=training, origin=origin, notes=list(notes)), tuned.pooling, summary)


def link_tree(src: Path, dst: Path) -> Path:
    """`dst` as a copy of the folder `src` made of hard links (no second copy on disk where links work)."""
    shutil.copytree(src, dst, copy_function=lambda a, b: link_or_copy(Path(a), Path(b)))
    return dst


def link_or_copy(src: Path, dst: Path) -> Path:
    """`dst` as a hard link to `src` (no second copy on disk), or a copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst
