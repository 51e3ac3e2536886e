"""Keyword tokenizing: how a passage's and a query's words become the terms the keyword
index holds, as SQL for DuckDB's ``fts`` extension and, for ASCII queries, in Python.

Every snapshot is built by the same ``fts_pragma`` over the rows of ``snapshot_rows_sql``,
and a query's words go through ``term_sql`` (or ``ascii_tokens`` and the same stemmers),
so a word meets its passages whichever way it came. ASCII queries are tokenized in
Python, exactly as fts does. A query leaves out the stop words of the languages the
passages were stemmed as (fts drops English ones only), and ``matched_words`` says
which words of a passage a query met, for a result to light them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence

import duckdb
import Stemmer

from core.text import STOPWORDS_BY_LANGUAGE, WORD

# Digits are kept (the fts default drops them): error codes, figures and identifiers are
# exactly what people search by keyword. Letters are any script's (the default keeps only
# a-z, so Russian, Greek, Arabic or CJK text was not keyword-searchable at all). A change
# here needs a rebuilt keyword index: it goes with CHUNKER_VERSION in core/chunking/passages.py.
IGNORE_PATTERN = r"(\\.|[^\p{L}\p{N}])+"
# fts's one stemmer (Porter, for English) leaves other scripts' words as they are, so a
# Russian "ёжики" never met "ежей". Words written wholly in one of these scripts are
# stemmed by its language's Snowball stemmer before fts sees them (porter then leaves
# the stem alone: its rules are a-z). Stemming comes before fts strips accents, which
# would turn "й" into "и" and matras into nothing under the stemmer's feet. A change here
# or in LANGUAGE_MARKERS needs a rebuilt keyword index: bump FORMAT (upkeep.py).
SCRIPT_STEMMERS = (
    ("Cyrillic", "russian"),
    ("Greek", "greek"),
    ("Arabic", "arabic"),
    ("Devanagari", "hindi"),
    ("Tamil", "tamil"),
)
# Latin-script languages share one script, so a passage's language is guessed from its
# commonest words: the language (a Snowball stemmer's name) with the most of its markers
# among the passage's words, at least two, English winning ties ("" keeps Porter). Words
# that are just as common in English ("die", "in", "a", "plus", "per", "door", ...) are
# left out. Only text with a non-ASCII character is guessed (German, French, Spanish
# or Swedish prose has its umlauts and accents within a few words): an all-ASCII passage
# keeps Porter, and an English library builds exactly as before.
LANGUAGE_MARKERS: tuple[tuple[str, str], ...] = (
    (
        "",
        "the and of to is that with for was are this be by from which have not or it on "
        "as at an were has been their they we these can",
    ),
    (
        "german",
        "der das und ist nicht ein eine zu den von mit sich des auf für im dem auch es "
        "als wie bei oder aus nach wird werden sind hat haben noch nur um über wenn kann "
        "sie ich",
    ),
    (
        "french",
        "le la les et des est une un du dans pour que qui pas sur au avec ce il sont par "
        "ne se ou mais leur cette été aux",
    ),
    (
        "spanish",
        "el la los las y de que en del se por un una es con para al lo como más pero sus "
        "le ya o este sí porque esta entre cuando muy sin sobre también",
    ),
    (
        "italian",
        "il di che la e un una non con del della sono le dei si gli nel alla anche più "
        "ma ha questo essere lo tra dalla delle",
    ),
    (
        "portuguese",
        "o os de que e da em um uma para com não por mais dos das se na ao mas foi ele "
        "ela sua seu são também",
    ),
    (
        "dutch",
        "de het een en van dat op te zijn niet met voor die er aan ook als bij maar om "
        "dan nog wordt naar worden geen",
    ),
    (
        "swedish",
        "och att det som en på är av för med den har de inte om ett var jag sig så från "
        "när kan vi eller också",
    ),
)
# IGNORE_PATTERN keeping combining marks inside words (fts strips them after this split).
WORD_SPLIT_PATTERN = r"(\\.|[^\p{L}\p{N}\p{M}])+"
# Each Chinese or Japanese character set apart by spaces before the split, in passages and
# queries alike (core.text.WORD reads them so too): those scripts put no space between
# words, so a clause was one term that only the same clause matched.
_CJK_SCRIPTS = r"[\p{Han}\p{Hiragana}\p{Katakana}]"


def cjk_spaced(text: str) -> str:
    """SQL for the SQL expression ``text`` with its Chinese and Japanese characters set
    apart."""
    return f"regexp_replace({text}, '({_CJK_SCRIPTS})', ' \\1 ', 'g')"


_LATIN_WORD = r"[\p{Latin}\p{M}]+"
# fts's ``tokenize`` (lower(strip_accents(s)), IGNORE_PATTERN replaced by a space, split
# on spaces) for ASCII text, where strip_accents does nothing and \p{L}\p{N} are a-z0-9:
# calling the macro costs ~3.5 ms of CPU per query (DuckDB compiles its Unicode regex on
# every call). Other text goes through the macro. tests/store/test_keyword_postings.py checks the
# two agree.
ASCII_IGNORE = re.compile(r"(\\.|[^a-z0-9])+")
# Stems remembered per word (the stemmer is a pure function), up to this many words.
STEM_MEMO_MAX = 100_000


def _script_cases(word: str) -> str:
    return " ".join(
        f"WHEN regexp_full_match({word}, '[\\p{{{script}}}\\p{{M}}]+') THEN stem({word}, '{stemmer}')"
        for script, stemmer in SCRIPT_STEMMERS
    )


def _sql_list(words: str) -> str:
    return "[" + ", ".join(f"'{w}'" for w in words.split()) + "]"


def snapshot_rows_sql(chunks_table: str, where: str) -> str:
    """SQL for the (chunk_id, body, lang) rows a snapshot indexes: each chunk's context
    line and text as fts is to read it, and the Latin-script language it was stemmed as
    ("" for Porter alone). Text with a non-ASCII character is split into lower-cased
    words (a Chinese or Japanese character is one), each word of SCRIPT_STEMMERS' scripts replaced by its stem and, in a passage
    of a LANGUAGE_MARKERS language, each Latin-script word by its stem in that language;
    all-ASCII text goes to fts as it is."""
    counts = ", ".join(
        f"len(list_intersect(words, {_sql_list(markers)}))" for _, markers in LANGUAGE_MARKERS
    )
    names = ", ".join(f"'{name}'" for name, _ in LANGUAGE_MARKERS)
    return (
        f"SELECT chunk_id, CASE WHEN words IS NULL THEN raw ELSE array_to_string("
        f"list_transform(words, w -> CASE {_script_cases('w')} WHEN lang <> '' AND "
        f"regexp_full_match(w, '{_LATIN_WORD}') THEN stem(w, lang) ELSE w END), ' ') END "
        "AS body, lang FROM ("
        "SELECT chunk_id, raw, words, CASE WHEN words IS NULL OR list_max(counts) < 2 "
        f"THEN '' ELSE [{names}][list_position(counts, list_max(counts))] END AS lang FROM ("
        f"SELECT chunk_id, raw, words, [{counts}] AS counts FROM ("
        "SELECT chunk_id, raw, CASE WHEN strlen(raw) = length(raw) THEN NULL ELSE "
        f"string_split_regex(lower({cjk_spaced('raw')}), '{WORD_SPLIT_PATTERN}') END AS words "
        "FROM (SELECT id AS chunk_id, coalesce(context, '') || chr(10) || text AS raw "
        f"FROM {chunks_table} WHERE {where}))))"
    )


def term_sql(word: str, language: str | None = None) -> str:
    """SQL for the term the index holds for the lower-cased word ``word`` (an SQL
    expression): its script's stem, or with ``language`` (an SQL expression naming a
    Snowball stemmer) a Latin-script word's stem in that language (NULL for another
    word), then what fts does to a word (accents stripped, Porter)."""
    if language is None:
        inner = f"CASE {_script_cases(word)} ELSE {word} END"
    else:
        inner = (
            f"CASE WHEN regexp_full_match({word}, '{_LATIN_WORD}') "
            f"THEN stem({word}, {language}) END"
        )
    return f"stem(lower(strip_accents({inner})), 'porter')"


def query_terms_sql() -> str:
    """SQL for the distinct terms of the query ``?`` without language variants, in one
    statement (the reference searches of bench/keyword_scale.py and the tests)."""
    return (
        f"SELECT DISTINCT {term_sql('w')} AS t FROM (SELECT unnest(string_split_regex("
        f"lower({cjk_spaced('?')}), '{WORD_SPLIT_PATTERN}')) AS w) WHERE w <> ''"
    )


def fts_pragma(table: str) -> str:
    """The fts index every snapshot gets (its tokenizer, stemmer and stopwords)."""
    return (
        f"PRAGMA create_fts_index('{table}', 'chunk_id', 'body', stemmer='porter', "
        f"stopwords='english', ignore='{IGNORE_PATTERN}', strip_accents=1, lower=1, "
        "overwrite=1)"
    )


def ascii_tokens(text: str) -> list[str] | None:
    """fts's ``tokenize`` of ASCII ``text`` (None for other text)."""
    if not text.isascii():
        return None
    return [w for w in ASCII_IGNORE.sub(" ", text.lower()).split(" ") if w]


def _stop_lists(languages: Sequence[str]) -> list[frozenset[str]]:
    lists = [STOPWORDS_BY_LANGUAGE.get(lang, frozenset()) for lang in languages if lang]
    return [*lists, STOPWORDS_BY_LANGUAGE["russian"]]


def content_words(words: Sequence[str], languages: Sequence[str]) -> list[str]:
    """``words`` without the stop words of ``languages`` (the Latin-script languages the
    index's passages were stemmed as) and of Russian (its own script: no English word is
    one of them). fts leaves those words in the passages it stems (it drops English
    ones only), so a query's "die" met every German passage. Only the languages the
    library holds count: an English library searches "dir" or "als" as it always did."""
    lists = _stop_lists(languages)
    return [w for w in words if not any(w in stop for stop in lists)]


def without_stop_words(words: Sequence[str], languages: Sequence[str]) -> list[str]:
    """:func:`content_words`, or all of ``words`` when they are stop words alone: such a
    query ("die der und") finds the passages it found before. English ones still find
    nothing by keyword, as before ("to be or not to be" is found by meaning)."""
    return content_words(words, languages) or list(words)


_PORTER = Stemmer.Stemmer("porter")
_PORTER_LOCK = threading.Lock()  # a Stemmer object is not safe across threads


def _porter(word: str) -> str:
    with _PORTER_LOCK:
        return str(_PORTER.stemWord(word))


class QueryStems:
    """A query's words as the index's terms, with the stems of words seen remembered
    (the stemmer is a pure function; asking DuckDB costs a statement per query)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str], str] = {}

    def words(self, cur: duckdb.DuckDBPyConnection, query: str) -> list[str]:
        """The query's words as fts splits them, lower-cased, each once."""
        words = ascii_tokens(query)
        if words is None:
            split = (
                f"SELECT unnest(string_split_regex(lower({cjk_spaced('?')}), "
                f"'{WORD_SPLIT_PATTERN}'))"
            )
            words = [str(r[0]) for r in cur.execute(split, [query]).fetchall() if r[0]]
        return list(dict.fromkeys(words))

    def terms(
        self, cur: duckdb.DuckDBPyConnection, query: str, languages: Sequence[str]
    ) -> list[str]:
        """The query's distinct terms as the index holds a document's words: each word's
        own, and its stem in each language the index's passages were stemmed as (the
        question's language is not guessed: a short one has too few words), the stop
        words of those languages left out."""
        return self.terms_of(cur, without_stop_words(self.words(cur, query), languages), languages)

    def terms_of(
        self, cur: duckdb.DuckDBPyConnection, words: Sequence[str], languages: Sequence[str]
    ) -> list[str]:
        pairs = [(w, lang) for w in words for lang in ("", *languages)]
        memo = self.stems(cur, pairs)
        return [t for t in dict.fromkeys(memo[pair] for pair in pairs) if t]

    def stems(
        self, cur: duckdb.DuckDBPyConnection, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], str]:
        """(word, language) -> the term the index holds for the word in a passage of that
        language ("" where the language's stemmer does not take the word: another
        script), every pair of ``pairs`` among them."""
        memo = self._memo
        missing = list(dict.fromkeys(pair for pair in pairs if pair not in memo))
        # An ASCII word's own term is fts's Porter stem alone (no script, no accent to
        # strip): the same Snowball code in-process, where asking DuckDB cost a
        # statement (a sixth of a hybrid search's CPU on SciFact). Other pairs go to
        # DuckDB, whose stemmers for other languages are older than PyStemmer's.
        fresh = {pair: _porter(pair[0]) for pair in missing if not pair[1] and pair[0].isascii()}
        missing = [pair for pair in missing if pair not in fresh]
        if missing:
            # A literal list: a list parameter costs ~3 ms to bind.
            values = ", ".join("('" + w.replace("'", "''") + f"', '{lang}')" for w, lang in missing)
            rows = cur.execute(
                f"SELECT w, l, CASE WHEN l = '' THEN {term_sql('w')} ELSE {term_sql('w', 'l')} "
                f"END FROM (VALUES {values}) AS v(w, l)"
            ).fetchall()
            fresh.update({(str(w), str(lang)): str(t or "") for w, lang, t in rows})
        if fresh:
            # One copy of the memo a query (it is replaced whole, never changed in place:
            # other threads read it).
            if len(memo) + len(fresh) > STEM_MEMO_MAX:
                memo = {pair: memo[pair] for pair in pairs if pair in memo}
            memo = {**memo, **fresh}
            self._memo = memo
        return memo


# The words of a passage as the desktop lights them (rich.term_ranges splits the same way).
_PASSAGE_WORD = WORD


def passage_languages(cur: duckdb.DuckDBPyConnection, texts: Sequence[str]) -> list[str]:
    """Each text's language as the index guesses a passage's (snapshot_rows_sql itself,
    over the texts): "" for Porter alone."""
    if not texts:
        return []
    rows = ", ".join(f"({i}, '', ?)" for i in range(len(texts)))
    table = f"(SELECT * FROM (VALUES {rows}) AS v(id, context, text))"
    found = dict(
        cur.execute(
            f"SELECT chunk_id, lang FROM ({snapshot_rows_sql(table, 'true')})", list(texts)
        ).fetchall()
    )
    return [str(found.get(i) or "") for i in range(len(texts))]


def matched_words(
    cur: duckdb.DuckDBPyConnection,
    stems: QueryStems,
    query: str,
    texts: Sequence[str],
    languages: Sequence[str],
    indexed: Callable[[str], bool],
) -> list[frozenset[str]]:
    """The words of each text (lower-cased) that a keyword search for ``query`` finds
    there: each word taken to the term the index holds for it in the text's language,
    and kept when it is one of the query's terms the index holds (``indexed``), which
    leaves out English stop words. Stop words of the text's language are not matches
    unless the query is nothing else."""
    words = stems.words(cur, query)
    kept = content_words(words, languages)
    wanted = {t for t in stems.terms_of(cur, kept or words, languages) if indexed(t)}
    if not wanted:
        return [frozenset() for _ in texts]
    out: list[frozenset[str]] = []
    for text, lang in zip(texts, passage_languages(cur, texts), strict=True):
        found = list(dict.fromkeys(w.lower() for w in _PASSAGE_WORD.findall(text)))
        pairs = [(w, "") for w in found] + ([(w, lang) for w in found] if lang else [])
        memo = stems.stems(cur, pairs)
        # A query of stop words alone found the passage by them: they are its matches.
        skip: set[str] = set().union(*_stop_lists([lang])) if kept else set()
        out.append(
            frozenset(
                w
                for w in found
                if w not in skip and ((lang and memo[(w, lang)]) or memo[(w, "")]) in wanted
            )
        )
    return out
