"""Vocabulary: what each comparison, operator, builtin and string method is called in plain words, and
the concept words ('threshold', 'round', 'case') a question may use for it."""

from __future__ import annotations

import ast

CMP_WORDS = {
    ast.Lt: "is less than", ast.LtE: "is at most", ast.Gt: "is more than", ast.GtE: "is at least",
    ast.Eq: "is", ast.NotEq: "is not", ast.In: "is in", ast.NotIn: "is not in",
    ast.Is: "is", ast.IsNot: "is not",
}
CMP_NEGATED = {
    ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
CMP_TAGS = {
    ast.Lt: ("threshold", "limit", "below", "under", "less", "maximum", "cutoff", "up"),
    ast.LtE: ("threshold", "limit", "below", "under", "up", "maximum", "cutoff", "inclusive"),
    ast.Gt: ("threshold", "limit", "above", "over", "more", "exceed", "minimum", "cutoff"),
    ast.GtE: ("threshold", "limit", "above", "over", "least", "minimum", "cutoff", "inclusive"),
}
BIN_WORDS = {
    ast.Add: "plus", ast.Sub: "minus", ast.Mult: "times", ast.Div: "divided by",
    ast.FloorDiv: "divided by", ast.Mod: "modulo",
    ast.Pow: "to the power of", ast.MatMult: "matrix-times", ast.BitAnd: "bitwise-and",
    ast.BitOr: "bitwise-or", ast.BitXor: "bitwise-xor", ast.LShift: "shifted left by",
    ast.RShift: "shifted right by",
}
BIN_TAGS = {
    ast.Add: ("add", "plus", "total", "extra"), ast.Sub: ("subtract", "minus", "less", "deduct"),
    ast.Mult: ("multiply", "times", "factor", "rate"), ast.Div: ("divide", "per", "average", "convert"),
    ast.FloorDiv: ("divide", "whole", "integer", "floor", "down", "round"),
    ast.Mod: ("remainder", "modulo", "divisible", "even", "odd", "every", "wrap"),
    ast.Pow: ("power", "square", "exponent"),
}
# Binding strength, so 'a plus b times c' needs no parentheses but '(a plus b) times c' does.
PRECEDENCE = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2, ast.FloorDiv: 2, ast.Mod: 2, ast.Pow: 3}
# Method calls: (phrase with {obj} and {args}, concept tags).
METHODS: dict[str, tuple[str, tuple[str, ...]]] = {
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
BUILTINS: dict[str, tuple[str, tuple[str, ...]]] = {
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
MATH = {
    "ceil": ("{0} rounded up", ("round", "up", "ceiling", "whole")),
    "floor": ("{0} rounded down", ("round", "down", "floor", "whole")),
    "sqrt": ("the square root of {0}", ("square", "root")),
    "log": ("the logarithm of {args}", ("log", "logarithm")),
    "exp": ("e to the power of {0}", ("exponential",)),
    "pi": ("pi", ("pi",)),
}
# `x += y` and its kin: what the update does, in words and as concept tags.
AUG_WORDS = {
    ast.Add: "increases by", ast.Sub: "decreases by", ast.Mult: "is multiplied by",
    ast.Div: "is divided by", ast.FloorDiv: "is divided (rounded down) by", ast.Mod: "becomes its remainder modulo",
    ast.Pow: "is raised to the power",
}
AUG_TAGS = {
    ast.Add: ("add", "increase", "accumulate", "extra", "bonus", "plus", "total"),
    ast.Sub: ("subtract", "decrease", "deduct", "minus", "reduce"),
    ast.Mult: ("multiply", "scale", "factor", "percent", "rate"),
    ast.Div: ("divide", "split", "per"),
}
