"""Procedural backend tasks: the small-model regime (debugging, ablations, CPU studies), not ColBench itself.

Each task is an everyday one- or two-line function whose decisive detail (a rate, a threshold and which side of
it is inclusive, a rounding, a text format, a branch order, a unit) is written nowhere in the request: the agent
learns it only by asking the simulated human, who reads it from the reference. The rows are in the ColBench
format (``problem_description``, ``ground_truth``, ``hidden_information`` = the reference, ten ``test_cases``
that straddle every hidden value), so every environment, trainer and scorer takes them as they take ColBench's.

Splits, deterministic for a seed::

    import gymnasium as gym
    import colbench_gym
    env = gym.make("ColBench-Backend-v0", tasks="procedural:train")        # 400 tasks, 20 templates
    env = gym.make("ColBench-Backend-v0", tasks="procedural:validation")   # 80 tasks: 48 seen templates, 32 unseen
    env = gym.make("ColBench-Backend-v0", tasks="procedural:test")         # 80 tasks: 48 seen templates, 32 unseen

    from colbench_gym.tasks.procedural import generate_tasks
    rows = generate_tasks(count=50, split="test", seed=3, templates="unseen")

Test tasks use hidden values that no training task uses (each value pool is split: every fourth value is for
test only), and the ``unseen`` part comes from templates that never appear in training; ``task_id`` says which
part a task belongs to (``proc-test-seen-...`` / ``proc-test-unseen-...``), as does ``row["template"]``.

They are hard for a 135M model: SmolLM2-135M-Instruct with two turns and a forced answer passes every test on 0 of
40 test tasks greedily (14% of the tests), and on 2 of 40 (17%) when its first turn is a plain question instead of
a guessed function. It hears the decisive fact and fails to use it (it resubmits its first guess, or keeps its own
greeting), which is what a critic that reads the reference can rank.

The validation split is for choosing a method's settings (rounds, learning rate, ...) without reading the test
tasks, and is built like the test split: its seen part uses hidden values that each train template reserves for
validation (``Template.validation_values``: values outside the template's pools, so no train or test task of any
seed can hold them; a two-way choice such as ``>`` or ``>=`` has no value left to reserve and is drawn whole), and its
unseen part comes from :data:`VALIDATION_UNSEEN_TEMPLATES`, templates of its own that share no name, function or
request with the train, test or warm-start templates (``proc-validation-seen-...`` /
``proc-validation-unseen-...``). The train and test rows are the same as before the validation split existed.

Here one question decides an episode: the offline human answers any question about a fact with the whole function
in words. :mod:`colbench_gym.tasks.procedural_multi` (``procedural_multi:<split>``) is the family where two or three
hidden details each need their own question; both families are drawn by :class:`TaskFamily`.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")
TRAIN_TASKS = 400
TEST_TASKS = 80
VALIDATION_TASKS = 80
TEST_UNSEEN_FRACTION = 0.4  # of the test split's tasks, and of the validation split's alike
WARM_START_TASKS = 400
SIGNATURE_MARKER = "The signature of the function is: "


@dataclass(frozen=True)
class Template:
    """A family of tasks: one function whose hidden values come from ``pools``.

    ``code`` and ``request`` are :meth:`str.format` templates over the hidden values (the request must not use
    them); ``calls(values)`` gives the ten test calls, chosen to straddle every hidden value. ``question`` (the
    warm-start pool's templates only) is what an expert asks: one question that names every hidden detail.
    ``validation_values`` (the train templates only) holds, for some of the pools, values that only the
    validation split uses: none of them may be in its pool, which train and test draw from.
    """

    name: str
    request: str
    code: str
    pools: dict[str, Sequence[Any]]
    calls: Callable[[dict[str, Any]], list[str]]
    question: str = ""
    validation_values: dict[str, Sequence[Any]] = field(default_factory=dict)
    id_prefix: ClassVar[str] = "proc"  # the family's mark at the head of every task id

    def __post_init__(self) -> None:
        # Checked at construction, so that no edit of a pool can hand a validation value to train or test.
        for pool_name, values in self.validation_values.items():
            if pool_name not in self.pools:
                raise ValueError(f"template {self.name}: validation values for {pool_name!r}, which is not one of its "
                                 f"pools {list(self.pools)}")
            if not values:
                raise ValueError(f"template {self.name}: no validation values for {pool_name!r}")
            in_pool = [v for v in values if v in self.pools[pool_name]]
            if in_pool:
                raise ValueError(f"template {self.name}: validation values {in_pool} of {pool_name!r} are in its pool, "
                                 "which train and test draw from")

    def values_for(self, split: Split, whole_pools: bool = False) -> list[dict[str, Any]]:
        """Every combination of hidden values of a split: test draws from every fourth pool value only, train from
        the others (the unseen templates, never in train, from ``whole_pools``). Validation draws from the template's
        ``validation_values`` where it has them and from the whole pool elsewhere (a two-way choice such as ``>``
        or ``>=``), so each validation combination holds a value no train or test combination holds."""
        if split == "validation" and not whole_pools:
            if not self.validation_values:
                raise ValueError(f"template {self.name} reserves no validation values: its validation tasks would "
                                 "repeat train or test tasks")
            pools = [list(dict.fromkeys(self.validation_values.get(name, pool))) for name, pool in self.pools.items()]
            return [dict(zip(self.pools, combo)) for combo in itertools.product(*pools)]
        if whole_pools:
            keep = lambda i: True
        else:
            keep = (lambda i: i % 4 == 3) if split == "test" else (lambda i: i % 4 != 3)
        pools = [list(dict.fromkeys(v for i, v in enumerate(pool) if keep(i))) for pool in self.pools.values()]
        return [dict(zip(self.pools, combo)) for combo in itertools.product(*pools)]

    def expert_questions(self) -> tuple[str, ...]:
        """What the warm start's expert asks, one message per turn: here the one question that names every hidden
        detail (empty for a template outside the warm-start pool)."""
        return (self.question,) if self.question else ()

    def expert_plans(self) -> tuple[tuple[str, ...], ...]:
        """Every form the expert's questions may take: here one, :meth:`expert_questions` (none outside the pool)."""
        questions = self.expert_questions()
        return (questions,) if questions else ()

    def row(self, values: dict[str, Any], split: Split, part: str) -> dict[str, Any]:
        code = self.code.format(**values).strip() + "\n"
        signature = code.splitlines()[0].rstrip(":")
        digest = hashlib.sha256(code.encode()).hexdigest()[:8]
        calls = self.calls(values)
        if len(calls) != 10:
            raise AssertionError(f"template {self.name}: {len(calls)} test calls, expected 10")
        return {
            "task_id": f"{self.id_prefix}-{split}-{part}-{self.name}-{digest}",
            "problem_description": f"{self.request} {SIGNATURE_MARKER}{signature}",
            "ground_truth": code,
            "hidden_information": code,
            "test_cases": {f"test{i}": call for i, call in enumerate(calls, 1)},
            "template": self.name,
        }


def _calls(function: str, *arguments: Any) -> list[str]:
    return [f"{function}({a!r})" if not isinstance(a, tuple) else f"{function}{a!r}" for a in arguments]


def _around(value: float, *others: float) -> list[float]:
    """The hidden threshold itself, its two neighbours, and far values on both sides."""
    step = 1 if float(value).is_integer() else 0.5
    return [value, value - step, value + step, *others]


# fmt: off
TRAIN_TEMPLATES: tuple[Template, ...] = (
    Template("late_fee",
             "Our library charges for every day a book comes back late. Write a function that gives the fee.",
             "def late_fee(days_late):\n    # fee per day late\n    return days_late * {rate}",
             {"rate": (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5,
                       5, 6, 7, 8, 9, 10, 12)},
             lambda v: _calls("late_fee", 0, 1, 2, 3, 5, 7, 10, 14, 30, 100),
             validation_values={"rate": (0.35, 1.1, 2.75)}),
    Template("is_adult",
             "Our sign-up form must check whether a person is old enough. Write a function for it.",
             "def is_adult(age):\n    return age {op} {limit}",
             {"op": (">=", ">", ">=", ">"), "limit": (13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 30, 35)},
             lambda v: _calls("is_adult", *_around(v["limit"], 0, 5, 12, 30, 60, 99, 13)),
             validation_values={"limit": (27, 28, 32)}),
    Template("sale_price",
             "The shop runs a sale on everything. Write a function that gives the price after the discount.",
             "def sale_price(price):\n    # percent off during the sale\n    return round(price * (1 - {percent} / 100), 2)",
             {"percent": (5, 8, 10, 12, 15, 18, 20, 22, 25, 30, 33, 35, 40, 45, 50, 55, 60, 65, 70, 75)},
             lambda v: _calls("sale_price", 0, 1, 9.99, 10, 20, 49.5, 100, 120, 250, 999),
             validation_values={"percent": (16, 28, 48)}),
    Template("greet",
             "Our app shows a greeting when a user logs in. Write a function that makes the greeting text.",
             "def greet(name):\n    return f'{word}, {{name}}{mark}'",
             {"word": ("Hello", "Hi", "Welcome", "Hey", "Good day", "Greetings", "Howdy", "Welcome back"),
              "mark": ("!", ".", "!!", "")},
             lambda v: _calls("greet", "Ann", "Bob", "Chen", "Dana", "Eve", "Finn", "Gus", "Hal", "Ida", "Jo"),
             validation_values={"word": ("Good morning", "Hiya", "Hello there"), "mark": ("!!!", " :)")}),
    Template("password_ok",
             "Our site needs a check that a new password is long enough. Write the check.",
             "def password_ok(password):\n    return len(password) {op} {length}",
             {"op": (">=", ">", ">=", ">"), "length": (6, 7, 8, 9, 10, 11, 12, 14, 16)},
             lambda v: _calls("password_ok", *["x" * n for n in _around(int(v["length"]), 0, 3, 5, 20, 24, 30, 40)]),
             validation_values={"length": (13, 15, 18)}),
    Template("exam_result",
             "Our school needs to know whether a student passed an exam. Write a function that says so.",
             "def exam_result(score):\n    if score {op} {pass_mark}:\n        return 'pass'\n    return 'fail'",
             {"op": (">=", ">", ">=", ">"), "pass_mark": (40, 45, 50, 51, 55, 60, 65, 66, 70, 75, 80, 85)},
             lambda v: _calls("exam_result", *_around(v["pass_mark"], 0, 10, 30, 90, 100, 99, 1)),
             validation_values={"pass_mark": (35, 58, 72)}),
    Template("tip_amount",
             "Our restaurant's till should suggest a tip for a bill. Write a function for the tip.",
             "def tip_amount(bill):\n    # tip rate, rounded to cents\n    return round(bill * {rate}, 2)",
             {"rate": (0.05, 0.06, 0.08, 0.1, 0.11, 0.12, 0.125, 0.14, 0.15, 0.16, 0.18, 0.2, 0.22, 0.24, 0.25, 0.3, 0.32,
                       0.35, 0.4, 0.45)},
             lambda v: _calls("tip_amount", 0, 1, 10, 12.5, 20, 33.3, 47.8, 100, 150, 1000),
             validation_values={"rate": (0.13, 0.17, 0.28)}),
    Template("order_code",
             "Our warehouse labels every order with a code made from its number. Write the function that makes "
             "the code.",
             "def order_code(number):\n    return f'{prefix}-{{number:0{width}d}}'",
             {"prefix": ("ORD", "INV", "PO", "SO", "REF", "WH", "SHP", "ID"), "width": (3, 4, 5, 6)},
             lambda v: _calls("order_code", 1, 7, 42, 99, 100, 512, 1234, 99999, 5, 0),
             validation_values={"prefix": ("BOX", "PKG", "TRK"), "width": (7, 8)}),
    Template("parking_fee",
             "Our car park charges by the hour, with a minimum charge. Write a function for the fee.",
             "def parking_fee(hours):\n    # hourly rate, never below the minimum charge\n"
             "    return max({minimum}, hours * {rate})",
             {"minimum": (1, 2, 3, 4, 5, 6, 8, 10), "rate": (0.5, 1, 1.5, 2, 2.5, 3, 4, 5)},
             lambda v: _calls("parking_fee", 0, 1, 2, 4, 6, 10, 16, 25, 40, 100),
             validation_values={"minimum": (7, 12), "rate": (0.75, 3.5)}),
    Template("cap_score",
             "Our game shows a player's score but no score may go above a limit. Write the function that shows "
             "it.",
             "def cap_score(score):\n    # the highest score ever shown\n    return min(score, {cap})",
             {"cap": (50, 60, 80, 90, 99, 100, 120, 128, 150, 200, 250, 255, 300, 400, 500, 750, 800, 999, 1000, 2000, 5000,
                      9999)},
             lambda v: _calls("cap_score", *_around(v["cap"], 0, 10, 49, 101, 1001, 10000, 123456)),
             validation_values={"cap": (75, 350, 1500)}),
    Template("heat_alert",
             "Our weather station must say whether it is too hot outside. Write a function that gives the alert "
             "level.",
             "def heat_alert(temperature):\n    if temperature {op} {limit}:\n        return 'hot'\n    return 'ok'",
             {"op": (">", ">=", ">", ">="), "limit": (25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 38, 40)},
             lambda v: _calls("heat_alert", *_around(v["limit"], -5, 0, 20, 45, 50, 24, 41)),
             validation_values={"limit": (36, 37, 39)}),
    Template("reward_points",
             "Our loyalty card gives points for money spent. Write a function that gives the points for a "
             "purchase.",
             "def reward_points(amount):\n    # one point for every full step of money spent\n"
             "    return int(amount // {step})",
             {"step": (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 100)},
             lambda v: _calls("reward_points", 0, 1, 4.99, 10, 19.9, 25, 49, 100, 333, 1000),
             validation_values={"step": (7, 18, 75)}),
    Template("speed_fine",
             "The city wants a function that gives the fine for driving too fast. Write it.",
             "def speed_fine(speed):\n    if speed <= {limit}:\n        return 0\n"
             "    # fine for every unit above the limit\n    return (speed - {limit}) * {per_unit}",
             {"limit": (30, 40, 50, 60, 70, 80, 90, 100), "per_unit": (2, 3, 5, 10, 15, 20, 25, 50)},
             lambda v: _calls("speed_fine", *_around(v["limit"], 0, 20, 75, 110, 130, 150, 45)),
             validation_values={"limit": (35, 55, 65), "per_unit": (4, 8, 12)}),
    Template("round_to_step",
             "Our pricing tool rounds prices to the nearest step. Write the rounding function.",
             "def round_to_step(value):\n    return round(value / {step}) * {step}",
             {"step": (2, 3, 4, 5, 6, 8, 10, 15, 20, 25, 50, 100, 7, 12, 30, 40)},
             lambda v: _calls("round_to_step", 0, 1, 7, 13, 18, 33, 49, 76, 101, 999),
             validation_values={"step": (9, 11, 60)}),
    Template("age_group",
             "Our survey sorts people into age groups. Write a function that gives the group for an age.",
             "def age_group(age):\n    if age < {young}:\n        return 'child'\n    if age < {old}:\n"
             "        return 'adult'\n    return 'senior'",
             {"young": (10, 12, 13, 14, 15, 16, 18, 21), "old": (55, 60, 62, 65, 67, 70, 75, 80)},
             lambda v: _calls("age_group", 0, v["young"] - 1, v["young"], v["young"] + 1, 40, v["old"] - 1,
                              v["old"], v["old"] + 1, 90, 30),
             validation_values={"young": (11, 17), "old": (58, 72)}),
    Template("make_slug",
             "Our blog turns post titles into web addresses. Write a function that makes the address part from a "
             "title.",
             "def make_slug(title):\n    return title.{case}().replace(' ', '{sep}')",
             {"case": ("lower", "upper", "lower", "lower"), "sep": ("-", "_", ".", "+", "", "~", ":", "--")},
             lambda v: _calls("make_slug", "Hello World", "My First Post", "a b c", "Tea Time", "One",
                              "Big News Today", "x y", "Summer Sale Now", "Hi There", "Go Team Go"),
             validation_values={"case": ("title", "capitalize"), "sep": ("__", "=")}),
    Template("shorten",
             "Our notification panel has little room, so long messages must be cut. Write the function that "
             "shortens a message.",
             "def shorten(text):\n    if len(text) <= {limit}:\n        return text\n"
             "    return text[:{limit}] + '{ellipsis}'",
             {"limit": (5, 8, 10, 12, 15, 20, 25, 30), "ellipsis": ("...", "~", " [more]", "..", "!", "…", "+",
                                                                   "(cut)")},
             lambda v: _calls("shorten", "", "hi", "hello", "a" * v["limit"], "b" * (v["limit"] + 1),
                              "The quick brown fox jumps", "x" * 40, "short text", "ab cd ef gh ij kl mn op",
                              "c" * (v["limit"] - 1)),
             validation_values={"limit": (6, 18), "ellipsis": (" >>", "*")}),
    Template("pin_valid",
             "Our bank app must check that a PIN has the right form. Write the check.",
             "def pin_valid(pin):\n    return len(pin) == {digits} and pin.isdigit()",
             {"digits": (3, 4, 5, 6, 7, 8, 9, 10)},
             lambda v: _calls("pin_valid", "1" * v["digits"], "2" * (v["digits"] - 1), "3" * (v["digits"] + 1),
                              "12a4", "", "0" * v["digits"], "9876543210", "1234", "123456", "a" * v["digits"]),
             validation_values={"digits": (11, 12)}),
    Template("sales_bonus",
             "Our sales team earns a bonus when they sell enough. Write a function that gives a seller's bonus.",
             "def sales_bonus(sales):\n    if sales {op} {target}:\n        # share of the sales paid as bonus\n"
             "        return sales * {rate}\n    return 0",
             {"op": (">=", ">", ">=", ">"), "target": (1000, 2000, 2500, 5000, 10000),
              "rate": (0.01, 0.02, 0.05, 0.1)},
             lambda v: _calls("sales_bonus", *_around(v["target"], 0, 500, 20000, 7500, 3000, 12000, 100000)),
             validation_values={"target": (1500, 4000, 8000), "rate": (0.03, 0.15)}),
    Template("water_goal",
             "Our health app suggests how much water to drink a day from body weight. Write the function.",
             "def water_goal(weight_kg):\n    # millilitres per kilogram, given in litres with one decimal\n"
             "    return round(weight_kg * {ml_per_kg} / 1000, 1)",
             {"ml_per_kg": (25, 26, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 40, 42, 45)},
             lambda v: _calls("water_goal", 0, 10, 45, 50, 60, 72.5, 80, 95, 110, 150),
             validation_values={"ml_per_kg": (27, 39, 44)}),
)

UNSEEN_TEMPLATES: tuple[Template, ...] = (
    Template("overtime_pay",
             "Our payroll pays extra for hours past a normal week. Write a function for the week's overtime pay.",
             "def overtime_pay(hours):\n    if hours <= {normal}:\n        return 0\n"
             "    # extra pay per hour past the normal week\n    return (hours - {normal}) * {rate}",
             {"normal": (35, 36, 37, 38, 40, 42, 44, 45), "rate": (10, 12, 15, 18, 20, 25, 30, 40)},
             lambda v: _calls("overtime_pay", *_around(v["normal"], 0, 20, 50, 60, 80, 33, 47))),
    Template("file_size_label",
             "Our file browser shows file sizes. Write the function that turns a size in bytes into the label.",
             "def file_size_label(size_bytes):\n    return f'{{size_bytes / {unit}:.{digits}f}} {name}'",
             {"unit": (1000, 1024, 1000, 1024), "digits": (0, 1, 2, 3), "name": ("KB", "kB", "K", "KiB")},
             lambda v: _calls("file_size_label", 0, 1, 999, 1000, 1024, 1536, 2048, 10000, 123456, 1048576)),
    Template("battery_status",
             "Our phone shows a warning when the battery runs low. Write the function that gives the status.",
             "def battery_status(percent):\n    if percent {op} {low}:\n        return 'low'\n    return 'fine'",
             {"op": ("<", "<=", "<", "<="), "low": (5, 10, 12, 15, 20, 25, 30, 35)},
             lambda v: _calls("battery_status", *_around(v["low"], 0, 1, 50, 99, 100, 3, 40))),
    Template("seat_label",
             "Our theatre prints a label for every seat. Write the function that makes it from a row and a seat "
             "number.",
             "def seat_label(row, seat):\n    return f'{row_word} {{row}}{sep}{seat_word} {{seat}}'",
             {"row_word": ("Row", "R", "Line", "Row"), "sep": (", ", " / ", " - ", ": "),
              "seat_word": ("Seat", "S", "No.", "Place")},
             lambda v: _calls("seat_label", ("A", 1), ("B", 12), ("C", 7), ("D", 30), ("E", 2), ("F", 15),
                              ("G", 100), ("H", 9), ("J", 21), ("K", 4))),
    Template("delivery_days",
             "Our shop promises a delivery time that depends on the distance. Write the function that gives the "
             "days.",
             "def delivery_days(distance_km):\n    # one extra day for every started step of distance\n"
             "    return {base} + int(distance_km // {step})",
             {"base": (1, 2, 3, 1, 2, 3, 4, 5), "step": (100, 150, 200, 250, 300, 400, 500, 1000)},
             lambda v: _calls("delivery_days", 0, 50, 99, 100, 250, 499, 800, 1000, 2500, 4000)),
)

# The validation split's own unseen templates: the same kinds of decisive details as the test's unseen ones, and no
# template, function or request shared with any other split or with the warm-start pool, so that settings chosen on
# them carry no knowledge of a test template.
VALIDATION_UNSEEN_TEMPLATES: tuple[Template, ...] = (
    Template("bag_too_heavy",
             "Our airline's check-in must flag a suitcase that weighs too much. Write the check.",
             "def bag_too_heavy(weight_kg):\n    return weight_kg {op} {limit}",
             {"op": (">", ">=", ">", ">="), "limit": (18, 20, 22, 23, 25, 28, 30, 32)},
             lambda v: _calls("bag_too_heavy", *_around(v["limit"], 0, 5, 10, 40, 50, 15, 45))),
    Template("electricity_cost",
             "Our energy app shows what the electricity a home used costs. Write a function for the cost.",
             "def electricity_cost(kwh):\n    # price per kilowatt-hour, rounded to cents\n"
             "    return round(kwh * {price}, 2)",
             {"price": (0.12, 0.15, 0.18, 0.2, 0.22, 0.25, 0.28, 0.3, 0.35, 0.4)},
             lambda v: _calls("electricity_cost", 0, 1, 7, 10, 12.5, 55.5, 100, 250, 333, 1000)),
    Template("initials",
             "Our chat app shows a person's initials in a small circle. Write the function that makes them from a "
             "full name.",
             "def initials(name):\n    return '{sep}'.join(word[0].upper() for word in name.split()) + '{end}'",
             {"sep": ("", ".", " ", "-", "/", ". "), "end": ("", ".")},
             lambda v: _calls("initials", "Ann Lee", "bob ray smith", "Chen Wu", "dana", "Eve Marie Ng", "Finn O",
                              "gus x", "Hal Jordan", "ida may belle", "Jo")),
    Template("membership_tier",
             "Our shop's loyalty program puts customers in a tier by what they spent this year. Write the function "
             "that gives the tier.",
             "def membership_tier(spent):\n    if spent >= {gold}:\n        return 'gold'\n    if spent >= {silver}:\n"
             "        return 'silver'\n    return 'basic'",
             {"gold": (500, 750, 1000, 1500, 2000), "silver": (100, 150, 200, 250, 300)},
             lambda v: _calls("membership_tier", 0, v["silver"] - 1, v["silver"], v["silver"] + 1, v["gold"] - 1,
                              v["gold"], v["gold"] + 1, 5000, 50, 400)),
    Template("cooking_time",
             "Our recipe app tells how long to roast a joint of meat from its weight. Write the function.",
             "def cooking_time(weight_kg):\n    # minutes per kilogram plus resting minutes, rounded to whole minutes\n"
             "    return round(weight_kg * {per_kg} + {rest})",
             {"per_kg": (20, 25, 30, 35, 40, 45), "rest": (0, 5, 10, 15, 20)},
             lambda v: _calls("cooking_time", 0, 0.5, 1, 1.25, 2, 2.5, 3, 4.2, 5, 7)),
    Template("duration_text",
             "Our music player shows how long a song is. Write the function that turns seconds into the text.",
             "def duration_text(seconds):\n    return f'{{seconds // 60}}{sep}{{seconds % 60:0{width}d}}'",
             {"sep": (":", ".", "m ", " min "), "width": (1, 2)},
             lambda v: _calls("duration_text", 0, 5, 59, 60, 65, 125, 600, 3599, 61, 9)),
)

# The warm-start pool: expert dialogues for supervised fine-tuning before RL (sweet_trl.warm_start) come from these
# templates only. Other everyday functions with the same kinds of decisive details; no function, name or request
# is shared with the train or test templates (check_warm_start_pool), so imitating them leaks no test structure.
WARM_START_TEMPLATES: tuple[Template, ...] = (
    Template("shipping_cost",
             "Our online shop charges for shipping by the weight of the parcel. Write a function for the cost.",
             "def shipping_cost(weight_kg):\n    # base charge plus a charge per kilogram\n"
             "    return round({base} + weight_kg * {per_kg}, 2)",
             {"base": (0, 1, 2, 2.5, 3, 4, 5, 6), "per_kg": (0.5, 0.75, 1, 1.2, 1.5, 2, 2.5, 3)},
             lambda v: _calls("shipping_cost", 0, 0.5, 1, 2, 3.5, 5, 10, 12.5, 20, 50),
             "What is the base shipping charge, and how much is added per kilogram of weight?"),
    Template("gross_price",
             "Our invoices must show prices with sales tax added. Write a function that gives the price with tax.",
             "def gross_price(net):\n    # sales tax in percent, rounded to cents\n    return round(net * (1 + {rate} / 100), 2)",
             {"rate": (5, 6, 7, 8, 9, 10, 12, 13, 15, 16, 17, 19, 20, 21, 23, 25)},
             lambda v: _calls("gross_price", 0, 1, 9.99, 10, 19.5, 50, 99.99, 100, 250, 1234.5),
             "What sales tax rate in percent should be added to the net price?"),
    Template("is_senior",
             "Our cinema gives a discount to older guests. Write a function that checks whether a guest gets it.",
             "def is_senior(age):\n    return age {op} {limit}",
             {"op": (">=", ">", ">=", ">"), "limit": (55, 58, 60, 62, 63, 64, 65, 66, 67, 68, 70, 72, 75, 80)},
             lambda v: _calls("is_senior", *_around(v["limit"], 0, 18, 40, 50, 90, 100, 54)),
             "What is the minimum age for the discount, and is that age included?"),
    Template("letter_grade",
             "Our teachers want marks turned into letter grades. Write a function that gives the letter for a "
             "score.",
             "def letter_grade(score):\n    if score >= {top}:\n        return 'A'\n    if score >= {middle}:\n"
             "        return 'B'\n    return 'C'",
             {"top": (80, 82, 85, 88, 90, 92, 95), "middle": (50, 55, 60, 65, 70, 75)},
             lambda v: _calls("letter_grade", 0, v["middle"] - 1, v["middle"], v["middle"] + 1, v["top"] - 1,
                              v["top"], v["top"] + 1, 100, 30, 79),
             "What is the lowest score for an A, and the lowest score for a B?"),
    Template("has_fever",
             "Our clinic's app must flag a fever from a body temperature. Write the check.",
             "def has_fever(temperature):\n    return temperature {op} {limit}",
             {"op": (">=", ">", ">=", ">"), "limit": (37.0, 37.2, 37.5, 37.8, 38.0, 38.3, 38.5)},
             lambda v: _calls("has_fever", v["limit"], round(v["limit"] - 0.1, 1), round(v["limit"] + 0.1, 1), 35.0,
                              36.6, 39.5, 41.0, 36.0, 40.0, 37.1),
             "Above which temperature is it a fever, and does that exact temperature count as a fever?"),
    Template("price_tag",
             "Our shop prints price tags. Write the function that turns an amount into the text on the tag.",
             "def price_tag(amount):\n    return f'{symbol}{{amount:.{digits}f}}'",
             {"symbol": ("$", "€", "£", "USD ", "EUR ", "CHF ", "¥", "kr "), "digits": (0, 1, 2, 3)},
             lambda v: _calls("price_tag", 0, 1, 2.5, 9.99, 10, 12.345, 99.5, 100, 1234.5678, 0.05),
             "Which currency symbol should the tag start with, and how many decimal places should it show?"),
    Template("username_ok",
             "Our forum checks the length of new user names. Write the check.",
             "def username_ok(name):\n    return {low} <= len(name) <= {high}",
             {"low": (2, 3, 4, 5, 6), "high": (10, 12, 14, 15, 16, 20, 24, 30)},
             lambda v: _calls("username_ok", "", "a" * (v["low"] - 1), "b" * v["low"], "c" * (v["low"] + 1),
                              "d" * (v["high"] - 1), "e" * v["high"], "f" * (v["high"] + 1), "g" * 40, "hi",
                              "name12"),
             "What are the shortest and the longest allowed lengths of a user name?"),
    Template("km_to_miles",
             "Our running app shows distances in miles. Write the function that converts kilometres.",
             "def km_to_miles(km):\n    # conversion factor, rounded to the given decimals\n"
             "    return round(km * {factor}, {digits})",
             {"factor": (0.62, 0.621, 0.6214, 0.6, 0.62137, 0.625), "digits": (0, 1, 2, 3)},
             lambda v: _calls("km_to_miles", 0, 1, 3, 5, 21.1, 42.195, 100, 7.5, 10000, 123456),
             "Which factor converts kilometres to miles, and to how many decimal places should it round?"),
    Template("taxi_fare",
             "Our taxi meter charges a starting fee plus a price per kilometre. Write the fare function.",
             "def taxi_fare(km):\n    # starting fee plus the price per kilometre\n    return {start} + km * {per_km}",
             {"start": (2, 2.5, 3, 3.5, 4, 5, 6, 8), "per_km": (1, 1.5, 2, 2.5, 3, 4)},
             lambda v: _calls("taxi_fare", 0, 1, 2, 4, 7.5, 10, 15, 25, 40, 100),
             "What is the starting fee, and what is the price per kilometre?"),
    Template("stock_status",
             "Our warehouse wants to know when to reorder an item. Write the function that gives the stock status.",
             "def stock_status(quantity):\n    if quantity {op} {reorder}:\n        return 'reorder'\n    return 'ok'",
             {"op": ("<", "<=", "<", "<="), "reorder": (5, 10, 15, 20, 25, 30, 40, 50, 75, 100)},
             lambda v: _calls("stock_status", *_around(v["reorder"], 0, 1, 200, 500, 3, 120, 1000)),
             "At which quantity should it say to reorder, and does that exact quantity count as reorder?"),
    Template("badge_text",
             "Our conference prints a badge for every guest. Write the function that makes the badge text from a "
             "name.",
             "def badge_text(name):\n    return '{prefix}' + name.{case}()",
             {"prefix": ("Guest: ", "Name: ", "Hello, ", "VIP ", "Speaker - ", "Visitor ", "Attendee: ", ""),
              "case": ("upper", "title", "lower", "upper")},
             lambda v: _calls("badge_text", "ann lee", "BOB", "chen wu", "Dana", "eve", "finn o", "GUS X", "hal",
                              "ida may", "jo"),
             "What text should come before the name, and should the name be in upper, lower or title case?"),
    Template("monthly_interest",
             "Our bank app shows the interest a savings balance earns in a month. Write the function.",
             "def monthly_interest(balance):\n    # monthly interest rate in percent, rounded to cents\n"
             "    return round(balance * {rate} / 100, 2)",
             {"rate": (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5)},
             lambda v: _calls("monthly_interest", 0, 1, 99.99, 100, 250, 1000, 1234.56, 5000, 10000, 250000),
             "What monthly interest rate in percent should be applied to the balance?"),
    Template("wind_level",
             "Our weather app labels the wind. Write the function that gives the label for a wind speed.",
             "def wind_level(speed):\n    if speed >= {storm}:\n        return 'storm'\n    if speed >= {windy}:\n"
             "        return 'windy'\n    return 'calm'",
             {"storm": (60, 65, 70, 75, 80, 90, 100), "windy": (20, 25, 30, 35, 40, 45)},
             lambda v: _calls("wind_level", 0, v["windy"] - 1, v["windy"], v["windy"] + 1, v["storm"] - 1,
                              v["storm"], v["storm"] + 1, 150, 10, 55),
             "From which wind speed is it 'windy', and from which speed is it a 'storm'?"),
    Template("bulk_total",
             "Our wholesale shop gives a discount on large orders. Write the function that gives an order's total.",
             "def bulk_total(quantity, unit_price):\n    total = quantity * unit_price\n"
             "    if quantity >= {min_quantity}:\n        # percent off for large orders\n"
             "        return round(total * (1 - {percent} / 100), 2)\n    return round(total, 2)",
             {"min_quantity": (5, 10, 12, 20, 25, 50, 100), "percent": (5, 8, 10, 12, 15, 20, 25)},
             lambda v: _calls("bulk_total", (1, 2.5), (v["min_quantity"] - 1, 3), (v["min_quantity"], 3),
                              (v["min_quantity"] + 1, 3), (200, 1.25), (3, 10), (40, 0.99), (0, 5), (150, 2),
                              (9, 4)),
             "From how many items does the large-order discount apply, and how many percent off is it?"),
    Template("calories_burned",
             "Our fitness tracker estimates calories from minutes of exercise. Write the function.",
             "def calories_burned(minutes):\n    # calories per minute, rounded to a whole number\n"
             "    return round(minutes * {per_minute})",
             {"per_minute": (4, 5, 6, 7, 7.5, 8, 9, 10, 11, 12, 13.5, 15)},
             lambda v: _calls("calories_burned", 0, 1, 5, 10, 15, 30, 45, 60, 90, 7),
             "How many calories are burned per minute of exercise?"),
    Template("reminder_text",
             "Our to-do app sends reminders. Write the function that makes the reminder text for a task.",
             "def reminder_text(task):\n    return f'{lead}: {{task}}{mark}'",
             {"lead": ("Reminder", "Remember", "To do", "Today", "Note", "Heads up", "Task", "Due"),
              "mark": ("!", ".", "", "!!")},
             lambda v: _calls("reminder_text", "call mom", "buy milk", "pay rent", "gym", "email Bo",
                              "water plants", "read", "book flight", "walk dog", "clean"),
             "What exactly should the reminder text look like?"),
    Template("billable_minutes",
             "Our consultants bill time in blocks. Write the function that gives the minutes to bill for a call.",
             "def billable_minutes(minutes):\n    # rounded up to a whole block of minutes\n"
             "    return -(-minutes // {block}) * {block}",
             {"block": (5, 6, 10, 12, 15, 20, 30, 60)},
             lambda v: _calls("billable_minutes", 0, 1, v["block"] - 1, v["block"], v["block"] + 1, 29, 44, 61,
                              95, 180),
             "To what size of block of minutes should the time be rounded up?"),
    Template("to_fahrenheit",
             "Our thermostat shows temperatures in Fahrenheit. Write the function that converts from Celsius.",
             "def to_fahrenheit(celsius):\n    return round(celsius * 9 / 5 + 32, {digits})",
             {"digits": (0, 1, 2, 3)},
             lambda v: _calls("to_fahrenheit", -40, -17.78, 0, 21.5, 36.6, 37.777, 100, 12.34, -3.3, 25),
             "To how many decimal places should the Fahrenheit temperature be rounded?"),
    Template("mask_card",
             "Our receipts hide most of a card number. Write the function that masks it.",
             "def mask_card(number):\n    return '{mask}' * (len(number) - {shown}) + number[-{shown}:]",
             {"mask": ("*", "#", "x", "X", "•", "-"), "shown": (2, 3, 4, 5, 6)},
             lambda v: _calls("mask_card", "1234567890123456", "4000123412341234", "9876543210", "1234567",
                              "5555444433332222", "12345678", "000011112222", "3141592653589793",
                              "2718281828", "1111222233334444"),
             "How many of the last digits stay visible, and which character hides the other digits?"),
    Template("study_hours",
             "Our school planner suggests weekly study time from the number of courses. Write the function.",
             "def study_hours(courses):\n    # hours per course, never more than the weekly cap\n"
             "    return min(courses * {per_course}, {cap})",
             {"per_course": (2, 3, 4, 5, 6), "cap": (10, 12, 15, 20, 25, 30, 40)},
             lambda v: _calls("study_hours", 0, 1, 2, 3, 5, 8, 10, 12, 20, 25),
             "How many study hours per course, and what is the most hours in a week?"),
)
# fmt: on


def template_clashes(templates: Sequence[Template], others: Sequence[Template]) -> list[str]:
    """What ``templates`` share with ``others``: a template name, a function name or a request, as
    ``"<template> (<what> of <other>)"``, sorted; empty when they are disjoint."""
    function = lambda t: t.code.split("(", 1)[0].removeprefix("def ").strip()
    return sorted(
        f"{mine.name} ({what} of {theirs.name})"
        for mine in templates for theirs in others
        for what, same in (("name", mine.name == theirs.name), ("function", function(mine) == function(theirs)),
                           ("request", mine.request == theirs.request))
        if same
    )


def _shuffled_pools(templates: Sequence[Template], split: Split, whole_pools: bool, rng: random.Random
                    ) -> list[tuple[Template, list[dict[str, Any]]]]:
    """Each template with its hidden-value combinations for ``split``, shuffled by ``rng`` in template order."""
    pools = []
    for template in templates:
        combos = template.values_for(split, whole_pools=whole_pools)
        rng.shuffle(combos)
        pools.append((template, combos))
    return pools


@dataclass(frozen=True)
class TaskFamily:
    """A family of generated tasks: its templates per split, how its rows are named and how many each named split
    has. The procedural family (:data:`PROCEDURAL`) and the multi-fact family
    (:mod:`colbench_gym.tasks.procedural_multi`) are two of them; the draw is the same for both, so a family's rows
    depend only on its own templates, sizes and the seed."""

    name: str
    train: tuple[Template, ...]
    test_unseen: tuple[Template, ...]
    validation_unseen: tuple[Template, ...]
    warm_start: tuple[Template, ...]
    id_prefix: str = "proc"
    sizes: dict[str, int] = field(default_factory=lambda: {
        "train": TRAIN_TASKS, "validation": VALIDATION_TASKS, "test": TEST_TASKS, "warm_start": WARM_START_TASKS})

    def __post_init__(self) -> None:
        # a template writes its own ids (Template.id_prefix) and the family finds its parts by its own prefix
        strays = sorted({t.name for t in (*self.held_out, *self.warm_start) if t.id_prefix != self.id_prefix})
        if strays:
            raise ValueError(f"task family {self.name!r} has id_prefix {self.id_prefix!r}, but templates {strays} "
                             f"write ids of another prefix: give their class id_prefix = {self.id_prefix!r}")

    @property
    def held_out(self) -> tuple[Template, ...]:
        """The templates a split draws from: a warm start may share nothing with them."""
        return self.train + self.test_unseen + self.validation_unseen

    def unseen_of(self, split: Split) -> tuple[Template, ...]:
        return {"train": (), "validation": self.validation_unseen, "test": self.test_unseen}[split]

    def templates_of(self, names: str | Sequence[str] | None, split: Split
                     ) -> tuple[list[Template], list[Template]]:
        """(seen, unseen) templates for a split; ``names`` picks "seen", "unseen" or template names. A split's unseen
        templates are its own: naming another split's is refused."""
        seen, unseen = list(self.train), list(self.unseen_of(split))
        if names is None:
            return seen, unseen
        if names == "seen":
            return seen, []
        if names == "unseen":
            if split == "train":
                raise ValueError("the unseen templates never appear in the train split")
            return [], unseen
        wanted = [names] if isinstance(names, str) else list(names)
        known = {t.name: t for t in self.held_out}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise ValueError(f"unknown {self.name} templates {unknown}; choose from {sorted(known)}")
        elsewhere = [n for n in wanted if known[n] not in self.train and known[n] not in unseen]
        if elsewhere and split == "train":
            raise ValueError("the unseen templates never appear in the train split")
        if elsewhere:
            raise ValueError(f"templates {elsewhere} are unseen templates of another split; the {split} split's own "
                             f"are {[t.name for t in unseen]}")
        return [known[n] for n in wanted if known[n] in self.train], [known[n] for n in wanted if known[n] in unseen]

    @staticmethod
    def _draw(templates: Sequence[Template], count: int, split: Split, part: str, rng: random.Random
              ) -> list[dict[str, Any]]:
        """``count`` distinct tasks spread evenly over ``templates`` (round-robin, so any prefix is balanced)."""
        pools = _shuffled_pools(templates, split, part == "unseen", rng)
        capacity = sum(len(c) for _, c in pools)
        if count > capacity:
            raise ValueError(f"asked for {count} {part} {split} tasks, but these templates make only {capacity} "
                             f"distinct ones ({', '.join(f'{t.name}: {len(c)}' for t, c in pools)})")
        rows: list[dict[str, Any]] = []
        depth = 0
        while len(rows) < count:
            for template, combos in pools:
                if depth < len(combos) and len(rows) < count:
                    rows.append(template.row(combos[depth], split, part))
            depth += 1
        return rows

    def generate_tasks(self, count: int, split: Split = "train", seed: int = 0,
                       templates: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
        """``count`` distinct task rows of a split, deterministic for ``seed`` (see :func:`generate_tasks`)."""
        if split not in SPLITS:
            raise ValueError(f"{self.name} split must be one of {list(SPLITS)}, got {split!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive int, got {count!r}")
        rng = random.Random(f"{seed}-{split}")
        seen, unseen = self.templates_of(templates, split)
        n_unseen = 0 if not unseen else (count if not seen else round(count * TEST_UNSEEN_FRACTION))
        seen_rows = self._draw(seen, count - n_unseen, split, "seen", rng) if count - n_unseen else []
        unseen_rows = self._draw(unseen, n_unseen, split, "unseen", rng) if n_unseen else []
        if not unseen_rows:
            return seen_rows
        # Interleave so that any prefix (max_eval_tasks) keeps the seen/unseen proportion.
        merged: list[dict[str, Any]] = []
        for i in range(count):
            target_unseen = round((i + 1) * n_unseen / count)
            taken_unseen = sum(r["task_id"].startswith(f"{self.id_prefix}-{split}-unseen") for r in merged)
            source = unseen_rows if taken_unseen < target_unseen else seen_rows
            merged.append(source.pop(0))
        return merged

    def check_warm_start_pool(self, templates: Sequence[Template]) -> None:
        """Refuse a warm-start pool that shares anything with the family's train, validation or test templates (see
        :func:`check_warm_start_pool`), or whose templates carry no expert question."""
        clashes = template_clashes(templates, self.held_out)
        if clashes:
            raise ValueError(f"the warm-start template pool overlaps the train, validation or test templates: "
                             f"{', '.join(clashes)}; warm-start dialogues must come from templates that no split uses")
        missing = [t.name for t in templates if not t.expert_questions()]
        if missing:
            raise ValueError(f"warm-start templates without an expert question: {missing}")

    def warm_start_tasks(self, count: int | None = None, seed: int = 0, templates: Sequence[str] | None = None
                         ) -> list[dict[str, Any]]:
        """``count`` distinct tasks of the warm-start pool (see :func:`warm_start_tasks`)."""
        count = self.sizes["warm_start"] if count is None else count
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive int, got {count!r}")
        known = {t.name: t for t in self.warm_start}
        names = list(known) if templates is None else list(templates)
        if not names:
            raise ValueError("no warm-start template named: name at least one, or leave templates unset for all")
        held = {t.name for t in self.held_out}
        if any(n in held for n in names):
            raise ValueError(f"warm-start templates {sorted(n for n in names if n in held)} are train, validation or "
                             f"test templates: "
                             f"warm-start dialogues must come from the warm-start pool {sorted(known)}")
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown warm-start templates {unknown}; choose from {sorted(known)}")
        chosen = [known[n] for n in dict.fromkeys(names)]
        self.check_warm_start_pool(chosen)
        rng = random.Random(f"{seed}-warm-start")
        pools = _shuffled_pools(chosen, "train", True, rng)
        capacity = sum(len(c) for _, c in pools)
        if count > capacity:
            raise ValueError(f"asked for {count} warm-start tasks, but these templates make only {capacity} distinct "
                             f"ones")
        rows: list[dict[str, Any]] = []
        for depth in itertools.count():
            for template, combos in pools:
                if depth < len(combos) and len(rows) < count:
                    rows.append(template.row(combos[depth], "warm", "start"))  # type: ignore[arg-type]
            if len(rows) == count:
                return rows
        raise AssertionError("unreachable")

    def warm_start_template(self, name: str) -> Template:
        """A template of the warm-start pool by name (its expert questions are the expert's)."""
        for template in self.warm_start:
            if template.name == name:
                return template
        raise KeyError(f"{name!r} is not a warm-start template")

    def load(self, split: str) -> list[dict[str, Any]]:
        """A named split, seed 0: ``train``, ``validation``, ``test`` or ``warm_start``."""
        if split in SPLITS:
            return self.generate_tasks(self.sizes[split], split, seed=0)  # type: ignore[arg-type]
        if split == "warm_start":
            return self.warm_start_tasks(self.sizes["warm_start"], seed=0)
        raise ValueError(f"unknown {self.name} split {split!r}; choose 'train', 'validation', 'test' or "
                         f"'warm_start'")

    def task_part(self, task_id: str) -> str | None:
        """``"seen"`` or ``"unseen"`` for one of the family's test or validation task ids, else None."""
        for split in ("test", "validation"):
            for part in ("seen", "unseen"):
                if task_id.startswith(f"{self.id_prefix}-{split}-{part}-"):
                    return part
        return None

    def task_template(self, task_id: str) -> str | None:
        """The template's name in one of the family's task ids (``proc-test-seen-age_group-62eb49ba``), else None."""
        for split in (*SPLITS, "warm"):
            for part in ("seen", "unseen", "start"):
                prefix = f"{self.id_prefix}-{split}-{part}-"
                if task_id.startswith(prefix) and "-" in task_id[len(prefix):]:
                    return task_id[len(prefix):].rsplit("-", 1)[0]
        return None


PROCEDURAL = TaskFamily("procedural", TRAIN_TEMPLATES, UNSEEN_TEMPLATES, VALIDATION_UNSEEN_TEMPLATES,
                        WARM_START_TEMPLATES)
UNSEEN_OF_SPLIT: dict[str, tuple[Template, ...]] = {"train": (), "validation": VALIDATION_UNSEEN_TEMPLATES,
                                                    "test": UNSEEN_TEMPLATES}


def generate_tasks(count: int, split: Split = "train", seed: int = 0,
                   templates: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``count`` distinct task rows of a split, deterministic for ``seed``.

    The test and validation splits hold seen templates (hidden values no train task uses; validation's are
    values no test task uses either) and, unless ``templates`` says otherwise, ``TEST_UNSEEN_FRACTION`` of tasks
    from unseen templates (each split its own, which train never uses), interleaved so that a prefix keeps the
    proportion. Asking for more tasks than the templates can make distinct raises ValueError.
    """
    return PROCEDURAL.generate_tasks(count, split, seed, templates)


def check_warm_start_pool(templates: Sequence[Template]) -> None:
    """Refuse a warm-start pool that shares anything with the train, validation or test templates: a template name,
    a function name or a request. Imitating such a template would teach the policy a held-out task's structure
    before it is evaluated."""
    PROCEDURAL.check_warm_start_pool(templates)


def warm_start_tasks(count: int = WARM_START_TASKS, seed: int = 0, templates: Sequence[str] | None = None
                     ) -> list[dict[str, Any]]:
    """``count`` distinct tasks of the warm-start pool (every value of every pool; task ids
    ``proc-warm-start-...``), spread evenly over ``templates`` (names from :data:`WARM_START_TEMPLATES`; all when
    ``None``). Naming a train or test template is refused, as is a pool that overlaps them."""
    return PROCEDURAL.warm_start_tasks(count, seed, templates)


def warm_start_template(name: str) -> Template:
    """A template of the warm-start pool by name (its ``question`` is the expert's)."""
    return PROCEDURAL.warm_start_template(name)


def load_procedural(split: str) -> list[dict[str, Any]]:
    """The named splits: ``train`` (400 tasks), ``validation`` and ``test`` (80 tasks each, 40% from unseen
    templates of their own), seed 0, and ``warm_start`` (400 tasks of the warm-start pool, which no split uses)."""
    return PROCEDURAL.load(split)


_REGISTERED: dict[str, tuple[TaskFamily, Callable[[str], list[dict[str, Any]]]]] = {}


def register_task_family(family: TaskFamily, load: Callable[[str], list[dict[str, Any]]] | None = None) -> None:
    """Make ``tasks="<family.name>:<split>"`` (the environments, ``--train_tasks``, ``--eval_tasks``) load
    ``load(split)`` (default: ``family.load``), and its test and validation ids count as seen or unseen templates in
    every figure that splits them (:func:`task_part`)::

        MINE = TaskFamily("mine", TRAIN, TEST_UNSEEN, VALIDATION_UNSEEN, WARM_START, id_prefix="mine")
        register_task_family(MINE)           # then: gym.make("ColBench-Backend-v0", tasks="mine:test")
    """
    if family.name in task_families() and family.name not in _REGISTERED:
        raise ValueError(f"{family.name!r} names a task family that ships with colbench_gym: choose another name")
    _REGISTERED[family.name] = (family, load or family.load)


def task_families() -> dict[str, tuple[TaskFamily, Callable[[str], list[dict[str, Any]]]]]:
    """Every task family generated in code, by name: ``(family, load(split) -> rows)``; the shipped ones first."""
    from colbench_gym.tasks.procedural_multi import MULTI_FACT
    from colbench_gym.tasks.procedural_wide import PROCEDURAL_WIDE, load_procedural_wide

    shipped = {PROCEDURAL.name: (PROCEDURAL, PROCEDURAL.load), MULTI_FACT.name: (MULTI_FACT, MULTI_FACT.load),
               PROCEDURAL_WIDE.name: (PROCEDURAL_WIDE, load_procedural_wide)}
    return {**shipped, **_REGISTERED}


def task_part(task_id: str) -> str | None:
    """``"seen"`` or ``"unseen"`` for a test or validation task id of any task family (``proc-test-seen-...``,
    ``multi-validation-unseen-...``), else None."""
    for family, _ in task_families().values():
        part = family.task_part(task_id)
        if part is not None:
            return part
    return None


def task_template(task_id: str) -> str | None:
    """The template a task id of any task family was made from (``age_group``), else None."""
    for family, _ in task_families().values():
        name = family.task_template(task_id)
        if name is not None:
            return name
    return None
