"""Facts from the reference: walks its syntax tree and writes one plain sentence per decision it makes,
with the conditions that lead to it."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from colbench_gym.simulators.offline_backend.comments import comment_facts, comments_by_line, nearby_comment_words
from colbench_gym.simulators.offline_backend.facts import Collector, Fact, fact_sentence
from colbench_gym.simulators.offline_backend.phrasing import (
    MAX_CLAUSE_CHARS,
    MAX_EXPRESSION_CHARS,
    Speaker,
    ordinal,
    say_identifier,
)
from colbench_gym.simulators.offline_backend.shapes import input_shape
from colbench_gym.simulators.offline_backend.syntax import is_blank, leaving_tests, simple_compare, target_names
from colbench_gym.simulators.offline_backend.vocabulary import AUG_TAGS, AUG_WORDS
from colbench_gym.simulators.offline_backend.words import word_stems

# A data table is said one entry per fact, up to this many entries.
_MAX_TABLE_FACTS = 100
# Methods that change the object they are called on, so `items.append(x)` defines `items`.
_MUTATING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "remove", "pop",
                               "discard", "sort", "reverse", "clear"})


class FactBuilder:
    """Walks a module and writes one fact per decision, with the conditions that lead to it."""

    def __init__(self, source: str, tree: ast.Module) -> None:
        self.source = source
        self.tree = tree
        self.speaker = Speaker(source)
        self.comments = comments_by_line(source)
        self.facts: list[Fact] = []
        self.main_names: set[str] = set()
        self.parameters: set[str] = set()

    # -- output -------------------------------------------------------------------------------

    def build(self) -> list[Fact]:
        self._body(self.tree.body, [], set(), function=None)
        self.facts.extend(comment_facts(self.comments, len(self.facts)))
        return self.facts

    def _add(self, context: Sequence[str], context_words: set[str], action: str, out: Collector,
             extra_words: Iterable[str] = (), volunteer: float = 1.0, kind: str = "code",
             subject: Iterable[str] = (), defines: Iterable[str] = ()) -> None:
        lead = _join_clauses(context)
        if len(lead) > 2 * MAX_CLAUSE_CHARS:
            lead = lead[: 2 * MAX_CLAUSE_CHARS].rsplit(" ", 1)[0] + " ..."
        keywords = frozenset(out.keywords | set(extra_words) | context_words)
        self.facts.append(Fact(fact_sentence(lead, action), keywords, frozenset(out.literals), len(self.facts),
                               volunteer, kind, lead, action, frozenset(subject), frozenset(defines),
                               frozenset(out.names)))

    def _clause(self, prefix: str, node: ast.AST, out: Collector) -> str:
        text = self.speaker.say(node, out, condition=True)
        return f"{prefix} {text}" if prefix else text

    # -- statements ----------------------------------------------------------------------------

    def _body(self, statements: Sequence[ast.stmt], context: list[str], words: set[str], function: str | None) -> None:
        guards: list[ast.expr] = []  # tests of earlier `if ...: return` at this level
        for statement in statements:
            try:
                if isinstance(statement, ast.If):
                    self._if_chain(statement, context, words, function, guards[-1] if guards else None)
                    guards.extend(leaving_tests(statement))
                    continue
                if guards and isinstance(statement, (ast.Return, ast.Raise)):
                    else_out = Collector()
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
        banded = all(simple_compare(g) for g in guards) and len({
            (ast.dump(g.left), isinstance(g.ops[0], (ast.Lt, ast.LtE))) for g in guards  # type: ignore[attr-defined]
        }) == 1
        if len(guards) == 1 or banded:
            negation = self.speaker.negate(guards[-1], Collector())
            if negation and len(negation) <= MAX_CLAUSE_CHARS:
                return f"otherwise (when {negation})"
            return "otherwise"
        return "if none of the checks above apply"

    def _statement(self, node: ast.stmt, context: list[str], words: set[str], function: str | None) -> None:
        comment_words = nearby_comment_words(self.comments, node)
        out = Collector()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(node, context, words)
        elif isinstance(node, ast.ClassDef):
            inner = context + [f"in {say_identifier(node.name)}"]
            self._body(node.body, inner, words | set(word_stems(node.name)), function)
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
            out.tag(*AUG_TAGS.get(op, ()))
            phrase = AUG_WORDS.get(op, "is updated with")
            counter = isinstance(node.value, ast.Constant) and node.value.value == 1
            self._add(context, words, f"{target} {phrase} {value}", out, comment_words,
                      volunteer=1.5 if out.literals and not counter else 0.8, defines=target_names(node.target))
        elif isinstance(node, ast.If):
            self._if_chain(node, context, words, function, None)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            clause_out = Collector()
            clause = self.speaker.loop(node.target, node.iter, clause_out)
            clause_out.tag("each", "every", "loop", "iterate", "all", "item", "list")
            loop_words = words | clause_out.keywords | comment_words
            self._body(node.body, context + [clause], loop_words, function)
            if node.orelse:
                self._body(node.orelse, context + ["after the loop finishes without stopping"], words, function)
        elif isinstance(node, ast.While):
            clause_out = Collector()
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
                changed = target_names(call.func.value)
            self._add(context, words, text if isinstance(call, ast.Call) else f"it evaluates {text}",
                      out, comment_words, volunteer=0.8 if changed else 0.6, defines=changed)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self._body(node.body, context, words, function)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self._body(node.body, context, words, function)
            for handler in node.handlers:
                handler_out = Collector()
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
        out = Collector()
        out.name(node.name)
        out.tag("function", "signature", "argument", "parameter", "take", "call")
        spoken_name = say_identifier(node.name)
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
        doc_words = set(word_stems(docstring[:2000]))
        if not context:
            self.main_names.add(node.name)
        taken = ", ".join(say_identifier(p) for p in params) or "no inputs"
        self._add(context, words, f"{spoken_name} takes {taken}", out, doc_words, volunteer=0.1, kind="signature")
        positional = node.args.posonlyargs + node.args.args
        with_defaults = positional[len(positional) - len(node.args.defaults):]
        defaults: list[tuple[ast.arg, ast.expr]] = list(zip(with_defaults, node.args.defaults, strict=True))
        defaults += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d is not None]
        for arg, default in defaults:
            default_out = Collector()
            default_out.name(arg.arg)
            default_out.tag("default", "optional", "given", "omit", "unspecified", "provide", "otherwise")
            value = self.speaker.say(default, default_out)
            self._add(context, words, f"if {say_identifier(arg.arg)} is not given, it is {value}",
                      default_out, volunteer=1.2, subject=word_stems(arg.arg), defines=[arg.arg])
        inner_context = context + ([f"in {spoken_name}"] if context else [])
        for param in params:
            shape = input_shape(node, param)
            if shape is not None:
                text, shape_out, volunteer = shape
                self._add(context, words, text, shape_out, volunteer=volunteer, kind="shape",
                          subject=word_stems(param))
        self._body(node.body, inner_context, words, function=node.name)

    def _assignment(self, targets: Sequence[ast.expr], value: ast.expr, context: list[str],
                    words: set[str], comment_words: set[str]) -> None:
        out = Collector()
        target_text = " and ".join(self.speaker.say(t, out) for t in targets)
        defined = {name for t in targets for name in target_names(t)}
        subject = set(word_stems(" ".join(sorted(n for t in targets for n in target_names(t, plain_only=True)))))
        out.names.clear()  # the targets are defined here, not used
        if isinstance(value, ast.Dict) and len(value.keys) >= 2 and all(k is not None for k in value.keys):
            # A lookup table: one fact per entry, so 'what about gold?' gets just that entry; unprompted,
            # the human would rather state the whole (short) table than one entry of it.
            table_out = Collector()
            table_out.keywords.update(out.keywords)
            table_text = self.speaker.say(value, table_out)
            short = len(table_text) <= MAX_EXPRESSION_CHARS
            for key, item in list(zip(value.keys, value.values, strict=True))[:_MAX_TABLE_FACTS]:
                entry_out = Collector()
                entry_out.keywords.update(out.keywords)
                entry_out.tag("table", "each", "per", "mapping")
                key_text = self.speaker.say(key, entry_out)
                item_text = self.speaker.say(item, entry_out)
                self._add(context, words, f"{target_text} for {key_text} is {item_text}", entry_out,
                          comment_words, volunteer=0.3 if is_blank(item) else (1.0 if short else 1.6),
                          subject=subject, defines=defined)
            if short:
                self._add(context, words, f"{target_text} is {table_text}", table_out, comment_words,
                          volunteer=0.3 if all(is_blank(v) for v in value.values) else 1.45,
                          subject=subject, defines=defined)
            return
        if isinstance(value, (ast.List, ast.Tuple)) and (len(value.elts) > 4 or any(
                isinstance(e, ast.Dict) for e in value.elts)) and all(
                isinstance(e, (ast.Tuple, ast.List, ast.Dict)) for e in value.elts):
            # A table of rows, such as [(limit, label), ...]: one fact per row as well.
            for position, element in enumerate(value.elts[:_MAX_TABLE_FACTS]):
                row_out = Collector()
                row_out.keywords.update(out.keywords)
                row_out.tag("table", "each", "row", "entry")
                row_text = self.speaker.say(element, row_out)
                self._add(context, words, f"the {ordinal(position)} entry of {target_text} is {row_text}",
                          row_out, comment_words, volunteer=1.3, defines=defined)
        text = self.speaker.say(value, out)
        volunteer = 1.5 if out.literals else 0.7
        if is_blank(value):
            volunteer = 0.3  # 'total is 0' before a loop is plumbing, not a requirement
        self._add(context, words, f"{target_text} is {text}", out, comment_words, volunteer=volunteer,
                  subject=subject, defines=defined)

    def _range_clause(self, previous: ast.expr | None, test: ast.expr, out: Collector) -> str | None:
        """After `if t < 37.5: ...`, the test `t < 38.5` reads 't is at least 37.5 and less than 38.5'."""
        if previous is None or not (simple_compare(previous) and simple_compare(test)):
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
            out = Collector()
            out.tag("if", "condition", "check", "when", "case")
            ranged = self._range_clause(previous, current.test, out)
            if ranged is not None and len(ranged) <= MAX_CLAUSE_CHARS:
                clause = ("if " if not branches else "otherwise, if ") + ranged
            else:
                clause = self._clause("if" if not branches else "otherwise, if", current.test, out)
            if isinstance(current.test, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value is None for c in current.test.comparators
            ):
                out.tag("default", "given", "provide", "omit", "unspecified", "optional")
            branches.append((clause, out.keywords | nearby_comment_words(self.comments, current), current.body))
            negations.append(self.speaker.negate(current.test, Collector()) or "")
            previous = current.test
            orelse = current.orelse
            if len(orelse) == 1 and isinstance(orelse[0], ast.If):
                current = orelse[0]
                continue
            if orelse:
                else_out = Collector()
                else_out.tag("otherwise", "else", "default", "other", "rest", "none", "neither", "fallback")
                if len(branches) == 1 and negations[0] and len(negations[0]) <= MAX_CLAUSE_CHARS:
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
            out = Collector()
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
