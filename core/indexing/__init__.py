"""Indexing stage: which files a folder holds, the indexer that keeps the library equal to them, the pace it keeps and the background re-embedding."""
