"""Loss module 'contrastive' (being written)."""
