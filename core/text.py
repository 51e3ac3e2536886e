"""Words and sentences, one definition for every stage that needs them.

Chunking (a chunk never ends inside a sentence), citation spans (the sentences of a cited
chunk that support a claim) and extractive answers (the sentences that answer a question)
must agree on what a sentence is, or a highlight could start inside a chunk's first
sentence. Sentences end at Latin and CJK full stops, blank lines and bullets, and not after
abbreviations or initials; words are lowercased, stop words dropped and plurals folded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# --- words --------------------------------------------------------------------------

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "may",
        "might",
        "must",
        "shall",
        "upon",
        "within",
        "without",
        "via",
        "per",
        "among",
        "whether",
        "yet",
        "though",
        "although",
        "however",
        "thus",
        "therefore",
        "one",
        "ones",
        "many",
        "much",
        "several",
        "etc",
        "according",
        "source",
        "sources",
        "document",
        "documents",
        "did",
        "does",
        "say",
        "says",
        "said",
        "called",
        "named",
        "known",
        "name",
    ]
)


def _word_list(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The function words of the other languages whose passages the keyword index stems by
# their own rules (its LANGUAGE_MARKERS, and Russian by script), keyed by Snowball
# stemmer name. fts drops only English stop words, so a German passage's "die", "der"
# and "ist" are terms like any other: a query's "die" met every German passage and lit
# its articles. Words that are as much English words are left out ("war", "man", "son",
# "sea", "era", "door", "ai", "eu"), so a library mixing languages still finds them;
# "die" stays in, the commonest German word by far.
STOPWORDS_BY_LANGUAGE: dict[str, frozenset[str]] = {
    "german": _word_list(
        """aber alle allem allen aller alles als also am an andere anderem anderen anderer
        anderes auch auf aus bei bis bist da damit dann das dass daß dasselbe dazu dein
        deine deinem deinen deiner deines dem demselben den denn denselben der derer
        derselbe derselben des desselben dessen dich die dies diese dieselbe dieselben
        diesem diesen dieser dieses dir doch dort du durch ein eine einem einen einer eines
        einige einigem einigen einiger einiges er es etwas euch euer eure eurem euren eurer
        eures für gegen gewesen habe haben hatte hatten hier hin hinter ich ihm ihn ihnen
        ihr ihre ihrem ihren ihrer ihres im in indem ins ist jede jedem jeden jeder jedes
        jene jenem jenen jener jenes kann kein keine keinem keinen keiner keines können
        könnte manche manchem manchen mancher manches mein meine meinem meinen meiner
        meines mich mir mit muss musste nach nicht nichts noch nun nur ob oder ohne sehr
        sein seine seinem seinen seiner seines sich sie sind so solche solchem solchen
        solcher solches soll sollte sondern sonst über um und uns unser unsere unserem
        unseren unseres unter vom von vor während waren warst was weil welche welchem
        welchen welcher welches wenn werde werden wie wieder will wir wird wirst wo wollen
        wollte würde würden zu zum zur zwar zwischen"""
    ),
    "french": _word_list(
        """au aux avec ce ces dans de des du elle en et eux il je la le leur lui ma mais me
        même mes moi mon ne nos notre nous on ou où par pas pour qu que qui sa se ses sur ta
        te tes toi tu un une vos votre vous c d j l à m n s t y été étée étées étés étant
        suis es est sommes êtes sont serai seras sera serons serez seront serais serait
        serions seriez seraient étais était étions étiez étaient fus fut fûmes fûtes furent
        sois soit soyons soyez soient fusse fusses fût fussions fussiez fussent ayant eue
        eues eus avons avez ont aurai auras aurons aurez auront aurais aurait aurions
        auriez auraient avais avait avions aviez avaient eut eûmes eûtes eurent aie aies
        ait ayons ayez aient ceci cela celà cet cette ici ils les leurs quel quels quelle
        quelles sans soi"""
    ),
    "spanish": _word_list(
        """de la que el en y a los del se las por un una para con no su al lo como más pero
        sus le ya o este sí porque esta entre cuando muy sobre también me hasta donde
        quien desde todos uno les ni contra otros ese eso ante ellos e esto mí antes
        algunos qué unos yo otro otras otra él tanto esa estos mucho quienes nada muchos
        cual poco ella estar estas algunas algo nosotros mi mis tú te ti tu tus ellas
        nosotras vosotros vosotras mío mía míos mías tuyo tuya tuyos tuyas suyo suya
        suyos suyas nuestro nuestra nuestros nuestras vuestro vuestra vuestros vuestras
        esos esas estoy estás está estamos estáis están esté estaba estaban es soy eres
        somos sois seas seamos sería será fue eran fueron ha he has hemos han había
        habían tengo tiene tienen tenía"""
    ),
    "italian": _word_list(
        """al allo agli all alla alle col coi da dal dallo dai dagli dall dalla dalle
        di del dello dei degli dell della delle in nel nello nei negli nell nella nelle su
        sul sullo sui sugli sull sulla sulle per tra contro io tu lui lei noi voi loro mio
        mia miei mie tuo tua tuoi tue suo sua suoi sue nostro nostra nostri nostre vostro
        vostra vostri vostre mi ti ci vi lo la li le gli ne il un uno una ma ed se perché
        anche dov che chi cui non più quale quanto quanti quanta quante quello quelli
        quella quelle questo questi questa queste si tutto tutti a c e i l o ho hai ha
        abbiamo avete hanno abbia sono sei è siamo siete sia siano sarà eri erano fui fu
        furono fosse essere avere stato stata stati"""
    ),
    "portuguese": _word_list(
        """de a o que e do da em um para com não uma no se na por mais as dos como mas ao
        ele das à seu sua ou quando muito nos já também só pelo pela até isso ela entre
        depois mesmo aos seus quem nas me esse eles você essa num nem suas meu às minha
        numa pelos elas qual nós lhe deles essas esses pelas este dele tu te vocês vos lhes
        meus minhas teu tua teus tuas nosso nossa nossos nossas dela delas esta estes
        estas aquele aquela aqueles aquelas isto aquilo estou está estamos estão esteve
        estava estavam há houve sou somos são eram fui foi foram seja sejam ser tenho tem
        temos têm tinha tinham teve"""
    ),
    "dutch": _word_list(
        """de en ik te dat die in een hij het niet zijn is was op aan als voor had er maar om
        hem dan zou of wat mijn dit zo over ze zich bij ook tot je mij uit der daar haar
        naar heb heeft hebben deze u nog zal me zij nu geen omdat iets worden toch al waren
        veel meer doen toen moet zonder kan hun dus alles onder ja eens hier wie werd
        altijd doch wordt wezen kunnen ons zelf tegen na reeds wil kon niets uw iemand
        geweest andere"""
    ),
    "swedish": _word_list(
        """och det att i en jag hon som han på den med var sig för så är ett om hade de av
        icke mig du henne då nu har inte hans honom skulle hennes där ej vid kunde något
        från ut när efter upp vi dem vara vad över än kan sina här ha mot alla under någon
        eller allt mycket ju denna själv detta åt utan varit hur ingen ni bli blev oss
        dessa några deras blir mina samma vilken er sådan vår blivit dess inom mellan
        sådant varför varje vilka ditt vem vilket sådana vart dina vars vårt våra ert
        vilkas"""
    ),
    "russian": _word_list(
        """и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по
        только ее её мне было вот от меня еще ещё нет о из ему теперь когда даже ну ли
        если уже или ни быть был него до вас нибудь опять уж вам ведь там потом себя
        ничего ей может они тут где есть надо ней для мы тебя их чем была сам чтоб без
        будто чего раз тоже себе под будет ж тогда кто этот того потому этого какой
        совсем ним здесь этом почти мой тем чтобы нее сейчас были куда зачем всех
        никогда можно при наконец об другой хоть после над больше тот через эти нас про
        всего них какая много разве эту моя впрочем свою этой перед иногда чуть том
        нельзя такой им более всегда конечно всю между"""
    ),
}


# Chinese and Japanese are written without spaces: each of their characters is a word
# of its own here and in the keyword index (core/store/keyword/tokens.py), as a search
# engine's unigram tokenizer reads them, or a whole clause would be one "word" that no
# question ever matched. Hangul has spaces between its words.
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
WORD = re.compile(rf"[{CJK}]|[^\W{CJK}]+")
_WORD = WORD
_CJK_CHAR = re.compile(rf"[{CJK}]")


def stem(word: str) -> str:
    # Just enough folding for overlap between an answer and its source (plural/possessive).
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    return [
        stem(w)
        for w in words(text)
        if w not in STOPWORDS and (len(w) > 1 or w.isdigit() or _CJK_CHAR.match(w))
    ]


def overlap(query_words: Sequence[str], text_words: set[str]) -> float:
    """Share of the distinct query words present in the text."""
    unique = set(query_words)
    if not unique:
        return 0.0
    return len(unique & text_words) / len(unique)


# --- sentences ----------------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "vs",
        "no",
        "nos",
        "fig",
        "figs",
        "al",
        "inc",
        "ltd",
        "jr",
        "sr",
        "prof",
        "gen",
        "col",
        "lt",
        "sgt",
        "approx",
        "ca",
        "cf",
        "p",
        "pp",
        "vol",
        "ed",
        "eds",
        "dept",
        "est",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "art",
        "sec",
        "ch",
    ]
)
# A sentence ends at . ! ? (plus closing quotes/brackets) when whitespace and then something
# other than a lowercase letter follows; at CJK full stops; and at blank lines or bullets.
_BOUNDARY = re.compile(
    r"(?P<latin>[.!?…]+[\"'”’)\]]*)(?=\s+(?![a-z]))"
    r"|(?P<cjk>[。！？]+[」』”’)]*)"
    r"|(?P<para>\n[ \t]*\n\s*)"
    r"|(?P<bullet>\n(?=[ \t]*(?:[-*•·▪‣]|\d{1,3}[.)])\s))"
)
_MAX_SENTENCE = 600


# A day written as an ordinal before its month ("bis zum 6. September", "den 1. maj"):
# German, the Nordic languages and others put a full stop there that ends no sentence.
_ORDINAL_DAY = re.compile(r"(?:^|(?<=[\s(]))\d{1,2}$")
# Their month names; those only English has ("March", "June") are left out, since there
# "Table 12. March was…" is two sentences.
_MONTH_AFTER = re.compile(
    r"\s+(?:januar|jänner|februar|märz|marts|mars|april|mai|maj|juni|juli|august|september"
    r"|oktober|november|dezember|december|desember|[a-zäö]+kuuta)\b",
    re.IGNORECASE,
)


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``dot`` closes an abbreviation, an initial or a day's
    ordinal, not a sentence."""
    head = text[max(0, dot - 12) : dot]
    if _ORDINAL_DAY.search(head) and _MONTH_AFTER.match(text, dot + 1):
        return True
    match = re.search(r"(?:^|[\s(\[])([A-Za-z.]{1,6})$", head)
    if not match:
        return False
    token = match.group(1)
    if re.fullmatch(r"(?:[A-Z]\.)*[A-Z]", token):  # J. / U.S.
        return True
    return token.lower().rstrip(".") in _ABBREVIATIONS


def trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def split_sentences(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the sentences of ``text[start:end]``, as offsets into
    ``text``, whitespace trimmed."""
    stop = len(text) if end is None else end
    spans: list[tuple[int, int]] = []
    for match in _BOUNDARY.finditer(text, start, stop):
        if match.group("latin") is not None:
            punct = match.group("latin")
            if (
                punct.startswith(".")
                and punct.rstrip("\"'”’)]") == "."
                and _is_abbreviation(text, match.start())
            ):
                continue
            cut = next_start = match.end()
        elif match.group("cjk") is not None:
            cut = next_start = match.end()
        else:
            cut = match.start()
            next_start = match.end()
        span = trimmed(text, start, cut)
        if span:
            spans.append(span)
        start = next_start
    span = trimmed(text, start, stop)
    if span:
        spans.append(span)
    return [piece for s in spans for piece in _split_long(text, s)]


def _split_long(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    # Tables and lists without punctuation would otherwise become one huge "sentence".
    start, end = span
    if end - start <= _MAX_SENTENCE or "\n" not in text[start:end]:
        return [span]
    out: list[tuple[int, int]] = []
    pos = start
    for line in re.finditer(r"\n", text[start:end]):
        cut = start + line.start()
        if cut - pos >= 80:
            piece = trimmed(text, pos, cut)
            if piece:
                out.append(piece)
            pos = cut + 1
    piece = trimmed(text, pos, end)
    if piece:
        out.append(piece)
    return out
