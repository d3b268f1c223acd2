"""The tuned encoder beside its base, on a served run: search (search, searching), gold pairs (evaluation), the
Explore tab (explore: maps, health, forgetting).
"""
