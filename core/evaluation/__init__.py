"""Measuring Lectern: BEIR retrieval, answers, the check on the user's own library, and the installation self-test."""
