"""Tab 2 and tab 3 on the served run: search both encoders, index another corpus, score gold pair sets."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from explorer.compare.evaluation import EvalReport, evaluate_sets, load_sets
from explorer.compare.search import BaseIndexes, Partners, search_both
from explorer.events import Phase
from explorer.resources.cpu import CpuAccounts
from explorer.resources.disk import Disk
from explorer.resources.models import ModelCache
from explorer.resources.record import RunInfo
from explorer.resources.runfacts import served_label
from explorer.resources.sessions import ExtraCorpus, Session
from explorer.resources.store import read_partners
from explorer.resources.turns import FairSlots
from explorer.settings import Settings
from explorer.share.uploads import display_name
from explorer.tune.inputs import clamp_k, split_queries
from mirror.config import BUNDLED_MODEL
from mirror.data import clean_texts, read_file
from mirror.errors import MirrorError

log = logging.getLogger("mirror.app")

PARTNERS_KEPT = 8  # runs whose partners (pairs.json) are held in memory, least recently searched dropped


class Searcher:
    """Tab 2 and tab 3 on the served run: search both encoders, index another corpus, score gold pair sets. It
    encodes in `search_slots` (a few at a time), reads the encoders and indexes `models` holds (a kept run by id:
    `kept`), asks `disk` before it writes, meters an evaluation's CPU in `cpu`. One per MirrorApp (`app.searcher`)."""

    def __init__(
        self,
        settings: Settings,
        models: ModelCache,
        kept: Callable[[str], RunInfo],
        disk: Disk,
        search_slots: FairSlots,
        base_indexes: BaseIndexes,
        cpu: CpuAccounts,
    ):
        self.settings, self.models, self.kept, self.disk = settings, models, kept, disk
        self.search_slots, self.base_indexes, self.cpu = search_slots, base_indexes, cpu  # cpu: evaluations metered
        self._partners: OrderedDict[Path, Partners | None] = OrderedDict()  # by run folder: `partners`
        self._examples: OrderedDict[Path, dict[str, Any] | None] = OrderedDict()  # by run folder: `example`
        self._lock = threading.Lock()

    def search(
        self,
        session: Session,
        queries: str,
        k: Any = 10,
        corpus: str = "main",
        hide_query: bool = False,
        base_model: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Top-k hits of each query (one per line) for the tuned and the base encoder, compared (explorer.compare.search):
        [{query, tuned: [{rank, text, score, only_here, base_rank}], base: [{..., tuned_rank}], base_only}]. Searching
        the strings of a pairs run (or strings loaded with a partner column, before any tuning), each hit also has its
        `partner` (its row's partner text, or None) and each query's result the `columns` searched and shown beside
        ({"strings": …, "partner": …}).

        `hide_query` drops the hit that is the query's own string (off by default: an API caller sees what the
        index holds). Before any tuning it searches the loaded strings with the base model `base_model` (default:
        the bundled one; a served run compares with its own base) alone: "tuned" is empty, "base_only" true.
        `run_id`: search that kept run instead of the session's (any client, after a restart too).
        """
        qs, k = split_queries(queries), clamp_k(k)
        run = self.kept(run_id) if run_id else session.run
        pair, partners = None, None
        if run is not None:
            loaded = self.models.loaded(run)
            extra = session.extra
            if corpus != "extra":
                pair, partners = loaded.main, self.partners(run)
            elif extra is not None and extra.run == run.folder:  # this session's, indexed for this run
                pair = self.models.corpus(extra.folder, loaded)
        if pair is None and corpus == "extra":
            raise MirrorError("no other corpus is indexed yet: upload one below and press “Index it”")
        if pair is None:
            return self._search_base_only(session, qs, k, bool(hide_query), base_model or BUNDLED_MODEL)
        # a few encodes at a time, in arrival order: no thread oversubscription; its CPU its visitor's (never refused)
        with self.search_slots, self.cpu.metered(session.owner, "a search", refuse=False):
            return search_both(pair.tuned, pair.base, qs, k, bool(hide_query), partners)

    def partners(self, run: RunInfo) -> Partners | None:
        """The partners of a pairs run's strings, row for row with its indexes, as the run keeps them (pairs.json,
        explorer.resources.store: a reloaded page, a run opened by its link, after a restart); a blend's are its parent
        run's (the same strings). None for a run without pairs, or whose partners are no longer kept."""
        folder = run.folder
        with self._lock:
            if folder in self._partners:
                self._partners.move_to_end(folder)
                return self._partners[folder]
        kept = read_partners(folder, run.n_texts)
        parent = run.record.origin.parent
        if kept is None and parent and len(parent) == 32 and run.record.training.pairs is not None:
            kept = read_partners(folder.parent / parent, run.n_texts)  # a blend of a pairs run made here
        found = Partners(kept[0], (str(kept[1][0]), str(kept[1][1]))) if kept is not None else None
        with self._lock:
            self._partners[folder] = found
            while len(self._partners) > PARTNERS_KEPT:
                self._partners.popitem(last=False)
        return found

    def example(self, run: RunInfo | None) -> dict[str, Any] | None:
        """The held-out row a pairs run's Search tab offers to try (its partner typed, its string to find): the first
        of those the run keeps (never trained on) that the served model finds higher than the base ({partner,
        string, tuned_rank, base_rank, better: True}); when it finds none of them higher, the first, `better` False
        (the page says the base finds it as well). Ranks in the top 10, None past it. None without examples."""
        pairs = run.record.training.pairs if run is not None else None
        if run is None or pairs is None or not pairs.examples:
            return None
        with self._lock:
            if run.folder in self._examples:
                return self._examples[run.folder]
        try:
            main = self.models.loaded(run).main
            with self.search_slots:
                partners = [partner for partner, _ in pairs.examples]
                tuned, base = main.tuned.search(partners, 10), main.base.search(partners, 10)
        except Exception:  # the header offers the first kept row, unranked, rather than failing the page
            log.exception("the held-out rows to try could not be ranked")
            return None
        tried = []
        for (partner, string), t_hits, b_hits in zip(pairs.examples, tuned, base, strict=True):
            t_rank = next((h.rank for h in t_hits if h.text == string), None)
            b_rank = next((h.rank for h in b_hits if h.text == string), None)
            better = t_rank is not None and (b_rank is None or t_rank < b_rank)
            tried.append(
                {"partner": partner, "string": string, "tuned_rank": t_rank, "base_rank": b_rank, "better": better}
            )
        chosen = next((row for row in tried if row["better"]), tried[0])
        with self._lock:
            self._examples[run.folder] = chosen
            while len(self._examples) > PARTNERS_KEPT:
                self._examples.popitem(last=False)
        return chosen

    def _search_base_only(
        self, session: Session, queries: list[str], k: int, hide_query: bool, model: str
    ) -> list[dict[str, Any]]:
        texts = list(session.texts)
        if len(texts) < 2:
            raise MirrorError(
                "Nothing to search yet: load your strings in tab ① (step 1) to search them with the base model, "
                "then tune one there to compare it with the tuned model."
            )
        model = self.models.check_download(model)
        encoder = self.models.base_encoder(model)
        pairing, rows = session.pairing, session.partners  # strings loaded with a partner column: shown beside
        partners = Partners(rows, pairing.columns()) if rows is not None and pairing is not None else None
        # the first search of these strings embeds them all: one slot, like a search; charged to its visitor
        with self.search_slots, self.cpu.metered(session.owner, "a search", refuse=False):
            index = self.base_indexes.get(model, encoder, texts)
            return search_both(None, index, queries, k, hide_query, partners)

    def index_corpus(
        self, session: Session, path: str | None, column: str | None = None, name: str | None = None
    ) -> str:
        """Index another uploaded corpus with the served tuned and base encoders; returns a summary. `name`: the
        file's name as the user gave it, where the path's own differs. It is the session's own (in its folder,
        charged to its visitor), never written into the run's folder: a run opened by its link is read only."""
        from index.store import VectorIndex
        from mirror.folders import replace_dir

        run = session.run
        if run is None:
            raise MirrorError("tune a model first (tab ①): the other corpus is indexed with your tuned encoder")
        if not path:
            raise MirrorError("upload a corpus file first")
        shown = display_name(name or path)
        raw = read_file(path, column, self.settings.max_upload_bytes, name=shown).strings
        texts, stats = clean_texts(raw)
        dropped = max(0, len(texts) - self.settings.max_strings)
        texts = texts[: self.settings.max_strings]
        if not texts:
            raise MirrorError(f"`{shown}` has no non-empty strings")
        loaded = self.models.loaded(run)
        # two indexes of its rows (vectors and texts) in the session's folder
        self.disk.check(session, 2 * sum(4 * loaded.tuned.dim + len(t.encode()) + 16 for t in texts))
        folder = session.folder / "extra"
        tmp = session.folder / ".extra.new"
        shutil.rmtree(tmp, ignore_errors=True)
        VectorIndex.build(loaded.base, texts, gpu=False).save(tmp / "extra_base")
        VectorIndex.build(loaded.tuned, texts, gpu=False).save(tmp / "extra_tuned")
        with session.lock:
            self.models.forget(folder)  # the corpus it replaces
            replace_dir(tmp, folder)
            session.extra = ExtraCorpus(run=run.folder, name=shown, folder=folder)
        return (
            f"Indexed {len(texts):,} strings of `{shown}` with both encoders ({stats.summary()}"
            + (f"; {dropped:,} more dropped: this server's limit is {self.settings.max_strings:,}" if dropped else "")
            + "). Searching it now."
        )

    def cancel_evaluation(self, session: Session) -> str:
        """Stop the session's evaluation between two batches of strings."""
        session.eval_stop.set()
        return "Stopping the evaluation…"

    def evaluate(self, session: Session, gold: Sequence[str], pairs_path: str | None = None) -> list[dict[str, Any]]:
        """Spearman ρ of cosine vs gold scores, for the base and (when there is one) the tuned encoder: a row per
        set, with bootstrap 95% intervals ("base 95% CI", ...). `evaluate_report` has the rest."""
        return self.evaluate_report(session, gold, pairs_path).rows

    def evaluate_report(
        self,
        session: Session,
        gold: Sequence[str],
        pairs_path: str | None = None,
        on_progress: Callable[[Phase], None] | None = None,
    ) -> EvalReport:
        """The rows of `evaluate`, the pairs whose rank moved most with tuning and notes (a set under 50 pairs,
        no tuned model yet); `on_progress` gets a Phase (strings encoded of all) as the encoders work. At most
        MIRROR_MAX_PAIRS pairs a file; `cancel_evaluation` stops it between two batches."""
        settings = self.settings
        sets = load_sets(gold, pairs_path, settings.max_upload_bytes, settings.max_pairs)
        stop = session.eval_stop
        stop.clear()

        def progress(phase: Phase) -> None:
            if stop.is_set():
                raise MirrorError("Evaluation cancelled.")
            if on_progress is not None:
                on_progress(phase)

        notes, run = [], session.run  # the run evaluated, named in the report even if another is served by then
        if run is not None:
            loaded = self.models.loaded(run)
            encoders = [("base", loaded.base), ("tuned", loaded.tuned)]
        else:
            encoders = [("base", self.models.base_encoder(BUNDLED_MODEL))]
            notes.append("no tuned model yet: these are the bundled base model's scores (tune one in tab ① to compare)")
        with self.cpu.metered(session.owner, "an evaluation", interactive=True):
            report = evaluate_sets(sets, encoders, progress, served_label(run))
        return dataclasses.replace(report, notes=notes + report.notes, run=run)
