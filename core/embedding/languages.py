"""Which languages a library is written in, and which embedding model that calls for.

The default embedding model was trained on English: on passages in another language its
meaning list is weak (German 0.662 nDCG@10 dense, Russian 0.398), while the bundled
multilingual model scores 0.95 on both. A person whose documents are in German never
learns that from a settings file, so the library says it: ``language_mix`` guesses each
sampled passage's language (the script of its letters, and for Latin-script text the
commonest words, as the keyword index stems them), and ``model_advice`` turns a mix into
the offer the app and ``lectern status`` show.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from core.embedding.models import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID
from core.store.keyword.tokens import LANGUAGE_MARKERS

ENGLISH = "English"
# Letters of these scripts name a language family; the first word of a letter's Unicode
# name is its script. A passage goes to the script most of its letters are written in.
SCRIPTS: dict[str, str] = {
    "CYRILLIC": "Cyrillic script (Russian and others)",
    "GREEK": "Greek",
    "ARABIC": "Arabic script",
    "HEBREW": "Hebrew",
    "DEVANAGARI": "Devanagari script (Hindi and others)",
    "TAMIL": "Tamil",
    "THAI": "Thai",
    "HANGUL": "Korean",
    "HIRAGANA": "Japanese",
    "KATAKANA": "Japanese",
    "CJK": "Chinese or Japanese",
}
OTHER_SCRIPT = "another script"
# What passage_language names by script rather than by language.
NON_LATIN = frozenset(SCRIPTS.values()) | {OTHER_SCRIPT}
_MARKERS = [
    ((name or "english").capitalize(), frozenset(words.split())) for name, words in LANGUAGE_MARKERS
]
# Passages sampled for the mix: the share of a language is known within about ±3 points
# (binomial, 95 %) from a thousand, and guessing them takes a few milliseconds.
LANGUAGE_SAMPLE = 1_000
MIN_LETTERS = 20  # fewer letters (a table of figures, a heading) say nothing

# When to offer the multilingual model, from this project's measurements on training sets
# only (docs/QUALITY.md): on the six non-English ones (German, Russian, Italian,
# Portuguese, Dutch, Arabic) hybrid nDCG@10 averages 0.669 with the default model and
# 0.933 with the multilingual one, and on SciFact train (English) 0.752 against 0.699. A
# library with a share s of non-English passages gains s × 0.264 − (1 − s) × 0.053, which
# is positive from s = 0.17. Rounded up to a twentieth (0.2): the switch re-embeds the
# whole library, which a gain of nearly nothing does not repay.
NON_ENGLISH_DEFAULT, NON_ENGLISH_MULTILINGUAL = 0.6693, 0.9331
ENGLISH_DEFAULT, ENGLISH_MULTILINGUAL = 0.7518, 0.6991
GAIN_NON_ENGLISH = NON_ENGLISH_MULTILINGUAL - NON_ENGLISH_DEFAULT
LOSS_ENGLISH = ENGLISH_DEFAULT - ENGLISH_MULTILINGUAL
OFFER_FROM_SHARE = math.ceil(LOSS_ENGLISH / (GAIN_NON_ENGLISH + LOSS_ENGLISH) * 20) / 20


def passage_language(text: str) -> str | None:
    """The language (or script) ``text`` is written in; None when it has too few letters
    to tell."""
    scripts: Counter[str] = Counter()
    latin = 0
    for ch in text:
        if not ch.isalpha():
            continue
        if ch.isascii():
            latin += 1
            continue
        name = unicodedata.name(ch, "")
        script = name.split(" ", 1)[0]
        if script == "LATIN":
            latin += 1
        elif script in SCRIPTS:
            scripts[SCRIPTS[script]] += 1
        else:
            scripts["other"] += 1
    letters = latin + sum(scripts.values())
    if letters < MIN_LETTERS:
        return None
    if scripts:
        script, count = scripts.most_common(1)[0]
        if count > latin:
            return script if script != "other" else OTHER_SCRIPT
    best, best_count = ENGLISH, 1
    for language, found in marker_words(text).items():
        if found > best_count:
            best, best_count = language, found
    return best


def marker_words(text: str) -> dict[str, int]:
    """How many of each Latin-script language's commonest words ``text`` holds, English
    first."""
    words = [word.strip(".,;:!?()«»\"'") for word in text.lower().split()]
    return {language: sum(word in markers for word in words) for language, markers in _MARKERS}


@dataclass(frozen=True)
class LanguageMix:
    """Shares of a sample of the library's passages by language, largest first."""

    shares: tuple[tuple[str, float], ...]
    sampled: int

    @property
    def non_english(self) -> float:
        return round(sum(share for language, share in self.shares if language != ENGLISH), 4)

    def to_json(self) -> dict[str, object]:
        return {"shares": dict(self.shares), "sampled": self.sampled}

    def sentence(self) -> str:
        """ "English 62 %, German 38 %" (languages under 1 % left out)."""
        shown = [f"{language} {share:.0%}" for language, share in self.shares if share >= 0.01]
        return ", ".join(shown).replace("%", " %") if shown else "not known yet"


def language_mix(texts: Iterable[str]) -> LanguageMix:
    counts: Counter[str] = Counter()
    for text in texts:
        language = passage_language(text)
        if language is not None:
            counts[language] += 1
    total = sum(counts.values())
    shares = tuple((language, round(count / total, 4)) for language, count in counts.most_common())
    return LanguageMix(shares, total)


@dataclass(frozen=True)
class ModelAdvice:
    """Whether to offer the multilingual model, and the words that offer it."""

    model: str
    message: str

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "message": self.message}


def model_advice(mix: LanguageMix, current_model: str | None) -> ModelAdvice | None:
    """The offer for a library with ``mix``; None when there is nothing to say."""
    if mix.sampled == 0 or current_model == MULTILINGUAL_MODEL_ID:
        return None
    if (current_model or DEFAULT_MODEL_ID) != DEFAULT_MODEL_ID:
        return None
    share = mix.non_english
    if share < OFFER_FROM_SHARE:
        return None
    others = [lang for lang, s in mix.shares if lang != ENGLISH and s >= 0.1]
    named = " and ".join(others[:2]) if others else "other languages"
    share_words = "All" if share >= 0.995 else f"{share:.0%}".replace("%", " %")
    return ModelAdvice(
        MULTILINGUAL_MODEL_ID,
        f"{share_words} of your passages are in {named}. The multilingual model finds the "
        f"right passage far more often outside English ({NON_ENGLISH_MULTILINGUAL:.2f} "
        f"against {NON_ENGLISH_DEFAULT:.2f} on Lectern's German, Russian, Italian, "
        f"Portuguese, Dutch and Arabic tests; {ENGLISH_MULTILINGUAL:.2f} against "
        f"{ENGLISH_DEFAULT:.2f} in English). Switching re-embeds in the background; search "
        "keeps working.",
    )
