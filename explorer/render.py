"""The error and duration helpers the run modules import from here while they are rewritten (explorer.runs.execute,
training, saved): `incident` and `user_error` (explorer.errors), `fmt_seconds` (explorer.words). Nothing else; the
pages are drawn by ui.render. To be renamed away once those modules import from explorer.errors and explorer.words.
"""

from explorer.errors import incident, user_error
from explorer.words import fmt_seconds

__all__ = ["fmt_seconds", "incident", "user_error"]
