"""The desktop reaches the engine one way: ``Backend.run(op)`` (issue 48).

The panels ask core's application layer (core/app/ops.py) through the backend and hear
what changed on its one ``changed`` signal; only the backend and the start-up that opens
the library hold a ``Library``, and only the objects that own a thread pool submit to
one. These read the source, so a panel that reaches past the seam fails here, named.
"""

from __future__ import annotations

import ast
import re
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESKTOP = ROOT / "desktop"
# The library is opened (and so named) here and nowhere else in the app.
HOLDS_THE_LIBRARY = {"backend.py", "startup.py"}
# Where thread pools are made and handed work: the pool itself, the backend's two, the
# start-up's use of them, and the model server monitor's own (it never reads the library).
OWNS_A_POOL = {"workers.py", "backend.py", "startup.py", "llm_monitor.py"}
BACKEND_LINES = 300


def _desktop_sources() -> list[Path]:
    return sorted(DESKTOP.glob("*.py"))


def _imports_library(tree: ast.AST) -> bool:
    for node in ast.walk(tree):  # TYPE_CHECKING blocks and imports in functions too
        if isinstance(node, ast.Import) and any(
            a.name == "core.library" or a.name.startswith("core.library.") for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (
            node.module == "core.library"
            or (node.module == "core" and any(a.name == "library" for a in node.names))
        ):
            return True
    return False


def _pool_use(tree: ast.AST) -> list[int]:
    """Lines that make a ``Background`` or hand something to another object's ``submit``."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        named = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        submits = (
            isinstance(func, ast.Attribute)
            and func.attr == "submit"
            and not (isinstance(func.value, ast.Name) and func.value.id == "self")
        )
        if named == "Background" or submits:
            lines.append(node.lineno)
    return lines


def test_no_panel_holds_the_library_or_a_thread_pool() -> None:
    offenders = []
    for path in _desktop_sources():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if path.name not in HOLDS_THE_LIBRARY:
            if _imports_library(tree):
                offenders.append(f"{path.name}: imports core.library (type against ops)")
            for number, line in enumerate(text.splitlines(), 1):
                if re.search(r"\bbackend\.library\b|\.background\.submit\(", line):
                    offenders.append(f"{path.name}:{number}: {line.strip()}")
        if path.name not in OWNS_A_POOL:
            offenders += [f"{path.name}:{n}: a thread pool used directly" for n in _pool_use(tree)]
    assert not offenders, "go through backend.run(op) or run_local:\n" + "\n".join(offenders)


def _backend_class() -> ast.ClassDef:
    tree = ast.parse((DESKTOP / "backend.py").read_text(encoding="utf-8"))
    (backend,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Backend"]
    return backend


def test_the_backend_is_small_and_says_what_changed_on_one_signal() -> None:
    backend = _backend_class()
    assert backend.end_lineno is not None
    assert backend.end_lineno - backend.lineno + 1 < BACKEND_LINES
    signals = [
        target.id
        for node in backend.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "Signal"
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    assert signals == ["changed"]


def test_an_op_run_says_its_changes_once_after_its_result(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytestqt")
    from core.app.ops import Changes, Op
    from core.config import Settings
    from core.errors import LecternError
    from desktop.backend import Backend

    backend = Backend(Settings(home=tmp_path), watch=False)
    heard: list[object] = []
    backend.changed.connect(lambda changes: heard.append(changes))
    notices: list[str] = []
    backend.notices.posted.connect(lambda _level, text: notices.append(text))

    # Before the library is open nothing runs, and the caller is told why.
    refused: list[BaseException] = []
    assert backend.run(Op("read", lambda library, ctx: 1), on_error=refused.append) is None
    assert isinstance(refused[0], LecternError) and "starting" in refused[0].message

    # Any open library will do for ops that do not read it.
    library = object()
    monkeypatch.setattr(backend.startup, "library", library)
    seen: list[object] = []
    threads: list[threading.Thread] = []

    def work(given: object, _ctx: object) -> str:
        seen.append(given)
        threads.append(threading.current_thread())
        return "made"

    made = Op("make", work, Changes(collections=True))
    order: list[str] = []
    backend.changed.connect(lambda _c: order.append("changed"))
    with qtbot.waitSignal(backend.changed, timeout=5000):
        task = backend.run(made, on_result=lambda value: order.append(value))
    assert task is not None
    assert seen == [library] and threads[0] is not threading.main_thread()
    assert order == ["made", "changed"] and heard == [Changes(collections=True)]

    # A read changes nothing and says nothing; a failure says nothing changed either.
    read = backend.run(Op("read", lambda library, ctx: 2), on_result=lambda v: order.append(str(v)))
    assert read is not None
    qtbot.waitUntil(lambda: "2" in order, timeout=5000)

    def fail(_library: object, _ctx: object) -> None:
        raise LecternError("That collection exists already.", "Choose another name.")

    failing = backend.run(Op("make", fail, Changes(collections=True)))
    assert failing is not None
    qtbot.waitUntil(lambda: bool(notices), timeout=5000)
    assert notices == ["That collection exists already. Choose another name."]
    assert heard == [Changes(collections=True)]
    monkeypatch.undo()  # nothing to close
    backend.shutdown()
