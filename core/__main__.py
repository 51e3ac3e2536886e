from __future__ import annotations

import sys

from core.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
