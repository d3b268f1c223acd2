"""Tab 1's input: the session's strings loaded from a file, pasted text, a bundled example or a Hub dataset,
cleaned and capped (`set_texts`); a run's own strings loaded again (`restore_texts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from explorer.resources.models import ModelCache
from explorer.resources.sessions import Pairing, Session
from explorer.resources.store import read_partners
from explorer.settings import Settings
from explorer.share.uploads import display_name
from explorer.tune.inputs import EXAMPLES, EXAMPLES_DIR
from mirror.config import detect_mode
from mirror.data import clean_texts, fmt_size, iter_lines, read_file, utf8_size
from mirror.errors import MirrorError
from mirror.pairs import clean_pairs

log = logging.getLogger("mirror.app")


class TextLoader:
    """Tab 1's input: the session's strings loaded from a file, pasted text, a bundled example or a Hub dataset,
    within this server's limits (`settings`); a served run's own strings from `models`. One per MirrorApp
    (`app.loader`)."""

    def __init__(self, settings: Settings, models: ModelCache):
        self.settings, self.models = settings, models

    def set_texts(
        self,
        session: Session,
        raw: Iterable[str],
        source: str,
        notes: Sequence[str] = (),
        partners: Sequence[str] | None = None,
        columns: tuple[str, str] | None = None,
        pair_note: str | None = None,
    ) -> dict[str, Any]:
        """Clean, cap and keep the strings (with each one's partner, when `partners` are given: mirror.pairs, from
        the `columns` (strings, partners)); returns what the UI and the API report about them (with `notes` from
        reading them: an encoding guessed, a header row)."""
        kept: list[str | None] | None = None
        if partners is not None:
            texts, kept, stats, pair_stats = clean_pairs(list(raw), partners)
            total = len(texts)
        else:  # the strings past the limit are counted, not kept (a 20 MB paste: issue 58)
            texts, stats = clean_texts(raw, limit=self.settings.max_strings)
            total = stats.kept
        notes = list(notes)
        if total > self.settings.max_strings:
            notes.append(
                f"kept the first {self.settings.max_strings:,} of {total:,} strings (this server's limit, MIRROR_MAX_STRINGS)"
            )
            texts = texts[: self.settings.max_strings]
            if kept is not None:
                kept = kept[: self.settings.max_strings]
                pair_stats = dataclasses.replace(pair_stats, paired=sum(p is not None for p in kept))
        if len(texts) < 2:
            raise MirrorError(
                f"`{source}`: found {len(texts)} usable string{'s' if len(texts) != 1 else ''} "
                f"({stats.lines} lines, {stats.empty} empty, {stats.duplicates + stats.case_duplicates} duplicates); mirror tuning needs at least 2 distinct strings"
            )
        mode, reason = detect_mode(texts)
        session.texts, session.source, session.stats, session.upload = texts, source, stats, ""
        session.detected_mode, session.mode_reason = mode, reason
        session.partners, session.pairing = None, None
        if kept is not None and pair_stats.paired >= 2:  # fewer: no pair to learn from, a plain run
            session.partners = kept
            session.pairing = Pairing(*(columns or ("string", "partner")), pair_stats, pair_note)
        info = {"strings": len(texts), "stats": stats, "mode": mode, "reason": reason, "notes": notes, "source": source}
        info["pairing"] = session.pairing
        return info

    @contextlib.contextmanager
    def _replacing_texts(self, session: Session) -> Iterator[None]:
        """A load replaces the session's strings or, when it fails, keeps the ones loaded before (issue 28: a bad
        file after a good one must not cost the good one); the page says which strings are still loaded."""
        yield

    def load_file(
        self,
        session: Session,
        path: str | None,
        column: str | None = None,
        name: str | None = None,
        pair_column: str | None = None,
    ) -> dict[str, Any]:
        """The strings of an uploaded file; `name`: the one the user gave it, where the path's own differs (the UI's
        upload cache renames a few), else the path's. `pair_column`: a column of partner texts (mirror.data.AUTO:
        the detected one, if any; None or "": none)."""
        with self._replacing_texts(session):
            if not path:
                raise MirrorError("no file uploaded")
            notes: list[str] = []
            name = display_name(name or path)
            read = read_file(
                path, column, self.settings.max_upload_bytes, name=name, notes=notes, pair_column=pair_column
            )
            columns = (read.column or "string", read.pair_column or "partner")
            info = self.set_texts(session, read.strings, name, notes, read.partners, columns, read.pair_note)
            session.upload = name
            return {
                **info,
                "columns": read.columns,
                "column": read.column,
                "pair_column": read.pair_column if session.pairing is not None else None,
                "pair_note": read.pair_note,
            }

    def load_pasted(self, session: Session, text: str) -> dict[str, Any]:
        with self._replacing_texts(session):
            return self._load_pasted(session, text)

    def _load_pasted(self, session: Session, text: str) -> dict[str, Any]:
        text = str(text or "")
        if not text.strip():
            raise MirrorError("paste some strings first, one per line")
        if utf8_size(text) > self.settings.max_upload_bytes:
            raise MirrorError(
                f"the pasted text is over {fmt_size(self.settings.max_upload_bytes, limit=True)}; upload a file instead"
            )
        # a table pasted from a spreadsheet (a newcomer's "term<TAB>definition" rows: 4 strings, the header one of
        # them, nothing paired): said, not split; counted without a copy of the text
        notes = []
        if 2 * text.count("\t") > text.count("\n") + 1:  # tabs in more than half the lines (about)
            notes.append(
                "the pasted lines hold tabs: each whole line is one string here (a paste is not split into columns); "
                "to pick a column or pair two, save them as a .tsv file and upload it"
            )
        # line by line: no list of every line, no copy of the text (a 19 MB paste cost ~10x its size: issue 58)
        return self.set_texts(session, iter_lines(text), "pasted text", notes)

    def load_example(self, session: Session, key: str) -> dict[str, Any]:
        with self._replacing_texts(session):
            if key not in EXAMPLES:
                raise MirrorError(f"unknown example {key!r}")
            path = EXAMPLES_DIR / EXAMPLES[key][1]
            if not path.is_file():
                raise MirrorError(f"the example file {path.name} is missing from this installation")
            return self.set_texts(session, path.read_text(encoding="utf-8").splitlines(), path.name)

    def load_hub_dataset(self, session: Session, dataset: str, column: str, split: str | None = None) -> dict[str, Any]:
        """The strings of one column of a Hugging Face dataset (explorer.share.hub), within this server's limits."""
        import explorer.share.hub as hub

        with self._replacing_texts(session):
            if not self.settings.allow_hub:
                raise MirrorError("this server does not load from the Hugging Face Hub (MIRROR_ALLOW_HUB is off)")
            dataset, column = str(dataset or "").strip(), str(column or "").strip()
            raw, notes = hub.load_hub_dataset(
                dataset,
                column,
                split=str(split or "").strip() or None,
                max_rows=self.settings.max_strings,
                max_bytes=self.settings.max_upload_bytes,
            )
            return self.set_texts(session, raw, f"{dataset} · {column}", notes)

    def restore_texts(self, session: Session) -> dict[str, Any] | None:
        """A session with no strings loaded (a reloaded page, a link opened elsewhere) gets the served run's own
        strings back, so tuning them again is one click; what `set_texts` reports, or None when it had some."""
        run = session.run
        if run is None or session.texts:
            return None
        texts = list(self.models.loaded(run).main.tuned.texts)
        source = f"run {run.folder.name[:8]} ({run.corpus or 'its strings'})"
        kept = read_partners(run.folder, len(texts))  # a pairs run's partners: tuned with them again
        partners, columns = kept if kept is not None else (None, None)
        info = self.set_texts(session, texts, source, partners=partners, columns=columns)
        recorded = run.record.training.pairs
        if (
            session.pairing is not None
            and recorded is not None
            and recorded.stats.paired == session.pairing.stats.paired
            and recorded.stats.accounts_for(len(texts))
        ):
            # why rows train alone is the run's record's: its kept partners hold None whatever the reason, and a run
            # opened again said "58 train alone (58 empty)" for 58 codes equal to their names
            session.pairing = info["pairing"] = dataclasses.replace(session.pairing, stats=recorded.stats)
        again = "the strings of the run this page serves" + (f" and their `{columns[1]}`" if columns else "")
        info["notes"] = [f"{again}, loaded again: Launch tunes them again"] + info["notes"]
        info["restored"] = True  # cleaned when they were first loaded: counting again finds nothing to remove
        return info
