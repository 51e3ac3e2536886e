"""Chunking stage: a parsed document split on its own structure into passages sized for the embedding model."""
