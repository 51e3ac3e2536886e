"""Embedding stage: the models that turn passages and questions into vectors, and the languages each one reads."""
