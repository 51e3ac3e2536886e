"""Server addresses: normalising them, and finding which of localhost's addresses listens."""

from __future__ import annotations

import socket
import urllib.parse

from core.errors import ConfigError

SERVER_URL_HINT = (
    "Use the form http://127.0.0.1:11434 (http or https, a host name or address, and a "
    "port from 1 to 65535)."
)


def check_server_url(url: str, setting: str = "") -> str:
    """``url`` as given (with ``http://`` added when it has no scheme) if it is a usable
    model server address, else a ConfigError that names ``setting``.

    urllib only complains about a bad port or bracket when the port is read, deep inside
    a request; checking here turns that into one clear message wherever the address
    comes from (OLLAMA_HOST, settings.json, the settings dialog)."""
    text = url.strip()
    candidate = text if "://" in text else "http://" + text

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"The model server address {text!r}{f' ({setting})' if setting else ''} is not "
            f"valid: {why}.",
            SERVER_URL_HINT,
        )

    if not text:
        raise bad("it is empty")
    if any(ch.isspace() for ch in text):
        raise bad("it contains spaces")
    try:
        parts = urllib.parse.urlsplit(candidate)
        port = parts.port
    except ValueError as exc:
        raise bad(_url_problem(str(exc))) from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise bad(f"the scheme must be http or https, not {parts.scheme!r}")
    if not parts.hostname:
        raise bad("it has no host name")
    if port == 0:
        raise bad("port 0 is not a real port")
    return candidate


def _url_problem(error: str) -> str:
    if "IPv6" in error:
        return "an IPv6 address must be closed with ']'"
    if "out of range" in error:
        return "the port must be a number from 1 to 65535"
    if "Port" in error or "port" in error:
        return "the port must be a number"
    return error


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
