"""Loss module 'mveb' (being written)."""
