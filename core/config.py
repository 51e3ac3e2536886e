"""Typed settings.

The data folder comes from platformdirs and can be overridden with ``LECTERN_HOME``; user
choices live in ``settings.json`` inside it. Environment variables win over the file so a
test or a packaged self-test can point Lectern anywhere without touching the user's setup.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from platformdirs import user_data_dir

from core.errors import ConfigError
from core.private import make_private_dir, write_private

APP_NAME = "Lectern"
# core.embedding.models.DEFAULT_MODEL_ID (not imported: it loads numpy and the model code).
DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# The settings that take one of a few words are typed with a Literal of those words, the
# one list of them (TEXT_CHOICES, below Settings, reads them off): settings.json's other
# words are replaced by the default and said, like numbers out of NUMERIC_BOUNDS, and a
# change made while Lectern runs (core/settings_store.py) to another word is refused.
# When indexing runs (core/indexing/throttle.py): always, only while the computer is otherwise
# idle, or within a share (percent) of the computer's CPU, all cores together.
IndexWhen = Literal["always", "idle", "share"]
# Where an answer's sources stand in the prompt (core/generation/prompt.py layout) and
# how a follow-up question is made standalone.
SourceOrder = Literal["relevance", "edges"]
FollowupRewrite = Literal["model", "keywords"]
# How the keyword and meaning lists are fused: the keys of core/retrieval/fusion.py FUSIONS.
FusionName = Literal["adaptive", "rrf"]
INDEX_WHEN: tuple[IndexWhen, ...] = typing.get_args(IndexWhen)
SOURCE_ORDERS: tuple[SourceOrder, ...] = typing.get_args(SourceOrder)
FOLLOWUP_REWRITES: tuple[FollowupRewrite, ...] = typing.get_args(FollowupRewrite)

# Fields of Settings that are not settings: never written to settings.json, nor read.
_NOT_SAVED = ("home", "replaced", "embedding_model_chosen")


def data_dir() -> Path:
    override = os.environ.get("LECTERN_HOME")
    path = (
        Path(override).expanduser() if override else Path(user_data_dir(APP_NAME, appauthor=False))
    )
    try:
        make_private_dir(path)
    except OSError as exc:
        where = f"{path} (LECTERN_HOME)" if override else str(path)
        problem = (
            "is a file, not a folder"
            if isinstance(exc, (FileExistsError, NotADirectoryError))
            else f"cannot be created: {exc.strerror or exc}"
        )
        hint = (
            "Set LECTERN_HOME to a folder (or unset it to use the default data folder)."
            if override
            else "Check that you can write to that folder, or set LECTERN_HOME to another one."
        )
        raise ConfigError(f"The data folder {where} {problem}.", hint) from exc
    return path


@dataclass(frozen=True)
class ReplacedSetting:
    """A value in settings.json outside its setting's range, and the one used instead."""

    name: str
    given: object
    used: object
    message: str
    hint: str


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=data_dir)
    # A key of core.llm.backends.BACKENDS: "ollama", or "openai" for any
    # OpenAI-compatible server. Text, not a Literal: that table is the one list of kinds
    # (adding one is its module and one row there), and the loader checks against it.
    llm_kind: str = "ollama"
    llm_url: str = ""  # empty: the backend's default (for Ollama, OLLAMA_HOST or its own)
    llm_model: str = "llama3.2"
    llm_api_key: str = ""
    # How long a model server that is alive (it answers a status check) may take to read
    # the question and sources before its first word: a CPU-only server read 1.1-1.6k
    # tokens in 80-528 s here. A server that stops answering is given up on in ~30 s.
    llm_first_token_timeout_s: float = 900.0
    top_k: int = 6
    candidates: int = 100  # distinct documents per retriever, before fusion
    rrf_k: int = 60  # only for fusion "rrf"
    fusion: FusionName = "adaptive"  # score-aware, per query (core/retrieval/fusion.py)
    # Hybrid search re-scores its top documents by late interaction (core/retrieval/second_stage.py):
    # their passages are encoded again at query time, a fraction of a second.
    rerank: bool = True
    # An answer's candidate sources are put in order by the LLM itself first
    # (core/generation/llm_order.py): seconds before the answer starts, so off unless asked for.
    llm_rerank: bool = False
    # The sources a model reads are the passages found widened to their neighbouring
    # chunks of the same section, as far as the prompt has room (core/generation/widen.py).
    # Off: on squad-small with SmolLM2-135M it did not measurably help (4/14 answerable
    # right with it, 3/14 and 5/14 in two runs without).
    small_to_big: bool = False
    # How the prompt lays out the sources (core/generation/prompt.py PromptChoices), and
    # how a follow-up is made standalone: "model" asks the LLM, "keywords" adds the
    # previous question's terms. Each default is the one bench/prompt_choices.py kept.
    # A long passage is sent to the model as its sentences around what the question
    # matches (core/generation/extractive.py excerpts), not whole.
    source_excerpts: bool = True
    source_order: SourceOrder = "relevance"
    source_dates: bool = True
    prefer_newest: bool = False
    followup_rewrite: FollowupRewrite = "model"
    # Low: a grounded answer leaves little room for invention. 0 makes runs repeatable.
    answer_temperature: float = 0.1
    # The longest answer a model may write, in tokens: a small model can repeat itself
    # until this limit (SmolLM2-135M at temperature 0 did, at 1.5 tokens/s on a busy CPU).
    answer_max_tokens: int = 1024
    # One of core.embedding.models.MODELS; changing it re-embeds the library (never mixed).
    # Unless the person chose one, a new library may start with the multilingual model
    # instead (core/indexing/model_switch.py).
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    # The app offers the multilingual model to a library mostly not in English
    # (core/embedding/languages.py) until the person switches or says not now.
    model_offer_declined: bool = False
    chunk_overlap_sentences: int = 0
    parse_timeout_s: float = 60.0
    parse_memory_mb: int = 1024
    # Scanned pages (PDF pages without a text layer) are read by OCR, after the other
    # files; languages are Tesseract's codes among those shipped (core/ingest/ocr.py).
    ocr_enabled: bool = True
    ocr_languages: tuple[str, ...] = ("eng",)
    ocr_timeout_s: float = 600.0
    ocr_memory_mb: int = 1536
    ignore_patterns: tuple[str, ...] = ()
    embed_batch_size: int = 32
    index_when: IndexWhen = "always"
    index_cpu_share: int = 50  # percent of all cores, for index_when "share"
    # Values of settings.json that were out of range when it was loaded, with the value
    # used instead: the CLI and the app say them when the library opens. Not a setting.
    replaced: tuple[ReplacedSetting, ...] = field(default=(), compare=False, repr=False)
    # Whether the person chose ``embedding_model``: settings.json names it, or it was
    # changed (with_changes). Not a setting: the app writes every setting back, and a
    # default written back is no choice (see save).
    embedding_model_chosen: bool = field(default=False, compare=False, repr=False)

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
        """The model server address by the rules of ``llm_kind``'s backend (the environment
        of this process applied); a malformed one raises ConfigError naming its source."""
        # Imported here: the table loads the HTTP clients.
        from core.llm.backends import backend_for

        return backend_for(self.llm_kind).resolve_url(self)

    def save(self) -> None:
        data = {k: v for k, v in asdict(self).items() if k not in _NOT_SAVED}
        data["ignore_patterns"] = list(self.ignore_patterns)
        if not self.embedding_model_chosen and self.embedding_model == DEFAULT_EMBEDDING_MODEL:
            # Written, the default would read back as the person's choice, and a new
            # library could no longer start with the model its documents call for.
            del data["embedding_model"]
        # Private: it may hold an API key.
        write_private(self.settings_path, json.dumps(data, indent=2))

    def with_changes(self, **changes: object) -> Settings:
        if "embedding_model" in changes:
            changes["embedding_model_chosen"] = True
        return replace(self, **changes)  # type: ignore[arg-type]


# The settings that take one of a few words, with their words: each one's Literal.
TEXT_CHOICES: dict[str, tuple[str, ...]] = {
    name: typing.get_args(kind)
    for name, kind in typing.get_type_hints(Settings).items()
    if typing.get_origin(kind) is Literal
}


def load_settings(home: Path | None = None) -> Settings:
    base = Settings(home=home) if home else Settings()
    path = base.settings_path
    if not path.exists():
        return base
    try:
        # utf-8-sig: Notepad and other editors start a UTF-8 file with a byte-order mark.
        raw = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"The settings file {path} could not be read: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(
            f"The settings file {path} does not hold settings (expected {{...}}).",
            f"Fix or delete {path}; Lectern then starts with the default settings.",
        )
    values = {
        f.name: _checked_value(f.name, raw[f.name], f.default, path)
        for f in fields(Settings)
        if f.name not in _NOT_SAVED and f.name in raw
    }
    replaced = []
    for name, value in list(values.items()):
        expected = _outside(name, value)
        if expected is not None:
            used = _replaced(name, value, expected, path)
            replaced.append(used)
            values[name] = used.used
    return replace(
        base,
        **values,
        replaced=tuple(replaced),
        embedding_model_chosen="embedding_model" in values,
    )


# Every numeric setting's range, both ends included. A value outside it is not refused
# (the app would not even open) but replaced by the default, and said: `{"candidates":
# 1e12}` ran out of memory after two minutes of searching, and chunk_overlap_sentences
# 1e9 re-queued every passage of the library. The default rather than the nearest end:
# a setting that is part of the index (the overlap) would still re-index everything.
# tests/cli/test_hostile_env.py checks that every numeric setting is here.
NUMERIC_BOUNDS: dict[str, tuple[float, float]] = {
    "llm_first_token_timeout_s": (1, 86_400),
    "answer_temperature": (0, 2),
    "answer_max_tokens": (64, 8192),
    "top_k": (1, 100),
    "candidates": (1, 1_000),
    "rrf_k": (1, 1_000),
    "chunk_overlap_sentences": (0, 10),
    "parse_timeout_s": (1, 3_600),
    "parse_memory_mb": (64, 65_536),
    "ocr_timeout_s": (1, 86_400),
    "ocr_memory_mb": (64, 65_536),
    "embed_batch_size": (1, 1_024),
    "index_cpu_share": (1, 100),
}


def check_settings(settings: Settings, names: Iterable[str]) -> None:
    """ConfigError for the first of ``names`` whose value is outside its setting's bounds
    or words. A change made while Lectern runs (core/settings_store.py) is refused, where
    one read from settings.json is replaced (load_settings): its caller is there to say so."""
    for name in names:
        value = getattr(settings, name)
        expected = _outside(name, value)
        if expected is not None:
            raise ConfigError(
                f"The setting {name!r} cannot be {_shown(value)}: it takes {expected}."
            )


def _outside(name: str, value: object) -> str | None:
    """What the setting takes, in words, when ``value`` is outside its bounds (numbers) or
    its words (TEXT_CHOICES, llm_kind); None when it is within them or the setting has
    neither."""
    if name in NUMERIC_BOUNDS:
        low, high = NUMERIC_BOUNDS[name]
        if isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high:
            return None  # (False for NaN too)
        whole = isinstance(_default_of(name), int)
        return f"{'a whole number' if whole else 'a number'} from {low:g} to {high:g}" + (
            "" if whole or not name.endswith("_s") else " (seconds)"
        )
    choices = _llm_kinds() if name == "llm_kind" else TEXT_CHOICES.get(name)
    if choices is None or value in choices:
        return None
    words = [f'"{c}"' for c in choices]
    return f"one of {', '.join(words[:-1])} or {words[-1]}"


def _replaced(name: str, value: object, expected: str, path: Path) -> ReplacedSetting:
    """The default used instead of ``value`` (outside what the setting takes), said."""
    default = _default_of(name)
    return ReplacedSetting(
        name,
        value,
        default,
        f"The setting {name!r} in {path} is {_shown(value)}, which is not {expected}; "
        f"Lectern uses {_shown(default)} instead.",
        f"Change {name!r} in {path} to {expected}, or remove the line to use the default.",
    )


def _shown(value: object) -> str:
    shown = f"{value:g}" if isinstance(value, float) else json.dumps(value, default=str)
    return f"{shown[:20]}…" if len(shown) > 40 else shown


def _llm_kinds() -> tuple[str, ...]:
    """The model server kinds there are: the keys of the backends' table."""
    # Imported only when settings.json names a kind: the table loads the HTTP clients.
    from core.llm.backends import BACKEND_KEYS

    return BACKEND_KEYS


def _checked_value(name: str, value: object, default: object, path: Path) -> Any:
    """``value`` converted to the type of the setting's default, or a ConfigError naming
    the key; a wrong type would otherwise surface as a crash far from its cause."""

    def bad(expected: str) -> ConfigError:
        return ConfigError(
            f"The setting {name!r} in {path} is {json.dumps(value)}, which is not {expected}.",
            f"Change {name!r} in {path} to {expected}, or remove the line to use the default"
            f" ({json.dumps(list(default) if isinstance(default, tuple) else default)}).",
        )

    if default is MISSING:  # every setting has a default; typed all the same
        return _typed(name, value, bad)
    if name == "llm_kind" or name in TEXT_CHOICES:
        return value  # a value outside the setting's words is replaced (load_settings)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    # Numbers of the right kind are checked against NUMERIC_BOUNDS by the caller.
    if isinstance(default, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)  # JSON's 1e3 or 5.0: a whole number written as a float
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("a whole number")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("text in quotes")
        return value
    if name == "ocr_languages":
        from core.ingest.ocr import available_languages

        shipped = available_languages()
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, str) and (v in shipped or not shipped) for v in value)
        ):
            raise bad(f"a list of languages Lectern can read: {json.dumps(list(shipped))}")
        return tuple(value)
    if name == "ignore_patterns":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad('a list of patterns in quotes, like ["*.bak"]')
        return tuple(value)
    return _typed(name, value, bad)


def _typed(name: str, value: object, bad: Callable[[str], ConfigError]) -> Any:
    """``value`` as the type the setting is declared with (core/records.py
    record_from_json): a setting of a kind not checked above (a tuple, an enum, a record)
    is never kept as the list or text JSON gives."""
    from core.records import record_from_json as from_json
    from core.records import record_to_json as to_json

    kind = typing.get_type_hints(Settings)[name]
    try:
        return from_json(kind, value)
    except ValueError:
        raise bad(f"a value of the form {json.dumps(to_json(_default_of(name)))}") from None


def _default_of(name: str) -> object:
    f = next(f for f in fields(Settings) if f.name == name)
    return f.default_factory() if f.default_factory is not MISSING else f.default
