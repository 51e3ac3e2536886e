"""QtPdf, imported only where a PDF page is rendered (it loads the PDF engine)."""

from __future__ import annotations

from PySide6.QtPdf import QPdfDocument

__all__ = ["QPdfDocument"]
