"""The one current ``Settings`` of a running process, and who is told when they change.

The app changes settings while its library is open (the settings dialog, a switch of
embedding model), and the library changes one on its own (the model it takes for its
first documents). Both go through one :class:`SettingsStore`: it checks a change, writes
settings.json and tells its subscribers which settings changed, so that what is built
from them (the library's retriever, the indexing pace) follows at once and nobody keeps
a copy to be kept in step.

A module of its own rather than part of core/config.py: that module is the record and
its file (what a setting may be, reading and writing settings.json) and is imported by
short commands that never change a setting; this one is the live value, its lock and
its listeners.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import fields

from core.config import Settings, check_settings

# Told the settings now current and the names of the fields that changed.
Listener = Callable[[Settings, frozenset[str]], None]


class SettingsStore:
    def __init__(self, settings: Settings) -> None:
        self._current = settings
        self._listeners: list[Listener] = []
        # Changes come from the UI thread and the library's worker threads: each is made
        # from the settings current then, and written in the order they are made.
        self._lock = threading.Lock()

    @property
    def current(self) -> Settings:
        return self._current

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after each change, on the thread that made it; returns the
        call that stops it (a library closes before the app's store goes), which may be
        made again."""
        self._listeners.append(listener)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return stop

    def update(self, **changes: object) -> Settings:
        """The current settings with ``changes`` (Settings.with_changes), checked, saved
        and announced; see ``replace``."""
        return self._commit(lambda current: current.with_changes(**changes), save=True)

    def replace(self, settings: Settings, *, save: bool = True) -> Settings:
        """Make ``settings`` current: ConfigError, and nothing changed, when a changed
        value is outside its setting's bounds or words. Saved to settings.json unless
        ``save`` is False (a value the library settles on by itself, not the person's
        choice, or one its caller saves). Subscribers are told what changed even when the file could not
        be written: the change holds for this run, and the OSError is raised after, for
        the caller to say so."""
        return self._commit(lambda _current: settings, save=save)

    def _commit(self, make: Callable[[Settings], Settings], *, save: bool) -> Settings:
        unsaved: OSError | None = None
        with self._lock:
            settings = make(self._current)
            changed = _changed(self._current, settings)
            check_settings(settings, changed)
            self._current = settings
            if save:
                try:
                    settings.save()
                except OSError as exc:
                    unsaved = exc
        # Outside the lock: a listener may take its own (the library's), which a thread
        # changing a setting from inside it already holds.
        if changed:
            for listener in list(self._listeners):
                listener(settings, changed)
        if unsaved is not None:
            raise unsaved
        return settings


def _changed(old: Settings, new: Settings) -> frozenset[str]:
    return frozenset(
        f.name for f in fields(Settings) if getattr(old, f.name) != getattr(new, f.name)
    )
