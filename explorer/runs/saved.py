"""Runs not trained here: a kept run opened again by id, a model zip saved from this app, a blend of the served
run's weights with its base.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from explorer.events import Done, Event, Failed, Note, Phase, Served
from explorer.runs.live import Run
from explorer.runs.models import REBUILT_NOTE
from explorer.runs.record import Checks, Made, Origin, RunRecord, Timing, training_of
from explorer.runs.sessions import RunInfo, Session
from explorer.runs.training import BUSY, new_run_info, package_run, run_bytes
from explorer.settings import inference_device
from explorer.share.uploads import display_name, extract_model_zip, model_zip_bytes
from mirror.config import BUNDLED_MODEL
from mirror.errors import MirrorError
from mirror.exports import download_name

log = logging.getLogger("mirror.app")


class SavedRuns:
    """Runs not trained here: a kept run opened again by id, a model zip saved from this app, a blend of the served
    run. One per MirrorApp (`app.saved`), over its state."""

    def __init__(self, app: Any):  # the MirrorApp (explorer.service) that composes it
        self.app = app

    def open_run(self, session: Session, run_id: str) -> RunInfo:
        """Serve a kept run (by its id: a link, the browser's run list, an API call) to this session."""
        info = self.app.runs.load(run_id)
        # served before its checks, which still run: the RunInfo they complete, so this session sees them land
        info = self.app.registry.served(info.folder.name) or info
        # a run whose files went bad fails here, and the session keeps what it had
        loaded = self.app.models.loaded(info)
        if info.checks_unfinished and not info.checks_pending:  # its server stopped during its checks
            info.checks_unfinished = False
            # its card (and a push of it) says the checks did not run, rather than nothing at all
            info.record.checks = Checks(skipped="the server restarted while they ran")
            package_run(info, zip_model=not info.model_zip.exists())
            self.app.runs.save(info)
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
        self.app.explore.forget(info.folder)  # figures computed from the old index
        # the rebuilt index under a name of its own: a link to the old zip handed out before never serves other bytes
        info.index_zip = info.index_zip.with_name(info.index_zip.stem + "-rebuilt.zip")
        package_run(info, zip_model=False)
        self.app.runs.save(info)

    def list_runs(self, run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """id, label, created of the runs among `run_ids` still kept here, newest first."""
        return self.app.runs.describe(r for r in run_ids if isinstance(r, str))

    def use_saved_model(self, session: Session, zip_path: str | None) -> Iterator[Event]:
        """Serve a model zip saved from this app: index the loaded strings with it and its base. Yields events."""
        if not zip_path:
            yield Failed("no model zip uploaded")
            return
        if len(session.texts) < 2:
            yield Failed("Load the strings to search first (step 1), then upload the model zip.")
            return
        yield from self._as_job(session, "upload", lambda run: self._use_saved(session, zip_path, run))

    def _as_job(self, session: Session, kind: str, job: Any) -> Iterator[Event]:
        """`job(run)`'s events as the session's live run: cancellable (the Tune tab's Cancel) from the moment it
        waits for its place in the training queue."""
        run = Run(session, kind)
        if not self.app.registry.begin(run):
            yield Failed(BUSY)
            return
        try:
            with contextlib.closing(self.app.trainer.exclusive(run, job(run))) as events:
                for ev in events:
                    run.publish(ev)
                    yield ev
        finally:
            self.app.registry.end(run)
            run.end()

    def _use_saved(self, session: Session, zip_path: str, handle: Run) -> Iterator[Event]:
        from mirror.encoder import load_encoder

        started = time.perf_counter()  # this upload's own seconds (its stats carry the training's, done earlier)
        run = self.app.trainer.new_run_folder(session, handle)
        texts, source = list(session.texts), session.source
        try:
            with self.app.trainer.discarded_unless_served(run) as served:
                # what it will hold, unpacked, is known before a byte is written: the accounts are asked for that
                unpacked = model_zip_bytes(Path(zip_path), self.app.settings.max_model_bytes)
                notes = self.app.check_disk(session, unpacked + Path(zip_path).stat().st_size)
                yield from (Note(n) for n in notes)
                yield Phase("Unpacking the model")
                limit = self.app.settings.max_model_bytes
                folder = extract_model_zip(Path(zip_path), run / "unpacked", limit, room=unpacked)
                os.replace(folder, run / "model")
                shutil.rmtree(run / "unpacked", ignore_errors=True)
                budget = self.app.models.weights_budget()
                tuned = load_encoder(run / "model", device=inference_device(), allowed_roots=[run], max_weights=budget)
                base_model, base, base_notes = self._base_of(tuned)
                notes = [*notes, *base_notes]
                events: list[Event] = []
                from index.pipeline import index_with

                for name, enc in (("base", base), ("tuned", tuned)):
                    index_with(
                        enc,
                        texts,
                        run / f"{name}_index",
                        f"Indexing your strings with the {name} encoder",
                        events.append,
                    )
                    yield from events
                    events.clear()
                made = uploaded_made(tuned, display_name(zip_path), base_notes)
                # served as uploaded, not re-zipped
                kept = link_or_copy(Path(zip_path), run / download_name(base_model, run.name, "model"))
                made.record.timing.load_seconds = round(time.perf_counter() - started, 1)  # unpacked, loaded, indexed
                info = self.app.trainer.serve(
                    session, new_run_info(run, base_model, texts, source, made, model_zip=kept)
                )
                served.append(info)
                self.app.trainer.measure_change(info)
                self.app.runs.save(info)
                yield Done(info, tuple(notes))
        except MirrorError as exc:
            yield Failed(str(exc))
        except Exception as exc:
            log.exception("model upload failed")  # details (which may name server paths) stay in the log
            yield Failed(f"could not use this model ({type(exc).__name__}); is it a zip saved by this app?")

    def _base_of(self, tuned) -> tuple[str, Any, list[str]]:
        """The base model an uploaded tuned model names (checked like one a user typed, hub size included), or
        the bundled model with a note when that one is not available here."""
        base_model = str((tuned.info.get("config") or {}).get("model") or BUNDLED_MODEL)
        try:
            return (
                base_model,
                self.app.models.base_encoder(self.app.models.check_download(base_model), tuned.pooling),
                [],
            )
        except MirrorError as exc:
            note = f"its base model {base_model!r} is not available here ({exc}); comparing with the bundled model"
            # with the tuned model's pooling: the served run reloads its base that way
            return BUNDLED_MODEL, self.app.models.base_encoder(BUNDLED_MODEL, tuned.pooling), [note]

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
        yield from self._as_job(session, "blend", lambda run: self._blend(session, parent, alpha, run))

    def _blend(self, session: Session, parent: RunInfo, alpha: float, handle: Run) -> Iterator[Event]:
        from index.pipeline import index_with
        from mirror.blend import blend_folder
        from mirror.encoder import load_encoder

        started = time.perf_counter()  # the blend's own seconds (its stats copy the parent's training time)
        # a blend of a blend blends the tuned weights of the run they both come from: named as that run's blend
        of = parent.record.origin
        origin = str((of.parent if of.alpha is not None else None) or parent.folder.name)
        of_summary = re.sub(r"^blend α=\S+ of ", "", parent.summary)
        run = self.app.trainer.new_run_folder(session, handle)
        try:
            with self.app.trainer.discarded_unless_served(run) as served:
                loaded = self.app.models.loaded(parent)
                # a new run of its own (its model twice, its index; the parent's files are linked, not copied)
                yield from (Note(n) for n in self.app.check_disk(session, run_bytes(loaded.tuned, parent.n_texts)))
                texts = list(loaded.main.tuned.texts)
                yield Phase(f"Blending the weights: α = {alpha:g} tuned, {1 - alpha:g} base")
                # the unblended model, for later blends (an uploaded blend has none: its model/, which records its α, and
                # mirror.blend blends it as α of the tuned weights it came from)
                link_tree(tuned_weights(parent.folder), run / "tuned_model")
                # the record names the parent run, so the blend's zip reads as this blend when it is reused; by its
                # short id only: the zip and a Hub push are shared, and a full run id opens the run (its strings)
                blend_folder(loaded.base, run / "tuned_model", alpha, run / "model", of=origin[:8])
                blended = load_encoder(run / "model", device=inference_device(), allowed_roots=[run])
                link_tree(parent.folder / "base_index", run / "base_index")
                events: list[Event] = []
                index_with(blended, texts, run / "tuned_index", "Indexing your strings with the blend", events.append)
                yield from events
                # the parent's training, notes and zip; its checks, times and neighbours are not the blend's
                record = RunRecord(
                    training=parent.record.training,
                    origin=Origin("blend", alpha, origin, zip=of.zip),
                    timing=Timing(blend_seconds=round(time.perf_counter() - started, 1)),  # its own seconds
                    notes=list(parent.record.notes),
                )
                made = Made(record, parent.pooling, f"blend α={alpha:g} of {of_summary}", list(parent.losses))
                checks = self.app.settings.general_checks
                info = new_run_info(run, parent.base_model, texts, parent.corpus, made, package=not checks)
                if not checks:
                    served.append(self.app.trainer.serve(session, info))
                    self.app.trainer.measure_change(info)
                    self.app.runs.save(info)
                    yield Done(info)
                    return
                # served before its checks, as a run (explorer.runs.training): they, its card and downloads follow
                served.append(self.app.trainer.serve_first(handle, info))
                yield Served(info)
                yield from self.app.trainer.check_and_package(info, texts)
                yield Done(info)
        except MirrorError as exc:
            yield Failed(str(exc))
        except Exception as exc:
            log.exception("blend failed")
            yield Failed(f"the blend failed ({type(exc).__name__}); the previous model stays served")


def uploaded_made(tuned: Any, name: str, notes: list[str]) -> Made:
    """What an uploaded model zip makes: the training its folder records (mirror_config.json), its blend when it is
    a zip of one (it reads as that blend, not as a tuned model), the zip's name, and `notes` (its base's)."""
    from mirror.blend import recorded_blend

    saved = dict(tuned.info.get("stats") or {})
    training = training_of(saved)
    training.mode = (tuned.info.get("config") or {}).get("mode", "?")
    blended = recorded_blend(tuned.info)
    alpha, parent = blended if blended is not None else (None, None)
    origin = Origin("uploaded", alpha, parent, zip=name)
    summary = f"uploaded model {name}" + (f" ({saved['summary']})" if saved.get("summary") else "")
    return Made(RunRecord(training=training, origin=origin, notes=list(notes)), tuned.pooling, summary)


def tuned_weights(run: Path) -> Path:
    """The unblended tuned model of a run folder: tuned_model/ of a blend, model/ otherwise."""
    return run / "tuned_model" if (run / "tuned_model").is_dir() else run / "model"


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
