"""Retrieval stage: keyword and meaning candidates, their fusion, the second stage and the optional ordering by the user's language model."""
