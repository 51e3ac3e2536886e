"""Drive the real app into its main states and save a screenshot of each.

Run under a virtual X server so the window is drawn as on a desktop:

    xvfb-run -s "-screen 0 1400x900x24" .venv/bin/python docs/screenshots/make_screenshots.py [--only 10]

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

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from tests.fake_ollama import FakeOllama, Messages, unused_port  # noqa: E402

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


def main() -> int:
    from core.config import Settings
    from core.embedding import load_embedder
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

    def open_window(url: str, theme_name: str = "light", model: str = "llama3.2") -> MainWindow:
        theme = Theme(theme_name)
        theme.apply()
        backend = Backend(Settings(home=home, llm_url=url, llm_model=model), embedder=embedder)
        qsettings = QSettings(str(work / "ui.ini"), QSettings.Format.IniFormat)
        window = MainWindow(backend, theme, qsettings)
        window.resize(1360, 860)
        window.show()
        window.focus_question()
        backend.start()
        wait(lambda: backend.is_ready and backend.llm_status.state != "checking")
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
    wait(
        lambda: (
            window.library.progress_card.isVisible()
            and window.library.progress_bar.maximum() > 0
            and window.library.progress_bar.value() >= 2
        ),
        300,
    )
    shot(window, "02-indexing.png")
    wait(lambda: not window.backend.indexing, 900)
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
    results = window.conversation.items[-1]
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
    wait(lambda: window.backend.llm_status.state != "checking")
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
    dialog.adjustSize()
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

    fake.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
