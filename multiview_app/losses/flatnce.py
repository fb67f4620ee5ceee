"""Loss module 'flatnce' (being written)."""
