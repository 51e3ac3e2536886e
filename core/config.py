"""Typed settings.

The data folder comes from platformdirs and can be overridden with ``LECTERN_HOME``; user
choices live in ``settings.json`` inside it. Environment variables win over the file so a
test or a packaged self-test can point Lectern anywhere without touching the user's setup.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from platformdirs import user_data_dir

from core.errors import ConfigError

APP_NAME = "Lectern"
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"


def data_dir() -> Path:
    override = os.environ.get("LECTERN_HOME")
    path = (
        Path(override).expanduser() if override else Path(user_data_dir(APP_NAME, appauthor=False))
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=data_dir)
    llm_kind: str = "ollama"  # "ollama" or "openai" (any OpenAI-compatible server)
    llm_url: str = ""  # empty means OLLAMA_HOST or the Ollama default
    llm_model: str = "llama3.2"
    llm_api_key: str = ""
    top_k: int = 6
    candidates: int = 50  # per retriever, before fusion
    rrf_k: int = 60
    chunk_overlap_sentences: int = 0
    parse_timeout_s: float = 60.0
    parse_memory_mb: int = 1024
    ignore_patterns: tuple[str, ...] = ()
    embed_batch_size: int = 32

    @property
    def db_path(self) -> Path:
        return self.home / "lectern.duckdb"

    @property
    def vectors_path(self) -> Path:
        return self.home / "vectors.usearch"

    @property
    def settings_path(self) -> Path:
        return self.home / "settings.json"

    @property
    def resolved_llm_url(self) -> str:
        if self.llm_url:
            return self.llm_url
        host = os.environ.get("OLLAMA_HOST", "").strip()
        if not host:
            return DEFAULT_OLLAMA_HOST
        if "://" not in host:
            host = "http://" + host
        if host.count(":") < 2:  # no port given, Ollama's own default applies
            host += ":11434"
        return host

    def save(self) -> None:
        data = {k: v for k, v in asdict(self).items() if k != "home"}
        data["ignore_patterns"] = list(self.ignore_patterns)
        tmp = self.settings_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, self.settings_path)

    def with_changes(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


def load_settings(home: Path | None = None) -> Settings:
    base = Settings(home=home) if home else Settings()
    path = base.settings_path
    if not path.exists():
        return base
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"The settings file {path} could not be read: {exc}") from exc
    known = {f.name for f in fields(Settings)} - {"home"}
    values = {k: v for k, v in raw.items() if k in known}
    if "ignore_patterns" in values:
        values["ignore_patterns"] = tuple(values["ignore_patterns"])
    return replace(base, **values)
