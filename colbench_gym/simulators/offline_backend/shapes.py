"""Input shapes: what each parameter of the reference looks like (a list of records with the entries
'price' and 'qty', a text such as 'HALF'), read from how the code uses it."""

from __future__ import annotations

import ast

from colbench_gym.simulators.offline_backend.facts import Collector
from colbench_gym.simulators.offline_backend.phrasing import and_list, say_identifier
from colbench_gym.simulators.offline_backend.syntax import target_names

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
            counters |= target_names(target, plain_only=True)
        elif isinstance(func, ast.Name) and func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
            counters |= target_names(target.elts[0], plain_only=True)
        elif isinstance(func, ast.Attribute) and func.attr in ("items", "keys"):
            first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
            keys |= target_names(first, plain_only=True)
    return counters, keys


def input_shape(function: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> tuple[str, Collector, float] | None:
    """What an input looks like, from how the code uses it: 'orders is a list; each order has
    the entries 'id' and 'total''. Humans know their data; this is how the code knows it too.

    Returns the sentence, the words it mentions and how worth saying it is unprompted, or None when
    the code tells nothing about ``param``.
    """
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
        return None
    spoken = say_identifier(param)
    kind = next((described for name, described in _SHAPE_WORDS if name in kinds), "a record")
    text = f"{spoken} is {kind}"
    if kind == "a text" and examples:
        text += " such as " + and_list(examples[:4])
    if keys:
        text += " with the entries " + and_list(keys)
    if item_keys and item_names:
        text += f"; each {say_identifier(item_names[0])} in it has the entries " + and_list(item_keys)
    elif item_names and kind == "a list":
        text += f" of {say_identifier(item_names[0])} items"
    out = Collector()
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
    return text, out, 1.3 if telling else 0.6
