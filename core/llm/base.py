"""What one kind of model server is, apart from how its client talks to it.

Each kind (Ollama, an OpenAI-compatible server) is a :class:`Backend` in its own module,
beside its client, and one row of :data:`core.llm.backends.BACKENDS`. Everything
that differs between kinds (the words for the server, how to start it, where it listens
when the settings name no address, whether it can download models) is read from here, so
no other module asks which kind it has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from core.errors import LecternError, LLMError

if TYPE_CHECKING:
    from core.llm.records import LLMClient


class ServerSettings(Protocol):
    """What a backend reads of the settings (``core.config.Settings`` has it). A protocol,
    not the class: the settings module asks the backends' table which kinds there are,
    so the backends must not import it back."""

    @property
    def llm_kind(self) -> str: ...

    @property
    def llm_url(self) -> str: ...

    @property
    def llm_api_key(self) -> str: ...

    @property
    def llm_first_token_timeout_s(self) -> float: ...


class Backend(ABC):
    """One kind of model server. Instances are stateless; the table holds one of each."""

    key: ClassVar[str]  # llm_kind in settings.json, and the client's ``kind``
    display_name: ClassVar[str]  # the choice in the settings dialog
    server_name: ClassVar[str]  # mid-sentence: "on Ollama at …", "on the model server at …"
    short_name: ClassVar[str]  # "Ollama is running but …", "The server is running but …"
    start_hint: ClassVar[str]  # how to get the server going when it does not answer
    can_download_models: ClassVar[bool]  # whether the client's pull() works
    takes_api_key: ClassVar[bool]
    # A server one installs (and whose guide the welcome screen can show): where to get it
    # and the command that starts it. Empty for a kind that is any server one picks.
    install_url: ClassVar[str] = ""
    serve_command: ClassVar[str] = ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r}>"

    @property
    def title_name(self) -> str:
        """``server_name`` at the start of a sentence."""
        return _capitalised(self.server_name)

    @property
    def title_short_name(self) -> str:
        return _capitalised(self.short_name)

    # --- addresses ----------------------------------------------------------------------

    @abstractmethod
    def resolve_url(self, settings: ServerSettings) -> str:
        """The address the client connects to, before normalising; a malformed one raises
        ConfigError naming where it came from (settings.json, an environment variable)."""

    def address(self, settings: ServerSettings) -> str:
        """The address as configured, for showing: never raises, "" when there is none."""
        if settings.llm_url:
            return settings.llm_url
        try:
            return self.resolve_url(settings)
        except LecternError:
            return ""

    @abstractmethod
    def url_placeholder(self, settings: ServerSettings) -> str:
        """What the settings dialog's empty address field says."""

    # --- clients ------------------------------------------------------------------------

    def make_client(self, settings: ServerSettings, **timeouts: float) -> LLMClient:
        """The client for the server ``settings`` name (timeouts as the client takes them);
        a malformed address raises ConfigError."""
        timeouts.setdefault("prompt_timeout", settings.llm_first_token_timeout_s)
        return self.build_client(settings, **timeouts)

    @abstractmethod
    def build_client(self, settings: ServerSettings, **timeouts: float) -> LLMClient:
        """The client itself, with every timeout given."""

    def pull_command(self, model: str) -> str:
        """The server's own command that downloads ``model`` ("" when it has none)."""
        return ""

    # --- the words of its errors --------------------------------------------------------

    @abstractmethod
    def not_running(self, url: str) -> str:
        """The sentence (without its full stop) for no server answering at ``url``."""

    @abstractmethod
    def not_found_hint(self, model: str) -> str:
        """How to get a model the server does not have."""

    def foreign_server(self, url: str, status: int, message: str) -> LLMError | None:
        """An HTTP error that shows the address is some other kind of server, as the error
        to raise instead of the status's usual one; None when it shows nothing of the kind."""
        return None


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]
