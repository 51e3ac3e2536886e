"""Drive the real app into its main states and save a screenshot of each.

Run under a virtual X server so the window is drawn as on a desktop:

    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python docs/screenshots/make_screenshots.py [--only 10]

(or with ``QT_QPA_PLATFORM=offscreen`` where there is no X server). The window is shot at
1440x900; the shots named ``*-1024x700.png`` at 1024x700.

Everything is real (model, index, files) except the LLM, which is the test suite's fake
Ollama server answering with sentences copied from the retrieved sources, as a grounded
model would.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from tests.fake_ollama import FakeOllama, Messages, unused_port  # noqa: E402

SIZE = (1440, 900)  # the window of most shots
SMALL = (1024, 700)  # the small window of the *-1024x700 shots
BOUNDARY = re.compile(r"(?<=[.!?])\s+")
# A source header is one line; its attributes may contain ">" (section="A > B").
SOURCE = re.compile(
    r"<<source-(?P<tag>\w+) n=(?P<n>\d+)[^\n]*>>\n(?P<body>.*?)\n<<end-(?P=tag)>>", re.S
)


def numbered_sources(messages: Messages) -> list[tuple[int, str]]:
    text = "\n".join(str(m.get("content", "")) for m in messages)
    return [(int(m.group("n")), m.group("body")) for m in SOURCE.finditer(text)]


def sentences(text: str) -> list[str]:
    # Chunks can start mid-sentence; a grounded model quotes whole sentences.
    text = re.sub(r"^#+ .*$", "", text, flags=re.M)  # Markdown headings are not sentences
    parts = [p.lstrip("-*• ").replace("**", "") for p in BOUNDARY.split(" ".join(text.split()))]
    return [p for p in parts if 25 <= len(p) <= 400 and not p[:1].islower()]


def grounded(keywords: list[str], count: int = 3) -> Callable[[Messages], str]:
    """An answer made of the source sentences that share the most keywords, each cited."""

    def answer(messages: Messages) -> str:
        picked: list[tuple[int, int, str]] = []
        for n, text in numbered_sources(messages):
            for sentence in sentences(text):
                score = sum(k.lower() in sentence.lower() for k in keywords)
                if score:
                    picked.append((score, -n, sentence.strip()))
        picked.sort(reverse=True)
        seen: set[str] = set()
        parts = []
        for _, neg_n, sentence in picked:
            if sentence in seen:
                continue
            seen.add(sentence)
            parts.append(f"{sentence} [{-neg_n}]")
            if len(parts) == count:
                break
        return " ".join(parts) or "The documents do not contain the answer to this question."

    return answer


def ask_and_open_pdf_citation(window: Any, wait: Callable[..., bool]) -> None:
    """Send the typed question, wait for the answer, open its first PDF citation."""
    panel = window.conversation
    panel.submit()
    wait(lambda: not panel.busy, 120)
    turn = panel.last_turn()
    if turn is not None:
        pdf = next((c for c in turn.turn.citations if c.source and c.source.type == "pdf"), None)
        if pdf is not None:
            turn.open_citation(pdf.n)
            wait(lambda: window.evidence.mode in ("pdf", "text", "message"))


def scene_indexing_settings(
    open_window: Callable[[str], Any], shot: Callable[[QWidget, str], None], url: str
) -> None:
    """The Settings dialog's Indexing group, set to use at most 25 % of the CPU."""
    window = open_window(url)
    dialog = window.open_settings()
    dialog.index_when.setCurrentIndex(dialog.index_when.findData("share"))
    dialog.cpu_share.setValue(25)
    dialog.resize(dialog.sizeHint())  # adjustSize() caps a window at 2/3 of the screen
    shot(dialog, "15-indexing-settings.png")
    dialog.reject()
    window.close()


def scene_collections(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    url: str,
    folders: dict[str, Path],
) -> None:
    """A conversation kept to a collection's PDFs: the scope on the question box, with
    its menu open over the window (a popup is a window of its own: drawn on the shot)."""
    from PySide6.QtGui import QPainter

    from core.app.ops import Changes
    from core.records import Scope

    window = open_window(url)
    library = window.backend.startup.library
    for name, folder in folders.items():
        if library.collections.get(name) is None:
            library.collections.create(name, [folder])
    window.backend.announce(Changes(collections=True))
    panel = window.conversation
    wait(lambda: len(panel.choices.collections) >= len(folders))
    panel.set_scope(Scope(collections=(next(iter(folders)),), types=("pdf",)))
    ask_box = panel.input
    ask_box.setPlainText("How does ReAct combine reasoning traces with actions?")
    panel.submit()
    wait(lambda: not panel.busy, 120)
    menu = panel.show_scope_menu()
    wait(lambda: menu.isVisible() and "Manage collections…" in panel.scope_actions())
    wait(lambda: False, 0.6)  # the popup's first paint
    if not shot_wanted(shot, "12-collections.png"):
        menu.hide()
        window.close()
        return
    picture = window.grab()
    painter = QPainter(picture)
    painter.drawPixmap(menu.pos() - window.mapToGlobal(window.rect().topLeft()), menu.grab())
    painter.end()
    path = OUT / "12-collections.png"
    picture.save(str(path))
    print("saved", path.relative_to(ROOT))
    menu.hide()
    window.close()


def scene_long_claim(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    fake: FakeOllama,
) -> None:
    """A twelve-line claim from one column of a three-column Federal Register page,
    highlighted whole on the rendered page (not only its last line)."""

    from tests.desktop.test_evidence_and_layout import FAA_SENTENCE  # the claim the test checks

    def quote_the_claim(messages: Messages) -> str:
        # One claim of twelve lines, cut in two by the chunker; cited to its first part.
        for n, body in numbered_sources(messages):
            if "FAA’s review of these" in " ".join(body.split()):
                return f"{FAA_SENTENCE} [{n}]"
        return grounded(["FAA", "emergency AD", "pilot"], 2)(messages)

    fake.answer = quote_the_claim
    window = open_window(fake.url)
    panel = window.conversation
    panel.input.setPlainText(
        "What was the basis for the revised pilot procedures in the FAA's emergency AD?"
    )
    ask_and_open_pdf_citation(window, wait)
    shot(window, "16-long-claim-pdf.png")
    window.close()


def scene_small_window(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    fake: FakeOllama,
) -> None:
    """The window at 1024x700: the title, the answer, the sources and the evidence pane
    wrap or elide, nothing is cut."""
    fake.answer = grounded(["home office", "allowance", "calendar year"], 2)
    window = open_window(fake.url)
    window.resize(*SMALL)
    panel = window.conversation
    panel.input.setPlainText(
        "How much is the home office allowance per calendar year, and what may it be spent on?"
    )
    panel.submit()
    wait(lambda: not panel.busy, 120)
    turn = panel.last_turn()
    if turn is not None and turn.turn.citations:
        turn.open_citation(turn.turn.citations[0].n)
        wait(lambda: window.evidence.mode in ("pdf", "text", "message"))
    shot(window, "17-window-1024x700.png")
    window.close()


def scene_download_in_place(
    open_window: Callable[..., Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    fake: FakeOllama,
) -> None:
    """The configured model is not installed: the answer is quoted from the documents,
    and its note downloads the model right there (one bar for the whole model)."""
    window = open_window(fake.url, model="phi4-mini")
    panel = window.conversation
    panel.input.setPlainText("How much is mileage reimbursed for a private car?")
    panel.submit()
    wait(lambda: not panel.busy, 120)
    turn = panel.last_turn()
    if turn is not None and turn.turn.missing_model:
        fake.pull_delay_s = 0.25
        fake.pull_steps = 40
        panel._download(turn, turn.turn.missing_model, start=True)
        bar = turn.download_bar
        wait(lambda: bar is not None and 300 < bar.value() < 800, 60)
        shot(window, "18-download-in-place.png")
        if turn.download is not None:
            turn.download.cancel()
        wait(lambda: turn.download is None or not turn.download.running, 30)
        fake.pull_delay_s = 0.0
    window.close()


def scene_no_model_small(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
) -> None:
    """No model server, at 1024x700: the badge says "No model" in words, the answer says
    it in a short note (once in a conversation), the hint under the box is whole."""
    from tests.fake_ollama import unused_port

    window = open_window(f"http://127.0.0.1:{unused_port()}")
    window.resize(*SMALL)
    panel = window.conversation
    panel.input.setPlainText("How much is mileage reimbursed for a private car?")
    panel.submit()
    wait(lambda: not panel.busy, 120)
    turn = panel.last_turn()
    if turn is not None and turn.turn.citations:
        turn.open_citation(turn.turn.citations[0].n)
        wait(lambda: window.evidence.mode in ("pdf", "text", "message"))
    shot(window, "20-no-model-1024x700.png")
    window.close()


def scene_pdf_line_small(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    fake: FakeOllama,
) -> None:
    """A PDF citation that starts mid-line, at 1024x700: the zoom fits the whole line
    ("company password manager. Passwords are never shared…"), not only the sentence."""
    fake.answer = grounded(["never shared", "not even with IT"], 1)
    window = open_window(fake.url)
    window.resize(*SMALL)
    panel = window.conversation
    panel.input.setPlainText("May I share my password with IT?")
    ask_and_open_pdf_citation(window, wait)
    shot(window, "21-pdf-whole-line-1024x700.png")
    window.close()


def scene_five_folders(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    url: str,
    docs: Path,
) -> None:
    """Five folders in the library at 1440x900: each whole, with its counts."""
    more = {
        "Meeting notes": {
            "2024-03-board.md": "# Board meeting, March\n\nThe board approved the new "
            "travel budget and asked for a review of the on-call rota.\n",
            "2024-04-team.txt": "Team meeting, April. We agreed to move the release to May "
            "and to retire the old status page.\n",
        },
        "Contracts": {
            "cleaning-services.txt": "The cleaning contract runs for two years and can be "
            "ended with three months' notice by either party.\n",
        },
        "Recipes": {
            "bread.md": "# Sourdough\n\nFeed the starter the night before; bake at 240 °C "
            "for 20 minutes with steam, then 25 minutes without.\n",
        },
    }
    added = []
    for name, files in more.items():
        folder = docs / name
        folder.mkdir(parents=True, exist_ok=True)
        for file, text in files.items():
            (folder / file).write_text(text, encoding="utf-8")
        added.append(str(folder))
    window = open_window(url)
    window.handle_drop(added)
    wait(lambda: len(window.library._rows) >= 5, 60)
    wait(lambda: not window.backend.indexing.active, 300)
    wait(lambda: False, 1.0)  # the last counts painted
    shot(window, "22-library-five-folders.png")
    window.close()


def shot_wanted(shot: Callable[[QWidget, str], None], name: str) -> bool:
    """Whether ``--only`` asks for ``name`` (``shot`` carries the filter)."""
    only = getattr(shot, "only", [])
    return not only or name.startswith(tuple(only))


# A landlord's folder in German, for the language offer's shot (written for Lectern).
GERMAN_FOLDER = {
    "Hausordnung.txt": "Hausordnung für das Mehrfamilienhaus Lindenstraße 12. Die Ruhezeiten gelten werktags von 22 Uhr bis 6 Uhr und mittags von 13 bis 15 Uhr. Das Treppenhaus wird abwechselnd von den Mietparteien gereinigt; der Plan hängt neben dem Briefkasten. Fahrräder und Kinderwagen werden im Keller abgestellt, nicht im Flur.",
    "Nebenkostenabrechnung 2025.txt": "Die Nebenkostenabrechnung für das Jahr 2025 umfasst Heizung, Warmwasser, Müllabfuhr, Grundsteuer und Hausmeisterdienste. Nachzahlungen sind innerhalb von dreißig Tagen nach Zugang der Abrechnung fällig. Einwände gegen die Abrechnung können bis zum Ablauf von zwölf Monaten schriftlich erhoben werden.",
    "Mietvertrag Wohnung 3.txt": "Der Mietvertrag für die Wohnung im dritten Obergeschoss beginnt am 1. April. Die Kaltmiete beträgt 820 Euro, die Vorauszahlung auf die Betriebskosten 210 Euro im Monat. Die Kaution in Höhe von drei Kaltmieten kann in drei Raten gezahlt werden. Die Kündigungsfrist beträgt drei Monate zum Monatsende.",
    "Protokoll Eigentümerversammlung.txt": "Protokoll der Eigentümerversammlung vom 14. März. Beschlossen wurde die Erneuerung der Dachrinnen und die Anschaffung neuer Mülltonnen. Die Instandhaltungsrücklage wird um zwei Euro je Quadratmeter erhöht. Die nächste Versammlung findet im Herbst statt.",
    "Heizung Wartung.txt": "Die Gasheizung wird einmal im Jahr im September gewartet. Bei einem Ausfall der Heizung ist der Notdienst der Firma Wärme & Co. rund um die Uhr erreichbar. Die Heizkörper sollten vor Beginn der Heizperiode entlüftet werden, damit sie gleichmäßig warm werden.",
    "Schlüssel und Schließanlage.txt": "Verlorene Schlüssel sind sofort der Hausverwaltung zu melden. Ein Ersatzschlüssel für die Schließanlage kostet 45 Euro und wird nur gegen Vorlage des Sicherungsscheins angefertigt. Wird die Schließanlage wegen eines Verlusts ausgetauscht, trägt die verursachende Mietpartei die Kosten.",
}


def scene_language_offer(
    open_window: Callable[..., Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    work: Path,
) -> None:
    """A German folder in a library of its own: once indexed, the library panel offers the
    multilingual model with its measured benefit (no model server: the offer needs none)."""
    from tests.fake_ollama import unused_port

    folder = work / "alex" / "Documents" / "Hausverwaltung"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in GERMAN_FOLDER.items():
        (folder / name).write_text(text, encoding="utf-8")
    library = work / "german-library"
    library.mkdir(exist_ok=True)
    window = open_window(f"http://127.0.0.1:{unused_port()}", library=library)
    window.handle_drop([str(folder)])
    wait(lambda: window.library.model_offer.isVisible(), 300)
    shot(window, "19-language-offer.png")
    window.close()


def scene_file_list(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    url: str,
) -> None:
    """The library's file list: every file with its state, failed and skipped first, the
    failed one selected so its reason and next step show on the details line."""
    from desktop.file_list import COL_STATE

    window = open_window(url)
    wait(lambda: not window.backend.indexing.active, 300)
    files = window.library.open_file_list()
    wait(lambda: files.loaded, 60)
    files.resize(1180, 640)
    model = files.model
    failed = [r for r in range(model.rowCount()) if model.index(r, COL_STATE).data() == "Failed"]
    if failed:
        files.table.selectRow(failed[0])
    shot(files, "13-file-list.png")
    files.close()
    window.close()


def scene_conversations(
    open_window: Callable[[str], Any],
    shot: Callable[[QWidget, str], None],
    wait: Callable[..., bool],
    url: str,
) -> None:
    """The conversation list searched ("receipts": the matches only), one conversation
    open with its title being renamed in place (F2 or double-click)."""
    from PySide6.QtWidgets import QAbstractItemView, QLineEdit

    from desktop.main_window import SNIPPET_ROLE

    window = open_window(url)
    side = window.conversation_list
    wait(lambda: side.list.count() > 1, 30)
    side.search.setText("receipts")
    wait(lambda: side.shown_query == "receipts", 30)
    rows = [side.list.item(i) for i in range(side.list.count())]
    # Renamed: one found by its title, so those found by their answers keep their snippet.
    target = next((i for i in rows if not i.data(SNIPPET_ROLE)), rows[0] if rows else None)
    if target is not None:
        side.list.setCurrentItem(target)
        wait(lambda: bool(window.conversation.turns), 30)
        side.rename_current()
        wait(lambda: side.list.state() == QAbstractItemView.State.EditingState, 10)
        editors = [e for e in side.list.findChildren(QLineEdit) if e.isVisible()]
        if editors:
            editors[0].setText("Expense claims: receipts")
            editors[0].home(False)
    shot(window, "14-conversations.png")
    window.close()


def main() -> int:
    from core.config import Settings
    from core.embedding.models import load_embedder
    from desktop.backend import Backend
    from desktop.main_window import MainWindow
    from desktop.theme import Theme

    # `--only 04 10` refreshes just those shots (the app is still driven through them all).
    only = [a for a in sys.argv[1:] if a != "--only"]
    app = QApplication.instance() or QApplication([])
    app.setApplicationName("Lectern")
    work = Path(tempfile.mkdtemp(prefix="lectern-shots-"))
    home = work / "data"
    home.mkdir()
    os.environ["LECTERN_HOME"] = str(home)
    # A home folder of its own, so the library shows paths like ~/Documents/…
    os.environ["HOME"] = str(work / "alex")
    docs = work / "alex" / "Documents"
    handbook = docs / "Team handbook"
    shutil.copytree(ROOT / "resources" / "sample-docs", handbook)
    research = docs / "Research papers"
    research.mkdir(parents=True)
    for name in (
        "arxiv-react-paper.pdf",
        "multicolumn-latex.pdf",
        "three-column-federal-register.pdf",
        "scanned-with-ocr-layer-vicksburg.pdf",
        "google-docs-export.pdf",
        "encrypted-rc4-128.pdf",
        "scanned-non-text-searchable.pdf",
    ):
        shutil.copy(SHARED / "pdfs" / name, research / name)

    fake = FakeOllama().start()
    fake.token_delay_s = 0.01
    embedder = load_embedder()

    def wait(condition: Callable[[], bool], timeout_s: float = 120) -> bool:
        deadline = time.monotonic() + timeout_s
        loop = QEventLoop()
        poll = QTimer()
        poll.timeout.connect(
            lambda: loop.quit() if condition() or time.monotonic() > deadline else None
        )
        poll.start(30)
        if not condition():
            loop.exec()
        poll.stop()
        return condition()

    def pause(seconds: float) -> None:
        end = time.monotonic() + seconds
        wait(lambda: time.monotonic() > end, seconds + 1)

    def shot(widget: QWidget, name: str) -> None:
        if only and not name.startswith(tuple(only)):
            return
        pause(0.4)  # let layouts settle and the last repaint land
        path = OUT / name
        widget.grab().save(str(path))
        print("saved", path.relative_to(ROOT))

    shot.only = only  # type: ignore[attr-defined]

    def open_window(
        url: str, theme_name: str = "light", model: str = "llama3.2", library: Path = home
    ) -> MainWindow:
        theme = Theme(theme_name)
        theme.apply()
        backend = Backend(Settings(home=library, llm_url=url, llm_model=model), embedder=embedder)
        qsettings = QSettings(str(work / "ui.ini"), QSettings.Format.IniFormat)
        window = MainWindow(backend, theme, qsettings)
        window.resize(*SIZE)
        window.show()
        window.focus_question()
        backend.start()
        wait(lambda: backend.is_ready and backend.llm.status.state != "checking")
        return window

    def ask(window: MainWindow, question: str) -> None:
        panel = window.conversation
        panel.input.setPlainText(question)
        panel.submit()
        wait(lambda: not panel.busy, 120)

    def open_citation(window: MainWindow, which: int) -> None:
        """Click citation ``which`` (0 first, -1 last) of the latest answer, if it has one."""
        turn = window.conversation.last_turn()
        if turn is not None and turn.turn.citations:
            turn.open_citation(turn.turn.citations[which].n)
            wait(lambda: window.evidence.mode in ("text", "pdf", "message"))

    # 1. First run: nothing indexed, no Ollama: the empty state says what to do.
    window = open_window(f"http://127.0.0.1:{unused_port()}")
    shot(window, "01-first-run.png")

    # 2. Folders dropped: indexing with progress, rate and time left.
    window.handle_drop([str(research), str(handbook)])

    # Mid-run: a quarter of the way or more, the bar and its title saying the same share.
    def indexed_any() -> bool:
        snapshot = window.backend.view.snapshot
        return bool(snapshot and snapshot.documents) and not window.backend.indexing.active

    wait(
        lambda: (
            (
                window.library.progress_card.isVisible()
                and window.library.progress_bar.maximum() > 0
                and window.library.progress_bar.value() >= 250
            )
            or indexed_any()
        ),  # done before a look at it: shoot what there is
        300,
    )
    shot(window, "02-indexing.png")
    wait(lambda: not window.backend.indexing.active, 900)
    pause(1.0)
    window.library.expand_problems()
    window.close()

    # 3. An answer with its sources; a citation opened in the evidence panel.
    fake.answer = grounded(["claim", "receipt", "approve", "EUR"], 3)
    window = open_window(fake.url)
    ask(window, "What are the rules for expense claims and receipts?")
    open_citation(window, -1)
    shot(window, "03-answer-with-evidence.png")

    # 4. A PDF citation: the rendered page with the supporting sentence highlighted.
    fake.answer = grounded(["interleav", "reasoning traces", "actions", "ReAct"], 2)
    window.new_conversation()
    ask(window, "How does ReAct combine reasoning traces with actions?")
    turn = window.conversation.last_turn()
    if turn is not None:
        pdf = next((c for c in turn.turn.citations if c.source and c.source.type == "pdf"), None)
        if pdf is not None:
            turn.open_citation(pdf.n)
            wait(lambda: window.evidence.mode in ("pdf", "text", "message"))
    shot(window, "04-pdf-highlight.png")

    # 11. A scanned page read by OCR: the citation lit on the words of the page image.
    fake.answer = grounded(["non-text-searchable", "image rather than", "plain text"], 1)
    window.new_conversation()
    ask(window, "Why can the text of a non-text-searchable PDF not be selected?")
    turn = window.conversation.last_turn()
    if turn is not None:
        scan = next(
            (
                c
                for c in turn.turn.citations
                if c.source and c.source.path.endswith("scanned-non-text-searchable.pdf")
            ),
            None,
        )
        if scan is not None:
            turn.open_citation(scan.n)
            wait(lambda: window.evidence.mode in ("pdf", "text", "message"))
    shot(window, "11-scanned-page-ocr.png")
    if only and all(n.startswith(("01", "02", "03", "04", "11")) for n in only):
        window.close()
        fake.stop()
        shutil.rmtree(work, ignore_errors=True)
        return 0  # nothing later was asked for

    # 5. Search-only mode: ranked passages with the matching words highlighted.
    window.new_conversation()
    window.conversation.set_search_mode(True)
    window.conversation.input.setPlainText("severity levels response time")
    window.conversation.submit()
    wait(lambda: not window.conversation.busy)
    # The Search tab's own list (not the transcript), headed "Search", best result first.
    results = window.conversation.search_results
    wait(lambda: results is not None and not results.loading, 60)
    cards = getattr(results, "cards", [])
    if cards:
        cards[0].clicked.emit()
        wait(lambda: window.evidence.mode in ("text", "pdf", "message"))
    shot(window, "05-search-only.png")
    window.conversation.set_search_mode(False)
    window.close()

    # 6. Errors where they happen: the model is not installed (with the fix at hand),
    #    and a stream cut mid-answer keeps the partial answer, marked incomplete.
    window = open_window(fake.url)
    fake.answer = grounded(["allowance", "paid on top", "€50", "22:00"], 3)
    fake.die_after_tokens = 34
    ask(window, "How is on-call work paid?")
    fake.die_after_tokens = None
    first = window.conversation.last_turn()
    window.backend.apply_settings(window.backend.settings.with_changes(llm_model="mistral"))
    wait(lambda: window.backend.llm.status.state != "checking")
    ask(window, "Which error codes mean the request can be retried?")
    if first is not None and first.turn.citations:
        first.open_citation(first.turn.citations[0].n)
        wait(lambda: window.evidence.mode in ("text", "pdf", "message"))
    shot(window, "06-errors-inline.png")
    window.backend.apply_settings(window.backend.settings.with_changes(llm_model="llama3.2"))
    window.close()

    # 7. No model server: the answer is extracted from the documents, and says so.
    window = open_window(f"http://127.0.0.1:{unused_port()}")
    ask(window, "How much is mileage reimbursed for a private car?")
    open_citation(window, 0)
    shot(window, "07-search-only-answer.png")
    window.close()

    # 8. Settings, while a model downloads.
    fake.pull_delay_s = 0.25
    fake.pull_steps = 40
    window = open_window(fake.url)
    dialog = window.open_settings(start_pull="qwen2.5:3b")
    wait(lambda: dialog.model.count() > 0)
    wait(lambda: 200 < dialog.pull_progress.value() < 900, 60)
    dialog.resize(dialog.sizeHint())  # adjustSize() caps a window at 2/3 of the screen
    shot(dialog, "08-settings-pull.png")
    dialog.reject()
    window.close()

    # 9. Dark mode.
    fake.pull_delay_s = 0.0
    fake.answer = grounded(["SEV1", "acknowledge", "status page", "15 minutes"], 3)
    window = open_window(fake.url, theme_name="dark")
    ask(window, "What must the primary do for a SEV1 incident?")
    open_citation(window, 0)
    shot(window, "09-dark.png")
    window.close()

    # 10. About, on the third-party licences the bundle carries.
    window = open_window(fake.url)
    about = window.open_about()
    about.tabs.setCurrentIndex(1)
    wait(lambda: "includes the following" in about.notices.toPlainText())
    about.filter.setText("PySide6")
    shot(about, "10-about-licences.png")
    about.reject()
    window.close()

    # 15. Settings > Indexing: at most a quarter of the CPU.
    scene_indexing_settings(open_window, shot, fake.url)

    # 12. Collections: a conversation kept to the research papers' PDFs.
    fake.answer = grounded(["interleav", "reasoning traces", "actions", "ReAct"], 2)
    scene_collections(open_window, shot, wait, fake.url, {"Papers": research, "Handbook": handbook})

    # 13. The library's file list, failed and skipped first.
    scene_file_list(open_window, shot, wait, fake.url)

    # 14. Conversations: the list searched, a title renamed in place.
    scene_conversations(open_window, shot, wait, fake.url)

    # 16. A long cited claim highlighted whole on its PDF page.
    scene_long_claim(open_window, shot, wait, fake)

    # 17. The window at 1024x700.
    scene_small_window(open_window, shot, wait, fake)

    # 18. A missing model downloaded from the answer's own note.
    scene_download_in_place(open_window, shot, wait, fake)

    # 20. No model server, at 1024x700: said in words, once.
    scene_no_model_small(open_window, shot, wait)

    # 21. A PDF citation's whole line, at 1024x700.
    scene_pdf_line_small(open_window, shot, wait, fake)

    # 22. Five folders in the library (last: the other shots keep the two folders).
    scene_five_folders(open_window, shot, wait, fake.url, docs)

    # 19. A German library of its own: the multilingual model offered.
    scene_language_offer(open_window, shot, wait, work)

    fake.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
