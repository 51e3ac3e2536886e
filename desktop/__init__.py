"""Lectern's desktop app: a PySide6 window over the ``core`` engine."""
