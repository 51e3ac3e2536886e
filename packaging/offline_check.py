"""Prove the packaged app stays offline: ``python packaging/offline_check.py``.

It re-runs itself inside a fresh network namespace (``unshare -rn``: an unprivileged
user namespace whose only interface is loopback), so any attempt to reach the internet
fails there instead of quietly succeeding. Inside, it starts the fake Ollama server on
127.0.0.1 and runs the bundle twice under ``strace``, which logs every ``connect`` and
``sendto`` the app and its parser worker make:

1. ``Lectern --self-test DIR --llm-url <fake>``: index, search, answer, QtPdf.
2. The desktop window itself (Qt offscreen) on a fresh data folder with DIR dropped on
   it, until it has asked the LLM server for its models and indexed for a while.

It fails unless the self-test passes, the window ran and reached the LLM server, and
every internet-family address either process tried is loopback. The report is JSON on
the last line of stdout.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLE = ROOT / "dist" / "Lectern" / "Lectern"
INSIDE_FLAG = "LECTERN_OFFLINE_CHECK_INSIDE"
# An unprivileged user namespace with its own network namespace: only loopback exists.
UNSHARE = ["unshare", "--user", "--map-root-user", "--net"]
NO_NAMESPACE = 3  # exit status when this machine cannot block the network this way
GUI_RUN_S = 25.0  # after the window first reaches the LLM server: time to index
GUI_START_LIMIT_S = 120.0

ADDRESS = re.compile(
    r"sa_family=(?P<family>AF_INET6?)"
    r".*?(?:sin6?_port=htons\((?P<port>\d+)\))"
    r".*?(?:inet_addr\(\"(?P<v4>[^\"]+)\"\)|inet_pton\(AF_INET6, \"(?P<v6>[^\"]+)\")"
)
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|::1|::ffff:127\.\d+\.\d+\.\d+)$")


def tools_missing() -> list[str]:
    return [tool for tool in ("unshare", "strace", "ip") if shutil.which(tool) is None]


def network_attempts(strace_log: Path) -> list[dict[str, object]]:
    """Every internet-family address in a connect/sendto/sendmsg line of the log."""
    attempts = []
    for line in strace_log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not any(call in line for call in ("connect(", "sendto(", "sendmsg(")):
            continue
        match = ADDRESS.search(line)
        if match is None:
            continue
        host = match["v4"] or match["v6"] or ""
        attempts.append(
            {
                "host": host,
                "port": int(match["port"]),
                "loopback": bool(LOOPBACK.match(host)),
                "line": line.strip()[:240],
            }
        )
    return attempts


def internet_is_blocked() -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(3)
    try:
        code = probe.connect_ex(("1.1.1.1", 443))
    finally:
        probe.close()
    return code in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EACCES, errno.EPERM)


def start_fake_ollama() -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_ollama"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        server.kill()
        raise SystemExit(f"The fake Ollama server did not start (said {url!r}).")
    return server, url


def app_environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    # A clean slate: none of the developer's offline switches may be what keeps the
    # packaged app offline; it must set them itself.
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "PYTHONPATH"):
        env.pop(name, None)
    env["LECTERN_HOME"] = str(home)
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["HOME"] = str(home / "user-home")
    env["XDG_CONFIG_HOME"] = str(home / "user-home" / ".config")
    env.pop("OLLAMA_HOST", None)
    return env


def traced(log: Path, *command: str) -> list[str]:
    """``command`` under strace, logging every address it (or any child) sends to."""
    return ["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(log), *command]


def run_self_test(bundle: Path, folder: Path, url: str, work: Path) -> dict[str, object]:
    log = work / "self-test.strace"
    command = traced(log, str(bundle), "--self-test", str(folder), "--llm-url", url)
    started = time.monotonic()
    result = subprocess.run(
        command,
        env=app_environment(work / "self-test-home"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    return {
        "exit_code": result.returncode,
        "passed": result.returncode == 0 and "Self-test passed." in result.stdout,
        "seconds": round(time.monotonic() - started, 1),
        "output": output[-4000:],
        "attempts": network_attempts(log),
    }


def run_window(bundle: Path, folder: Path, url: str, work: Path) -> dict[str, object]:
    home = work / "gui-home"
    home.mkdir(parents=True, exist_ok=True)
    port = int(url.rsplit(":", 1)[1])
    (home / "settings.json").write_text(json.dumps({"llm_url": url}), encoding="utf-8")
    log = work / "window.strace"
    command = traced(log, str(bundle), str(folder))
    output_path = work / "window.out"
    with output_path.open("w") as output:
        app = subprocess.Popen(
            command,
            env=app_environment(home),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        reached_server = False
        deadline = time.monotonic() + GUI_START_LIMIT_S
        while time.monotonic() < deadline and app.poll() is None:
            if log.exists() and any(
                a["port"] == port and a["loopback"] for a in network_attempts(log)
            ):
                reached_server = True
                break
            time.sleep(0.5)
        if reached_server:
            time.sleep(GUI_RUN_S)
        still_running = app.poll() is None
        if still_running:
            os.killpg(app.pid, signal.SIGTERM)
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait()
    return {
        "reached_llm_server": reached_server,
        "ran_until_stopped": still_running,
        "output": output_path.read_text(errors="replace")[-2000:],
        "attempts": network_attempts(log),
    }


def check_inside(bundle: Path, folder: Path) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    report: dict[str, object] = {"internet_blocked": internet_is_blocked()}
    server, url = start_fake_ollama()
    work = Path(tempfile.mkdtemp(prefix="lectern-offline-"))
    try:
        report["self_test"] = run_self_test(bundle, folder, url, work)
        report["window"] = run_window(bundle, folder, url, work)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    attempts = [*report["self_test"]["attempts"], *report["window"]["attempts"]]  # type: ignore[index]
    outside = [a for a in attempts if not a["loopback"]]
    report["loopback_connections"] = sum(1 for a in attempts if a["loopback"])
    report["non_loopback_attempts"] = outside
    report["ok"] = bool(
        report["internet_blocked"]
        and report["self_test"]["passed"]  # type: ignore[index]
        and report["window"]["reached_llm_server"]  # type: ignore[index]
        and report["window"]["ran_until_stopped"]  # type: ignore[index]
        and not outside
    )
    for part in ("self_test", "window"):
        report[part]["attempts"] = len(report[part]["attempts"])  # type: ignore[index]
    print(json.dumps(report))
    return 0 if report["ok"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the packaged app with only loopback.")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument(
        "--folder", type=Path, default=ROOT / "resources" / "sample-docs", help="folder to index"
    )
    args = parser.parse_args()
    bundle, folder = args.bundle.resolve(), args.folder.resolve()
    if os.environ.get(INSIDE_FLAG) == "1":
        return check_inside(bundle, folder)
    missing = tools_missing()
    if missing:
        print(f"Cannot block the network here: {', '.join(missing)} not installed.")
        return 2
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"Cannot create a network namespace here: {probe.stderr.strip()}")
        return NO_NAMESPACE
    if not bundle.is_file():
        print(f"No packaged app at {bundle}; build it with `make package`.")
        return 2
    env = dict(os.environ, **{INSIDE_FLAG: "1"})
    inside = [sys.executable, str(Path(__file__).resolve()), "--bundle", str(bundle)]
    inside += ["--folder", str(folder)]
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", *inside], env=env
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
