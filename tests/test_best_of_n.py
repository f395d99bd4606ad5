"""Best-of-N fine-tuning (SWEET-RL's critic, the policy fine-tuned on its top candidate): the pick, the
configuration and the learning."""

from __future__ import annotations

import math
import random
import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from helpers_learning import HELD_OUT_POOL, TRAIN_POOL, assert_held_out, learning_corpus, spread
from helpers_tiny_models import ASSUMPTION, DETAILS, decisive_question, tiny_causal_lm, tiny_tokenizer

from sweet_trl.best_of_n import (
    BestOfNFinetuneConfig,
    best_candidate,
    best_of_n_dataset,
    best_turns_from_ranked,
    train_best_of_n,
)
from sweet_trl.policy_trainer import preference_margins

SYSTEM = "You are a software engineer working with a human who wants a Python function."
FAST = dict(bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
            logging_steps=1000, disable_tqdm=True, max_length=256)


def config(tmp_path, **overrides) -> BestOfNFinetuneConfig:
    return BestOfNFinetuneConfig(output_dir=str(tmp_path / "best"), **{**FAST, **overrides})


def ranked_row(state: int, candidates, scores, turn: int = 1, **extra) -> dict:
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Task {state}."}]
    return {"state_id": f"s{state}", "task_id": f"t{state}", "turn": turn, "prompt": prompt,
            "candidates": list(candidates), "ranking_scores": list(scores), **extra}


# ---------------------------------------------------------------------------------------------------------------
# The pick

def test_the_pick_is_the_highest_finite_score_with_its_margin(tmp_path):
    rows = [
        ranked_row(0, ["a", "b", "c"], [0.1, 0.7, 0.3]),
        ranked_row(1, ["a", "b", "c"], [float("nan"), None, 0.2]),             # one scored candidate: no choice
        ranked_row(2, ["a", "b", "c"], [float("-inf"), 0.4, 0.4]),             # ties: the first
        ranked_row(3, ["a", "b"], [0.9, 0.1], ranking_error="critic failed"),
        ranked_row(4, ["a", "b"], [0.9]),                                       # scores do not match candidates
        ranked_row(5, ["a", "b"], [0.2, 0.5], turn=0),
    ]
    examples, stats = best_turns_from_ranked(rows, config(tmp_path, turns=[1]))
    assert [(e["state_id"], e["completion"][0]["content"]) for e in examples] == [("s0", "b"), ("s2", "b")]
    assert examples[0]["margin"] == pytest.approx(0.4) and examples[1]["margin"] == 0.0
    assert examples[0]["completion"] == [{"role": "assistant", "content": "b"}]
    assert examples[0]["prompt"] == rows[0]["prompt"] and examples[0]["score"] == 0.7
    assert dict(stats.dropped) == {"state_unranked_or_too_few_candidates": 2, "state_ranking_failed": 1,
                                   "state_turn_not_trained": 1}
    every_turn, _ = best_turns_from_ranked(rows, config(tmp_path))
    assert [e["state_id"] for e in every_turn] == ["s0", "s2", "s5"]
    assert best_candidate([None, float("nan")]) is None and best_candidate([-2.0, -1.0, -1.5]) == 1


def test_top_fraction_keeps_the_states_whose_pick_scores_highest_in_their_order(tmp_path):
    rows = [ranked_row(i, ["a", "b"], [score, -5.0]) for i, score in enumerate([0.1, 0.9, -0.4, 0.5, 0.3])]
    examples, stats = best_turns_from_ranked(rows, config(tmp_path, top_fraction=0.5))
    assert [e["state_id"] for e in examples] == ["s1", "s3", "s4"]  # ceil(2.5) states: 0.9, 0.5, 0.3
    assert dict(stats.dropped) == {"state_pick_below_top_fraction": 2} and stats.rows_out == 3
    one, _ = best_turns_from_ranked(rows, config(tmp_path, top_fraction=0.01))
    assert [e["state_id"] for e in one] == ["s1"]  # never empty while a state is ranked
    every, _ = best_turns_from_ranked(rows, config(tmp_path))
    assert len(every) == 5


def test_min_score_leaves_out_the_states_whose_pick_scores_below_it(tmp_path):
    # true-reward scores: the fraction of tests each candidate passes
    rows = [ranked_row(0, ["a", "b"], [1.0, 0.2]), ranked_row(1, ["a", "b"], [0.0, 0.9]),
            ranked_row(2, ["a", "b", "c"], [0.0, 0.0, 0.0]), ranked_row(3, ["a", "b"], [0.5, 1.0])]
    examples, stats = best_turns_from_ranked(rows, config(tmp_path, min_score=1.0))
    assert [(e["state_id"], e["completion"][0]["content"]) for e in examples] == [("s0", "a"), ("s3", "b")]
    assert dict(stats.dropped) == {"state_pick_below_min_score": 2}
    assert len(best_turns_from_ranked(rows, config(tmp_path, min_score=0.9))[0]) == 3
    assert len(best_turns_from_ranked(rows, config(tmp_path))[0]) == 4  # None: every state, the failing picks too
    with pytest.raises(ValueError, match="no turn state to learn from.*state_pick_below_min_score.*lower min_score"):
        best_of_n_dataset(rows[2:3], config(tmp_path, min_score=1.0))


def test_nothing_to_learn_from_is_an_error_that_says_why(tmp_path):
    rows = [ranked_row(0, ["a", "b"], [0.2, 0.5], turn=0)]
    with pytest.raises(ValueError, match="no turn state to learn from.*state_turn_not_trained.*widen turns"):
        best_of_n_dataset(rows, config(tmp_path, turns=[1]))


@pytest.mark.parametrize("bad, message", [
    ({"turns": []}, "turns must be None or a non-empty list"),
    ({"turns": [-1]}, "turns must be None or a non-empty list"),
    ({"min_candidates": 1}, "min_candidates must be >= 2"),
    ({"top_fraction": 0.0}, r"top_fraction must be in \(0, 1\]"),
    ({"top_fraction": 1.5}, r"top_fraction must be in \(0, 1\]"),
    ({"min_score": float("nan")}, "min_score must be a finite number"),
    ({"completion_only_loss": False}, "would train on the dialogue too"),
])
def test_bad_settings_are_named(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        config(tmp_path, **bad)


# ---------------------------------------------------------------------------------------------------------------
# Learning

def ranked_states(units, pool, seed: int, count: int) -> list[dict]:
    """Turn states ranked as a critic with c ranks them: asking about the hidden unit first, the assumption last,
    the fillers between, in a shuffled candidate order."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": rng.choice(pool["descriptions"])}]
        fillers = rng.sample(pool["fillers"], 2)
        scored = [(decisive_question(rng.choice(units)), 1.0 + rng.random()), (ASSUMPTION, -1.0 - rng.random()),
                  *((filler, rng.uniform(-0.5, 0.5)) for filler in fillers)]
        rng.shuffle(scored)
        rows.append({"state_id": f"{seed}-{index}", "task_id": f"{seed}-{index}", "turn": 0, "prompt": prompt,
                     "candidates": [text for text, _ in scored], "ranking_scores": [score for _, score in scored]})
    return rows


def asking_over_assuming(rows) -> list[dict]:
    """Per state, the pair (the critic's top candidate, the assumption) that a policy should order alike."""
    pairs = []
    for row in rows:
        best = max(range(len(row["candidates"])), key=lambda i: row["ranking_scores"][i])
        pairs.append({"prompt": row["prompt"], "chosen": [{"role": "assistant", "content": row["candidates"][best]}],
                      "rejected": [{"role": "assistant", "content": ASSUMPTION}]})
    return pairs


def every_pair(rows) -> list[dict]:
    """Each state's top candidate against each of the others (what a held-out check compares)."""
    pairs = []
    for row, (best,) in zip(rows, ([p["chosen"]] for p in asking_over_assuming(rows))):
        pairs += [{"prompt": row["prompt"], "chosen": best, "rejected": [{"role": "assistant", "content": text}]}
                  for text in row["candidates"] if text != best[0]["content"]]
    return pairs


def test_the_policy_learns_the_critics_pick_not_the_rest_on_held_out_states(tmp_path):
    """Training states hold four candidates: the question about the hidden unit (the critic's top score), two
    fillers and "Let me assume the usual unit." (its lowest). After best-of-N fine-tuning on 32 states, on 16
    held-out states (other requests, fillers and units) the log-probability of asking about the unit rises over
    the assumption's. The assumption is one text that every training state offers, so a pick that ignores the
    scores (tests/mutations.py, ``best_of_n_ignores_scores``: a random candidate) imitates it on a quarter of the
    states and the margin falls instead. Asserted on every seed: margin gain over 3 nats, every held-out margin up.
    Measured over seeds 0-2: margin gain 6.5, 7.0, 7.1 nats, every pair raised; with the random pick, seed 0:
    -3.7 nats, no pair raised."""
    tokenizer = tiny_tokenizer(learning_corpus())
    gains = []
    for seed in range(3):
        train = ranked_states(DETAILS[:6], TRAIN_POOL, seed, 32)
        held_out = asking_over_assuming(ranked_states(DETAILS[6:], HELD_OUT_POOL, 100 + seed, 16))
        assert_held_out(every_pair(train), held_out)
        model = tiny_causal_lm(tokenizer, seed=seed)
        before = preference_margins(model, tokenizer, held_out)
        settings = config(tmp_path / str(seed), learning_rate=1e-3, per_device_train_batch_size=8,
                          num_train_epochs=2, seed=seed)
        output = train_best_of_n(settings, train, model=model, tokenizer=tokenizer)
        assert (tmp_path / str(seed) / "best" / "model.safetensors").exists() and output == settings.output_dir
        after = preference_margins(model, tokenizer, held_out)
        gain = statistics.mean(after) - statistics.mean(before)
        raised = statistics.mean(a > b for a, b in zip(after, before))
        gains.append(round(gain, 1))
        print(f"seed {seed}: margin gain {gain:.2f} nats, raised on {raised:.3f} of {len(held_out)}")
        assert math.isfinite(gain) and gain > 3.0, f"seed {seed}: margin gain {gain:.2f}; gains so far {gains}"
        assert raised == 1.0, f"seed {seed}: held-out margins raised {raised:.3f}; gains so far {gains}"
    print(f"margin gain {spread(gains)} {gains}")


def test_bf16_on_a_cpu_trains_under_autocast_and_still_learns(tmp_path):
    """``bf16: true`` with no GPU runs the trainer on the CPU under bf16 autocast (sweet_trl.precision): the linear
    layers compute in bf16 while the weights stay float32, and the policy learns the critic's pick as in float32
    (the test above, seed 0, same threshold). Measured: margin gain 6.5 nats (float32: 6.5)."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    tokenizer = tiny_tokenizer(learning_corpus())
    train = ranked_states(DETAILS[:6], TRAIN_POOL, 0, 32)
    held_out = asking_over_assuming(ranked_states(DETAILS[6:], HELD_OUT_POOL, 100, 16))
    model = tiny_causal_lm(tokenizer, seed=0)
    before = preference_margins(model, tokenizer, held_out)
    settings = config(tmp_path, bf16=True, use_cpu=False, learning_rate=1e-3, per_device_train_batch_size=8,
                      num_train_epochs=2, seed=0)
    assert settings.use_cpu, "bf16 without a GPU must select the CPU (transformers refuses it otherwise)"
    output_dtypes = set()
    hook = model.model.layers[0].mlp.down_proj.register_forward_hook(
        lambda module, args, output: output_dtypes.add(output.dtype) if module.training else None)
    train_best_of_n(settings, train, model=model, tokenizer=tokenizer)
    hook.remove()
    assert output_dtypes == {torch.bfloat16}
    assert model.model.layers[0].mlp.down_proj.weight.dtype == torch.float32
    gain = statistics.mean(preference_margins(model, tokenizer, held_out)) - statistics.mean(before)
    print(f"bf16 margin gain {gain:.2f} nats")
    assert math.isfinite(gain) and gain > 3.0, f"margin gain {gain:.2f}"


def test_a_selector_without_a_scorer_in_the_rank_stage_is_refused_not_graded():
    """The rank stage's last branch grades with the hidden tests: a selector added to SELECTORS without a branch of
    its own must not fall into it (the rows would be labelled with the new selector and ranked by the true reward)."""
    from types import SimpleNamespace

    from sweet_trl.pipeline.stages import _selector

    with pytest.raises(ValueError, match="no scorer for selector 'shortest'"):
        _selector(None, SimpleNamespace(uses_critic=False, selector="shortest", selector_seed=0), None)
