"""A simulated human for backend tasks that needs no model: it answers from the reference code.

In ColBench the human knows a reference Python function (``hidden_information``) and answers the
agent's questions about it in plain words, without handing over the code. This simulator does the
same deterministically:

1. The reference is parsed with :mod:`ast` (once per distinct reference; the result is cached) and
   turned into *facts*: one plain-English sentence per decision the code makes, e.g.
   ``if age < 18: return 'minor'`` becomes "If age is less than 18, the result is 'minor'."
   Facts cover default arguments, constants and lookup tables (one fact per entry, and the whole
   table), conditions with their ranges ("temp is at least 37.5 and less than 38.5") and order,
   what is returned and how it is rounded or formatted (f-string patterns, format specs), loops
   and accumulations, skipped items, raised errors, what each input looks like (read from how the
   code uses it: "orders is a list; each order has the entries 'price' and 'qty'"), and the
   reference's own comments, said as notes.
2. Each fact carries keywords: the words of the identifiers it mentions (split on ``_`` and
   camelCase), its literal values, words of nearby comments, and words for what the construct
   means ("threshold", "limit", "round", "decimal", "format", "empty", "default", "error", ...).
3. A question is scored against every fact (matched keywords weighted by how rare they are among
   the task's facts, synonyms at half weight, a bonus for literal values named in the question).
   The reply states the best one to three facts, at most two sentences and 400 characters, with
   the constant or update the best fact relies on ("converted is multiplied by 1 minus fee rate"
   brings "fee rate is 0.015"). A message with several questions gets one fact per question.
   "What should it return?" gets the result; "any other requirements?" gets facts not yet said in
   the dialogue; anything else the code does not cover gets
   :data:`~colbench_gym.simulators.base.DONT_KNOW`.

The reply never quotes the reference: expressions are spoken in words ("price times 0.9"), and a
fact that would still contain a whole source line longer than 30 characters is never said.
Hidden information that is not Python is answered from its best-matching sentences.

Example::

    from colbench_gym.simulators.offline_backend import OfflineBackendSimulator
    from colbench_gym.simulators.base import SimulatorRequest
    from colbench_gym.tasks import load_builtin

    task = load_builtin("train")[0]
    human = OfflineBackendSimulator()
    request = SimulatorRequest(task, [
        {"role": "user", "content": task.problem_description},
        {"role": "assistant", "content": "Is there a surcharge for heavy parcels?"},
    ])
    print(human.reply(request).text)
    # If weight kg is more than 20, cost increases by 10. Also, note: Heavy parcel surcharge.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from colbench_gym.simulators.base import DONT_KNOW, SimulatorReply, SimulatorRequest

MAX_REPLY_CHARS = 400
MAX_FACTS_PER_REPLY = 3
# A source line at least this long is never repeated verbatim in a reply.
LEAK_LINE_CHARS = 30
# Questions are long only by accident (pasted code, logs); the question itself sits at the ends.
_QUESTION_HEAD_CHARS = 2000
_QUESTION_TAIL_CHARS = 2000
_MAX_EXPRESSION_CHARS = 240
_MAX_CLAUSE_CHARS = 160
_MAX_SEQUENCE_ITEMS = 12
# A reference is a short function; these bound the work on a pathological one (a huge data table).
_MAX_SOURCE_CHARS = 60_000
_MAX_TABLE_FACTS = 100
_MAX_FACTS = 800

# ---------------------------------------------------------------------------------------------
# Words
# ---------------------------------------------------------------------------------------------

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
_RAW_TOKEN_RE = re.compile(r"[A-Za-z0-9_\-+]+|[^\sA-Za-z0-9]")


def _stem(word: str) -> str:
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


_GENERIC_ASK = frozenset(_stem(w) for w in _GENERIC_ASK_WORDS)
_SYNONYM_STEMS: dict[str, frozenset[str]] = {}
for _key, _values in _SYNONYMS.items():
    _SYNONYM_STEMS.setdefault(_stem(_key), frozenset())
    _SYNONYM_STEMS[_stem(_key)] |= frozenset(_stem(v) for v in _values)


def _words(text: str) -> list[str]:
    """Lower-cased word stems of ``text``; identifiers split on ``_`` and camelCase."""
    out = []
    for piece in _WORD_RE.findall(text):
        lowered = piece.lower()
        if lowered in _STOPWORDS:
            continue
        out.append(_stem(lowered))
    return out


def _number_forms(value: float) -> set[str]:
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


def _say_identifier(name: str) -> str:
    """'weight_kg' -> 'weight kg', 'maxSpeed' -> 'max speed'; single letters stay as they are."""
    parts = [p for p in re.split(r"_+", name) if p]
    words: list[str] = []
    for part in parts:
        words.extend(w.lower() if not w.isupper() or len(w) == 1 else w
                     for w in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", part))
    return " ".join(words) if words else name


# ---------------------------------------------------------------------------------------------
# Facts
# ---------------------------------------------------------------------------------------------


@dataclass
class Fact:
    """One sentence the human can say, with what a question must mention to get it."""

    text: str
    keywords: frozenset[str]
    literals: frozenset[str]
    order: int
    volunteer: float = 1.0
    """How worth saying unprompted (constants and decisions above plumbing)."""
    kind: str = "code"
    """'code'; 'return' (what the function gives back); 'signature' (its name and inputs); 'shape'
    (what an input looks like); 'note' (a comment in the reference, said as it is)."""
    lead: str = ""
    """The conditions the sentence starts with ('For each item in cart, if ...'), for merging replies."""
    action: str = ""
    """The rest of the sentence ('total increases by price')."""
    subject: frozenset[str] = frozenset()
    """Words of the name this fact defines; a question naming it all gets this fact first."""
    defines: frozenset[str] = frozenset()
    """Variables this fact sets or changes."""
    uses: frozenset[str] = frozenset()
    """Variables this fact reads, to find the constants and updates an answer relies on."""


@dataclass
class Knowledge:
    """Everything the human can say about one hidden reference, built once and cached."""

    facts: list[Fact]
    idf: dict[str, float]
    guard: _LeakGuard
    is_code: bool
    name_words: frozenset[str] = frozenset()


class _Collector:
    """Collects the words, literal values, names and concept tags an expression mentions."""

    def __init__(self) -> None:
        self.keywords: set[str] = set()
        self.literals: set[str] = set()
        self.names: set[str] = set()

    def tag(self, *words: str) -> None:
        self.keywords.update(_stem(w) for w in words)

    def name(self, identifier: str) -> None:
        self.keywords.update(_words(identifier))

    def literal(self, value: object) -> None:
        if isinstance(value, str):
            text = value.strip()
            if text and len(text) <= 40:
                self.literals.add(text.lower())
            self.keywords.update(_words(value[:200]))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            forms = _number_forms(value)
            self.literals.update(forms)
            self.keywords.update(forms)
        elif value is None:
            self.tag("none", "missing", "empty", "nothing")
        elif isinstance(value, bool):
            self.tag("true" if value else "false")


_CMP_WORDS = {
    ast.Lt: "is less than", ast.LtE: "is at most", ast.Gt: "is more than", ast.GtE: "is at least",
    ast.Eq: "is", ast.NotEq: "is not", ast.In: "is in", ast.NotIn: "is not in",
    ast.Is: "is", ast.IsNot: "is not",
}
_CMP_NEGATED = {
    ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_CMP_TAGS = {
    ast.Lt: ("threshold", "limit", "below", "under", "less", "maximum", "cutoff", "up"),
    ast.LtE: ("threshold", "limit", "below", "under", "up", "maximum", "cutoff", "inclusive"),
    ast.Gt: ("threshold", "limit", "above", "over", "more", "exceed", "minimum", "cutoff"),
    ast.GtE: ("threshold", "limit", "above", "over", "least", "minimum", "cutoff", "inclusive"),
}
_BIN_WORDS = {
    ast.Add: "plus", ast.Sub: "minus", ast.Mult: "times", ast.Div: "divided by",
    ast.FloorDiv: "divided by", ast.Mod: "modulo",
    ast.Pow: "to the power of", ast.MatMult: "matrix-times", ast.BitAnd: "bitwise-and",
    ast.BitOr: "bitwise-or", ast.BitXor: "bitwise-xor", ast.LShift: "shifted left by",
    ast.RShift: "shifted right by",
}
_BIN_TAGS = {
    ast.Add: ("add", "plus", "total", "extra"), ast.Sub: ("subtract", "minus", "less", "deduct"),
    ast.Mult: ("multiply", "times", "factor", "rate"), ast.Div: ("divide", "per", "average", "convert"),
    ast.FloorDiv: ("divide", "whole", "integer", "floor", "down", "round"),
    ast.Mod: ("remainder", "modulo", "divisible", "even", "odd", "every", "wrap"),
    ast.Pow: ("power", "square", "exponent"),
}
# Binding strength, so 'a plus b times c' needs no parentheses but '(a plus b) times c' does.
_PRECEDENCE = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2, ast.FloorDiv: 2, ast.Mod: 2, ast.Pow: 3}
_AUG_WORDS = {
    ast.Add: "increases by", ast.Sub: "decreases by", ast.Mult: "is multiplied by",
    ast.Div: "is divided by", ast.FloorDiv: "is divided (rounded down) by", ast.Mod: "becomes its remainder modulo",
    ast.Pow: "is raised to the power",
}
_AUG_TAGS = {
    ast.Add: ("add", "increase", "accumulate", "extra", "bonus", "plus", "total"),
    ast.Sub: ("subtract", "decrease", "deduct", "minus", "reduce"),
    ast.Mult: ("multiply", "scale", "factor", "percent", "rate"),
    ast.Div: ("divide", "split", "per"),
}
# Method calls: (phrase with {obj} and {args}, concept tags).
_METHODS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lower": ("{obj} in lowercase", ("case", "lowercase", "insensitive", "sensitive", "capital")),
    "casefold": ("{obj} in lowercase", ("case", "lowercase", "insensitive", "sensitive")),
    "upper": ("{obj} in uppercase", ("case", "uppercase", "insensitive", "sensitive", "capital")),
    "title": ("{obj} in title case", ("case", "capital", "title")),
    "capitalize": ("{obj} with its first letter capitalised", ("case", "capital")),
    "strip": ("{obj} with surrounding {args} removed", ("whitespace", "space", "trim", "strip")),
    "lstrip": ("{obj} with leading {args} removed", ("whitespace", "space", "trim", "strip")),
    "rstrip": ("{obj} with trailing {args} removed", ("whitespace", "space", "trim", "strip", "punctuation")),
    "split": ("{obj} split on {args}", ("split", "word", "separate", "delimiter")),
    "join": ("the items of {args} joined with {obj}", ("join", "separator", "delimiter", "comma", "combine")),
    "replace": ("{obj} with {args} replaced", ("replace", "substitute")),
    "startswith": ("{obj} starts with {args}", ("start", "begin", "prefix")),
    "endswith": ("{obj} ends with {args}", ("end", "suffix")),
    "count": ("how many times {args} occurs in {obj}", ("count", "number", "occurrence")),
    "find": ("the position of {args} in {obj}", ("position", "find", "index")),
    "rfind": ("the position of the last {args} in {obj}", ("position", "last", "find")),
    "index": ("the position of {args} in {obj}", ("position", "index")),
    "get": ("the {args} entry of {obj}", ("lookup", "table", "default")),
    "items": ("each key and value of {obj}", ("each", "key", "value")),
    "keys": ("the keys of {obj}", ("key",)),
    "values": ("the values of {obj}", ("value",)),
    "isdigit": ("{obj} is all digits", ("digit", "number", "numeric")),
    "isnumeric": ("{obj} is numeric", ("digit", "number", "numeric")),
    "isalpha": ("{obj} is all letters", ("letter", "alphabetic")),
    "isalnum": ("{obj} is letters or digits", ("letter", "digit", "alphanumeric", "symbol", "punctuation")),
    "isupper": ("{obj} is uppercase", ("uppercase", "capital", "case")),
    "islower": ("{obj} is lowercase", ("lowercase", "case")),
    "isspace": ("{obj} is whitespace", ("whitespace", "space")),
    "format": ("the text {obj} filled in with {args}", ("format", "text", "message")),
    "append": ("{args} is added to {obj}", ("add", "append", "list")),
    "extend": ("the items of {args} are added to {obj}", ("add", "extend", "list")),
    "pop": ("an item taken out of {obj}", ("remove",)),
    "remove": ("{args} is removed from {obj}", ("remove",)),
    "sort": ("{obj} is sorted", ("sort", "order")),
    "zfill": ("{obj} padded with zeros to {args} characters", ("pad", "zero", "width")),
    "ljust": ("{obj} padded on the right to {args} characters", ("pad", "align", "width")),
    "rjust": ("{obj} padded on the left to {args} characters", ("pad", "align", "width")),
    "center": ("{obj} centred in {args} characters", ("pad", "center", "width")),
}
# Builtins: (phrase with {0}, {1}, {args}; concept tags).
_BUILTINS: dict[str, tuple[str, tuple[str, ...]]] = {
    "len": ("the length of {0}", ("length", "count", "number", "many", "size", "long")),
    "sum": ("the sum of {0}", ("sum", "total", "add")),
    "abs": ("the absolute value of {0}", ("absolute", "negative", "difference")),
    "int": ("{0} as a whole number (fraction dropped)", ("integer", "whole", "truncate", "int")),
    "float": ("{0} as a decimal number", ("float", "decimal")),
    "str": ("{0} as text", ("text", "string")),
    "bool": ("whether {0} is set", ("boolean",)),
    "list": ("{0} as a list", ("list",)),
    "tuple": ("{0} as a tuple", ("tuple",)),
    "set": ("the distinct items of {0}", ("unique", "distinct", "duplicate")),
    "dict": ("{args} as a mapping", ("mapping", "dictionary")),
    "reversed": ("{0} in reverse order", ("reverse", "order")),
    "enumerate": ("each position and item of {0}", ("each", "position", "index")),
    "zip": ("matching items of {args}", ("pair", "each")),
    "any": ("any of {0} holds", ("any", "least", "one")),
    "all": ("all of {0} hold", ("all", "every")),
    "range": ("the numbers in range({args})", ("range", "each", "number", "times")),
    "print": ("it prints {args}", ("print", "display")),
    "isinstance": ("{0} is of type {1}", ("type", "kind")),
    "type": ("the type of {0}", ("type",)),
    "ord": ("the character code of {0}", ("code", "character")),
    "chr": ("the character with code {0}", ("character",)),
    "divmod": ("{0} divided by {1} with remainder", ("divide", "remainder")),
    "pow": ("{0} to the power of {1}", ("power",)),
    "hash": ("a hash of {0}", ("hash",)),
}
_MATH = {
    "ceil": ("{0} rounded up", ("round", "up", "ceiling", "whole")),
    "floor": ("{0} rounded down", ("round", "down", "floor", "whole")),
    "sqrt": ("the square root of {0}", ("square", "root")),
    "log": ("the logarithm of {args}", ("log", "logarithm")),
    "exp": ("e to the power of {0}", ("exponential",)),
    "pi": ("pi", ("pi",)),
}


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _ordinal(index: int) -> str:
    """0 -> 'first', 11 -> '12th': positions as people count them."""
    if index < len(_ORDINALS):
        return _ORDINALS[index]
    number = index + 1
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _describe_format_spec(spec: str) -> str:
    """'.2f' -> 'with 2 decimals'; '<20' -> 'left-aligned in 20 characters'; ',.2f' adds separators."""
    match = re.fullmatch(r"(?:(.)?([<>^=]))?([+\- ])?(#)?(0)?(\d+)?([,_])?(?:\.(\d+))?([bcdeEfFgGnosxX%])?", spec)
    if not match:
        return f"formatted as '{spec}'"
    fill, align, _sign, _alt, zero, width, grouping, precision, kind = match.groups()
    parts = []
    if width:
        where = {"<": "left-aligned", ">": "right-aligned", "^": "centred", "=": "padded"}.get(align or "", "padded")
        if zero and not align:
            where = "zero-padded"
        filler = f" (filled with '{fill}')" if fill else ""
        parts.append(f"{where} in {width} characters{filler}")
    if grouping:
        parts.append("with thousands separators")
    if precision is not None and kind in (None, "f", "F", "%", "e", "E", "g", "G"):
        parts.append(f"with {precision} decimals")
    if kind == "%":
        parts.append("as a percentage")
    elif kind in ("x", "X"):
        parts.append("in hexadecimal")
    elif kind == "b":
        parts.append("in binary")
    elif kind == "e":
        parts.append("in scientific notation")
    return ", ".join(parts) if parts else f"formatted as '{spec}'"


class _Speaker:
    """Renders expressions in words; never emits source text longer than a literal."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()
        self._encoded: dict[int, bytes] = {}

    def _number_as_written(self, node: ast.Constant) -> str | None:
        """'1.80' as the reference writes it (repr would say 1.8); offsets are UTF-8 bytes."""
        line, end_line = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if line is None or line != end_line or not 0 < line <= len(self.lines):
            return None
        if line not in self._encoded:
            self._encoded[line] = self.lines[line - 1].encode("utf-8")
        try:
            return self._encoded[line][node.col_offset:node.end_col_offset].decode("utf-8")  # type: ignore[misc]
        except UnicodeDecodeError:
            return None

    def say(self, node: ast.AST | None, out: _Collector, depth: int = 0, condition: bool = False) -> str:
        """``node`` in words; an expression too long to say is summarised instead."""
        if node is None:
            return "nothing"
        text = self._say(node, out, depth)
        limit = _MAX_CLAUSE_CHARS if condition else _MAX_EXPRESSION_CHARS
        if len(text) > limit and depth == 0:
            return self._summary(node, out, condition)
        return text

    def _summary(self, node: ast.AST, out: _Collector, condition: bool = False) -> str:
        """A short gist of an expression too long to say: what it is built from and its constants."""
        if isinstance(node, ast.Dict):
            keys = [self._say(k, out, 1) for k in node.keys[:8] if k is not None]
            more = f" and {len(node.keys) - 8} more" if len(node.keys) > 8 else ""
            return f"a mapping with the keys {', '.join(keys)}{more}" if keys else "a mapping"
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and node.elts and all(
                isinstance(e, ast.Dict) for e in node.elts):
            first: ast.Dict = node.elts[0]  # type: ignore[assignment]
            keys = [self._say(k, out, 1) for k in first.keys[:8] if k is not None]
            return f"a list of {len(node.elts)} mappings with the keys {', '.join(keys)}"
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            shown = [self._say(e, out, 1) for e in node.elts[:4]]
            shown = [s if len(s) <= 40 else s[:37] + "..." for s in shown]
            return f"{len(node.elts)} items such as {', '.join(shown)}"
        callees = {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
        names: list[str] = []
        constants: list[str] = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and id(sub) not in callees and sub.id not in names:
                names.append(sub.id)
                out.names.add(sub.id)
            elif isinstance(sub, ast.Constant) and not isinstance(sub.value, bool) and sub.value is not None:
                shown = self._constant(sub)
                if shown not in constants and len(shown) <= 40:
                    constants.append(shown)
        spoken = _and([_say_identifier(n) for n in names[:6]]) if names else "the inputs"
        using = f" (with {', '.join(constants[:8])})" if constants else ""
        if condition:
            return f"a check on {spoken}{using} holds"
        return f"computed from {spoken}{using}"

    def _constant(self, node: ast.Constant) -> str:
        value = node.value
        if isinstance(value, str):
            shown = value if len(value) <= 120 else value[:117] + "..."
            return repr(shown)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            segment = self._number_as_written(node)
            if segment and re.fullmatch(r"[0-9_.eE+\-xXoObBjJ]+", segment):
                return segment.replace("_", "")
            return repr(value)
        if isinstance(value, bytes):
            return repr(value[:40])
        return repr(value)

    def _items(self, nodes: Sequence[ast.AST], out: _Collector, depth: int) -> str:
        shown = [self._say(n, out, depth + 1) for n in nodes[:_MAX_SEQUENCE_ITEMS]]
        if len(nodes) > _MAX_SEQUENCE_ITEMS:
            shown.append(f"and {len(nodes) - _MAX_SEQUENCE_ITEMS} more")
        return ", ".join(shown)

    def _paren(self, node: ast.AST, out: _Collector, depth: int, parent: int = 0, right: bool = False) -> str:
        """Say ``node``, in parentheses where a reader could otherwise group it wrongly."""
        text = self._say(node, out, depth + 1)
        if isinstance(node, ast.BinOp):
            own = _PRECEDENCE.get(type(node.op), 0)
            if own < parent or (own == parent and right) or isinstance(node.op, ast.FloorDiv) or own == 0:
                return f"({text})"
            return text
        if isinstance(node, (ast.BoolOp, ast.IfExp, ast.Compare)):
            return f"({text})"
        return text

    def _say(self, node: ast.AST, out: _Collector, depth: int) -> str:
        if depth > 12:
            return "..."
        if isinstance(node, ast.Constant):
            out.literal(node.value)
            return self._constant(node)
        if isinstance(node, ast.Name):
            out.name(node.id)
            out.names.add(node.id)
            return _say_identifier(node.id)
        if isinstance(node, ast.Attribute):
            out.name(node.attr)
            if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in _MATH:
                return _MATH[node.attr][0]
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                return _say_identifier(node.attr)
            return f"the {_say_identifier(node.attr)} of {self._say(node.value, out, depth + 1)}"
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                if isinstance(node.operand, ast.Constant):
                    out.tag("negative")
                    value = node.operand.value
                    out.literal(-value if isinstance(value, (int, float)) else value)
                    return "-" + self._constant(node.operand)
                return f"minus {self._paren(node.operand, out, depth)}"
            if isinstance(node.op, ast.Not):
                if isinstance(node.operand, (ast.Name, ast.Attribute, ast.Subscript)):
                    out.tag("empty", "missing", "nothing", "zero", "blank")
                    return f"{self._say(node.operand, out, depth + 1)} is empty or missing"
                return f"not {self._paren(node.operand, out, depth)}"
            if isinstance(node.op, ast.UAdd):
                return self._say(node.operand, out, depth + 1)
            return f"the bitwise inverse of {self._paren(node.operand, out, depth)}"
        if isinstance(node, ast.BinOp):
            return self._binop(node, out, depth)
        if isinstance(node, ast.BoolOp):
            joiner = " and " if isinstance(node.op, ast.And) else " or "
            spoken = [self._say(v, out, depth + 1) for v in node.values]
            return joiner.join(f"({text})" if isinstance(v, (ast.BoolOp, ast.IfExp)) else text
                               for v, text in zip(node.values, spoken, strict=True))
        if isinstance(node, ast.Compare):
            return self._compare(node.left, node.ops, node.comparators, out, depth)
        if isinstance(node, ast.IfExp):
            return (f"{self._say(node.body, out, depth + 1)} if {self._say(node.test, out, depth + 1)}, "
                    f"otherwise {self._say(node.orelse, out, depth + 1)}")
        if isinstance(node, ast.Call):
            return self._call(node, out, depth)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, out, depth)
        if isinstance(node, ast.JoinedStr):
            out.tag("format", "text", "message", "string", "display")
            return "the text '" + self._fstring(node, out, depth) + "'"
        if isinstance(node, ast.FormattedValue):
            return self._say(node.value, out, depth + 1)
        if isinstance(node, ast.List):
            return f"[{self._items(node.elts, out, depth)}]"
        if isinstance(node, ast.Tuple):
            return f"({self._items(node.elts, out, depth)})"
        if isinstance(node, ast.Set):
            return f"{{{self._items(node.elts, out, depth)}}}"
        if isinstance(node, ast.Dict):
            out.tag("mapping", "table")
            pairs = []
            for key, value in list(zip(node.keys, node.values, strict=True))[:_MAX_SEQUENCE_ITEMS]:
                key_text = self._say(key, out, depth + 1) if key is not None else "everything in"
                pairs.append(f"{key_text} → {self._say(value, out, depth + 1)}")
            if len(node.keys) > _MAX_SEQUENCE_ITEMS:
                pairs.append(f"and {len(node.keys) - _MAX_SEQUENCE_ITEMS} more")
            return "a mapping " + ", ".join(pairs) if pairs else "an empty mapping"
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self._comprehension(node.elt, node.generators, out, depth)
        if isinstance(node, ast.DictComp):
            element = f"{self._say(node.key, out, depth + 1)} → {self._say(node.value, out, depth + 1)}"
            return self._comprehension(None, node.generators, out, depth, element)
        if isinstance(node, ast.Lambda):
            return self._say(node.body, out, depth + 1)
        if isinstance(node, ast.Starred):
            return f"all of {self._say(node.value, out, depth + 1)}"
        if isinstance(node, ast.NamedExpr):
            return self._say(node.value, out, depth + 1)
        if isinstance(node, ast.Slice):
            return "a slice"
        if isinstance(node, ast.Await):
            return self._say(node.value, out, depth + 1)
        return "an expression"

    def _binop(self, node: ast.BinOp, out: _Collector, depth: int) -> str:
        op = type(node.op)
        out.tag(*_BIN_TAGS.get(op, ()))
        if op is ast.Mod and isinstance(node.left, (ast.Constant, ast.JoinedStr)) and isinstance(
            getattr(node.left, "value", None), str
        ):
            out.tag("format", "text", "message")
            template, values = self._say(node.left, out, depth + 1), self._say(node.right, out, depth + 1)
            return f"the text {template} filled in with {values}"
        if any(isinstance(side, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(side, "value", ""), str)
               for side in (node.left, node.right)):
            out.tag("format", "text", "display", "show", "character", "symbol")
        if op is ast.Mult:
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, float) and 0 < side.value < 2:
                    out.tag("percent", "percentage", "rate", "fraction", "multiplier", "discount", "markup")
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                out.tag("repeat")
        terms = _added_terms(node)
        if len(terms) >= 4:  # a long a + b + c + d reads better as a sum
            spoken = [self._paren(t, out, depth, parent=2) for t in terms]
            return "the sum of " + ", ".join(spoken[:-1]) + " and " + spoken[-1]
        own = _PRECEDENCE.get(op, 0)
        left = self._paren(node.left, out, depth, own)
        right = self._paren(node.right, out, depth, own, right=True)
        if op is ast.FloorDiv:
            return f"{left} divided by {right}, rounded down"
        return f"{left} {_BIN_WORDS.get(op, 'combined with')} {right}"

    def _compare(self, left: ast.AST, ops: Sequence[ast.cmpop], comparators: Sequence[ast.AST],
                 out: _Collector, depth: int) -> str:
        parts = [self._say(left, out, depth + 1)]
        previous = left
        for op, right in zip(ops, comparators, strict=False):
            op_type = type(op)
            words = _CMP_WORDS.get(op_type, "compared with")
            numeric = isinstance(right, ast.Constant) and isinstance(right.value, (int, float)) or (
                isinstance(right, ast.UnaryOp) and isinstance(right.operand, ast.Constant)
            )
            if numeric:
                out.tag(*_CMP_TAGS.get(op_type, ("equal", "exactly")))
                if isinstance(right, ast.Constant) and right.value == 0:
                    out.tag("zero", "negative", "positive")
                    if isinstance(previous, ast.Call) and getattr(previous.func, "id", "") == "len":
                        out.tag("empty", "nothing", "blank", "none")
            if isinstance(right, ast.Constant) and isinstance(right.value, str):
                out.tag("case", "option", "kind", "type", "category", "match", "equal")
            if op_type in (ast.In, ast.NotIn):
                out.tag("one", "among", "allowed", "valid", "contain")
                if isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                    words = "is one of" if op_type is ast.In else "is not one of"
            if isinstance(right, ast.Constant) and right.value is None:
                words = "is missing (None)" if op_type in (ast.Is, ast.Eq) else "is given (not None)"
                parts.append(words)
                previous = right
                continue
            if previous is not left:
                parts.append("and")
            parts.append(f"{words} {self._say(right, out, depth + 1)}")
            previous = right
        return " ".join(parts)

    def _call(self, node: ast.Call, out: _Collector, depth: int) -> str:
        func = node.func
        args = [self._paren(a, out, depth, parent=9) if isinstance(a, (ast.BinOp, ast.IfExp))
                else self._say(a, out, depth + 1) for a in node.args]
        keywords = {k.arg: k.value for k in node.keywords}
        if isinstance(func, ast.Name):
            name = func.id
            out.name(name)
            if name == "round":
                out.tag("round", "decimal", "place", "precision", "digit")
                if len(node.args) >= 2 or "ndigits" in keywords:
                    digits_node = node.args[1] if len(node.args) >= 2 else keywords["ndigits"]
                    digits = self._say(digits_node, out, depth + 1)
                    places = "decimal place" if digits == "1" else "decimal places"
                    return f"{args[0] if args else 'it'} rounded to {digits} {places}"
                out.tag("whole", "integer", "nearest")
                return f"{args[0] if args else 'it'} rounded to the nearest whole number"
            if name in ("max", "min") and len(node.args) == 2 and not node.keywords:
                clamp = self._clamp(node, out, depth)
                if clamp:
                    return clamp
            if name in ("max", "min"):
                biggest = name == "max"
                out.tag(*(("maximum", "largest", "highest", "most", "at", "least", "floor", "minimum") if biggest
                          else ("minimum", "smallest", "lowest", "least", "cap", "maximum", "limit", "most")))
                if len(args) == 1:
                    extreme = "largest" if biggest else "smallest"
                    text = f"the {extreme} of {args[0]}"
                else:
                    extreme = "larger" if biggest else "smaller"
                    text = f"the {extreme} of " + (" and ".join(args) if len(args) == 2 else ", ".join(args))
                if "key" in keywords:
                    text += f" by {self._say(keywords['key'], out, depth + 1)}"
                if "default" in keywords:
                    text += f" (or {self._say(keywords['default'], out, depth + 1)} when there are none)"
                return text
            if name == "sorted":
                out.tag("sort", "order", "rank", "ascending")
                text = f"{args[0] if args else 'the items'} sorted"
                if "key" in keywords:
                    key = keywords["key"]
                    if isinstance(key, ast.Lambda) and isinstance(key.body, ast.Tuple):
                        out.tag("tie", "break", "then")
                    text += f" by {self._say(key, out, depth + 1)}"
                reverse = keywords.get("reverse")
                if isinstance(reverse, ast.Constant) and reverse.value:
                    out.tag("descending", "highest", "largest", "reverse")
                    text += ", largest first"
                else:
                    out.tag("ascending", "smallest", "lowest")
                    text += ", smallest first"
                return text
            if (name == "sum" and len(node.args) == 1 and isinstance(node.args[0], ast.GeneratorExp)
                    and isinstance(node.args[0].elt, ast.Constant) and node.args[0].elt.value == 1):
                out.tag("count", "number", "many", "how")  # sum(1 for x in xs if c): a count
                return "the number of " + self._comprehension(None, node.args[0].generators, out, depth, "").strip()
            if name in _BUILTINS:
                phrase, tags = _BUILTINS[name]
                out.tag(*tags)
                return phrase.format(*(args + ["?", "?"]), args=", ".join(args))
            if name in ("ValueError", "TypeError", "KeyError", "IndexError", "Exception", "RuntimeError",
                        "ZeroDivisionError", "AssertionError", "NotImplementedError"):
                out.tag("error", "invalid", "exception")
                return f"a {name}" + (f" saying {args[0]}" if args else "")
            spoken = _say_identifier(name)
            return f"{spoken} of {', '.join(args)}" if args else f"the {spoken}"
        if isinstance(func, ast.Attribute):
            method = func.attr
            out.name(method)
            if isinstance(func.value, ast.Name) and func.value.id == "math" and method in _MATH:
                phrase, tags = _MATH[method]
                out.tag(*tags)
                return phrase.format(*(args + ["?"]), args=", ".join(args))
            obj = self._say(func.value, out, depth + 1)
            if method in ("strip", "lstrip", "rstrip") and not args:
                args = ["whitespace"]
            if method in ("split",) and not args:
                args = ["whitespace"]
            if method == "get" and len(args) == 2:
                out.tag("default", "otherwise", "unknown", "other")
                return f"the {args[0]} entry of {obj} (or {args[1]} if it is not there)"
            if method == "sort":
                text = f"{obj} is sorted"
                if "key" in keywords:
                    text += f" by {self._say(keywords['key'], out, depth + 1)}"
                reverse = keywords.get("reverse")
                if isinstance(reverse, ast.Constant) and reverse.value:
                    out.tag("descending", "highest", "largest", "reverse")
                    text += ", largest first"
                out.tag("sort", "order")
                return text
            if method in _METHODS:
                phrase, tags = _METHODS[method]
                out.tag(*tags)
                return phrase.format(obj=obj, args=", ".join(args) if args else "nothing")
            spoken = _say_identifier(method)
            return f"{spoken} of {obj}" + (f" with {', '.join(args)}" if args else "")
        return f"the result of calling {self._say(func, out, depth + 1)}"

    def _clamp(self, node: ast.Call, out: _Collector, depth: int) -> str | None:
        """min(max(x, low), high) and max(min(x, high), low) read 'x kept between low and high'."""
        outer = node.func.id  # type: ignore[attr-defined]
        inner_name = "max" if outer == "min" else "min"
        for inner, bound in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == inner_name
                    and len(inner.args) == 2 and not inner.keywords):
                value, inner_bound = inner.args
                if isinstance(value, ast.Constant) and not isinstance(inner_bound, ast.Constant):
                    value, inner_bound = inner_bound, value
                low, high = (inner_bound, bound) if outer == "min" else (bound, inner_bound)
                out.tag("clamp", "between", "range", "limit", "minimum", "maximum", "cap", "floor", "bound")
                return (f"{self._say(value, out, depth + 1)} kept between {self._say(low, out, depth + 1)} "
                        f"and {self._say(high, out, depth + 1)}")
        return None

    def _bound(self, node: ast.expr | None, out: _Collector, depth: int) -> str | None:
        """A slice bound: '3', 'n', or a phrase in parentheses ('(limit minus 3)')."""
        if node is None:
            return None
        text = self._say(node, out, depth + 1)
        return text if " " not in text else f"({text})"

    def _subscript(self, node: ast.Subscript, out: _Collector, depth: int) -> str:
        if isinstance(node.value, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            # d[a][b][c] -> 'the entry of d at [a][b][c]', not 'the entry of the entry of ...'
            keys: list[ast.expr] = []
            base: ast.expr = node
            while isinstance(base, ast.Subscript) and not isinstance(base.slice, ast.Slice):
                keys.append(base.slice)
                base = base.value
            path = "".join(f"[{self._say(k, out, depth + 1)}]" for k in reversed(keys))
            return f"the entry of {self._say(base, out, depth + 1)} at {path}"
        target = self._say(node.value, out, depth + 1)
        index = node.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, int) and not isinstance(index.value, bool):
            out.tag("first" if index.value == 0 else "item")
            return f"the {_ordinal(index.value)} item of {target}"
        negative = isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub)
        if negative and isinstance(index.operand, ast.Constant):  # type: ignore[attr-defined]
            out.tag("last", "end")
            if index.operand.value == 1:
                return f"the last item of {target}"
            return f"item {index.operand.value} from the end of {target}"
        if isinstance(index, ast.Slice):
            lower = self._bound(index.lower, out, depth)
            upper = self._bound(index.upper, out, depth)
            if index.step is not None:
                step = self._say(index.step, out, depth + 1)
                if step == "-1" and lower is None and upper is None:
                    out.tag("reverse")
                    return f"{target} reversed"
                return f"every {step} item of {target}"
            if lower is None and upper is not None:
                out.tag("first", "start", "truncate", "limit")
                if upper == "-1":
                    return f"{target} without its last item"
                if upper.startswith("-"):
                    return f"{target} without its last {upper[1:]} items"
                return f"the first {upper} items of {target}"
            if upper is None and lower is not None:
                if lower.startswith("-"):
                    out.tag("last", "end")
                    return f"the last {lower[1:]} items of {target}"
                return f"{target} from position {lower} on"
            if lower is not None and upper is not None:
                return f"{target} from position {lower} up to {upper}"
            return f"a copy of {target}"
        if isinstance(index, ast.Constant) and isinstance(index.value, str):
            out.literal(index.value)
            return f"the {self._constant(index)} entry of {target}"
        return f"the entry of {target} for {self._say(index, out, depth + 1)}"

    def _fstring(self, node: ast.JoinedStr, out: _Collector, depth: int) -> str:
        pieces = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.keywords.update(_words(value.value))
                pieces.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                inner = self._say(value.value, out, depth + 1)
                spec = ""
                if isinstance(value.format_spec, ast.JoinedStr) and all(
                    isinstance(v, ast.Constant) for v in value.format_spec.values
                ):
                    spec_text = "".join(str(v.value) for v in value.format_spec.values)
                    if spec_text:
                        out.tag("decimal", "round", "align", "pad", "width", "format")
                        out.literals.update(re.findall(r"\d+", spec_text))
                        spec = ", " + _describe_format_spec(spec_text)
                pieces.append(f"<{inner}{spec}>")
        return "".join(pieces)

    def loop(self, target: ast.expr, iterator: ast.expr, out: _Collector, depth: int = 0) -> str:
        """'for each word in words (at position i)' rather than 'for each (i, word) in enumerate(words)'."""
        def say(node: ast.AST) -> str:
            return self._say(node, out, depth + 1)

        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(iterator, ast.Call):
            func = iterator.func
            if isinstance(func, ast.Name) and func.id == "enumerate" and iterator.args:
                out.tag("position", "index")
                return f"for each {say(target.elts[1])} in {say(iterator.args[0])} (at position {say(target.elts[0])})"
            if isinstance(func, ast.Attribute) and func.attr == "items" and not iterator.args:
                out.tag("key", "value")
                return f"for each {say(target.elts[0])} and {say(target.elts[1])} in {say(func.value)}"
        if isinstance(target, ast.Name) and target.id == "_":
            spoken_target = "_"
        elif isinstance(target, ast.Tuple) and target.elts:
            names = [say(e) for e in target.elts]
            spoken_target = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        else:
            spoken_target = say(target)
        if (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Name) and iterator.func.id == "range"
                and 1 <= len(iterator.args) <= 2 and not iterator.keywords):
            out.tag("times", "repeat", "count", "range")
            bounds = [say(a) for a in iterator.args]
            if len(bounds) == 1 and spoken_target.strip("_ ") == "":
                return f"repeated {bounds[0]} times"
            start, stop = ("0", bounds[0]) if len(bounds) == 1 else bounds
            return f"for each {spoken_target} from {start} up to (not including) {stop}"
        return f"for each {spoken_target} in {say(iterator)}"

    def _comprehension(self, element: ast.AST | None, generators: Sequence[ast.comprehension],
                       out: _Collector, depth: int, element_text: str | None = None) -> str:
        out.tag("each", "every", "all")
        text = element_text if element_text is not None else self._say(element, out, depth + 1)
        for gen in generators:
            text += " " + self.loop(gen.target, gen.iter, out, depth)
            for condition in gen.ifs:
                out.tag("filter", "only", "skip")
                text += f" where {self._say(condition, out, depth + 1)}"
        return text

    def negate(self, test: ast.AST, out: _Collector) -> str | None:
        """The opposite of a simple condition, said positively ('age is at least 18'), or None."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            flipped = _CMP_NEGATED.get(type(test.ops[0]))
            if flipped is not None:
                return self._compare(test.left, [flipped()], test.comparators, out, 0)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.say(test.operand, out)
        if isinstance(test, (ast.Name, ast.Attribute)):
            return f"{self.say(test, out)} is false or empty"
        text = self.say(test, out, condition=True)
        return f"not ({text})" if len(text) <= _MAX_CLAUSE_CHARS - 6 else None


class _FactBuilder:
    """Walks a module and writes one fact per decision, with the conditions that lead to it."""

    def __init__(self, source: str, tree: ast.Module) -> None:
        self.source = source
        self.tree = tree
        self.speaker = _Speaker(source)
        self.comments = self._comments_by_line(source)
        self.facts: list[Fact] = []
        self.main_names: set[str] = set()
        self.parameters: set[str] = set()

    @staticmethod
    def _comments_by_line(source: str) -> dict[int, str]:
        comments: dict[int, str] = {}
        try:
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.COMMENT:
                    comments[token.start[0]] = token.string.lstrip("#").strip()
        except (tokenize.TokenError, IndentationError, SyntaxError):
            pass
        return comments

    def _comment_words(self, node: ast.AST) -> set[str]:
        """Words of comments on a statement's own lines and in the comment block right above it."""
        start = getattr(node, "lineno", None)
        if start is None:
            return set()
        end = getattr(node, "end_lineno", start) or start
        if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef)):
            end = start  # a block's body has its own comments
        words: set[str] = set()
        for line in range(start, end + 1):
            if line in self.comments:
                words.update(_words(self.comments[line]))
        line = start - 1
        while line in self.comments:
            words.update(_words(self.comments[line]))
            line -= 1
        return words

    # -- output -------------------------------------------------------------------------------

    def build(self) -> list[Fact]:
        self._body(self.tree.body, [], set(), function=None)
        self._comment_facts()
        return self.facts

    def _add(self, context: Sequence[str], context_words: set[str], action: str, out: _Collector,
             extra_words: Iterable[str] = (), volunteer: float = 1.0, kind: str = "code",
             subject: Iterable[str] = (), defines: Iterable[str] = ()) -> None:
        lead = _join_clauses(context)
        if len(lead) > 2 * _MAX_CLAUSE_CHARS:
            lead = lead[: 2 * _MAX_CLAUSE_CHARS].rsplit(" ", 1)[0] + " ..."
        keywords = frozenset(out.keywords | set(extra_words) | context_words)
        self.facts.append(Fact(_sentence(lead, action), keywords, frozenset(out.literals), len(self.facts),
                               volunteer, kind, lead, action, frozenset(subject), frozenset(defines),
                               frozenset(out.names)))

    def _comment_facts(self) -> None:
        """Comments are the human's own notes: each informative one can be said as it is."""
        for line in sorted(self.comments):
            comment = self.comments[line].strip()
            content = _words(comment)
            if len(content) < 2 or _CODE_COMMENT.search(comment) or len(comment) > 200:
                continue
            out = _Collector()
            out.keywords.update(content)
            out.tag("note")
            for number in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", comment):
                out.literals.update(_number_forms(float(number) if "." in number else int(number)))
            for quoted in re.findall(r"'([^']{1,40})'|\"([^\"]{1,40})\"", comment):
                out.literals.add((quoted[0] or quoted[1]).strip().lower())
            informative = bool(out.literals)
            text = comment[0].upper() + comment[1:]
            text = text if text.endswith((".", "!", "?")) else text + "."
            self.facts.append(Fact(f"Note: {text}", frozenset(out.keywords), frozenset(out.literals),
                                   len(self.facts), 1.1 if informative else 0.4, "note", "", f"note: {text}"))

    def _clause(self, prefix: str, node: ast.AST, out: _Collector) -> str:
        text = self.speaker.say(node, out, condition=True)
        return f"{prefix} {text}" if prefix else text

    # -- statements ----------------------------------------------------------------------------

    def _body(self, statements: Sequence[ast.stmt], context: list[str], words: set[str], function: str | None) -> None:
        guards: list[ast.expr] = []  # tests of earlier `if ...: return` at this level
        for statement in statements:
            try:
                if isinstance(statement, ast.If):
                    self._if_chain(statement, context, words, function, guards[-1] if guards else None)
                    guards.extend(_leaving_tests(statement))
                    continue
                if guards and isinstance(statement, (ast.Return, ast.Raise)):
                    else_out = _Collector()
                    else_out.tag("otherwise", "else", "default", "other", "rest", "none", "neither", "fallback",
                                 "nothing", "remaining", "all")
                    clause = self._otherwise(guards)
                    self._statement(statement, context + [clause], words | else_out.keywords, function)
                    continue
                self._statement(statement, context, words, function)
            except (RecursionError, ValueError, TypeError, AttributeError, IndexError, KeyError):
                continue  # an odd construct costs one fact, never the whole reference

    def _otherwise(self, guards: Sequence[ast.expr]) -> str:
        """What is left after checks that each returned: 'otherwise (when temp is at least 38.5)'."""
        banded = all(_simple_compare(g) for g in guards) and len({
            (ast.dump(g.left), isinstance(g.ops[0], (ast.Lt, ast.LtE))) for g in guards  # type: ignore[attr-defined]
        }) == 1
        if len(guards) == 1 or banded:
            negation = self.speaker.negate(guards[-1], _Collector())
            if negation and len(negation) <= _MAX_CLAUSE_CHARS:
                return f"otherwise (when {negation})"
            return "otherwise"
        return "if none of the checks above apply"

    def _statement(self, node: ast.stmt, context: list[str], words: set[str], function: str | None) -> None:
        comment_words = self._comment_words(node)
        out = _Collector()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(node, context, words)
        elif isinstance(node, ast.ClassDef):
            inner = context + [f"in {_say_identifier(node.name)}"]
            self._body(node.body, inner, words | set(_words(node.name)), function)
        elif isinstance(node, ast.Return):
            value = self.speaker.say(node.value, out) if node.value is not None else "nothing"
            if isinstance(node.value, (ast.Compare, ast.BoolOp)) or (
                    isinstance(node.value, ast.UnaryOp) and isinstance(node.value.op, ast.Not)):
                value = "whether " + value  # 'the result is whether x is more than 2'
                out.tag("true", "false", "boolean", "whether")
            out.tag("return", "result", "output", "answer", "give", "show", "display")
            self._add(context, words, f"the result is {value}", out, comment_words,
                      volunteer=1.5 if out.literals else 1.0, kind="return")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None:
                self._assignment(targets, node.value, context, words, comment_words)
        elif isinstance(node, ast.AugAssign):
            target = self.speaker.say(node.target, out)
            value = self.speaker.say(node.value, out)
            op = type(node.op)
            out.tag(*_AUG_TAGS.get(op, ()))
            phrase = _AUG_WORDS.get(op, "is updated with")
            counter = isinstance(node.value, ast.Constant) and node.value.value == 1
            self._add(context, words, f"{target} {phrase} {value}", out, comment_words,
                      volunteer=1.5 if out.literals and not counter else 0.8, defines=_target_names(node.target))
        elif isinstance(node, ast.If):
            self._if_chain(node, context, words, function, None)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            clause_out = _Collector()
            clause = self.speaker.loop(node.target, node.iter, clause_out)
            clause_out.tag("each", "every", "loop", "iterate", "all", "item", "list")
            loop_words = words | clause_out.keywords | comment_words
            self._body(node.body, context + [clause], loop_words, function)
            if node.orelse:
                self._body(node.orelse, context + ["after the loop finishes without stopping"], words, function)
        elif isinstance(node, ast.While):
            clause_out = _Collector()
            clause = self._clause("while", node.test, clause_out)
            clause_out.tag("loop", "repeat", "until")
            self._body(node.body, context + [clause], words | clause_out.keywords | comment_words, function)
        elif isinstance(node, ast.Raise):
            out.tag("error", "invalid", "exception", "raise", "fail", "reject")
            what = self.speaker.say(node.exc, out) if node.exc is not None else "the error again"
            self._add(context, words, f"it raises {what}", out, comment_words, volunteer=1.4)
        elif isinstance(node, ast.Continue):
            out.tag("skip", "ignore", "exclude", "filter")
            self._add(context, words, "that item is skipped", out, comment_words, volunteer=1.2)
        elif isinstance(node, ast.Break):
            out.tag("stop", "break", "end", "first")
            self._add(context, words, "the loop stops", out, comment_words, volunteer=1.0)
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return  # docstrings: the signature fact already carries their words
            text = self.speaker.say(node.value, out)
            changed: set[str] = set()
            call = node.value
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr in _MUTATING_METHODS):
                changed = _target_names(call.func.value)
            self._add(context, words, text if isinstance(call, ast.Call) else f"it evaluates {text}",
                      out, comment_words, volunteer=0.8 if changed else 0.6, defines=changed)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self._body(node.body, context, words, function)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self._body(node.body, context, words, function)
            for handler in node.handlers:
                handler_out = _Collector()
                caught = self.speaker.say(handler.type, handler_out) if handler.type is not None else "any error"
                handler_out.tag("error", "invalid", "exception", "fail")
                self._body(handler.body, context + [f"if {caught} happens"], words | handler_out.keywords, function)
            self._body(getattr(node, "orelse", []), context, words, function)
            self._body(getattr(node, "finalbody", []), context, words, function)
        elif isinstance(node, ast.Assert):
            out.tag("error", "invalid", "must", "check", "require")
            self._add(context, words, f"{self.speaker.say(node.test, out)} must hold", out, comment_words)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.tag("import", "module", "library")
            modules = [alias.name for alias in node.names]
            for module in modules:
                out.name(module)
            self._add(context, words, "it uses " + ", ".join(modules), out, comment_words, volunteer=0.2)
        elif type(node).__name__ == "Match":
            subject = self.speaker.say(node.subject, out)
            for case in node.cases:
                pattern = ast.unparse(case.pattern)
                clause = f"when {subject} matches {pattern[:40]}"
                self._body(case.body, context + [clause], words | out.keywords, function)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, context: list[str], words: set[str]) -> None:
        out = _Collector()
        out.name(node.name)
        out.tag("function", "signature", "argument", "parameter", "take", "call")
        spoken_name = _say_identifier(node.name)
        params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                  if a.arg not in ("self", "cls")]
        if node.args.vararg:
            params.append(node.args.vararg.arg)
        if node.args.kwarg:
            params.append(node.args.kwarg.arg)
        for param in params:
            out.name(param)
        self.parameters.update(params)
        docstring = ast.get_docstring(node) or ""
        doc_words = set(_words(docstring[:2000]))
        if not context:
            self.main_names.add(node.name)
        taken = ", ".join(_say_identifier(p) for p in params) or "no inputs"
        self._add(context, words, f"{spoken_name} takes {taken}", out, doc_words, volunteer=0.1, kind="signature")
        positional = node.args.posonlyargs + node.args.args
        with_defaults = positional[len(positional) - len(node.args.defaults):]
        defaults: list[tuple[ast.arg, ast.expr]] = list(zip(with_defaults, node.args.defaults, strict=True))
        defaults += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d is not None]
        for arg, default in defaults:
            default_out = _Collector()
            default_out.name(arg.arg)
            default_out.tag("default", "optional", "given", "omit", "unspecified", "provide", "otherwise")
            value = self.speaker.say(default, default_out)
            self._add(context, words, f"if {_say_identifier(arg.arg)} is not given, it is {value}",
                      default_out, volunteer=1.2, subject=_words(arg.arg), defines=[arg.arg])
        inner_context = context + ([f"in {spoken_name}"] if context else [])
        for param in params:
            self._parameter_shape(node, param, context, words)
        self._body(node.body, inner_context, words, function=node.name)

    def _parameter_shape(self, function: ast.FunctionDef | ast.AsyncFunctionDef, param: str,
                         context: list[str], words: set[str]) -> None:
        """What an input looks like, from how the code uses it: 'orders is a list; each order has
        the entries 'id' and 'total''. Humans know their data; this is how the code knows it too."""
        kinds: list[str] = []
        keys: list[str] = []
        item_names: list[str] = []
        item_keys: list[str] = []
        examples: list[str] = []
        counters, elements = _loop_variables(function)

        def note(collection: list[str], value: str) -> None:
            if value not in collection and len(collection) < 8:
                collection.append(value)

        def is_param(node: ast.AST) -> bool:
            return isinstance(node, ast.Name) and node.id == param

        for node in ast.walk(function):
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                iterator, target = node.iter, node.target
                if is_param(iterator):
                    note(kinds, "list")
                    if isinstance(target, ast.Name):
                        note(item_names, target.id)
                elif (isinstance(iterator, ast.Call) and isinstance(iterator.func, ast.Attribute)
                      and is_param(iterator.func.value) and iterator.func.attr in ("items", "keys", "values")):
                    note(kinds, "mapping")
            elif isinstance(node, ast.Subscript):
                key = node.slice
                if is_param(node.value):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        note(keys, repr(key.value))
                    elif (isinstance(key, ast.Constant) and isinstance(key.value, int)
                          or isinstance(key, ast.Name) and key.id in counters
                          or isinstance(key, (ast.Slice, ast.BinOp))):
                        note(kinds, "list")
                    elif isinstance(key, ast.Name) and key.id in elements:
                        note(kinds, "mapping")
                    else:
                        note(kinds, "sequence or mapping")
                elif (isinstance(node.value, ast.Name) and node.value.id in item_names
                      and isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    note(item_keys, repr(key.value))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner, attr = node.func.value, node.func.attr
                first = node.args[0] if node.args else None
                string_key = isinstance(first, ast.Constant) and isinstance(first.value, str)
                if is_param(owner):
                    if attr in ("items", "keys", "values", "get"):
                        note(kinds, "mapping")
                        if attr == "get" and string_key:
                            note(keys, repr(first.value))  # type: ignore[union-attr]
                    elif attr in _TEXT_METHODS:
                        note(kinds, "text")
                elif isinstance(owner, ast.Name) and owner.id in item_names and attr == "get" and string_key:
                    note(item_keys, repr(first.value))  # type: ignore[union-attr]
            elif isinstance(node, ast.Compare) and (is_param(node.left) or (
                    # coupon.upper() == 'HALF' tells the values of coupon as well
                    isinstance(node.left, ast.Call) and isinstance(node.left.func, ast.Attribute)
                    and is_param(node.left.func.value) and node.left.func.attr in _TEXT_METHODS)):
                for comparator in node.comparators:
                    if isinstance(comparator, ast.Constant) and isinstance(comparator.value, str):
                        note(kinds, "text")
                        note(examples, repr(comparator.value))
                    elif isinstance(comparator, ast.Constant) and isinstance(comparator.value, (int, float)) \
                            and not isinstance(comparator.value, bool):
                        note(kinds, "number")
            elif isinstance(node, ast.BinOp) and (is_param(node.left) or is_param(node.right)):
                other = node.right if is_param(node.left) else node.left
                text_operand = isinstance(other, ast.JoinedStr) or (
                    isinstance(other, ast.Constant) and isinstance(other.value, str))
                if not text_operand:
                    note(kinds, "number")
            elif (isinstance(node, (ast.If, ast.IfExp, ast.While)) and is_param(node.test)
                  or isinstance(node, ast.BoolOp) and any(is_param(v) for v in node.values)):
                note(kinds, "flag")
        if not (kinds or keys or item_keys):
            return
        spoken = _say_identifier(param)
        kind = next((described for name, described in _SHAPE_WORDS if name in kinds), "a record")
        text = f"{spoken} is {kind}"
        if kind == "a text" and examples:
            text += " such as " + _and(examples[:4])
        if keys:
            text += " with the entries " + _and(keys)
        if item_keys and item_names:
            text += f"; each {_say_identifier(item_names[0])} in it has the entries " + _and(item_keys)
        elif item_names and kind == "a list":
            text += f" of {_say_identifier(item_names[0])} items"
        out = _Collector()
        out.name(param)
        for name in item_names:
            out.name(name)
        for key in keys + item_keys:
            out.literal(key.strip("'\""))
        out.tag("input", "format", "structure", "type", "shape", "look", "data")
        if keys or item_keys:
            out.tag("contain", "field", "entry", "key", "record", "object", "dict", "dictionary")
        out.tag(*_SHAPE_TAGS.get(kind, ()))
        telling = bool(keys or item_keys or examples) or kind in ("a list", "a mapping (dictionary)")
        self._add(context, words, text, out, volunteer=1.3 if telling else 0.6, kind="shape",
                  subject=_words(param))

    def _assignment(self, targets: Sequence[ast.expr], value: ast.expr, context: list[str],
                    words: set[str], comment_words: set[str]) -> None:
        out = _Collector()
        target_text = " and ".join(self.speaker.say(t, out) for t in targets)
        defined = {name for t in targets for name in _target_names(t)}
        subject = set(_words(" ".join(sorted(n for t in targets for n in _target_names(t, plain_only=True)))))
        out.names.clear()  # the targets are defined here, not used
        if isinstance(value, ast.Dict) and len(value.keys) >= 2 and all(k is not None for k in value.keys):
            # A lookup table: one fact per entry, so 'what about gold?' gets just that entry; unprompted,
            # the human would rather state the whole (short) table than one entry of it.
            table_out = _Collector()
            table_out.keywords.update(out.keywords)
            table_text = self.speaker.say(value, table_out)
            short = len(table_text) <= _MAX_EXPRESSION_CHARS
            for key, item in list(zip(value.keys, value.values, strict=True))[:_MAX_TABLE_FACTS]:
                entry_out = _Collector()
                entry_out.keywords.update(out.keywords)
                entry_out.tag("table", "each", "per", "mapping")
                key_text = self.speaker.say(key, entry_out)
                item_text = self.speaker.say(item, entry_out)
                self._add(context, words, f"{target_text} for {key_text} is {item_text}", entry_out,
                          comment_words, volunteer=0.3 if _is_blank(item) else (1.0 if short else 1.6),
                          subject=subject, defines=defined)
            if short:
                self._add(context, words, f"{target_text} is {table_text}", table_out, comment_words,
                          volunteer=0.3 if all(_is_blank(v) for v in value.values) else 1.45,
                          subject=subject, defines=defined)
            return
        if isinstance(value, (ast.List, ast.Tuple)) and (len(value.elts) > 4 or any(
                isinstance(e, ast.Dict) for e in value.elts)) and all(
                isinstance(e, (ast.Tuple, ast.List, ast.Dict)) for e in value.elts):
            # A table of rows, such as [(limit, label), ...]: one fact per row as well.
            for position, element in enumerate(value.elts[:_MAX_TABLE_FACTS]):
                row_out = _Collector()
                row_out.keywords.update(out.keywords)
                row_out.tag("table", "each", "row", "entry")
                row_text = self.speaker.say(element, row_out)
                self._add(context, words, f"the {_ordinal(position)} entry of {target_text} is {row_text}",
                          row_out, comment_words, volunteer=1.3, defines=defined)
        text = self.speaker.say(value, out)
        volunteer = 1.5 if out.literals else 0.7
        if _is_blank(value):
            volunteer = 0.3  # 'total is 0' before a loop is plumbing, not a requirement
        self._add(context, words, f"{target_text} is {text}", out, comment_words, volunteer=volunteer,
                  subject=subject, defines=defined)

    def _range_clause(self, previous: ast.expr | None, test: ast.expr, out: _Collector) -> str | None:
        """After `if t < 37.5: ...`, the test `t < 38.5` reads 't is at least 37.5 and less than 38.5'."""
        if previous is None or not (_simple_compare(previous) and _simple_compare(test)):
            return None
        if ast.dump(previous.left) != ast.dump(test.left):  # type: ignore[attr-defined]
            return None
        upward = (ast.Lt, ast.LtE)
        if isinstance(previous.ops[0], upward) != isinstance(test.ops[0], upward):  # type: ignore[attr-defined]
            return None  # `x < 8` then `x >= 12` are separate checks, not bands
        negation = self.speaker.negate(previous, out)
        current = self.speaker.say(test, out)
        if not negation:
            return None
        return f"{negation} and {current}"

    def _if_chain(self, node: ast.If, context: list[str], words: set[str], function: str | None,
                  guard: ast.expr | None) -> None:
        branches: list[tuple[str, set[str], list[ast.stmt]]] = []
        current: ast.If | None = node
        previous = guard
        negations: list[str] = []
        while current is not None:
            out = _Collector()
            out.tag("if", "condition", "check", "when", "case")
            ranged = self._range_clause(previous, current.test, out)
            if ranged is not None and len(ranged) <= _MAX_CLAUSE_CHARS:
                clause = ("if " if not branches else "otherwise, if ") + ranged
            else:
                clause = self._clause("if" if not branches else "otherwise, if", current.test, out)
            if isinstance(current.test, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value is None for c in current.test.comparators
            ):
                out.tag("default", "given", "provide", "omit", "unspecified", "optional")
            branches.append((clause, out.keywords | self._comment_words(current), current.body))
            negations.append(self.speaker.negate(current.test, _Collector()) or "")
            previous = current.test
            orelse = current.orelse
            if len(orelse) == 1 and isinstance(orelse[0], ast.If):
                current = orelse[0]
                continue
            if orelse:
                else_out = _Collector()
                else_out.tag("otherwise", "else", "default", "other", "rest", "none", "neither", "fallback")
                if len(branches) == 1 and negations[0] and len(negations[0]) <= _MAX_CLAUSE_CHARS:
                    clause = f"otherwise (when {negations[0]})"
                elif len(branches) == 1:
                    clause = "otherwise"
                else:
                    clause = "if none of the checks above apply"
                branches.append((clause, else_out.keywords, orelse))
            current = None
        for clause, clause_words, body in branches:
            self._body(body, context + [clause], words | clause_words, function)
        if len(branches) >= 3:
            out = _Collector()
            out.tag("order", "first", "priority", "precedence", "before", "after", "check", "sequence")
            steps = [c.split(",", 1)[-1].strip().removeprefix("if ").strip() for c, _, _ in branches[:6]]
            steps = [s if len(s) <= 60 else s[:57] + "..." for s in steps]
            self._add(context, words, "the checks go in this order: " + "; then ".join(steps), out, volunteer=0.3)


def _join_clauses(context: Sequence[str]) -> str:
    """'if A', 'if B' -> 'if A and B': nested conditions read as one condition."""
    clauses: list[str] = []
    for clause in (c.strip().rstrip(",") for c in context):
        if not clause:
            continue
        if clauses and clause.startswith("if ") and clauses[-1].startswith(("if ", "otherwise, if ")):
            clauses[-1] += " and " + clause[3:]
        else:
            clauses.append(clause)
    return ", ".join(clauses)


def _sentence(lead: str, action: str) -> str:
    text = f"{lead}, {action}" if lead else action
    text = text.strip()
    text = text[0].upper() + text[1:] if text else text
    return text if text.endswith((".", "!", "?")) else text + "."


def _is_blank(node: ast.expr) -> bool:
    """0, '', None, False, [], {} and the like: a starting value, not a decision."""
    if isinstance(node, ast.Constant):
        return node.value in (0, "", None, False) or node.value is None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        return not getattr(node, "elts", getattr(node, "keys", None))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        return node.func.id in ("list", "dict", "set", "tuple", "str", "int", "float")
    return False


def _leaving_tests(node: ast.If) -> list[ast.expr]:
    """The tests of an if/elif chain whose every branch returns and that has no final else."""
    tests: list[ast.expr] = []
    current: ast.If | None = node
    while current is not None:
        if not _ends_flow(current.body):
            return []
        tests.append(current.test)
        if not current.orelse:
            return tests
        if len(current.orelse) == 1 and isinstance(current.orelse[0], ast.If):
            current = current.orelse[0]
        else:
            return []
    return tests


# How a parameter's kind is said, most telling first.
_SHAPE_WORDS = (("mapping", "a mapping (dictionary)"), ("list", "a list"), ("text", "a text"),
                ("flag", "a True/False flag"), ("number", "a number"), ("sequence or mapping", "a sequence or mapping"))
_SHAPE_TAGS = {
    "a mapping (dictionary)": ("mapping", "dict", "dictionary", "key", "lookup"),
    "a list": ("list", "array", "sequence", "collection", "many"),
    "a text": ("text", "string", "word", "name"),
    "a True/False flag": ("flag", "boolean", "true", "false", "yes", "no"),
    "a number": ("number", "numeric", "integer", "float", "amount"),
    "a sequence or mapping": ("list", "mapping", "dict", "collection"),
}
_TEXT_METHODS = frozenset({"lower", "upper", "strip", "lstrip", "rstrip", "split", "startswith", "endswith",
                           "replace", "title", "capitalize", "isdigit", "isalpha", "casefold", "splitlines"})


def _loop_variables(function: ast.AST) -> tuple[set[str], set[str]]:
    """Loop names that count positions (`for i in range(n)`, enumerate) and those that hold the keys
    of a mapping (`for k, v in d.items()`), which tell a list input from a dictionary input."""
    counters: set[str] = set()
    keys: set[str] = set()
    for node in ast.walk(function):
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            continue
        iterator, target = node.iter, node.target
        if not isinstance(iterator, ast.Call):
            continue
        func = iterator.func
        if isinstance(func, ast.Name) and func.id == "range":
            counters |= _target_names(target, plain_only=True)
        elif isinstance(func, ast.Name) and func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
            counters |= _target_names(target.elts[0], plain_only=True)
        elif isinstance(func, ast.Attribute) and func.attr in ("items", "keys"):
            first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
            keys |= _target_names(first, plain_only=True)
    return counters, keys


def _added_terms(node: ast.expr) -> list[ast.expr]:
    """The terms of a + b + c (left-nested additions), or [node] when it is not an addition."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _added_terms(node.left) + [node.right]
    return [node]


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


_MUTATING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "remove", "pop",
                               "discard", "sort", "reverse", "clear"})


def _target_names(target: ast.expr, plain_only: bool = False) -> set[str]:
    """Names an assignment changes: `x`, `x, y`, and (unless ``plain_only``) the `d` of `d[k]`, `d.a`."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _target_names(element, plain_only)}
    if isinstance(target, ast.Starred):
        return _target_names(target.value, plain_only)
    if not plain_only and isinstance(target, (ast.Subscript, ast.Attribute)):
        return _target_names(target.value)
    return set()


def _ends_flow(body: Sequence[ast.stmt]) -> bool:
    """Whether a block always leaves (return/raise/continue/break), so what follows is its 'else'."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _simple_compare(node: ast.expr | None) -> bool:
    """`x < 5`-like: one order comparison against a number."""
    return (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
            and isinstance(node.comparators[0], (ast.Constant, ast.UnaryOp))
            and not isinstance(node.left, ast.Constant))


_CODE_COMMENT = re.compile(r"==|!=|\w\s*=\s*\w|\w\(\)|^\s*(return|if|for|while|def|import|print|elif|else)\b|:\s*$"
                           r"|^\s*(noqa|type:|pragma|pylint|fmt:)")


# ---------------------------------------------------------------------------------------------
# Knowledge: parse once per reference
# ---------------------------------------------------------------------------------------------


_CODE_HINT = re.compile(r"^\s*(def |class |import |from \S+ import |return\b|if .*:\s*$|for .*:\s*$)", re.MULTILINE)


def _looks_like_code(text: str) -> bool:
    return bool(_CODE_HINT.search(text))


def _parse_leniently(text: str) -> ast.Module | None:
    """Parse the reference; a truncated tail (a common export glitch) is dropped line by line."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    lines = text.splitlines()
    for cut in range(len(lines) - 1, max(len(lines) - 30, 0), -1):
        try:
            tree = ast.parse("\n".join(lines[:cut]))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if tree.body:
            return tree
    return None


def _parse_strictly(text: str) -> ast.Module | None:
    """Text without the look of code counts as code only if it parses and defines something, so
    prose such as 'Discount\nMembers get 15%' is not mistaken for a Python expression."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    defines = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.Lambda)
    return tree if any(isinstance(node, defines) for node in ast.walk(tree)) else None


def _prose_facts(text: str) -> list[Fact]:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if len(s.strip()) > 2]
    facts = []
    for order, sentence in enumerate(sentences[:500]):
        shown = sentence
        if len(shown) > MAX_REPLY_CHARS:
            shown = shown[: MAX_REPLY_CHARS - 3].rsplit(" ", 1)[0] + "..."
        out = _Collector()
        out.keywords.update(_words(sentence))
        for number in re.findall(r"\d+(?:\.\d+)?", sentence):
            out.literals.add(number)
        facts.append(Fact(shown, frozenset(out.keywords), frozenset(out.literals), order))
    return facts


def _idf(facts: Sequence[Fact]) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for fact in facts:
        counts.update(fact.keywords)
    total = max(len(facts), 1)
    return {word: math.log(1.0 + total / count) for word, count in counts.items()}


class _LeakGuard:
    """Finds whether a text contains a whole long source line, in time linear in the text:
    lines are indexed by their first characters, so a 5000-line reference costs no more."""

    _KEY = 16  # every guarded line is longer than LEAK_LINE_CHARS > _KEY

    def __init__(self, lines: Iterable[str]) -> None:
        self.by_prefix: dict[str, list[str]] = {}
        for line in lines:
            self.by_prefix.setdefault(line[: self._KEY], []).append(line)

    def __bool__(self) -> bool:
        return bool(self.by_prefix)

    def leaks(self, text: str) -> bool:
        if not self.by_prefix:
            return False
        for start in range(len(text) - self._KEY + 1):
            for line in self.by_prefix.get(text[start:start + self._KEY], ()):
                if text.startswith(line, start):
                    return True
        return False


@lru_cache(maxsize=1024)
def build_knowledge(hidden_information: str) -> Knowledge:
    """Turn hidden information into facts (cached: the same reference is parsed once)."""
    text = hidden_information if isinstance(hidden_information, str) else str(hidden_information)
    guard = _LeakGuard({line.strip() for line in text.splitlines() if len(line.strip()) > LEAK_LINE_CHARS})
    is_code = _looks_like_code(text)
    source = text if len(text) <= _MAX_SOURCE_CHARS else text[:_MAX_SOURCE_CHARS].rsplit("\n", 1)[0]
    tree = _parse_leniently(source) if is_code else _parse_strictly(source)
    facts: list[Fact] = []
    name_words: set[str] = set()
    if tree is not None and tree.body:
        builder = _FactBuilder(source, tree)
        try:
            facts = builder.build()[:_MAX_FACTS]
        except RecursionError:
            facts = []
        for name in builder.main_names:
            name_words.update(_words(name))
        for name in builder.parameters:  # 'weights' in calculate_weighted_score(reviews, weights) is a topic
            name_words.difference_update(_words(name))
        is_code = is_code or bool(facts)
    if not facts and not is_code:
        facts = _prose_facts(text)
    if is_code:
        facts = [f for f in facts if not guard.leaks(f.text)]
    return Knowledge(facts, _idf(facts), guard if is_code else _LeakGuard(()), is_code, frozenset(name_words))


# ---------------------------------------------------------------------------------------------
# Answering
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Question:
    words: tuple[str, ...]
    expanded: frozenset[str]
    raw_lower: str
    raw_tokens: frozenset[str]
    numbers: frozenset[str]


_ENUMERATOR = re.compile(r"(?m)(?:^|(?<=\s))\(?\d{1,2}[.)](?=\s+[A-Za-z])")


def _read_question(text: str) -> _Question:
    text = _ENUMERATOR.sub(" ", text)  # '1. What ...' numbers the question, it does not ask about 1
    words = tuple(dict.fromkeys(_words(text)))
    expanded = {s for w in words for s in _SYNONYM_STEMS.get(w, ())} - set(words)
    raw_tokens = frozenset(_RAW_TOKEN_RE.findall(text))
    numbers = set(re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", text))
    numbers |= {n.replace(",", "") for n in re.findall(r"\d{1,3}(?:,\d{3})+", text)}
    return _Question(words, frozenset(expanded), text.lower(), raw_tokens, frozenset(numbers))


def _literal_hit(literal: str, question: _Question) -> bool:
    if literal in question.numbers:
        return True
    if not literal or literal[0].isdigit():
        return False
    if not any(ch.isalnum() for ch in literal):
        # punctuation such as '?' counts only when quoted, not as the question's own punctuation
        return f"'{literal}'" in question.raw_lower or f'"{literal}"' in question.raw_lower
    if len(literal) == 1:
        # a one-letter value ('A', 'Y', 'X') as a word of its own, in capitals, but not the pronoun 'I'
        upper = literal.upper()
        return upper != "I" and upper in question.raw_tokens or f"'{literal}'" in question.raw_lower
    if len(literal) <= 2:
        return any(token.lower() == literal for token in question.raw_tokens)
    return re.search(r"(?<![a-z0-9])" + re.escape(literal) + r"(?![a-z0-9])", question.raw_lower) is not None


_ASKS_SHAPE = frozenset(_stem(w) for w in (
    "format", "type", "structure", "shape", "look", "input", "list", "dict", "dictionary", "mapping", "key",
    "field", "entry", "contain", "number", "text", "string", "flag", "boolean", "record", "object", "data"))
# Asking what an input is like: 'What format are the inputs in?', not 'What if the input is empty?'.
_ASKS_INPUT = frozenset(_stem(w) for w in ("format", "structure", "type", "look", "shape", "kind"))
_ASKS_SIGNATURE = frozenset(_stem(w) for w in ("argument", "parameter", "signature", "arg", "param", "take"))


def _score(fact: Fact, question: _Question, knowledge: Knowledge) -> tuple[float, bool]:
    """(score, whether a topical word matched): rare shared words weigh most, named literals more."""
    score = 0.0
    topical = False
    if fact.kind == "shape" and not (fact.subject & set(question.words) or _ASKS_INPUT & set(question.words)):
        return 0.0, False  # 'is it a text?' is an answer only when the question is about this input
    if fact.subject and fact.kind != "shape" and fact.subject.issubset(question.words):
        score += 1.0
        topical = not fact.subject.issubset(_GENERIC_ASK)
    for word in question.words:
        if word in fact.keywords:
            weight = knowledge.idf.get(word, 0.0)
            if word in knowledge.name_words or word in _GENERIC_ASK:
                weight *= 0.3
            else:
                topical = True
            score += weight
    for word in question.expanded:
        if word in fact.keywords:
            score += 0.5 * knowledge.idf.get(word, 0.0)
            if word not in knowledge.name_words:
                topical = True
    for literal in fact.literals:
        if _literal_hit(literal, question):
            score += 2.0
            topical = True
    if fact.kind == "signature" and not _ASKS_SIGNATURE.intersection(question.words):
        score *= 0.4  # every parameter name is in it; say it only when inputs are the topic
    elif fact.kind == "shape" and not _ASKS_SHAPE.intersection(question.words) \
            and not _ASKS_SHAPE.intersection(question.expanded):
        score *= 0.5
    return score, topical


def _without_shared_lead(fact: Fact, lead: str) -> str:
    if not lead or not fact.lead or not fact.action:
        return fact.text
    if fact.lead == lead:
        return _sentence("", fact.action)
    if fact.lead.startswith(lead + ", "):
        return _sentence(fact.lead[len(lead) + 2:], fact.action)
    return fact.text


def _fit(facts: Sequence[Fact], limit: int = MAX_REPLY_CHARS) -> str:
    """At most two sentences: the first fact, then 'Also, ...' joining the rest with semicolons.

    A later fact under the same conditions as the first drops them ('Also, amount is 5'), so a
    reply does not repeat 'for each name and grams in ingredients' three times.
    """
    texts = [facts[0].text] + [_without_shared_lead(fact, facts[0].lead) for fact in facts[1:]]
    first = texts[0]
    if len(first) > limit:
        first = first[: limit - 3].rsplit(" ", 1)[0].rstrip(",;") + "..."
        return first
    reply = first
    rest: list[str] = []
    for text in texts[1:]:
        clause = text.rstrip(".")
        if clause[:2] not in ("I ", "I'") and not clause[:2].isupper():  # keep 'I' and acronyms
            clause = clause[0].lower() + clause[1:]
        candidate = reply + " Also, " + "; ".join(rest + [clause]) + "."
        if len(candidate) > limit:
            break
        rest.append(clause)
    if rest:
        reply = reply + " Also, " + "; ".join(rest) + "."
    return reply


def _definition_of(fact: Fact, knowledge: Knowledge, already: Sequence[Fact]) -> Fact | None:
    """The fact an answer relies on: the constant it names ('fee rate is 0.015'), or, when the
    answer is just 'the result is ranks', how ``ranks`` is filled."""
    bare_result = fact.kind == "return" and len(fact.uses) == 1 and fact.action == (
        "the result is " + _say_identifier(next(iter(fact.uses))))
    for name in sorted(fact.uses):
        if name in fact.defines:
            continue
        candidates = [c for c in knowledge.facts if name in c.defines and c is not fact and c not in already
                      and c.kind == "code" and c.volunteer >= 0.7]
        with_constants = [c for c in candidates if c.literals]
        if with_constants:
            return with_constants[0]
        if bare_result and candidates:
            return candidates[-1]  # the last update says what ends up in it
    return None


# Where one question ends and the next begins: after '?', at line breaks, before '2.' / '3)'.
_QUESTION_PARTS = re.compile(r"(?<=\?)\s+|\n+|\s(?=\d[.)]\s)")
_RETURN_ASK = frozenset(_stem(w) for w in ("return", "output", "result", "produce"))
# Words that ask about the result's form without naming anything in particular.
_RESULT_WORDS = frozenset(_stem(w) for w in ("format", "type", "kind", "look", "form", "structure", "shape", "style",
                                             "data", "final", "expected", "thing", "way", "exact"))
_GENERIC_REQUEST = re.compile(
    r"\b(anything else|any other|other (details|requirements|rules|cases)|more (details|information|info)|"
    r"edge cases?|special cases?|requirements?|specifications?|constraints?|what else|details?|clarify|"
    r"tell me (more|about)|describe|explain|how should (it|the function) (work|behave))\b",
    re.IGNORECASE,
)


class OfflineBackendSimulator:
    """The human for backend tasks, answering from the hidden reference without any model.

    Args:
        max_facts: most facts stated in one reply (1-3 is natural for a person).
        max_chars: longest reply, in characters.
        min_score: weakest match still answered; below it the human says "I don't know."
            or, when asked for details in general, volunteers something not yet said.
        volunteer: whether general questions ("any other requirements?") get untold facts.

    ``reply(request)`` never raises: a malformed request gets ``DONT_KNOW`` with ``error`` set.
    """

    def __init__(self, max_facts: int = MAX_FACTS_PER_REPLY, max_chars: int = MAX_REPLY_CHARS,
                 min_score: float = 0.6, volunteer: bool = True) -> None:
        if not 1 <= max_facts <= 10:
            raise ValueError(f"max_facts must be between 1 and 10, got {max_facts}")
        if max_chars < 40:
            raise ValueError(f"max_chars must be at least 40, got {max_chars}")
        self.max_facts = max_facts
        self.max_chars = max_chars
        self.min_score = min_score
        self.volunteer = volunteer

    def reply(self, request: SimulatorRequest) -> SimulatorReply:
        task = getattr(request, "task", None)
        hidden = getattr(task, "hidden_information", None)
        if hidden is None:
            kind = type(task).__name__
            return SimulatorReply(DONT_KNOW, error=f"OfflineBackendSimulator needs a backend task with "
                                                   f"hidden_information, got {kind}")
        if not isinstance(hidden, str) or not hidden.strip():
            return SimulatorReply(DONT_KNOW)
        messages = getattr(request, "messages", None) or []
        question, told = self._dialogue(messages)
        try:
            text = self.answer(hidden, question, told)
        except Exception as err:  # noqa: BLE001 - one odd turn must not end a batch of dialogues
            return SimulatorReply(DONT_KNOW, error=f"offline simulator failed on this turn: {err!r}")
        return SimulatorReply(text)

    @staticmethod
    def _dialogue(messages: Sequence[object]) -> tuple[str, str]:
        """(latest agent message, everything the human has said after the task description)."""
        question = ""
        human_turns: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            content = content if isinstance(content, str) else ""
            if message.get("role") == "assistant":
                question = content
            elif message.get("role") == "user":
                human_turns.append(content)
        return question, "\n".join(human_turns[1:])

    def answer(self, hidden_information: str, question: str, told: str = "") -> str:
        """The reply to ``question`` given the hidden reference; ``told`` is what was already said."""
        knowledge = build_knowledge(hidden_information)
        if not knowledge.facts or not question.strip():
            return DONT_KNOW
        if len(question) > _QUESTION_HEAD_CHARS + _QUESTION_TAIL_CHARS:
            question = question[:_QUESTION_HEAD_CHARS] + " " + question[-_QUESTION_TAIL_CHARS:]
        parsed = _read_question(question)
        ranked = self._rank(knowledge, parsed)
        if ranked:
            chosen = self._per_part(knowledge, question, ranked)
            if not chosen:
                best = ranked[0][0]
                chosen = [fact for score, fact in ranked[: self.max_facts] if score >= 0.6 * best]
            return self._with_definition(chosen, knowledge)
        if _RETURN_ASK.intersection(parsed.words) and not self._unanswered_topic(parsed, knowledge):
            # 'What should it return?': the human describes the result, final case first.
            returns = [f for f in knowledge.facts if f.kind == "return"]
            if returns:
                chosen = [returns[-1]] + sorted(returns[:-1], key=lambda f: (-f.volunteer, f.order))
                return self._with_definition(chosen[: min(2, self.max_facts)], knowledge)
        if self.volunteer and _GENERIC_REQUEST.search(question):
            untold = [f for f in knowledge.facts if f.volunteer >= 1.0
                      and f.text not in told and not (f.action and f.action in told)]
            untold.sort(key=lambda f: (-f.volunteer, f.order))
            if untold:
                return self._say(untold[: min(2, self.max_facts)], knowledge) or DONT_KNOW
        return DONT_KNOW

    @staticmethod
    def _unanswered_topic(parsed: _Question, knowledge: Knowledge) -> bool:
        """Whether the question names something the code never mentions ('Should it be rounded?'
        of code that does not round): then describing the result would not answer it."""
        known = set(knowledge.idf)
        ignored = _GENERIC_ASK | _RETURN_ASK | _RESULT_WORDS | knowledge.name_words
        return any(word not in known and word not in ignored and not word.isdigit() and len(word) > 2
                   for word in parsed.words)

    def _rank(self, knowledge: Knowledge, parsed: _Question) -> list[tuple[float, Fact]]:
        """Facts that share a topic with the question, best first (ties: earlier in the code first)."""
        scored = []
        for fact in knowledge.facts:
            score, topical = _score(fact, parsed, knowledge)
            if topical and score >= self.min_score:
                scored.append((score, fact))
        scored.sort(key=lambda item: (-item[0], item[1].order))
        return scored

    def _per_part(self, knowledge: Knowledge, question: str,
                  ranked: list[tuple[float, Fact]]) -> list[Fact]:
        """Several questions in one message ('1. ...? 2. ...?') get one answer each, in their order."""
        parts = [p for p in _QUESTION_PARTS.split(question) if len(_words(p)) >= 2]
        if len(parts) < 2:
            return []
        chosen: list[Fact] = []
        earlier = ""
        for part in parts[:12]:
            # earlier questions are context: 'How many minutes?' follows 'Is the first half hour free?'
            before = ({id(fact): score for score, fact in self._rank(knowledge, _read_question(earlier))}
                      if earlier else {})
            best = sorted(((score + 0.5 * before.get(id(fact), 0.0), fact)
                           for score, fact in self._rank(knowledge, _read_question(part))),
                          key=lambda item: (-item[0], item[1].order))
            fresh = [(score, fact) for score, fact in best if fact not in chosen]
            if fresh and fresh[0][0] >= 0.8 * best[0][0]:  # a weaker runner-up is not this part's answer
                chosen.append(fresh[0][1])
            earlier += " " + part
        if len(chosen) < 2:
            return []
        return chosen[: self.max_facts]

    def _with_definition(self, chosen: list[Fact], knowledge: Knowledge) -> str:
        """Say the chosen facts, the first followed by the constant or update it relies on."""
        definition = _definition_of(chosen[0], knowledge, chosen)
        if definition is not None and len(chosen) < self.max_facts:
            chosen = [chosen[0], definition, *chosen[1:]]
        return self._say(chosen[: self.max_facts], knowledge) or DONT_KNOW

    def _say(self, facts: Sequence[Fact], knowledge: Knowledge) -> str:
        facts = list(facts)
        while facts:
            reply = _fit(facts, self.max_chars)
            if not knowledge.guard.leaks(reply):
                return reply
            facts = facts[:-1]
        return ""
