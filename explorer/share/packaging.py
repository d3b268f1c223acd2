"""A served run's downloads: its model card written from its record, its model and its tuned index zipped, each
ready to unzip beside the other (the index's meta.json points at the model)."""

from __future__ import annotations

import logging
import posixpath

from explorer.resources.record import RunInfo
from explorer.share.card import write_card
from explorer.share.uploads import model_folder_in_zip, zip_folder

log = logging.getLogger("mirror.app")
INDEX_README = """\
A Mirror Explorer search index (FAISS) of your strings, built with the tuned model.
Unzip the model zip beside it (this folder and mirror-model/ side by side), then search it:

  with sentence-transformers and FAISS alone (pip install sentence-transformers faiss-cpu):
    import json, faiss
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("mirror-model")
    index = faiss.read_index("mirror-index/index.faiss")        # exact inner product over unit vectors
    texts = json.load(open("mirror-index/texts.json", encoding="utf-8"))
    scores, ids = index.search(model.encode(["your query"], normalize_embeddings=True), 10)
    print([(texts[i], float(s)) for i, s in zip(ids[0], scores[0])])

  with Mirror Explorer's own command (its virtualenv's python, from any folder):
    /path/to/mirror-explorer/.venv/bin/python -m index query mirror-index "your query"
"""


def package_run(info: RunInfo, zip_model: bool | None = None) -> RunInfo:
    """The run's downloads: the model card written into model/ from the run's record as it is now (the general
    checks included, so run them first), model/ zipped (inside: mirror-model/) unless its zip is there already (an
    uploaded one, served as it came), and the tuned index zipped (inside: mirror-index/) with a meta.json pointing
    at the model beside it."""
    from index.folder import META_FILE, with_encoder_at

    folder = info.folder
    try:
        write_card(folder / "model", {**info.stats, "losses": info.losses}, info.base_model)
    except Exception:  # a run is never failed for its card
        log.exception("could not write the model card")
    if zip_model if zip_model is not None else not info.model_zip.exists():
        zip_folder(folder / "model", info.model_zip, "mirror-model")
    model_dir = model_folder_in_zip(info.model_zip)  # "mirror-model" (what the app zips), or an uploaded zip's own
    index_at = posixpath.normpath(posixpath.join("..", model_dir))  # unzipped beside the model zip: no --encoder
    extra = {"README.txt": INDEX_README, META_FILE: with_encoder_at(folder / "tuned_index", index_at)}
    zip_folder(folder / "tuned_index", info.index_zip, "mirror-index", extra)
    return info
