"""Words: how questions, identifiers and comments become the word stems that facts are matched on."""

from __future__ import annotations

import re

_STOPWORDS = frozenset(
    ["a", "an", "the", "and", "or", "but", "if", "then", "else", "of", "to", "in", "on", "at", "by", "for", "from", "with", "about", "as", "into", "is", "are", "was", "were", "be", "been", "being", "do", "does", "did", "doing", "have", "has", "had", "having", "i", "me", "my", "we", "our", "you", "your", "he", "she", "it", "its", "they", "them", "their", "this", "that", "these", "those", "there", "here", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "should", "would", "could", "can", "will", "shall", "may", "might", "must", "please", "thanks", "thank", "just", "so", "also", "any", "some", "all", "each", "other", "such", "only", "own", "same", "than", "too", "very", "s", "t", "don", "not", "no", "yes", "ok", "okay", "let", "us", "get", "got", "need", "want", "like", "know", "tell", "say", "said", "use", "used", "using", "function", "code", "write", "python"]
)
# Question words that carry no topic, even though they are not stopwords.
_GENERIC_ASK_WORDS = (
    "anything", "else", "detail", "requirement", "specific", "more", "edge", "case", "special", "clarify",
    "preference", "prefer", "rule", "constraint", "assumption", "expect", "expectation", "behavior",
    "behaviour", "handle", "information", "info", "explain", "describe", "work", "logic", "help", "spec",
    "example", "exactly", "precise", "question", "return", "result", "output", "value", "happen", "mean",
    "supposed", "calculate", "compute", "consider", "account", "matter", "important", "give", "provide",
)
# Words a question may use for what the code calls otherwise (stemmed when the module loads).
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "tie": ("draw",), "draw": ("tie",), "free": ("zero", "0", "nothing"), "zero": ("0",),
    "cost": ("price", "fee", "charge", "rate"), "price": ("cost", "fee", "rate"),
    "fee": ("cost", "charge", "fine"), "fine": ("fee", "charge"), "charge": ("fee", "cost"),
    "fare": ("fee", "cost"), "surcharge": ("extra", "charge", "fee"),
    "cutoff": ("threshold",), "boundary": ("threshold",), "limit": ("threshold", "maximum"),
    "threshold": ("limit",), "cap": ("maximum", "limit"), "ceiling": ("maximum",),
    "max": ("maximum",), "maximum": ("limit",), "most": ("maximum",), "upper": ("maximum",),
    "min": ("minimum",), "minimum": ("limit",), "least": ("minimum",), "lower": ("minimum",),
    "percent": ("rate", "percentage"), "percentage": ("rate", "percent"), "%": ("percent",),
    "decimal": ("round",), "precision": ("round",), "digit": ("round",), "place": ("round",),
    "round": ("decimal",), "format": ("text",), "formatted": ("format",), "display": ("format",),
    "show": ("format", "display"), "shown": ("show", "format", "display"), "look": ("format",),
    "string": ("text",), "message": ("text",),
    "empty": ("missing",), "blank": ("empty",), "missing": ("empty",), "null": ("none",),
    "error": ("invalid",), "exception": ("error",), "invalid": ("error",), "fail": ("error",),
    "negative": ("below",), "sort": ("order",), "order": ("sort",), "rank": ("sort",),
    "ascending": ("sort",), "descending": ("sort",), "tiebreak": ("tie",),
    "bonus": ("extra",), "extra": ("bonus", "additional"), "additional": ("extra",),
    "discount": ("off", "reduce"), "reduce": ("discount",), "skip": ("ignore",), "ignore": ("skip",),
    "default": ("given",), "optional": ("default",), "unit": ("convert",), "convert": ("unit",),
    "lowercase": ("case",), "uppercase": ("case",), "capital": ("case",), "capitalize": ("case",),
    "sensitive": ("case",), "insensitive": ("case",), "whitespace": ("space",), "space": ("whitespace",),
    "separator": ("join",), "delimiter": ("split", "join"), "comma": ("join",),
    "weekend": ("saturday", "sunday"), "lunch": ("block",), "break": ("block", "stop"),
    "big": ("large", "heavy"), "large": ("big",), "heavy": ("big", "weight"), "small": ("short",),
    "long": ("large",), "short": ("small",), "length": ("len",), "count": ("number",),
    "often": ("frequency",), "frequency": ("often",), "append": ("add",), "number": ("count",),
    "initial": ("first",), "start": ("first",), "begin": ("first",), "final": ("last",), "end": ("last",),
}

_WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+(?:\.\d+)?|%")
RAW_TOKEN_RE = re.compile(r"[A-Za-z0-9_\-+]+|[^\sA-Za-z0-9]")


def stem(word: str) -> str:
    """A deliberately small stemmer: plural, -ing, -ed and a final -e, so 'rates' meets 'rate'."""
    if not word or not word[0].isalpha():
        return word
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


GENERIC_ASK = frozenset(stem(w) for w in _GENERIC_ASK_WORDS)
SYNONYM_STEMS: dict[str, frozenset[str]] = {}
for _key, _values in _SYNONYMS.items():
    SYNONYM_STEMS.setdefault(stem(_key), frozenset())
    SYNONYM_STEMS[stem(_key)] |= frozenset(stem(v) for v in _values)


def word_stems(text: str) -> list[str]:
    """Lower-cased word stems of ``text``; identifiers split on ``_`` and camelCase."""
    out = []
    for piece in _WORD_RE.findall(text):
        lowered = piece.lower()
        if lowered in _STOPWORDS:
            continue
        out.append(stem(lowered))
    return out


def number_forms(value: float) -> set[str]:
    """Spellings of a number a question may use: 0.15 -> {'0.15', '15'} (as a percentage)."""
    forms: set[str] = set()
    if isinstance(value, bool):
        return forms
    forms.add(repr(value))
    if isinstance(value, float) and value.is_integer():
        forms.add(str(int(value)))
    if isinstance(value, int):
        forms.add(f"{value:,}")
    if isinstance(value, float) and 0 < abs(value) < 1:
        percent = round(value * 100, 6)
        forms.add(str(int(percent)) if float(percent).is_integer() else repr(percent))
    if isinstance(value, float) and 1 < value < 2:  # 1.25 is "25% more"
        percent = round((value - 1) * 100, 6)
        forms.add(str(int(percent)) if float(percent).is_integer() else repr(percent))
    return forms
