"""Server addresses: normalising them, finding which of localhost's addresses listens,
and the proxy settings of the environment (which a server on this machine never uses)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator

from core.errors import ConfigError, LLMUnavailableError

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


# --- proxies ----------------------------------------------------------------------------
#
# httpx reads every ``*_proxy`` variable (either case) when it builds a client that trusts
# the environment, and refuses to be built at all for a proxy it cannot use: a SOCKS one
# without the socksio package, a scheme it does not know. A server on this machine is
# asked directly whatever they say; one elsewhere goes through the person's proxy, and a
# proxy that cannot be used is said in words (the answer is then quoted).


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (localhost, 127.0.0.0/8, ::1)."""
    host = (_split_url(url).hostname or "").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def trusts_environment(url: str) -> bool:
    """Whether the HTTP client for ``url`` takes its proxy from the environment: not for
    this machine, nor for a host NO_PROXY names (httpx would still build, and fail on,
    a proxy that is never used for it)."""
    if is_loopback(url):
        return False
    parts = _split_url(url)
    try:
        # The environment's NO_PROXY only (not a system's own settings), as httpx reads it.
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        return not bypass(parts.netloc or "")
    except Exception:  # a malformed NO_PROXY: the proxy settings apply as httpx reads them
        return True


def _is_proxy_variable(name: str) -> bool:
    lower = name.lower()
    return lower.endswith("_proxy") and lower != "no_proxy"


def proxy_setting(url: str) -> tuple[str, str] | None:
    """The environment variable that would route ``url`` through a proxy, and its value
    without any password; None when none is set."""
    scheme = _split_url(url).scheme.lower() or "http"
    names = [f"{scheme}_proxy", "all_proxy"]
    for name in [n for wanted in names for n in (wanted, wanted.upper())]:
        value = os.environ.get(name, "").strip()
        if value:
            return name, _without_password(value)
    return None


def _without_password(value: str) -> str:
    try:
        parts = urllib.parse.urlsplit(value if "://" in value else "http://" + value)
        if parts.username is None and parts.password is None:
            return value
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "(a value that is not an address)"


_ENVIRONMENT = threading.Lock()


@contextlib.contextmanager
def proxies_masked() -> Iterator[None]:
    """The proxy variables out of this process's environment for the time of the block:
    for code that builds a client that trusts the environment, which Lectern cannot
    change (the ``ollama`` package makes one as it is imported)."""
    with _ENVIRONMENT:
        saved = {
            name: os.environ.pop(name) for name in list(os.environ) if _is_proxy_variable(name)
        }
        try:
            yield
        finally:
            os.environ.update(saved)


def unusable_client(exc: Exception, url: str) -> LLMUnavailableError:
    """The words for an HTTP client for ``url`` that could not even be built."""
    proxy = proxy_setting(url)
    if proxy is None:
        error = LLMUnavailableError(
            f"Lectern could not set up a connection to the model server at {url}"
            + (f" ({exc})." if str(exc) else "."),
            "Check the server address in the settings.",
        )
        # The client library's name for the fault is for a developer (the desktop's
        # Details fold), not for the sentence.
        error.detail = type(exc).__name__  # type: ignore[attr-defined]
        return error
    name, value = proxy
    socks = "socks" in value.lower() and isinstance(exc, ImportError)
    why = "SOCKS proxies need the socksio package, which is not installed" if socks else str(exc)
    host = _split_url(url).hostname or url
    return LLMUnavailableError(
        f"Lectern cannot reach the model server at {url} through the proxy {value} "
        f"({name}): {why}.",
        f"Unset {name}, or add {host} to NO_PROXY so that the server is asked directly"
        + (", or install socksio (pip install socksio)." if socks else "."),
    )
