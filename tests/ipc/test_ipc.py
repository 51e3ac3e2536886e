"""Read-only commands beside a writer (core/ipc/): while ``lectern watch`` or
``lectern index`` holds the library, ``lectern search``, ``status`` and ``ask`` run in
other processes and are answered by the writer over its local socket, printing what
they would print on their own.

Real processes throughout: the writer is ``python -m core watch`` (or ``index``) with
the real model and DuckDB, the commands are ``python -m core ...`` beside it, and only
the model server is faked (tests/fake_ollama.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import ipc
from core.cli.common import ANSWERED_REMOTELY
from core.config import Settings
from core.library import Library
from tests.conftest import REPO, SAMPLE_DOCS
from tests.fake_ollama import FakeOllama
from tests.helpers import cli, lectern_env

pytestmark = pytest.mark.skipif(not ipc.supported(), reason="no AF_UNIX sockets here")
# The start of a request in this version of the protocol.
V = b'{"v": %d, ' % ipc.PROTOCOL

BUSY = "Another Lectern process is using the library"
HIT_KEYS = {
    "chunk_id",
    "document",
    "title",
    "type",
    "page",
    "page_end",
    "location",
    "score",
    "text",
    "start",
    "end",
    "heading_path",
    "bm25_rank",
    "dense_rank",
    "reranked",
}


def signal_dispositions(pid: int) -> str:
    """Whether a child blocks, ignores or catches signals (Linux's masks), for a child
    that did not stop on Ctrl-C: one started with Ctrl-C ignored or blocked inherits it."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "signal masks unknown"
    return ", ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def as_a_terminal_job() -> None:
    """Run in a child before it starts: Ctrl-C's signal as a terminal's foreground job has
    it. A suite started in the background (`make test &` in a script, nohup) hands its
    children Ctrl-C ignored, which is the shell's rule, not what these tests test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


TERMINAL_JOB = as_a_terminal_job if os.name == "posix" else None


class Writer:
    """``python -m core <args>`` holding the library, its output in files (no pipe to
    fill up and stall it)."""

    def __init__(self, home: Path, *args: str) -> None:
        self.home = home
        self.out = home.parent / f"writer-{time.monotonic_ns()}.out"
        self.err = self.out.with_suffix(".err")
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "core", *args],
                cwd=REPO,
                env=lectern_env(home, PYTHONFAULTHANDLER="1"),  # see stop()
                stdout=out,
                stderr=err,
                preexec_fn=TERMINAL_JOB,
            )

    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.out.read_text():
            assert self.proc.poll() is None, self.output()[-3000:]
            assert time.monotonic() < deadline, self.output()[-3000:]
            time.sleep(0.1)

    def wait_serving(self, timeout: float = 300) -> ipc.RemoteLibrary:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.output()[-3000:]
            remote = ipc.connect(self.home)
            if remote is not None:
                return remote
            assert time.monotonic() < deadline, self.output()[-3000:]
            time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            state = signal_dispositions(self.proc.pid)
            self.proc.send_signal(signal.SIGABRT)  # its threads' stacks, to the error file
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=60)
            raise AssertionError(
                f"the writer did not stop on Ctrl-C ({state}):\n" + self.err.read_text()[-6000:]
            ) from None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Writer]:
    """``lectern watch`` over a copy of the sample documents, serving beside it."""
    root = tmp_path_factory.mktemp("ipc")
    shutil.copytree(SAMPLE_DOCS, root / "docs")
    (root / "home").mkdir()
    writer = Writer(root / "home", "watch", str(root / "docs"), "--reconcile", "0")
    try:
        writer.wait_for("Watching")
        writer.wait_serving()
        yield writer
    finally:
        writer.stop()


def raw(path: Path, payload: bytes) -> list[dict[str, Any]]:
    """What the server replies to ``payload`` sent as is."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(str(path))
        sock.sendall(payload)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return [json.loads(line) for line in data.decode().splitlines()]


def served_socket(home: Path) -> Path:
    record = json.loads(ipc.record_path(home).read_text())
    return Path(record["socket"])


# --- beside `lectern watch` -------------------------------------------------------------


def test_status_beside_watch(watched: Writer) -> None:
    result = cli(watched.home, "status", "--json")
    assert result.returncode == 0, result.stderr
    assert ANSWERED_REMOTELY in result.stderr and "Traceback" not in result.stderr
    status = json.loads(result.stdout.splitlines()[-1])
    assert status["counts"]["indexed"] == 5 and status["chunks"] > 0
    assert [f["path"] for f in status["folders"]] == [str(watched.home.parent / "docs")]
    assert {d["path"].rsplit("/", 1)[-1] for d in status["documents"]} >= {
        "travel-policy.html",
        "on-call-handbook.md",
    }

    text = cli(watched.home, "status")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"Data folder: {watched.home}\n")
    assert "5 indexed" in text.stdout


def test_search_beside_watch(watched: Writer) -> None:
    result = cli(watched.home, "search", "receipts required for expenses", "--json", "-k", "3")
    assert result.returncode == 0, result.stderr
    assert ANSWERED_REMOTELY in result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["query"] == "receipts required for expenses" and found["mode"] == "hybrid"
    assert 1 <= len(found["results"]) <= 3
    assert all(set(hit) == HIT_KEYS for hit in found["results"])
    assert found["results"][0]["document"].endswith("expense-limits-note.txt")

    # Filters as the command takes them: a folder relative to where it runs, a type.
    docs = watched.home.parent / "docs"
    only_md = cli(
        watched.home, "search", "rota", "--json", "--folder", "docs", "--type", "md",
        cwd=watched.home.parent,
    )  # fmt: skip
    assert only_md.returncode == 0, only_md.stderr
    hits = json.loads(only_md.stdout.splitlines()[-1])["results"]
    assert hits and all(h["document"] == str(docs / "on-call-handbook.md") for h in hits)

    keyword = cli(watched.home, "search", "nightly hotel cap", "--mode", "bm25")
    assert keyword.returncode == 0, keyword.stderr
    assert keyword.stdout.startswith(f"[1] {docs / 'travel-policy.html'}")
    assert "(score " in keyword.stdout.splitlines()[0]


def test_ask_beside_watch(watched: Writer, llm: FakeOllama) -> None:
    chats = len(llm.requests_to("/api/chat"))
    host = f"127.0.0.1:{llm.port}"  # the asking command's server, not the writer's
    result = cli(
        watched.home, "ask", "How much is the nightly hotel cap?", "--json", OLLAMA_HOST=host
    )
    assert result.returncode == 0, result.stderr
    assert ANSWERED_REMOTELY in result.stderr
    answer = json.loads(result.stdout.splitlines()[-1])
    assert answer["mode"] == "generated" and answer["answer"]
    assert answer["citations"] and answer["citations"][0]["quote"]
    assert isinstance(answer["conversation"], int)
    assert len(llm.requests_to("/api/chat")) > chats

    # Text: the answer streamed, then the sources; a follow-up continues the conversation.
    text = cli(
        watched.home, "ask", "And in London?", "--conversation", str(answer["conversation"]),
        OLLAMA_HOST=host,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert "\nSources:\n[1] " in text.stdout
    assert f"(conversation {answer['conversation']}: continue with" in text.stdout

    extracted = cli(watched.home, "ask", "What is the hotel cap?", "--no-llm", "--json")
    assert extracted.returncode == 0, extracted.stderr
    assert json.loads(extracted.stdout.splitlines()[-1])["mode"] in ("extractive", "declined")


def test_ask_error_comes_back_in_words(watched: Writer, llm: FakeOllama) -> None:
    result = cli(
        watched.home, "ask", "How much is the hotel cap?", "--conversation", "9999",
        OLLAMA_HOST=f"127.0.0.1:{llm.port}",
    )  # fmt: skip
    assert result.returncode == 2
    assert "no conversation 9999" in result.stderr and "--conversation" in result.stderr
    assert "Traceback" not in result.stderr

    # A missing model quotes the documents there too, and the warning names the model.
    as_json = cli(
        watched.home, "ask", "How much is the hotel cap?", "--model", "mistral", "--json",
        OLLAMA_HOST=f"127.0.0.1:{llm.port}",
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout.splitlines()[-1])
    assert answer["mode"] in ("extractive", "declined")
    missing = [w for w in answer["warnings"] if w["kind"] == "model_missing"]
    assert missing and missing[0]["model"] == "mistral"


def test_ctrl_c_while_waiting_cancels_the_answer_there(watched: Writer, llm: FakeOllama) -> None:
    llm.stall_before_first_s = 60.0
    disconnects = len(llm.disconnects)
    chats = len(llm.requests_to("/api/chat"))
    asking = subprocess.Popen(
        [sys.executable, "-m", "core", "ask", "How much is the nightly hotel cap?"],
        cwd=REPO,
        env=lectern_env(watched.home, OLLAMA_HOST=f"127.0.0.1:{llm.port}", PYTHONFAULTHANDLER="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=TERMINAL_JOB,
    )
    try:
        deadline = time.monotonic() + 120
        while len(llm.requests_to("/api/chat")) == chats:
            assert asking.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        asking.send_signal(signal.SIGINT)
        try:
            _, err = asking.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            state = signal_dispositions(asking.pid)
            asking.send_signal(signal.SIGABRT)  # its threads' stacks, to its error pipe
            _, err = asking.communicate(timeout=30)
            raise AssertionError(
                f"`ask` did not stop on Ctrl-C ({state}):\n{err[-6000:]}"
            ) from None
        assert asking.returncode == 130 and "Cancelled." in err
        # The writer's answer stops too: it hangs up on the model server mid-stall, long
        # before the stall (60 s) or the first-token timeout would end it.
        deadline = time.monotonic() + 20
        while len(llm.disconnects) == disconnects:
            assert time.monotonic() < deadline, "the running Lectern kept waiting"
            time.sleep(0.05)
    finally:
        llm.stall_before_first_s = 0.0
        if asking.poll() is None:
            asking.kill()
            asking.wait(timeout=60)
    assert cli(watched.home, "status", "--json").returncode == 0


def test_socket_is_private_and_recorded(watched: Writer) -> None:
    path = served_socket(watched.home)
    assert path == watched.home / ipc.SOCKET_NAME
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(ipc.record_path(watched.home).stat().st_mode) == 0o600


def test_garbage_gets_an_error_line_not_a_crash(watched: Writer) -> None:
    path = served_socket(watched.home)
    for payload in (
        b"garbage\n",
        b"\xff\xfe\n",
        b"[1, 2]\n",
        V + b'"op": "drop tables"}\n',
        b'{"v": 99, "op": "status"}\n',
        V + b'"op": "search", "query": "hotel", "mode": "psychic"}\n',
        V + b'"op": "search", "query": "hotel", "k": 0}\n',
        V + b'"op": "search"}\n',
        V + b'"op": "ask", "question": 7}\n',
    ):
        replies = raw(path, payload)
        assert len(replies) == 1, (payload, replies)
        reply = replies[0]
        assert reply["v"] == ipc.PROTOCOL and reply["ok"] is False, (payload, reply)
        assert reply["error"]["message"] and "Traceback" not in json.dumps(reply)
    # A client that hangs up mid-line, or says nothing, is dropped quietly.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(V + b'"op"')
    # The server still answers, and so does the command.
    assert raw(path, V + b'"op": "hello"}\n')[0]["result"]["pid"] == watched.proc.pid
    assert cli(watched.home, "status", "--json").returncode == 0


# --- stale sockets and writers without a server --------------------------------------------


@pytest.mark.slow
def test_stale_socket_after_kill_then_next_writer(tmp_path: Path) -> None:
    shutil.copytree(SAMPLE_DOCS, tmp_path / "docs")
    home = tmp_path / "home"
    home.mkdir()
    first = Writer(home, "watch", str(tmp_path / "docs"), "--reconcile", "0")
    try:
        first.wait_for("Watching")
        first.wait_serving()
    finally:
        first.kill()  # SIGKILL: the socket file and its record stay behind
    stale = served_socket(home)
    assert stale.exists() and ipc.connect(home) is None

    # Nobody holds the library: the command opens it itself, at once.
    alone = cli(home, "status", "--json")
    assert alone.returncode == 0, alone.stderr
    assert ANSWERED_REMOTELY not in alone.stderr
    assert json.loads(alone.stdout.splitlines()[-1])["counts"]["indexed"] == 5

    # A writer that answers nothing (an older Lectern) beside the stale socket: the plain
    # busy message, not a hang or a traceback.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('held', flush=True);"
            " time.sleep(600)",
            str(Settings(home=home).db_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        busy = cli(home, "search", "hotel cap", "--json")
        assert busy.returncode == 2
        assert BUSY in busy.stderr and "Traceback" not in busy.stderr
        assert ANSWERED_REMOTELY not in busy.stderr
    finally:
        holder.kill()
        holder.wait(timeout=60)

    # The next writer replaces the stale socket and serves.
    second = Writer(home, "watch", "--reconcile", "0")
    try:
        second.wait_for("Watching")
        second.wait_serving()
        result = cli(home, "search", "nightly hotel cap", "--json")
        assert result.returncode == 0, result.stderr
        assert ANSWERED_REMOTELY in result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["results"]
    finally:
        assert second.stop() == 0, second.output()[-3000:]
    # A clean stop takes its socket and record along.
    assert not stale.exists() and not ipc.record_path(home).exists()


@pytest.mark.slow
def test_beside_index_and_same_output_as_alone(tmp_path: Path) -> None:
    """``lectern index`` serves while it runs, and what a command prints through it is
    what it prints on its own once the writer is gone."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS, docs)
    bulk = docs / "bulk"
    bulk.mkdir()
    # Enough files that indexing is still running when the commands below ask.
    for i in range(300):
        (bulk / f"survey-{i:03d}.txt").write_text(
            f"Survey {i} counted waders along the tidal creek at dawn. Marker kw{i:03d}q. "
            "The tide was low and the mudflats were busy with redshank and curlew.\n"
        )
    home = tmp_path / "home"
    home.mkdir()
    writer = Writer(home, "index", str(docs), "--json")
    try:
        writer.wait_serving()
        status = cli(home, "status", "--json")
        assert writer.proc.poll() is None, "indexing ended before the command asked"
    finally:
        rc = writer.proc.wait(timeout=600)
    assert rc == 0, writer.output()[-3000:]
    assert status.returncode == 0, status.stderr
    assert ANSWERED_REMOTELY in status.stderr
    during = json.loads(status.stdout.splitlines()[-1])
    assert str(docs) in [f["path"] for f in during["folders"]]
    assert not ipc.record_path(home).exists()

    # Beside a writer, then alone: the same lines on standard output.
    watcher = Writer(home, "watch", "--reconcile", "0")
    try:
        watcher.wait_for("Watching")
        watcher.wait_serving()
        remote = [
            cli(home, "search", "nightly hotel cap", "-k", "4"),
            cli(home, "search", "kw042q", "--mode", "bm25", "--json"),
            cli(home, "status"),
        ]
    finally:
        watcher.stop()
    local = [
        cli(home, "search", "nightly hotel cap", "-k", "4"),
        cli(home, "search", "kw042q", "--mode", "bm25", "--json"),
        cli(home, "status"),
    ]
    for beside, alone in zip(remote, local, strict=True):
        assert beside.returncode == alone.returncode == 0, (beside.stderr, alone.stderr)
        assert ANSWERED_REMOTELY in beside.stderr and ANSWERED_REMOTELY not in alone.stderr
    assert remote[0].stdout == local[0].stdout and remote[0].stdout.startswith("[1] ")
    a, b = (json.loads(r.stdout.splitlines()[-1]) for r in (remote[1], local[1]))
    assert a["results"] and a["results"] == b["results"]
    assert a["results"][0]["document"].endswith("survey-042.txt")
    # The status lines are the same but one: the fusion's record of questions asked,
    # which the writer kept and saved as it closed and the local search then added to.
    counted = [
        [line for line in r.stdout.splitlines() if line.startswith("Hybrid search:")]
        for r in (remote[2], local[2])
    ]
    assert "of the 1 question asked" in counted[0][0]
    assert "of the 2 questions asked" in counted[1][0]
    assert [
        line for line in remote[2].stdout.splitlines() if not line.startswith("Hybrid search:")
    ] == [line for line in local[2].stdout.splitlines() if not line.startswith("Hybrid search:")]


# --- where the socket goes --------------------------------------------------------------


def test_long_data_folder_puts_the_socket_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path.joinpath(*["a-rather-long-folder-name"] * 5)
    assert len(str(home / ipc.SOCKET_NAME)) > 108
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    for xdg in (str(runtime), ""):
        monkeypatch.setenv("XDG_RUNTIME_DIR", xdg)
        with Library(Settings(home=home)) as library:
            server = ipc.serve(library)
            try:
                assert server.active and server.path is not None
                assert len(os.fsencode(str(server.path))) <= ipc.MAX_SOCKET_PATH
                if xdg:
                    assert server.path.parent == runtime
                else:
                    # A folder of its own, under a name no one could make first.
                    assert server.path.parent.name.startswith("lectern-ipc-")
                    assert server.path.parent.name != f"lectern-ipc-{os.getuid()}"
                    assert stat.S_IMODE(server.path.parent.stat().st_mode) == 0o700
                # The record beside the database says where, whatever the environment
                # of the command asking.
                monkeypatch.delenv("XDG_RUNTIME_DIR")
                remote = ipc.connect(home)
                assert remote is not None and remote.path == server.path
                assert remote.status()["home"] == str(home)
            finally:
                server.close()
            assert not server.path.exists() and not ipc.record_path(home).exists()
            assert ipc.connect(home) is None


def test_a_stale_socket_never_blocks_serving(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    stale = home / ipc.SOCKET_NAME
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))  # bound, never listening, then closed: connect is refused
    dead.close()
    ipc.record_path(home).write_text(json.dumps({"protocol": 1, "socket": str(stale), "pid": 1}))
    assert ipc.connect(home) is None
    with Library(Settings(home=home)) as library, ipc.serve(library) as server:
        assert server.active and server.path == stale
        remote = ipc.connect(home)
        assert remote is not None and remote.status()["home"] == str(home)


# --- beside the desktop app ----------------------------------------------------------------


def test_beside_the_desktop_app(qtbot: Any, tmp_path: Path, embedder: Any) -> None:
    from desktop.backend import Backend

    shutil.copytree(SAMPLE_DOCS, tmp_path / "docs")
    home = tmp_path / "home"
    with Library(Settings(home=home), embedder=embedder) as library:
        library.index([tmp_path / "docs"])
    backend = Backend(Settings(home=home), embedder=embedder, watch=False)
    try:
        backend.start()
        qtbot.waitUntil(lambda: backend.is_ready, timeout=60_000)
        # The app's own event loop is idle here: the answer comes from the server's threads.
        status = cli(home, "status", "--json")
        found = cli(home, "search", "nightly hotel cap", "--mode", "bm25", "--json")
    finally:
        backend.shutdown()
    assert status.returncode == 0, status.stderr
    assert ANSWERED_REMOTELY in status.stderr
    assert json.loads(status.stdout.splitlines()[-1])["counts"]["indexed"] == 5
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout.splitlines()[-1])["results"]
    assert hits[0]["document"] == str(tmp_path / "docs" / "travel-policy.html")
    # Closing the app takes the socket along: the next command opens the library itself.
    assert not (home / ipc.SOCKET_NAME).exists() and not ipc.record_path(home).exists()
