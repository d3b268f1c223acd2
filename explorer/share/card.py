"""The model card of a tuned model: its home is `mirror.card` (the engine's CLI writes it too); re-exported here for
the app's service layer."""

from __future__ import annotations

from mirror.card import BUNDLED_HUB_ID, CARD_FILE, hub_base_model, model_card, read_mirror_config, write_card

__all__ = ["BUNDLED_HUB_ID", "CARD_FILE", "hub_base_model", "model_card", "read_mirror_config", "write_card"]
