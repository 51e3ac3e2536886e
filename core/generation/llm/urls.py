"""Server addresses: normalising them, and finding which of localhost's addresses listens."""

from __future__ import annotations

import socket
import urllib.parse

from core.config import check_server_url


def _split_url(url: str) -> urllib.parse.SplitResult:
    if "://" not in url:
        url = "http://" + url
    return urllib.parse.urlsplit(url)


def normalise_url(url: str, default_port: int | None = None) -> str:
    """``scheme://host:port[/path]`` with no trailing slash; ``0.0.0.0`` means this machine.

    A malformed address raises ConfigError here, when the client is built, rather than a
    ValueError from urllib at the first request."""
    parts = _split_url(check_server_url(url))
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):  # a listen-everywhere address, not a destination
        host = "127.0.0.1"
    port = parts.port or default_port or (443 if parts.scheme == "https" else 80)
    if ":" in host:
        host = f"[{host}]"
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{host}:{port}{path}"


def _host_candidates(url: str) -> list[str]:
    """URLs to try, in order, for one configured address."""
    parts = _split_url(url)
    if (parts.hostname or "").lower() != "localhost":
        return [url]
    netloc_v4 = f"127.0.0.1:{parts.port}" if parts.port else "127.0.0.1"
    netloc_v6 = f"[::1]:{parts.port}" if parts.port else "[::1]"
    return [
        urllib.parse.urlunsplit(parts._replace(netloc=netloc_v4)),
        urllib.parse.urlunsplit(parts._replace(netloc=netloc_v6)),
    ]


def _accepts(url: str, timeout: float) -> bool:
    parts = _split_url(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_url(url: str, connect_timeout: float) -> str:
    """The first candidate for ``url`` that accepts a TCP connection, else the first one.

    ``localhost`` often resolves to ``::1`` first while Ollama listens on 127.0.0.1 only;
    trying IPv4 first avoids a refused (or, behind some firewalls, a hanging) connection.
    """
    candidates = _host_candidates(url)
    if len(candidates) == 1:
        return candidates[0]
    for candidate in candidates:
        if _accepts(candidate, min(connect_timeout, 2.0)):
            return candidate
    return candidates[0]
