"""The packaged app's entry point.

``freeze_support`` must run first: the PDF/DOCX parser worker is a "spawn" child, which
in a frozen app is this same executable started with multiprocessing's arguments, and
it has to become the worker before the GUI (or torch) is even imported.
"""

from __future__ import annotations

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    from desktop.__main__ import main

    sys.exit(main())
