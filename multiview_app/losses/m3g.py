"""Loss module 'm3g' (being written)."""
