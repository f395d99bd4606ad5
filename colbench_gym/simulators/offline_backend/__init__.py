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
Hidden information that is not Python is answered from its best-matching sentences. A task row with
``"reveal": "asked_facts_only"`` (the multi-fact tasks, ``procedural_multi:<split>``) is answered from its
``hidden_facts`` instead: only the facts whose detail the question names (:mod:`.asked_facts`).

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

The package, one job per module:

* :mod:`.words`: text into word stems, with the synonyms a question may use.
* :mod:`.facts`: what a fact is, and the knowledge built from one reference.
* :mod:`.vocabulary`: what operators, builtins and methods are called in words.
* :mod:`.phrasing`: expressions said in plain words.
* :mod:`.syntax`: small readings of the syntax tree (names changed, checks that return).
* :mod:`.shapes`: what each input looks like, from how the code uses it.
* :mod:`.comments`: the reference's comments, as keywords and as notes.
* :mod:`.extraction`: the walk over the reference that writes the facts.
* :mod:`.leaks`: never repeating a long source line.
* :mod:`.knowledge`: parsing once per reference (code or prose), cached.
* :mod:`.matching`: reading a question and scoring each fact against it.
* :mod:`.replies`: the chosen facts in at most two sentences.
* :mod:`.asked_facts`: the reply of a task that reveals only the facts asked for.
* :mod:`.simulator`: :class:`OfflineBackendSimulator`, which decides what answers a turn.
"""

from colbench_gym.simulators.offline_backend.facts import Fact, Knowledge
from colbench_gym.simulators.offline_backend.knowledge import build_knowledge
from colbench_gym.simulators.offline_backend.leaks import LEAK_LINE_CHARS
from colbench_gym.simulators.offline_backend.replies import MAX_FACTS_PER_REPLY, MAX_REPLY_CHARS
from colbench_gym.simulators.offline_backend.simulator import OfflineBackendSimulator

__all__ = [
    "LEAK_LINE_CHARS", "MAX_FACTS_PER_REPLY", "MAX_REPLY_CHARS", "Fact", "Knowledge", "OfflineBackendSimulator",
    "build_knowledge",
]
