"""A model download as a person reads it: one bar for the whole model, words for the steps.

Ollama reports a pull layer by layer ("pulling 8eeb52dfb3bb", with that layer's own
total), so a bar drawn from each message restarts for every layer and the status shows
raw digests. ``PullTracker`` folds the stream into one fraction over every layer seen so
far, which never moves backwards, and a sentence for each step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import LecternError
from core.llm.records import LLMClient, PullProgress


def byte_size(num: int | None) -> str:
    """``num`` bytes in the units a download dialog uses (decimal, as Ollama's are)."""
    if num is None:
        return "?"
    size = float(num)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


@dataclass(frozen=True)
class PullStatus:
    text: str  # one sentence, no digests
    fraction: float | None  # the whole model; None until a layer with a size is seen


class PullTracker:
    def __init__(self, model: str) -> None:
        self.model = model
        self._layers: dict[str, tuple[int, int]] = {}  # digest -> (completed, total)
        self._shown = 0.0

    def update(self, progress: PullProgress) -> PullStatus:
        status = progress.status.strip().lower()
        if progress.digest and progress.total:
            self._layers[progress.digest] = (
                min(progress.completed or 0, progress.total),
                progress.total,
            )
        done = sum(c for c, _ in self._layers.values())
        total = sum(t for _, t in self._layers.values())
        if total:
            # A new layer adds to the total; the bar holds still rather than jump back.
            self._shown = max(self._shown, done / total)
        fraction = self._shown if self._layers else None
        if status == "success":
            return PullStatus(f"{self.model} is ready to use.", 1.0)
        if status.startswith("pulling manifest"):
            text = f"Preparing the download of {self.model}…"
        elif status.startswith(("pulling", "downloading")):
            text = (
                f"Downloading {self.model} · {byte_size(done)} of {byte_size(total)}"
                if total
                else f"Downloading {self.model}…"
            )
        elif status.startswith("verifying"):
            text = f"Checking the download of {self.model}…"
        elif status.startswith(("writing", "removing")):
            text = f"Finishing the download of {self.model}…"
        else:  # a step this version does not know: the server's words, once
            text = progress.status.strip().capitalize() or f"Downloading {self.model}…"
        return PullStatus(text, fraction)


def pull_model(
    client: LLMClient,
    model: str,
    report: Callable[[PullStatus], None],
    cancel: threading.Event | None = None,
) -> bool:
    """Download ``model`` into the server, reporting each step; False when cancelled.

    Raises LLMError (or LecternError when the server ends without success), so a caller
    shows the message and hint as for any other failure."""
    tracker = PullTracker(model)
    last: PullProgress | None = None
    for progress in client.pull(model, cancel=cancel):
        last = progress
        report(tracker.update(progress))
    if cancel is not None and cancel.is_set():
        return False
    if last is None or last.status.strip().lower() != "success":
        raise LecternError(
            f"The download of {model} ended before it was complete.",
            "Try again; Ollama resumes an interrupted download where it stopped.",
        )
    return True
