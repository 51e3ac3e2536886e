"""Turning files into text with structure: one module per format, a registry, a sandbox.

Use ``ParserPool`` for files a person dropped into a watched folder (a separate process
with time and memory limits); ``parse_file`` parses in this process without limits.

The names below are imported on first use: ``core.records`` and ``core.errors`` read the
format table (``core.formats``), and importing this package must not bring in the
registry, which itself needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.ingest.registry import (
        FILE_TYPES,
        SUPPORTED_EXTENSIONS,
        detect_type,
        parse_file,
        skip_reason,
    )
    from core.ingest.sandbox import ParserPool

__all__ = [
    "FILE_TYPES",
    "SUPPORTED_EXTENSIONS",
    "ParserPool",
    "detect_type",
    "parse_file",
    "skip_reason",
]

_HOME = {name: "core.ingest.registry" for name in __all__} | {"ParserPool": "core.ingest.sandbox"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
