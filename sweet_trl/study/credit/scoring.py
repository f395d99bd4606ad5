"""Every ranker's scores of the ground truth's candidates, each cached on its own.

A ranker maps a state row (``prompt`` with the system instructions, ``privileged``, ``candidates``,
``policy_mean_logprobs``) to one score per candidate, higher is better. The rankers compared:

* ``trained_with_c`` (the run's ranking), and ``trained_with_c:<ranking>`` for every ranking of
  :data:`sweet_trl.losses.RANKING_RULES`: the asymmetric critic, through the ``rank`` stage's own scorer;
* ``untrained_with_c``: the critic's base model as critic and reference (the run's ranking), i.e. what ``c`` tells
  before any Bradley-Terry training (with ``critic_minus_reference_without_c``: the candidate's pointwise mutual
  information with ``c``);
* ``trained_without_c``: the paper's ablation, a critic trained the same way without ``c``;
* ``value_function``: a scalar head regressed on returns without ``c``
  (:mod:`~sweet_trl.study.credit.value_function`);
* ``policy_likelihood``: the policy's own mean token log-probability of each candidate (free; a control for
  "the likeliest answer is the best");
* ``random`` is not scored: :mod:`~sweet_trl.study.credit.metrics` gives its expectation exactly.

Scores live in ``<folder>/<ranker>.jsonl`` with the identity of what made them (a critic's run id, the ranking,
the ground truth's settings) on the first line, so a retrained critic is scored again and nothing else is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Ranker = Callable[[Mapping[str, Any]], Sequence[float]]


def cached_scores(folder: Path, name: str, identity: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                  make_ranker: Callable[[], Ranker], progress: bool = True) -> list[list[float]]:
    """``name``'s scores of every row: read back when ``identity`` matches, else computed (``make_ranker`` is
    called only then: loading a model is the slow part) and written."""
    from sweet_trl.study.critic_eval import read_with_settings, write_with_settings

    path = folder / f"{name.replace(':', '__')}.jsonl"
    stored = read_with_settings(path, identity)
    if stored is not None and [r["state_id"] for r in stored] == [r["state_id"] for r in rows]:
        return [r["scores"] for r in stored]
    ranker = make_ranker()
    scores = [[float(x) for x in ranker(row)] for row in _progress(rows, name, progress)]
    folder.mkdir(parents=True, exist_ok=True)
    write_with_settings(path, identity, [{"state_id": r["state_id"], "scores": s} for r, s in zip(rows, scores)])
    return scores


def _progress(rows: Sequence[Any], name: str, enabled: bool) -> Any:
    if not enabled:
        return rows
    from tqdm.auto import tqdm

    return tqdm(rows, desc=f"scoring: {name}", unit="state")


def critic_ranker(critic: Any, ranking: str) -> Ranker:
    """A :class:`~sweet_trl.critic.SweetCritic` ranking as the ``rank`` stage does (the same scorer)."""
    from sweet_trl.study.critic_eval import critic_ranker as ranker

    return ranker(critic, ranking)


def load_critic(folder: Path, batch_size: int, dtype: Any = None) -> Any:
    from sweet_trl.critic import SweetCritic

    return SweetCritic.from_pretrained(folder / "model", batch_size=batch_size, **({"dtype": dtype} if dtype else {}))


def untrained_critic(trained: Any, batch_size: int, dtype: Any = None) -> Any:
    """The base model of a LoRA critic as critic and as its own reference (:meth:`SweetCritic.untrained`)."""
    untrained = trained.untrained(dtype)
    untrained.batch_size = batch_size
    return untrained


def policy_likelihood(row: Mapping[str, Any]) -> list[float]:
    return [float(x) if x is not None else float("nan") for x in row["policy_mean_logprobs"]]


def value_function_ranker(scorer: Any) -> Ranker:
    return lambda row: scorer.scores(row["prompt"], row["candidates"])
