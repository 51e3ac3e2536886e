"""The desktop app as a demanding user found it (issue 12): each defect, driven through the
window over a real library (real model, real DuckDB, real files; only the LLM is faked).

A long cited claim is highlighted whole on its PDF page; a search hit lights only the
searched words and quotes the card's snippet; text wraps or elides instead of being cut;
the smaller ones (placeholders, Open original without a launcher, Markdown rendered,
headings kept apart from sentences, the no-model badge's name, a removed folder or a
deleted file leaving the open answer at once, a model download in one bar and in words,
Markdown search hits read as text); a missing model quotes the documents and downloads in
the answer's note.
"""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtGui
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtWidgets import QWidget

from core.config import Settings
from desktop.main_window import MainWindow
from tests.desktop import test_window as base
from tests.desktop.test_window import ask
from tests.fake_ollama import FakeOllama, Messages, sources_in, unused_port

# the window over a real library: model loading and indexing: not in `make test-fast`.
pytestmark = pytest.mark.slow

# The desktop tests' fixtures: a window on a fresh or copied library, and a library with
# the sample documents indexed once per module.
open_window = base.open_window
indexed = base.indexed

FAA_PDF = "three-column-federal-register.pdf"
# Twelve lines of one column of page 2, set in three columns; the chunker splits it.
FAA_SENTENCE = (
    "The FAA’s review of these flights and associated risk assessments provided the basis "
    "for the revised pilot procedures contained in the interim action of the FAA’s "
    "emergency AD; specifically, the rationale was that if pilots were provided awareness "
    "of the airplane and flightdeck effects of this specific failure scenario and were "
    "provided appropriate instructions via the emergency AD, this would enable appropriate "
    "pilot response to the erroneously high AOA failure scenario for the period of time "
    "needed to fully eliminate this unsafe condition with a software revision to the "
    "flight control computers."
)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def faa_indexed(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Path:
    """A library holding the three-column Federal Register PDF: its home folder."""
    from core.library import Library
    from tests.conftest import SHARED_DATA

    source = SHARED_DATA / "pdfs" / FAA_PDF
    if not source.exists():
        pytest.skip(f"evaluation data not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp("faa")
    folder = root / "rules"
    folder.mkdir()
    shutil.copy(source, folder / FAA_PDF)
    home = root / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([folder])
    return home


def page_line_rects(pdf: Path, page: int, sentence: str) -> list[QRectF]:
    """The rectangles QtPdf gives the lines of ``sentence`` on ``page`` (1-based)."""
    from PySide6.QtPdf import QPdfDocument

    from desktop.locate import locate

    doc = QPdfDocument(None)
    doc.load(str(pdf))
    try:
        text = doc.getAllText(page - 1).text()
        found = locate(sentence, text)
        assert found is not None
        start, end = found
        selection = doc.getSelectionAtIndex(page - 1, start, end - start)
        return [polygon.boundingRect() for polygon in selection.bounds()]
    finally:
        doc.close()


def covered(line: QRectF, rects: list[QRectF]) -> bool:
    """Most of ``line``'s width lies inside highlighted rectangles on its row."""
    middle = line.center().y()
    inside = 0.0
    for r in rects:
        if r.top() - 1 <= middle <= r.bottom() + 1:
            inside += max(0.0, min(r.right(), line.right()) - max(r.left(), line.left()))
    return inside >= 0.8 * line.width()


# --- 3. a long cited claim is highlighted whole ---------------------------------------------


def test_a_long_cited_claim_is_highlighted_whole_across_its_lines(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    faa_indexed: Path,
    tmp_path: Path,
) -> None:
    def cite_the_sentence(messages: Messages) -> str:
        sources = [flat(s) for s in sources_in(messages)]
        n = next(i for i, s in enumerate(sources, 1) if "FAA’s review of these" in s)
        return f"{FAA_SENTENCE} [{n}]"

    fake_ollama.answer = cite_the_sentence
    window = open_window(url=fake_ollama.url, copy_from=faa_indexed)
    turn = ask(
        qtbot,
        window,
        "What did the FAA's review of the flights and risk assessments provide the basis for?",
    )
    view = turn.turn
    assert view.mode == "generated" and len(view.citations) == 1
    citation = view.citations[0]
    quote = flat(citation.quote)
    # The whole sentence is the support, though the chunker cut it in two.
    assert quote.startswith("The FAA’s review of these flights"), quote
    assert quote.endswith("with a software revision to the flight control computers."), quote
    assert "flight control computers" in turn.copy_markdown()

    turn.open_citation(citation.n)
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "pdf", timeout=30_000)
    assert evidence.located and evidence.pdf_page == 2
    # The quote box holds the whole claim (shortened on screen, whole in its tooltip).
    assert "flight control computers" in evidence.quote.toolTip()
    pdf = Path(view.sources[citation.n - 1].path)
    lines = page_line_rects(pdf, 2, FAA_SENTENCE)
    assert len(lines) >= 10  # the sentence is set on a dozen lines
    rects = evidence.pdf_view.canvas.rects
    assert all(covered(line, rects) for line in lines), [
        (round(line.top()), covered(line, rects)) for line in lines
    ]


# --- 4. a search hit lights its words, and quotes the card's snippet -----------------------


def searched(word: str, query: str) -> bool:
    """``word`` is one of the query's words, give or take an ending ("limits", "limit")."""
    from core.text import STOPWORDS

    asked = [w for w in re.findall(r"\w+", query.lower()) if w not in STOPWORDS]
    return any(word.lower()[:4] == w[:4] for w in asked)


def search_for(qtbot: Any, window: MainWindow, query: str) -> Any:
    """The Search tab's results for ``query``, once its cards are shown."""
    panel = window.conversation
    panel.set_search_mode(True)
    panel.input.setPlainText(query)
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    results = panel.search_results
    qtbot.waitUntil(lambda: not results.loading and bool(results.cards), timeout=20_000)
    return results


def card_snippet(card: Any) -> str:
    """The passage a search card shows, as plain text."""
    shown = card.label.text().split('margin-top:4px;">')[1]
    return flat(html.unescape(re.sub(r"<[^>]+>", "", shown)))


def quoted(evidence: Any) -> str:
    """The evidence panel's quote box, as plain text without its quotation marks."""
    return flat(html.unescape(re.sub(r"<[^>]+>", "", evidence.quote.text()))).strip("“”")


def test_a_search_hit_highlights_only_the_searched_words_and_quotes_its_snippet(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url="", copy_from=indexed[0])
    query = "corporate card monthly limit"
    results = search_for(qtbot, window, query)
    card = results.cards[0]
    card.clicked.emit()
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)
    lit = evidence.highlighted_text()
    assert lit and all(searched(w, query) for w in lit), lit
    # Only words: no highlight runs over a line or a table cell.
    assert all(re.fullmatch(r"\w+", w) for w in lit), lit
    # The quote box shows the passage the card showed.
    assert quoted(evidence) == card_snippet(card)


def test_a_pdf_search_hit_highlights_only_the_searched_words(
    qtbot: Any, open_window: Callable[..., MainWindow], faa_indexed: Path
) -> None:
    from PySide6.QtPdf import QPdfDocument

    window = open_window(url="", copy_from=faa_indexed)
    panel = window.conversation
    panel.set_search_mode(True)
    query = "flightcrew awareness of the failure"
    panel.input.setPlainText(query)
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    results = panel.search_results
    qtbot.waitUntil(lambda: not results.loading and bool(results.cards), timeout=20_000)
    hit = results.hits[0]
    results.cards[0].clicked.emit()
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "pdf", timeout=30_000)
    rects = evidence.pdf_view.canvas.rects
    assert rects and evidence.located
    doc = QPdfDocument(None)
    doc.load(hit.path)
    try:
        page = (evidence.pdf_page or 1) - 1
        # The text under each box, read along its middle.
        lit = [
            doc.getSelection(
                page,
                QPointF(r.left() + 0.5, r.center().y()),
                QPointF(r.right() - 0.5, r.center().y()),
            ).text()
            for r in rects
        ]
    finally:
        doc.close()
    # Each box holds a searched word (it may catch a neighbour's edge, never a line).
    for text in lit:
        words = re.findall(r"\w+", text)
        assert 1 <= len(words) <= 2 and any(searched(w, query) for w in words), lit


# --- 6. text wraps or elides, never cut -----------------------------------------------------


def cut_texts(root: QWidget) -> list[str]:
    """Visible labels and buttons whose text does not fit them: a wrapped label shorter
    than its text needs, a one-line label or a button narrower than its words. Labels
    that elide themselves (with the full text in a tooltip) and icon-only buttons pass."""
    from PySide6.QtWidgets import QAbstractButton, QLabel, QToolButton

    from desktop.widgets import ElidedLabel

    cut: list[str] = []
    for label in root.findChildren(QLabel):
        if not label.isVisibleTo(root) or not label.text() or label.width() <= 1:
            continue
        if isinstance(label, ElidedLabel):
            if label.text() != label.full_text() and label.toolTip() != label.full_text():
                cut.append(f"elided without tooltip: {label.full_text()[:50]}")
        elif label.wordWrap():
            if label.heightForWidth(label.width()) > label.height() + 1:
                cut.append(f"wrapped label cut: {label.text()[:50]}")
        else:
            plain = label.textFormat() == Qt.TextFormat.PlainText or not QtGui.Qt.mightBeRichText(
                label.text()
            )
            needed = label.fontMetrics().horizontalAdvance(label.text())
            if plain and needed > label.contentsRect().width() + 1:
                cut.append(f"one-line label cut: {label.text()[:50]}")
    for button in root.findChildren(QAbstractButton):
        if not button.isVisibleTo(root) or not button.text() or button.width() <= 1:
            continue
        if isinstance(button, QToolButton) and (
            button.toolButtonStyle() == Qt.ToolButtonStyle.ToolButtonIconOnly
        ):
            continue
        icon_width = 0 if button.icon().isNull() else button.iconSize().width() + 4
        if button.fontMetrics().horizontalAdvance(button.text()) + icon_width > button.width():
            cut.append(f"button cut: {button.text()}")
    return cut


def overflowing(panel: Any) -> list[str]:
    """Labels of the conversation that reach past the right edge of its visible column."""
    from PySide6.QtWidgets import QLabel

    viewport = panel.scroll_area.viewport()
    out = []
    for label in panel.column.findChildren(QLabel):
        if label.isVisibleTo(panel.column):
            right = label.mapTo(viewport, QPoint(label.width(), 0)).x()
            if right > viewport.width() + 1:
                out.append(f"{label.objectName()}: {label.text()[:40]} ends at {right}")
    return out


def settle(qtbot: Any, ms: int = 400) -> None:
    qtbot.wait(ms)


def test_text_wraps_or_elides_at_1024x700_and_in_narrow_panes(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", copy_from=indexed[0])
    window.resize(1024, 700)
    # The evidence pane at its narrowest.
    sizes = window.split.sizes()
    window.split.setSizes([sizes[0], sum(sizes) - sizes[0] - 320, 320])
    question = "How much is the home office allowance per calendar year, and what is it for?"
    turn = ask(qtbot, window, question)
    assert turn.turn.mode == "extractive"
    turn.open_citation(turn.turn.citations[0].n)
    qtbot.waitUntil(lambda: window.evidence.mode == "text", timeout=20_000)
    settle(qtbot)
    panel = window.conversation
    assert overflowing(panel) == []
    # The title keeps room to be read ("W…" was all it showed).
    shown = panel.title.text().rstrip("…")
    assert len(shown) >= 20 and question.startswith(shown), panel.title.text()
    assert cut_texts(window) == []

    # Search cards in a narrow column.
    panel.set_search_mode(True)
    panel.input.setPlainText("home office allowance equipment")
    qtbot.keyClick(panel.input, Qt.Key.Key_Return)
    results = panel.search_results
    qtbot.waitUntil(lambda: not results.loading and bool(results.cards), timeout=20_000)
    qtbot.waitUntil(lambda: len(results.cards) == len(results.hits), timeout=10_000)
    settle(qtbot)
    assert overflowing(panel) == []
    assert cut_texts(window) == []

    # The pause line wraps in the sidebar rather than ending in "…already searchab".
    assert window.library.progress_detail.wordWrap()

    # The Settings error grows the dialog instead of ending in "…or check the".
    dialog = window.open_settings()
    qtbot.waitUntil(lambda: "not running" in dialog.server_status.text(), timeout=20_000)
    settle(qtbot)
    assert cut_texts(dialog) == []
    dialog.reject()


# --- 8. the smaller ones --------------------------------------------------------------------


def on_screen(window: MainWindow) -> Any:
    """What the window's backing store holds: what the person sees, not a fresh paint."""
    return window.screen().grabWindow(window.winId()).toImage()


def test_switching_modes_shows_the_new_modes_placeholder(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url="", copy_from=indexed[0])
    panel = window.conversation
    settle(qtbot)
    for search in (True, False):
        panel.set_search_mode(search)
        settle(qtbot, 300)
        shown = on_screen(window)
        panel.input.viewport().repaint()  # what it should show
        settle(qtbot, 100)
        assert on_screen(window) == shown, f"stale placeholder after switching to {search=}"
    assert panel.input.placeholderText().startswith("Ask")


def test_open_original_without_a_launcher_says_so_with_the_path(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    indexed: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from PySide6.QtGui import QDesktopServices, QGuiApplication

    window = open_window(url="", copy_from=indexed[0])
    turn = ask(qtbot, window, "How much is the home office allowance per calendar year?")
    turn.open_citation(turn.turn.citations[0].n)
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)
    # A system with no file launcher: nothing on PATH, and Qt's answer there.
    empty = tmp_path / "no-programs"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: False))
    evidence.open_button.click()
    path = turn.turn.citations[0].source.path  # type: ignore[union-attr]
    assert evidence.open_failed.isVisible()
    assert path in evidence.open_failed_text.text()
    assert "could not open" in evidence.open_failed_text.text()
    evidence.copy_path_button.click()
    assert QGuiApplication.clipboard().text() == path


def test_markdown_is_rendered_in_the_evidence_panel_with_the_span_lit(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url="", copy_from=indexed[0])
    turn = ask(qtbot, window, "How much is the on-call allowance per week as primary?")
    citation = next(c for c in turn.turn.citations if c.source and c.source.type == "md")
    turn.open_citation(citation.n)
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)
    shown = evidence.text_view.toPlainText()
    assert "**" not in shown and "\n## " not in shown and "Compensation" in shown
    # The headings are set as headings, not as lines starting with "#".
    document = evidence.text_view.document()
    levels = {document.findBlockByNumber(i).blockFormat().headingLevel() for i in range(50)}
    assert levels & {1, 2}
    lit = " ".join(evidence.highlighted_text())
    letters = re.sub(r"\W", "", citation.quote)
    assert lit and re.sub(r"\W", "", lit) == letters, (lit, citation.quote)


def test_extractive_answers_keep_headings_out_of_sentences(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url=f"http://127.0.0.1:{unused_port()}", copy_from=indexed[0])
    turn = ask(qtbot, window, "What must company laptops and phones have?")
    view = turn.turn
    assert view.mode == "extractive"
    # security-policy.pdf sets "2 Laptops and phones" on the line above the sentence.
    assert "Laptops and phones Company" not in view.answer
    assert "Company laptops use full-disk encryption" in view.answer
    assert all(not flat(c.quote).startswith("2 Laptops") for c in view.citations)


def test_the_no_model_badge_is_not_called_search(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    from PySide6.QtWidgets import QAbstractButton, QLabel

    window = open_window(url=f"http://127.0.0.1:{unused_port()}", copy_from=indexed[0])
    pill = window.conversation.llm_pill
    qtbot.waitUntil(lambda: window.backend.llm.status.state == "unreachable", timeout=20_000)
    assert pill.text() == "No model · quoting passages"
    assert window.conversation.search_mode.text() == "Search"
    words = [w.text() + " " + w.toolTip() for w in window.findChildren(QLabel)]
    words += [w.text() + " " + w.toolTip() for w in window.findChildren(QAbstractButton)]
    assert not [w for w in words if "search-only" in w.casefold()]


def test_removing_a_folder_drops_its_sources_from_the_open_answer_at_once(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    window = open_window(url="", copy_from=indexed[0])
    turn = ask(qtbot, window, "How much is the home office allowance per calendar year?")
    view = turn.turn
    assert view.sources and view.citations
    quote = flat(view.citations[0].quote)
    assert quote
    turn.open_citation(view.citations[0].n)
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)

    window.backend.indexing.remove_folder(str(indexed[1]))
    qtbot.waitUntil(
        lambda: (
            window.backend.view.snapshot is not None and not window.backend.view.snapshot.folders
        ),
        timeout=30_000,
    )
    settle(qtbot)
    assert all(s.removed and not s.text for s in turn.turn.sources)
    assert all(not c.quote for c in turn.turn.citations)
    assert "removed from the library" in turn.sources.text()
    markdown = turn.copy_markdown()
    assert "**Sources**" in markdown and quote[:40] not in markdown.split("**Sources**")[1]
    # The evidence panel lets go of the document too.
    assert evidence.mode == "message" and "no longer available" in evidence.message.text()
    assert quote[:40] not in flat(evidence.quote.text())


def test_a_missing_model_quotes_the_documents_then_downloads_in_place(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
) -> None:
    """Defect 5: a missing model gave "No answer". Now the answer is quoted from the
    documents, and the note's Download fetches the model right there (one bar for the
    whole model, no digests), then offers Ask again, which gets a written answer."""
    from PySide6.QtWidgets import QPushButton

    window = open_window(url=fake_ollama.url, model="mistral", copy_from=indexed[0])
    assert window.backend.llm.status.state == "model_missing"
    turn = ask(qtbot, window, "How much is mileage reimbursed per km?")
    view = turn.turn
    assert view.error is None and not turn.error_box.isVisible()
    assert view.mode == "extractive" and "0.30" in view.answer and view.citations
    assert view.missing_model == "mistral" and "No answer" not in turn.badge.text()

    def buttons() -> dict[str, QPushButton]:
        return {b.text(): b for b in turn.findChildren(QPushButton) if b.isVisibleTo(turn)}

    assert "Download mistral" in buttons() and "Choose another model…" in buttons()
    fake_ollama.pull_delay_s = 0.05
    fake_ollama.pull_steps = 8
    buttons()["Download mistral"].click()
    assert window.settings_dialog is None  # in place, not in a dialog
    bar = turn.download_bar
    assert bar is not None and turn.download_text is not None and "Cancel" in buttons()
    values: list[int] = []
    words: list[str] = []
    bar.valueChanged.connect(values.append)
    assert turn.download is not None
    turn.download.progressed.connect(lambda status: words.append(status.text))
    qtbot.waitUntil(lambda: turn.download_outcome == "done", timeout=30_000)
    assert "mistral:latest" in fake_ollama.models
    # One bar for the model: it moved several times and never went back for a new layer.
    assert len(set(values)) > 2 and values == sorted(values), values
    assert words and not [w for w in words if re.search(r"[0-9a-f]{12}", w)], words
    assert any("Downloading mistral" in w and " of " in w for w in words), words
    assert "Ask again" in buttons()
    qtbot.waitUntil(lambda: window.backend.llm.status.ready, timeout=20_000)

    buttons()["Ask again"].click()
    panel = window.conversation
    qtbot.waitUntil(lambda: panel.last_turn() is not turn, timeout=10_000)
    again = panel.last_turn()
    assert again is not None
    qtbot.waitUntil(lambda: not panel.busy and not again.turn.streaming, timeout=60_000)
    assert again.turn.error is None and again.turn.mode == "generated"


def test_settings_download_shows_one_bar_in_words_and_the_models_sizes(
    qtbot: Any,
    open_window: Callable[..., MainWindow],
    fake_ollama: FakeOllama,
    indexed: tuple[Path, Path],
) -> None:
    """Defect 8: the download showed raw layer digests and its bar restarted for every
    layer; the model list showed no sizes."""
    window = open_window(url=fake_ollama.url, model="mistral", copy_from=indexed[0])
    fake_ollama.pull_delay_s = 0.05
    fake_ollama.pull_steps = 8
    dialog = window.open_settings(start_pull="mistral")
    values: list[int] = []
    words: list[str] = []
    dialog.pull_progress.valueChanged.connect(values.append)
    # A label has no signal for its text: sample it while the download runs.
    from PySide6.QtCore import QTimer

    timer = QTimer()
    timer.timeout.connect(lambda: words.append(dialog.pull_status.text()))
    timer.start(20)
    qtbot.waitUntil(lambda: dialog.pull_task is None, timeout=30_000)
    timer.stop()
    assert "ready to use" in dialog.pull_status.text()
    assert dialog.pull_progress.value() == 1000
    assert len(set(values)) > 2 and values == sorted(values), values
    assert not [w for w in words if re.search(r"[0-9a-f]{12}", w)], words
    assert any("Downloading mistral" in w for w in words), words
    qtbot.waitUntil(lambda: dialog.model.count() >= 2, timeout=20_000)
    items = [dialog.model.itemText(i) for i in range(dialog.model.count())]
    assert "llama3.2:latest · 2.0 GB" in items, items
    dialog.model.setCurrentIndex(items.index("llama3.2:latest · 2.0 GB"))
    assert dialog.form_settings().llm_model == "llama3.2:latest"
    dialog.reject()


def test_a_markdown_search_hit_reads_as_text_not_markup(
    qtbot: Any, open_window: Callable[..., MainWindow], indexed: tuple[Path, Path]
) -> None:
    """Search cards showed a Markdown file's raw source (``**Monday at 10:00 CET**``,
    ``- **Primary**:``); they show it as it reads, and the quote box the same words."""
    window = open_window(url="", copy_from=indexed[0])
    results = search_for(qtbot, window, "weekly rota handover Monday primary secondary")
    cards = [c for c, h in zip(results.cards, results.hits, strict=False) if h.path.endswith(".md")]
    assert cards, [h.path for h in results.hits]
    card = cards[0]
    card_text = card_snippet(card)
    assert "Monday at 10:00 CET" in card_text, card_text
    assert "**" not in card_text and "##" not in card_text, card_text
    card.clicked.emit()
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)
    assert quoted(evidence) == card_text


def test_a_deleted_file_drops_its_sources_from_the_open_answer(
    qtbot: Any, open_window: Callable[..., MainWindow], tmp_path: Path, embedder: object
) -> None:
    """Defect 8: removing one file (not its whole folder) left its text in the answer on
    screen until the conversation was reopened."""
    from core.library import Library
    from tests.conftest import SAMPLE_DOCS

    folder = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, folder)
    home = tmp_path / "home"
    home.mkdir()
    with Library(Settings(home=home), embedder=embedder) as lib:  # type: ignore[arg-type]
        lib.index([folder])
    window = open_window(url="", home=home)
    turn = ask(qtbot, window, "How much is the home office allowance per calendar year?")
    view = turn.turn
    cited = view.citations[0].source
    assert cited is not None and cited.text
    gone = Path(cited.path)
    quote = flat(view.citations[0].quote)
    turn.open_citation(view.citations[0].n)
    evidence = window.evidence
    qtbot.waitUntil(lambda: evidence.mode == "text", timeout=20_000)

    gone.unlink()
    window.backend.indexing.rescan()
    qtbot.waitUntil(
        lambda: all(s.removed for s in turn.turn.sources if s.path == str(gone)),
        timeout=30_000,
    )
    settle(qtbot)
    kept = [s for s in turn.turn.sources if s.path != str(gone)]
    assert all(s.text and not s.removed for s in kept)
    assert all(not c.quote for c in turn.turn.citations if c.source and c.source.path == str(gone))
    assert "removed from the library" in turn.sources.text()
    assert quote[:40] not in turn.copy_markdown().split("**Sources**")[1]
    assert evidence.mode == "message" and "no longer available" in evidence.message.text()
