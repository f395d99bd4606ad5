"""Small readings of the reference's syntax tree: which names a statement changes, which checks all
return, which values are mere starting values."""

from __future__ import annotations

import ast
from collections.abc import Sequence


def is_blank(node: ast.expr) -> bool:
    """0, '', None, False, [], {} and the like: a starting value, not a decision."""
    if isinstance(node, ast.Constant):
        return node.value in (0, "", None, False) or node.value is None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        return not getattr(node, "elts", getattr(node, "keys", None))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        return node.func.id in ("list", "dict", "set", "tuple", "str", "int", "float")
    return False


def leaving_tests(node: ast.If) -> list[ast.expr]:
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


def added_terms(node: ast.expr) -> list[ast.expr]:
    """The terms of a + b + c (left-nested additions), or [node] when it is not an addition."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return added_terms(node.left) + [node.right]
    return [node]


def target_names(target: ast.expr, plain_only: bool = False) -> set[str]:
    """Names an assignment changes: `x`, `x, y`, and (unless ``plain_only``) the `d` of `d[k]`, `d.a`."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in target_names(element, plain_only)}
    if isinstance(target, ast.Starred):
        return target_names(target.value, plain_only)
    if not plain_only and isinstance(target, (ast.Subscript, ast.Attribute)):
        return target_names(target.value)
    return set()


def _ends_flow(body: Sequence[ast.stmt]) -> bool:
    """Whether a block always leaves (return/raise/continue/break), so what follows is its 'else'."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def simple_compare(node: ast.expr | None) -> bool:
    """`x < 5`-like: one order comparison against a number."""
    return (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
            and isinstance(node.comparators[0], (ast.Constant, ast.UnaryOp))
            and not isinstance(node.left, ast.Constant))
