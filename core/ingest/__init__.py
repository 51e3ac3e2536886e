"""Turning files into text with structure: one module per format, a registry, a sandbox.

Use ``ParserPool`` for files a person dropped into a watched folder (a separate process
with time and memory limits); ``parse_file`` parses in this process without limits.
"""

from __future__ import annotations

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
