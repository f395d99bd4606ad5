"""The widened procedural family: the procedural train templates plus 20 more, with the same validation and test.

Why it exists: trained on the 20 templates of :mod:`colbench_gym.tasks.procedural`, a policy did not transfer to
the unseen templates in the fair study. This family asks whether more templates do, at the same number of train
tasks: its train split is 400 tasks drawn round-robin over 40 templates (procedural's 20 and
:data:`EXTRA_TRAIN_TEMPLATES`), about 10 a template instead of 20 (``pin_valid`` makes only 6), so
``max_train_tasks: 40`` holds one task of each template instead of two. Every other split is procedural's own, row
for row: a run that trains on ``procedural_wide:train`` is evaluated on the very same validation and test tasks (and
warm start) as one that trains on ``procedural:train``::

    import gymnasium as gym
    import colbench_gym
    env = gym.make("ColBench-Backend-v0", tasks="procedural_wide:train")   # 400 tasks, 40 templates
    env = gym.make("ColBench-Backend-v0", tasks="procedural_wide:test")    # = procedural:test (80 tasks)

The 20 new templates are everyday one- or two-line functions in the style of procedural's, with the same kinds of
decisive details (a rate, a threshold and which side of it is inclusive, a cap or floor, a rounding, a text), on
other topics and in other shapes than the unseen templates of the test and validation splits. They share no name,
function or request with any template of :mod:`colbench_gym.tasks.procedural`; their pools keep every fourth value
for test rows and their ``validation_values`` outside the pools, as procedural's do, although the named validation
and test splits (procedural's) never hold them. Task ids keep procedural's ``proc-`` prefix, so ``task_part``
reads them as it reads procedural's.
"""

from __future__ import annotations

from typing import Any

from colbench_gym.tasks.procedural import (
    TRAIN_TEMPLATES,
    UNSEEN_TEMPLATES,
    VALIDATION_UNSEEN_TEMPLATES,
    WARM_START_TEMPLATES,
    TaskFamily,
    Template,
    load_procedural,
)
from colbench_gym.tasks.procedural import _around as around
from colbench_gym.tasks.procedural import _calls as calls

# fmt: off
EXTRA_TRAIN_TEMPLATES: tuple[Template, ...] = (
    Template("rice_water",
             "Our recipe app says how much water to cook rice in. Write a function that gives the cups of water "
             "for the cups of rice.",
             "def rice_water(cups_rice):\n    # cups of water for every cup of rice\n    return cups_rice * {ratio}",
             {"ratio": (1.25, 1.5, 1.75, 2, 2.25, 2.5, 1.2, 1.4, 1.6, 1.8, 3, 1.1, 1.15, 1.35, 1.45, 1.65)},
             lambda v: calls("rice_water", 0, 0.5, 1, 1.5, 2, 3, 4, 0.25, 6, 10),
             validation_values={"ratio": (1.3, 2.75, 3.5)}),
    Template("laps_completed",
             "Our swimming app counts the full lengths of the pool a swimmer has finished. Write a function that "
             "gives the count from the distance swum.",
             "def laps_completed(metres):\n    # one lap for every full length of the pool\n"
             "    return int(metres // {pool_length})",
             {"pool_length": (10, 12, 15, 16, 18, 20, 22, 25, 30, 33, 40, 50, 11, 24, 28, 35)},
             lambda v: calls("laps_completed", 0, v["pool_length"] - 1, v["pool_length"], v["pool_length"] + 1,
                             2 * v["pool_length"] - 1, 2 * v["pool_length"], 100, 333, 1000, 1500),
             validation_values={"pool_length": (14, 45, 60)}),
    Template("train_is_late",
             "Our rail app marks a train as late when it arrives too long after its timetable time. Write the "
             "check; both times are in minutes after midnight.",
             "def train_is_late(arrival, scheduled):\n    # minutes of delay a train may have before it is late\n"
             "    return arrival - scheduled {op} {grace}",
             {"op": (">", ">=", ">", ">="), "grace": (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30)},
             lambda v: calls("train_is_late", *[(start + delay, start) for start, delay in zip(
                 (540, 600, 615, 420, 720, 900, 1080, 480, 1200, 660),
                 around(v["grace"], 0, -4, 45, 90, 200, 1, 25))]),
             validation_values={"grace": (7, 9, 25)}),
    Template("thermostat_setting",
             "Our smart thermostat keeps the heating between a lowest and a highest setting, whatever a user asks "
             "for. Write the function that gives the setting it uses.",
             "def thermostat_setting(requested):\n    # never below the lowest setting nor above the highest\n"
             "    return max({lowest}, min(requested, {highest}))",
             {"lowest": (5, 7, 8, 10, 12, 14, 15, 16), "highest": (22, 24, 25, 26, 27, 28, 29, 30)},
             lambda v: calls("thermostat_setting", v["lowest"] - 1, v["lowest"], v["lowest"] + 1, v["highest"] - 1,
                             v["highest"], v["highest"] + 1, 0, 40, 20, -5),
             validation_values={"lowest": (6, 9), "highest": (23, 32)}),
    Template("match_points",
             "Our football league table gives a team points for its wins and for its draws. Write a function that "
             "gives a team's points.",
             "def match_points(wins, draws):\n    # points for each win and for each draw\n"
             "    return wins * {win_points} + draws * {draw_points}",
             {"win_points": (2, 3, 4, 5, 6, 8, 10, 12), "draw_points": (0, 0.5, 1, 1.5, 2, 2.5, 3, 4)},
             lambda v: calls("match_points", (0, 0), (1, 0), (0, 1), (2, 1), (5, 3), (10, 0), (0, 10), (7, 7),
                             (3, 2), (12, 5)),
             validation_values={"win_points": (7, 9), "draw_points": (0.25, 0.75)}),
    Template("coupon_total",
             "Our shop's coupon takes money off an order that is big enough. Write a function that gives the total "
             "to pay.",
             "def coupon_total(total):\n    if total {op} {minimum}:\n        # fixed amount taken off\n"
             "        return total - {off}\n    return total",
             {"op": (">=", ">", ">=", ">"), "minimum": (20, 25, 30, 40, 50, 60, 75, 100),
              "off": (2, 3, 4, 5, 8, 10, 12, 15)},
             lambda v: calls("coupon_total", *around(v["minimum"], 0, 10, 150, 200, 500, 19.99, 1000)),
             validation_values={"minimum": (35, 45, 80), "off": (6, 7, 20)}),
    Template("penalty_score",
             "Our school takes marks off homework that is handed in late, but a mark never goes below zero. Write "
             "a function that gives the mark after the penalty.",
             "def penalty_score(score, days_late):\n    # marks taken off for each day late\n"
             "    return max(0, score - days_late * {penalty})",
             {"penalty": (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 11, 14, 16, 18)},
             lambda v: calls("penalty_score", (80, 0), (80, 1), (80, 2), (55, 3), (90, 5), (100, 10), (70, 1),
                             (60, 4), (100, 0), (30, 20)),
             validation_values={"penalty": (7, 9, 30)}),
    Template("essay_long_enough",
             "Our school portal only accepts an essay that has enough words. Write the check.",
             "def essay_long_enough(essay):\n    return len(essay.split()) {op} {min_words}",
             {"op": (">=", ">", ">=", ">"), "min_words": (20, 25, 30, 40, 50, 60, 75, 80, 100, 120, 150, 200)},
             lambda v: calls("essay_long_enough", *[" ".join(["word"] * n) for n in
                                                    around(v["min_words"], 0, 1, 10, 300, 5, 15, 250)]),
             validation_values={"min_words": (35, 90, 175)}),
    Template("is_urgent",
             "Our helpdesk treats a ticket as urgent when its code starts with a special tag, in any letter case. "
             "Write the check.",
             "def is_urgent(ticket):\n    return ticket.upper().startswith('{tag}')",
             {"tag": ("URG", "P1", "HIGH", "CRIT", "ASAP", "HOT", "RUSH", "SOS", "NOW", "FAST", "RED", "PRIO", "ALERT",
                      "EMERG", "VIP", "STAT")},
             lambda v: calls("is_urgent", v["tag"].lower() + "-101", v["tag"] + "-7", v["tag"].title() + "9",
                             "misc-4", "ticket-12", "bug-3", "idea-8", "q-55", "help-2", "x"),
             validation_values={"tag": ("TOP", "FIRE")}),
    Template("winner_message",
             "Our board game app announces the result at the end of a game. Write the function that makes the "
             "message from the winner's name.",
             "def winner_message(name):\n    return f'{{name}} {verb}{mark}'",
             {"verb": ("wins", "won", "is the winner", "takes the game", "is the champion", "wins the game",
                       "triumphs", "comes first"),
              "mark": ("!", ".", "!!", "")},
             lambda v: calls("winner_message", "Ann", "Bob", "Chen", "Dana", "Eve", "Finn", "Gus", "Hal", "Ida",
                             "Jo"),
             validation_values={"verb": ("prevails", "beats everyone"), "mark": ("!!!", " :)")}),
    Template("film_end_minute",
             "Our cinema's website shows when a film ends, counting the adverts and trailers shown before it. Write "
             "the function; times are in minutes after midnight.",
             "def film_end_minute(start_minute, length_minutes):\n"
             "    # minutes of adverts and trailers before the film\n"
             "    return start_minute + {adverts} + length_minutes",
             {"adverts": (5, 8, 10, 12, 15, 18, 20, 25, 6, 9, 14, 16, 13, 17, 19, 24)},
             lambda v: calls("film_end_minute", (600, 90), (720, 120), (1080, 95), (0, 100), (840, 150),
                             (1200, 110), (900, 88), (630, 135), (1140, 102), (780, 127)),
             validation_values={"adverts": (7, 22, 30)}),
    Template("step_progress",
             "Our health app shows how far a user has got towards the daily step goal, as a whole percent that "
             "stops at a hundred. Write the function.",
             "def step_progress(steps):\n    # percent of the daily goal, a whole number, never above 100\n"
             "    return min(100, round(steps / {goal} * 100))",
             {"goal": (4000, 5000, 6000, 7000, 7500, 8000, 9000, 10000, 11000, 12000, 15000, 20000, 3000, 4500, 5500,
                       14000)},
             lambda v: calls("step_progress", 0, 500, 1000, 2500, 3333, 5000, 7777, 9999, 12345, 30000),
             validation_values={"goal": (6500, 8500, 13000)}),
    Template("reply_subject",
             "Our email app fills in the subject line of a reply from the subject of the message being answered. "
             "Write the function.",
             "def reply_subject(subject):\n    return '{prefix}' + subject.strip()",
             {"prefix": ("Re: ", "RE: ", "Re:", "Reply: ", "AW: ", "Answer: ", "Re - ", "RE:", "Rif: ", "Odp: ", "VS: ",
                         "Resp: ", "R: ", "RES: ", "Ynt: ", "Réf: ")},
             lambda v: calls("reply_subject", "Lunch?", "  Budget for May ", "Meeting at noon", "hello",
                             "Invoice 42", " Party ", "Your order", "Q3 plan", "Holiday photos", "x"),
             validation_values={"prefix": ("SV: ", "Antw: ")}),
    Template("pet_dose_ml",
             "Our vet clinic's app gives the dose of a pet's worming syrup from its weight, never more than the "
             "largest dose. Write the function.",
             "def pet_dose_ml(weight_kg):\n    # millilitres per kilogram with one decimal, never above the largest "
             "dose\n    return min({most_ml}, round(weight_kg * {ml_per_kg}, 1))",
             {"ml_per_kg": (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 0.8, 1, 1.2, 1.5),
              "most_ml": (5, 6, 8, 10, 12, 15, 20, 25)},
             lambda v: calls("pet_dose_ml", 0, 1, 2.5, 4, 7.5, 10, 15, 30, 80, 200),
             validation_values={"ml_per_kg": (0.35, 0.9), "most_ml": (7, 30)}),
    Template("level_up",
             "Our game lets a player move up a level once they have enough experience points, and each level "
             "needs more points than the one before. Write the check.",
             "def level_up(xp, level):\n    # experience points needed for each level\n"
             "    return xp {op} level * {xp_per_level}",
             {"op": (">=", ">", ">=", ">"),
              "xp_per_level": (50, 80, 100, 120, 150, 200, 250, 300, 400, 500, 750, 1000)},
             lambda v: calls("level_up", *[(n * v["xp_per_level"] + d, n) for n, d in
                                           ((1, 0), (1, -1), (1, 1), (2, 0), (2, -1), (2, 1), (1, -50), (3, 5000),
                                            (5, -200), (4, 0))]),
             validation_values={"xp_per_level": (60, 90, 600)}),
    Template("watering_minutes",
             "Our garden sprinkler waters for longer on hot days. Write a function that gives the watering time in "
             "minutes for the day's temperature.",
             "def watering_minutes(temperature):\n    if temperature {op} {hot}:\n        # minutes on a hot day\n"
             "        return {long_minutes}\n    return 10",
             {"op": (">", ">=", ">", ">="), "hot": (24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35),
              "long_minutes": (15, 18, 20, 25, 30, 35, 40, 45)},
             lambda v: calls("watering_minutes", *around(v["hot"], 0, 15, 40, 45, 10, 20, 38)),
             validation_values={"hot": (22, 23, 37), "long_minutes": (12, 50)}),
    Template("message_too_loud",
             "Our chat app warns when a message has too many exclamation marks. Write the check.",
             "def message_too_loud(message):\n    return message.count('!') {op} {limit}",
             {"op": (">", ">=", ">", ">="), "limit": (1, 2, 3, 4, 5, 6, 8, 10)},
             lambda v: calls("message_too_loud", *["Go" + "!" * n for n in around(v["limit"], 0, 15, 20, 1, 2, 30,
                                                                                  11)]),
             validation_values={"limit": (7, 12)}),
    Template("tyre_pressure_ok",
             "Our car's dashboard checks that a tyre's pressure is inside the safe range. Write the check.",
             "def tyre_pressure_ok(psi):\n    return {low} <= psi <= {high}",
             {"low": (26, 27, 28, 29, 30, 31, 32, 33), "high": (34, 35, 36, 37, 38, 39, 40, 42)},
             lambda v: calls("tyre_pressure_ok", v["low"] - 1, v["low"], v["low"] + 1, v["high"] - 1, v["high"],
                             v["high"] + 1, 0, 60, 20, 33.5),
             validation_values={"low": (24, 25), "high": (44, 45)}),
    Template("charm_price",
             "Our shop makes every price end in the same cents: it drops the cents a price had and adds its usual "
             "ending. Write the function that gives the shelf price.",
             "def charm_price(price):\n    # keep the whole units, then add the usual ending\n"
             "    return int(price) + {ending}",
             {"ending": (0.99, 0.95, 0.9, 0.49, 0.5, 0.89, 0.79, 0.45, 0.75, 0.97, 0.98, 0.29, 0.85, 0.8, 0.65, 0.55)},
             lambda v: calls("charm_price", 0.5, 1, 4.2, 9.99, 12.3, 19, 24.75, 99.01, 150.5, 1000),
             validation_values={"ending": (0.69, 0.59, 0.39)}),
    Template("rating_stars",
             "Our hotel reviews show a rating as a row of symbols, filled up to the rating and empty after it. "
             "Write the function that draws the row.",
             "def rating_stars(stars):\n    return '{full}' * stars + '{empty}' * ({out_of} - stars)",
             {"full": ("*", "★", "#", "+", "X", "o", "♥", "="), "empty": (".", "-", "☆", " ", "_", "·", "~", ","),
              "out_of": (4, 5, 6, 7, 8, 9, 10, 12)},
             lambda v: calls("rating_stars", 0, 1, 2, 3, 4, v["out_of"] - 2, v["out_of"] - 1, v["out_of"], 2, 1),
             validation_values={"full": ("@", "%"), "empty": ("^", ":"), "out_of": (11, 15)}),
)
# fmt: on

PROCEDURAL_WIDE = TaskFamily("procedural_wide", TRAIN_TEMPLATES + EXTRA_TRAIN_TEMPLATES, UNSEEN_TEMPLATES,
                             VALIDATION_UNSEEN_TEMPLATES, WARM_START_TEMPLATES)
WIDE_SPLITS = ("train", "validation", "test", "warm_start")


def load_procedural_wide(split: str) -> list[dict[str, Any]]:
    """The named splits, seed 0: ``train`` is the family's own (400 tasks round-robin over its 40 templates);
    ``validation``, ``test`` and ``warm_start`` are :func:`colbench_gym.tasks.procedural.load_procedural`'s rows,
    so that evaluation matches a run that trains on ``procedural:train``."""
    if split not in WIDE_SPLITS:
        raise ValueError(f"unknown procedural_wide split {split!r}; choose 'train', 'validation', 'test' or "
                         "'warm_start'")
    if split == "train":
        return PROCEDURAL_WIDE.load("train")
    return load_procedural(split)
