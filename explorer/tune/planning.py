"""The plan and time estimate of a run before it starts (explorer.tune.estimate does the pricing): what the page shows,
as values (`Shown`, `Bases`; ui.plan_md words them), the memory a run plans with, and the calibration at server start.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from explorer.resources.models import ModelCache
from explorer.resources.sessions import RunInfo, Session, Tuning, texts_key
from explorer.settings import Settings
from explorer.tune.estimate import IO_PHASES, Estimator
from explorer.tune.guess import device_and_threads, rough_estimate
from explorer.tune.inputs import (
    EXAMPLES,
    EXAMPLES_DIR,
    build_config,
    preset_overrides,
    recorded_overrides,
    trained_rows,
)
from explorer.words import fmt_seconds
from mirror.config import BUNDLED_MODEL, MIRROR_CONFIG_FILE
from mirror.data import clean_texts
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")
# What a base's size does not scale in the suggestions' times: loading it, saving and zipping (I/O, not compute).
UNSCALED_PHASES = IO_PHASES


class Warming:
    """The server's start-up work (MirrorApp.warm_up: the checks' base side, the small example's calibration, UMAP's
    kernels compiled), true while it runs. Meanwhile a plan is priced at the calibrated speed, not probed against it
    (a fresh server's first plan said "8.4x slower now … ~23 min" while it compiled, "~3 min" a minute later; the run
    took 7), and a plan that must calibrate waits for it to end (`wait`)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._done.set()

    def __bool__(self) -> bool:
        return not self._done.is_set()

    def begin(self) -> None:
        self._done.clear()

    def end(self) -> None:
        self._done.set()

    def wait(self, seconds: float) -> None:
        """Until the start-up work ends, at most `seconds`."""
        self._done.wait(seconds)


@dataclass(frozen=True)
class Shown:
    """The plan the page shows of a run before it starts: its Estimate (calibrated, or the rough guess or one priced
    with another length's calibration, and `why_rough` it is not its own) of `config` with its notes; or no plan: no
    strings loaded (`config` None), or settings refused (`refused`: why)."""

    est: Any = None
    config: Any = None
    notes: tuple[str, ...] = ()
    why_rough: str = ""
    refused: str = ""


@dataclass(frozen=True)
class Bases:
    """What the base-model box says: the bundled model's Estimate of the session's run (None: no strings, or not
    calibrated: `why`), whether strings are loaded, and where this server may load models from."""

    est: Any
    why: str
    loaded: bool
    allow_hub: bool
    offline: bool
    local_roots: bool


class Planner:
    """The plan and time estimate of a run before it starts, as the page shows it (`estimator` does the pricing,
    with the base encoders `models` holds; it calibrates only while no run is live in `registry`). One per
    MirrorApp (`app.planner`)."""

    def __init__(
        self,
        settings: Settings,
        models: ModelCache,
        estimator: Estimator,
        registry: Any,
        queue: Any = None,
        cpu: Any = None,
    ):
        self.settings, self.models, self.estimator, self.registry = settings, models, estimator, registry
        self.queue = queue  # the training slots (explorer.runs.jobs.TrainQueue): a plan says what a Launch waits for
        self.cpu = cpu  # the visitors' CPU accounts (explorer.resources.cpu): a plan says what they leave room for
        self.warming = Warming()  # the server's own start-up work runs while it is true
        self._launched: OrderedDict[str, Tuning] = OrderedDict()  # run id -> the settings its Launch ran (`launch`)
        self._budgets: OrderedDict[str, int] = OrderedDict()  # session id -> its plan shown's memory (`shown_budget`)

    CALIBRATION_WAIT_S = 90.0  # an estimate waits this long for another request's calibration of the same key

    def plan(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Shown:
        """The planned steps and the whole job's time on this machine, phase by phase (ui.plan_md words it).

        The first estimate for a model (and pooling, device, precision, threads) calibrates: a few real training
        steps and encodes of that model, timed here (explorer.tune.estimate; a few seconds). Until then, and where it
        cannot calibrate now (a hub model not loaded yet, a run training on this server, ZeroGPU, another request
        calibrating the same key), it is the rough guess from string lengths, saying why.
        """
        if not session.texts:
            return Shown()
        try:
            config, notes = build_config(
                session.texts,
                str(model or BUNDLED_MODEL).strip() or BUNDLED_MODEL,
                mode,
                overrides,
                self.settings.max_steps,
                pairs=session.partners is not None,
                partners=session.partners,
            )
            notes = [*pairs_notes(session, config), *notes]
            est, why = self.estimate_of(session, config)
            est, no_room = self.room_for_retry(session, est, config)
            notes += [no_room] if no_room else []
        except MirrorError as exc:
            return Shown(refused=str(exc))
        from mirror.encoder import attention_note

        base = self.models.cached_base(config.model, config.pooling)  # loaded by the estimate when it could be
        attention = attention_note(base) if base is not None else None
        waits = self.queue_note(session)
        return Shown(est, config, (*notes, *([attention] if attention else []), *([waits] if waits else [])), why)

    def room_for_retry(self, session: Session, est: Any, config: Any) -> tuple[Any, str]:
        """`est` as the run will likely go: where its second training (est.retry, mirror.job) would not fit this
        server's time for a run (MIRROR_MAX_RUN_SECONDS) or the visitor's hour of CPU (at its threads' CPU seconds a
        second on a CPU, one on a GPU), that clause dropped and a note saying so; the run decides again with what it
        measures (explorer.runs.execute.Runner.room)."""
        if est is None or est.retry <= 0:
            return est, ""
        whole, cap = est.total + est.retry, self.settings.max_run_seconds
        if cap and whole > cap:
            why = f"a run here may take {fmt_seconds(cap)} (MIRROR_MAX_RUN_SECONDS)"
        elif self.cpu is not None:
            device, threads = device_and_threads(config.device)
            left = self.cpu.left(session.owner)
            needed = whole * (threads if device == "cpu" else 1)
            if needed <= left:
                return est, ""
            why = (
                f"it would spend about {needed:,.0f} CPU seconds and this server leaves you {max(0.0, left):,.0f} of "
                "your hour's budget (MIRROR_VISITOR_CPU_S)"
            )
        else:
            return est, ""
        return dataclasses.replace(est, retry=0.0), (
            "should the general checks hold this run's blend down, it will not train again with general text held "
            f"near the base here: with that second training {why}"
        )

    def queue_note(self, session: Session) -> str:
        """What a Launch now waits for: the runs of other visitors in line for the training slots, when none is free
        ("" when a slot is free, or only this visitor's own run is in line: that one says itself)."""
        if self.queue is None:
            return ""
        others, free = self.queue.ahead_of(session)
        if not others or free > 0:
            return ""
        one = others == 1
        # the time said: a plan is drawn when strings or settings change, not when those runs end (a second visitor's
        # plan still named a run ended minutes before: a newcomer's pass)
        return (
            f"{others} run{'' if one else 's'} of other visitors {'is' if one else 'are'} training or waiting for this "
            f"server's training slot now ({time.strftime('%H:%M %Z')}, as this plan was made): a Launch waits for "
            f"{'it' if one else 'them'} first, and that wait is not in this estimate (the status line counts the jobs "
            "ahead while it waits)"
        )

    def estimate_of(self, session: Session, config, may_calibrate: bool = True) -> tuple[Any, str]:
        """The calibrated Estimate of a run of `config` on the session's strings, or the rough one and why.
        `may_calibrate` false: only a calibration made before is used."""
        from explorer.settings import zero_gpu
        from mirror.names import looks_local

        texts = list(session.texts)
        model = self.models.check_model(config.model)  # before the rough guess reads the model's config
        device, threads = device_and_threads(config.device)
        rough = rough_estimate(
            texts, config, device, threads, trained_rows(texts, config, session.partners), session.partners
        )
        if zero_gpu():
            return rough, "the GPU is lent to a run only while it trains, so it is not timed ahead"
        base = self.models.cached_base(model, config.pooling)
        if base is None and model != BUNDLED_MODEL and not looks_local(model, here=False):  # never downloads for a plan
            scaled = self.scaled_from_bundled(session, config, device, threads)
            if scaled is not None:  # ordered by size: the bundled model's price here, times this one's compute
                return scaled, (
                    "the bundled model's price here, scaled by this model's compute per token; calibrates once it is "
                    "loaded (by a run)"
                )
            return rough, "calibrates on this machine once this model is loaded (by a run)"
        base = base or self.models.base_encoder(model, config.pooling)
        key, prev = texts_key(texts), session.run
        build_base = True
        if prev and (prev.base_model, prev.pooling, prev.texts_key) == (model, base.pooling, key):
            build_base = not (prev.folder / "base_index").is_dir()  # _train copies it
        est = self.estimator.estimate(
            texts,
            key,
            config,
            device,
            threads,
            base,
            memory_budget=self.shown_budget(session, config),
            build_base=build_base,
            # a second request while the first calibrates (the page asks again as a file lands) waits for it:
            # its answer is the one the page keeps
            wait=self.CALIBRATION_WAIT_S,
            # a calibration would slow a training run, and be slowed by it
            may_calibrate=may_calibrate and not self.registry.runs(),
            check_encoders=self.check_encoders(base),
            # what the machine gives now (a tenth of a second): not while a run here trains, which a new run waits for,
            # nor while this server warms up (its own passing work, not the machine's speed)
            probe=may_calibrate and not self.registry.runs() and not self.warming,
            train_texts=second_sides(texts, session.partners),
            # a calibration timed beside the warm-up priced a fresh server's first plan of 600 GO rows at ~14 min
            # (training 11) where the same plan a minute later said ~9 (training 7; the run trained 6.6 min)
            settle=lambda: self.warming.wait(self.CALIBRATION_WAIT_S),
        )
        if not may_calibrate:
            why = "calibrates on this machine when a plan for the bundled model is shown"
        elif self.registry.runs():
            # (a second visitor's plan said nothing of the run ahead: its Launch then waited 10 min for a slot)
            why = (
                "a run is training on this server now: a Launch may wait for a slot, and this plan is timed on this "
                "machine once no run trains"
            )
        else:
            why = "calibrating on this machine (another request started it)…"
        if est is None:
            return rough, why
        # priced with another length's calibration (est.borrowed): a newcomer's plan made while another run trained
        # said "(rough guess) ~2 min" of a 6-min run
        return est, why if est.borrowed else ""

    def scaled_from_bundled(self, session: Session, config, device: str, threads: int) -> Any:
        """A rough Estimate of a run of another model (not loaded: nothing is downloaded for a plan): the bundled
        model's calibrated estimate of the same run here, its compute phases times the model's compute per token
        (explorer.tune.guess.model_cost_factor); None when the bundled model has no calibration here yet."""
        import dataclasses

        from explorer.tune.guess import model_cost_factor

        bundled = self.models.cached_base(BUNDLED_MODEL, config.pooling)
        if bundled is None:
            return None
        like = dataclasses.replace(config, model=BUNDLED_MODEL)
        texts = list(session.texts)
        est = self.estimator.estimate(
            texts, texts_key(texts), like, device, threads, bundled, self.memory_budget(like),
            wait=False, may_calibrate=False, check_encoders=self.check_encoders(bundled), probe=not self.warming,
            train_texts=second_sides(texts, session.partners),
        )  # fmt: skip
        if est is None:
            return None
        factor = model_cost_factor(config.model)
        phases = tuple((name, s if name in UNSCALED_PHASES else s * factor) for name, s in est.phases)
        return dataclasses.replace(est, phases=phases, calibration=None)

    def bases(self, session: Session | None, mode: str, overrides: dict[str, Any]) -> Bases:
        """The bases the box suggests, priced (ui.plan_md.bases_md words it): the bundled model's estimate of a run of
        the session's strings with these settings (calibrated here when it has been, never calibrated for this),
        which each base's compute per token scales. `session` None or without strings: no times yet."""
        est, why = None, ""
        loaded = session is not None and bool(session.texts)
        if loaded:
            try:
                config, _ = build_config(session.texts, BUNDLED_MODEL, mode, overrides, self.settings.max_steps)
                est, why = self.estimate_of(session, config, may_calibrate=False)
            except MirrorError as exc:
                why = str(exc)
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes")
        return Bases(est, why, loaded, self.settings.allow_hub, offline, bool(self.settings.model_roots))

    # ------------------------------------------------------------ the settings a Launch runs, held (issue 59)

    LAUNCHED_KEPT = 1000  # the settings of this many launched runs stay known (a reload after a run shows them)

    def hold(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Tuning:
        """These settings, as the page shows them: what the session's next Launch runs and a reloaded page shows.
        Held only while strings are loaded (settings changed before any are loaded are not a plan: a load sets them)."""
        model = str(model or BUNDLED_MODEL).strip() or BUNDLED_MODEL
        tuning = Tuning(str(mode or "auto"), model, dict(overrides))
        if session.texts:
            session.tuning = tuning
        return tuning

    def held(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Shown:
        """The plan the page shows: of the settings the session holds (those given, when it holds none). An event
        sent with the page's values of a moment before (a model picked while a load ran) plans what Launch runs; a
        plan made while the held settings changed (a setting edited during the first plan's calibration) is made
        again, so that the last plan to land is never an older one's."""
        shown = Shown()
        for _ in range(3):
            held = session.tuning
            if held is not None:
                model, mode, overrides = held.model, held.mode, dict(held.overrides)
            shown = self.plan(session, model, mode, overrides)
            if session.tuning is held:
                break
        return shown

    def hold_model(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Tuning:
        """Another base model: held with the settings the session holds (those given, when it holds none: the model's
        event carries the page's values as they were when it was picked, maybe before a load set them)."""
        held = session.tuning
        if held is not None:
            mode, overrides = held.mode, dict(held.overrides)
        return self.hold(session, model, mode, overrides)

    def after_load(
        self, session: Session, mode: str, model: str, shown: dict[str, Any], touched=()
    ) -> tuple[dict[str, Any], list[str]]:
        """The settings once strings are loaded, held: with the preset Auto, the detected preset's values (the pairs
        preset for strings with partners) but for those changed by hand (`touched`), which keep the value `shown`;
        with another preset, those shown. Also the names of the ones kept that differ from the preset."""
        values, kept = dict(shown), []
        if mode == "auto":
            mine = set(touched or ())
            preset = preset_overrides(session.detected_mode, session.partners is not None)
            kept = [name for name in preset if name in mine and values.get(name) != preset[name]]
            values = {name: values.get(name) if name in mine else value for name, value in preset.items()}
        self.hold(session, model, mode, values)
        return values, kept

    def preset(self, session: Session, mode: str, model: str) -> dict[str, Any]:
        """A preset chosen on purpose: every setting takes its value (Auto: the preset detected for the session's
        strings), held."""
        resolved = mode if mode != "auto" else (session.detected_mode if session.texts else "words")
        values = preset_overrides(resolved, session.partners is not None)
        self.hold(session, model, mode, values)
        return values

    def launch(self, session: Session, model: str, mode: str, overrides: dict[str, Any]) -> Tuning:
        """Launch: the settings shown, held by the session and by the run its click asked for (a page reloaded once
        that run has ended shows them again); what the run runs."""
        tuning = self.hold(session, model, mode, overrides)
        run = self.registry.of(session)
        if run is not None:
            self._launched[run.id] = tuning
            while len(self._launched) > self.LAUNCHED_KEPT:
                self._launched.popitem(last=False)
        return tuning

    def restored(self, session: Session, launched_by: Session | None = None) -> tuple[Tuning, list[str]] | None:
        """The settings a page (re)loaded shows, held by `session` from now on: its own; else those of the session
        that launched the run the page follows (`launched_by`: this browser's page before its reload); else those its
        served run (a blend: its parent) was launched with on this server, or that run's recorded config; None when
        there are none. With them, the names of those changed by hand (those that differ from the strings' preset)
        where they are this browser's own settings: a later load keeps them; a run's settings are nobody's here."""
        held = session if session.tuning is not None else launched_by
        if held is None or held.tuning is None:
            run = session.run
            if run is None:
                return None
            tuning = self._launched.get(run.folder.name) or self._launched.get(run.record.origin.parent or "")
            session.tuning = tuning or recorded_tuning(run, session.detected_mode)
            return (session.tuning, []) if session.tuning is not None else None
        session.tuning = tuning = held.tuning  # (reattached to a run: its strings come back with the run's end)
        resolved = tuning.mode if tuning.mode != "auto" else held.detected_mode
        preset = preset_overrides(resolved, held.partners is not None)
        return tuning, [name for name, value in tuning.overrides.items() if name in preset and value != preset[name]]

    def shown_budget(self, session: Session, config) -> int:
        """The memory a plan shown to the session is priced with (`memory_budget`, read now): kept as the budget of its
        next Launch (`launch_budget`), so that the run is the plan the page shows."""
        budget = self._budgets[session.id] = self.memory_budget(config)
        self._budgets.move_to_end(session.id)
        while len(self._budgets) > self.LAUNCHED_KEPT:
            self._budgets.popitem(last=False)
        return budget

    def launch_budget(self, session: Session, config) -> int:
        """The memory a Launch of the session plans its run with: that of the plan it was shown last, else what the
        machine gives now. Its job keeps it unless the machine has less free by then (mirror.job.kept_memory)."""
        return self._budgets.get(session.id) or self.memory_budget(config)

    def memory_budget(self, config) -> int:
        """The memory a run of `config` plans its steps with (mirror.job.plan_memory): the one a Launch plans
        with is carried to its job, which keeps it (mirror.job.kept_memory)."""
        from mirror.job import plan_memory

        return plan_memory(config, self.settings.train_memory_bytes)

    def check_encoders(self, base) -> int:
        """Encoders the general checks after a run encode: none when they are off, 1 when the base's scores are
        kept (explorer.compare.forgetting), else 2."""
        from explorer.compare.forgetting import base_scored

        if not self.settings.general_checks:
            return 0
        return 1 if base_scored(base) else 2

    def planned(
        self, texts: list[str], key: str, config, base, build_base: bool, memory: int | None = None, partners=None
    ) -> Any:
        """The calibrated estimate of the run about to start within `memory` bytes (its plan's budget; None: read now),
        of `texts` and their `partners` (a pairs run), if its key is calibrated (never calibrates: the run is about to
        use the machine); None otherwise. What its live ETA re-times (explorer.tune.eta) and `Estimator.observe`
        learns from after the run."""
        try:
            device, threads = device_and_threads(config.device)
            budget = self.memory_budget(config) if memory is None else memory
            return self.estimator.estimate(
                texts, key, config, device, threads, base, budget, build_base, wait=False, may_calibrate=False,
                check_encoders=self.check_encoders(base), train_texts=second_sides(texts, partners),
            )  # fmt: skip
        except MirrorError as exc:  # a plan the run itself refuses (memory, length): said to the user, no traceback
            log.info("could not price the run for the estimator: %s", exc)
            return None
        except Exception:  # an estimate must never stop a run
            log.exception("could not price the run for the estimator")
            return None

    def warm_up(self, checks_s: float | None = None) -> None:
        """At server start: calibrate the estimate of the bundled model on the small example (the run a newcomer
        tries first) in the background, so the first plan shown costs its visitor nothing and is not timed while
        their own requests compete with it. `checks_s`: what scoring the base's side of the general checks took
        just before (explorer.compare.forgetting.warm_up), the price of a run's checks (Estimator.checks_timed;
        on a quiet machine a run's took 1.7-1.9 s against 2.1 s there: that first pass also creates the kernels
        of its shapes)."""
        texts = clean_texts((EXAMPLES_DIR / EXAMPLES["small"][1]).read_text(encoding="utf-8").splitlines())[0]
        config, _ = build_config(texts, BUNDLED_MODEL, "auto", {}, self.settings.max_steps)
        device, threads = device_and_threads(config.device)
        base = self.models.base_encoder(BUNDLED_MODEL, config.pooling)
        est = self.estimator.estimate(
            texts, texts_key(texts), config, device, threads, base, self.memory_budget(config),
            may_calibrate=not self.registry.runs(), check_encoders=self.check_encoders(base),
        )  # fmt: skip
        if est is not None and checks_s is not None and not self.estimator.checks_timed(est, base, checks_s):
            log.info("the general checks' warm-up took %.1f s, far over their price: not used to price them", checks_s)


def recorded_tuning(run: RunInfo, detected_mode: str) -> Tuning | None:
    """The settings a run was made with, from its recorded config (its tuned model's mirror_config.json: the epochs
    as it ran them, its steps as capped: the same plan), or None (an uploaded zip that records none). Its preset is
    Auto where the strings' detected one is the run's."""
    for folder in (run.folder / "tuned_model", run.folder / "model"):  # a run blended after training: tuned_model/
        try:
            config = json.loads((folder / MIRROR_CONFIG_FILE).read_text(encoding="utf-8")).get("config")
        except (OSError, ValueError, AttributeError):
            continue
        overrides = recorded_overrides(config)
        if overrides:
            mode = str(config.get("mode") or "")
            explicit = mode in ("words", "sentences") and mode != detected_mode
            return Tuning(mode if explicit else "auto", run.base_model, overrides)
    return None


def pairs_notes(session: Session, config) -> list[str]:
    """What the plan says of a pairs run: how many strings train with their partner, how many are held out to
    measure the gain (or that none are, and why)."""
    from mirror.pairs import holdout

    pairing, partners = session.pairing, session.partners
    if pairing is None or partners is None:
        return []
    held = len(holdout(partners, config.pair_holdout, seed=config.seed))
    string_col, partner_col = pairing.columns()
    trained = pairing.stats.paired - held
    alone = len(session.texts) - pairing.stats.paired
    line = f"Pairs: {trained:,} rows train, each `{string_col}` with its `{partner_col}` (its positive in the loss)" + (
        f", {alone:,} alone on their mirror views" if alone else ""
    )
    if held:
        line += f"; {held:,} rows held out of training, to measure on them what tuning gained"
    elif config.pair_holdout <= 0:
        line += "; none held out (held-out share 0): no measure of the gain on your rows"
    else:
        line += "; too few pairs to hold some out (40 needed): no measure of the gain on your rows"
    return [line]


def second_sides(texts: list[str], partners: list[str | None] | None) -> list[str] | None:
    """A pairs run's second view of each row: its partner, or the string itself (a row without one trains on its
    mirror views); None without partners."""
    if partners is None:
        return None
    return [t if p is None else p for t, p in zip(texts, partners, strict=True)]
