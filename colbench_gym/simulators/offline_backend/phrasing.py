"""Plain words: Python expressions said the way a person would say them ("price times 0.9"), never
as source text longer than a literal."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from colbench_gym.simulators.offline_backend.facts import Collector
from colbench_gym.simulators.offline_backend.syntax import added_terms
from colbench_gym.simulators.offline_backend.vocabulary import (
    BIN_TAGS,
    BIN_WORDS,
    BUILTINS,
    CMP_NEGATED,
    CMP_TAGS,
    CMP_WORDS,
    MATH,
    METHODS,
    PRECEDENCE,
)
from colbench_gym.simulators.offline_backend.words import word_stems

# Longest expression and condition said in full; a longer one is summarised by what it is built from.
MAX_EXPRESSION_CHARS = 240
MAX_CLAUSE_CHARS = 160
# Items of a list, tuple or mapping said one by one before 'and N more'.
_MAX_SEQUENCE_ITEMS = 12


def say_identifier(name: str) -> str:
    """'weight_kg' -> 'weight kg', 'maxSpeed' -> 'max speed'; single letters stay as they are."""
    parts = [p for p in re.split(r"_+", name) if p]
    words: list[str] = []
    for part in parts:
        words.extend(w.lower() if not w.isupper() or len(w) == 1 else w
                     for w in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", part))
    return " ".join(words) if words else name


def and_list(items: Sequence[str]) -> str:
    """['a', 'b', 'c'] -> 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def ordinal(index: int) -> str:
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


class Speaker:
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

    def say(self, node: ast.AST | None, out: Collector, depth: int = 0, condition: bool = False) -> str:
        """``node`` in words; an expression too long to say is summarised instead."""
        if node is None:
            return "nothing"
        text = self._say(node, out, depth)
        limit = MAX_CLAUSE_CHARS if condition else MAX_EXPRESSION_CHARS
        if len(text) > limit and depth == 0:
            return self._summary(node, out, condition)
        return text

    def _summary(self, node: ast.AST, out: Collector, condition: bool = False) -> str:
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
        spoken = and_list([say_identifier(n) for n in names[:6]]) if names else "the inputs"
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

    def _items(self, nodes: Sequence[ast.AST], out: Collector, depth: int) -> str:
        shown = [self._say(n, out, depth + 1) for n in nodes[:_MAX_SEQUENCE_ITEMS]]
        if len(nodes) > _MAX_SEQUENCE_ITEMS:
            shown.append(f"and {len(nodes) - _MAX_SEQUENCE_ITEMS} more")
        return ", ".join(shown)

    def _paren(self, node: ast.AST, out: Collector, depth: int, parent: int = 0, right: bool = False) -> str:
        """Say ``node``, in parentheses where a reader could otherwise group it wrongly."""
        text = self._say(node, out, depth + 1)
        if isinstance(node, ast.BinOp):
            own = PRECEDENCE.get(type(node.op), 0)
            if own < parent or (own == parent and right) or isinstance(node.op, ast.FloorDiv) or own == 0:
                return f"({text})"
            return text
        if isinstance(node, (ast.BoolOp, ast.IfExp, ast.Compare)):
            return f"({text})"
        return text

    def _say(self, node: ast.AST, out: Collector, depth: int) -> str:
        if depth > 12:
            return "..."
        if isinstance(node, ast.Constant):
            out.literal(node.value)
            return self._constant(node)
        if isinstance(node, ast.Name):
            out.name(node.id)
            out.names.add(node.id)
            return say_identifier(node.id)
        if isinstance(node, ast.Attribute):
            out.name(node.attr)
            if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in MATH:
                return MATH[node.attr][0]
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                return say_identifier(node.attr)
            return f"the {say_identifier(node.attr)} of {self._say(node.value, out, depth + 1)}"
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

    def _binop(self, node: ast.BinOp, out: Collector, depth: int) -> str:
        op = type(node.op)
        out.tag(*BIN_TAGS.get(op, ()))
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
        terms = added_terms(node)
        if len(terms) >= 4:  # a long a + b + c + d reads better as a sum
            spoken = [self._paren(t, out, depth, parent=2) for t in terms]
            return "the sum of " + ", ".join(spoken[:-1]) + " and " + spoken[-1]
        own = PRECEDENCE.get(op, 0)
        left = self._paren(node.left, out, depth, own)
        right = self._paren(node.right, out, depth, own, right=True)
        if op is ast.FloorDiv:
            return f"{left} divided by {right}, rounded down"
        return f"{left} {BIN_WORDS.get(op, 'combined with')} {right}"

    def _compare(self, left: ast.AST, ops: Sequence[ast.cmpop], comparators: Sequence[ast.AST],
                 out: Collector, depth: int) -> str:
        parts = [self._say(left, out, depth + 1)]
        previous = left
        for op, right in zip(ops, comparators, strict=False):
            op_type = type(op)
            words = CMP_WORDS.get(op_type, "compared with")
            numeric = isinstance(right, ast.Constant) and isinstance(right.value, (int, float)) or (
                isinstance(right, ast.UnaryOp) and isinstance(right.operand, ast.Constant)
            )
            if numeric:
                out.tag(*CMP_TAGS.get(op_type, ("equal", "exactly")))
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

    def _call(self, node: ast.Call, out: Collector, depth: int) -> str:
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
            if name in BUILTINS:
                phrase, tags = BUILTINS[name]
                out.tag(*tags)
                return phrase.format(*(args + ["?", "?"]), args=", ".join(args))
            if name in ("ValueError", "TypeError", "KeyError", "IndexError", "Exception", "RuntimeError",
                        "ZeroDivisionError", "AssertionError", "NotImplementedError"):
                out.tag("error", "invalid", "exception")
                return f"a {name}" + (f" saying {args[0]}" if args else "")
            spoken = say_identifier(name)
            return f"{spoken} of {', '.join(args)}" if args else f"the {spoken}"
        if isinstance(func, ast.Attribute):
            method = func.attr
            out.name(method)
            if isinstance(func.value, ast.Name) and func.value.id == "math" and method in MATH:
                phrase, tags = MATH[method]
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
            if method in METHODS:
                phrase, tags = METHODS[method]
                out.tag(*tags)
                return phrase.format(obj=obj, args=", ".join(args) if args else "nothing")
            spoken = say_identifier(method)
            return f"{spoken} of {obj}" + (f" with {', '.join(args)}" if args else "")
        return f"the result of calling {self._say(func, out, depth + 1)}"

    def _clamp(self, node: ast.Call, out: Collector, depth: int) -> str | None:
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

    def _bound(self, node: ast.expr | None, out: Collector, depth: int) -> str | None:
        """A slice bound: '3', 'n', or a phrase in parentheses ('(limit minus 3)')."""
        if node is None:
            return None
        text = self._say(node, out, depth + 1)
        return text if " " not in text else f"({text})"

    def _subscript(self, node: ast.Subscript, out: Collector, depth: int) -> str:
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
            return f"the {ordinal(index.value)} item of {target}"
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

    def _fstring(self, node: ast.JoinedStr, out: Collector, depth: int) -> str:
        pieces = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.keywords.update(word_stems(value.value))
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

    def loop(self, target: ast.expr, iterator: ast.expr, out: Collector, depth: int = 0) -> str:
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
                       out: Collector, depth: int, element_text: str | None = None) -> str:
        out.tag("each", "every", "all")
        text = element_text if element_text is not None else self._say(element, out, depth + 1)
        for gen in generators:
            text += " " + self.loop(gen.target, gen.iter, out, depth)
            for condition in gen.ifs:
                out.tag("filter", "only", "skip")
                text += f" where {self._say(condition, out, depth + 1)}"
        return text

    def negate(self, test: ast.AST, out: Collector) -> str | None:
        """The opposite of a simple condition, said positively ('age is at least 18'), or None."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            flipped = CMP_NEGATED.get(type(test.ops[0]))
            if flipped is not None:
                return self._compare(test.left, [flipped()], test.comparators, out, 0)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.say(test.operand, out)
        if isinstance(test, (ast.Name, ast.Attribute)):
            return f"{self.say(test, out)} is false or empty"
        text = self.say(test, out, condition=True)
        return f"not ({text})" if len(text) <= MAX_CLAUSE_CHARS - 6 else None
