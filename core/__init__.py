"""Lectern's engine: everything the desktop app and the ``lectern`` CLI share."""

from __future__ import annotations

__version__ = "0.1.0"
