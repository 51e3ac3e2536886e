"""Offline mode for the model libraries, set in one place by every entry point.

huggingface_hub and transformers read these variables once, when first imported, so each
entry point (the CLI, the desktop app, the model loader itself) calls this before anything
can import them; otherwise a missing model file would be fetched from the network.
"""

from __future__ import annotations

import os

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def force_offline() -> None:
    for name in OFFLINE_VARIABLES:
        os.environ[name] = "1"
    # The tokenizer's own thread pool fights the parser and model threads for two cores.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
