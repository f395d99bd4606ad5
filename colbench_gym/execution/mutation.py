"""Wrong-but-plausible answers: a reference with one constant changed.

Used to check that task tests tell right from wrong (a test suite that passes a mutant is weak),
and by the grader's parity tests and benchmark as harmless wrong answers::

    from colbench_gym.execution.mutation import constant_mutants
    wrong = constant_mutants(task.ground_truth)      # [code, code, ...]
"""

from __future__ import annotations

import ast
import copy


def _mutable_constants(tree: ast.AST) -> list[ast.Constant]:
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docstrings:
            continue
        value = node.value
        if isinstance(value, bool) or value is None or value is Ellipsis:
            continue
        if isinstance(value, (int, float, str)):
            found.append(node)
    return found


def _mutated(value: float | str) -> int | float | str:
    if isinstance(value, str):
        return value + "~" if value else "~"
    return value + 1


def constant_mutants(code: str, limit: int | None = None) -> list[str]:
    """Copies of ``code``, each with exactly one numeric constant (+1) or string literal (+"~")
    changed, in source order; docstrings are left alone. ``[]`` if ``code`` does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    count = len(_mutable_constants(tree))
    mutants = []
    for index in range(count if limit is None else min(count, limit)):
        clone = copy.deepcopy(tree)
        target = _mutable_constants(clone)[index]
        target.value = _mutated(target.value)
        mutants.append(ast.unparse(clone))
    return mutants
