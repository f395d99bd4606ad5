"""Per-turn credit against Monte Carlo returns: replayed turn states, candidate values, the agreement metrics."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401  (registers the ids)
from colbench_gym.tasks import load_builtin
from sweet_trl.generation import Generation
from sweet_trl.rollouts import collect
from sweet_trl.study.credit import metrics
from sweet_trl.study.credit.mc_values import (
    MonteCarloSettings,
    candidate_values,
    continuation_plan,
    first_steps,
    held_out_states,
    monte_carlo_values,
)
from sweet_trl.study.credit.replay import ReplayScript, ReplayTurnState
from sweet_trl.study.credit.results import ground_truth_summary

TASKS = load_builtin("train")[:3]
WRONG = "I WANT TO ANSWER:\ndef nothing():\n    return None"


def right(task) -> str:
    return "I WANT TO ANSWER:\n" + task.ground_truth


def make_env():
    return gym.make("ColBench-Backend-v0", tasks=TASKS, max_turns=2)


class KeywordPolicy:
    """Asks a plain question first; answers right only when the dialogue's last question said "magic". Candidate
    sampling (``n > 1``) gives, in order: a magic question, a plain question, the right answer, a wrong one."""

    name = "keyword"

    def __init__(self):
        self.histories = []

    def generate(self, histories, n=1, sampling=None, seeds=None):
        out = []
        for history in histories:
            self.histories.append(history)
            task = next(t for t in TASKS if t.problem_description in history[1]["content"])
            asked = [m["content"] for m in history if m["role"] == "assistant"]
            if n > 1:
                texts = ["A magic question?", "A plain question?", right(task), WRONG][:n]
            elif not asked:
                texts = ["A plain question?"]
            else:
                texts = [right(task) if "magic" in asked[-1] else WRONG]
            out.append([Generation(t, token_ids=[1, 2], logprobs=[-0.5, -0.5]) for t in texts])
        return out


@pytest.fixture(scope="module")
def held_out_records():
    return collect(KeywordPolicy(), tasks=TASKS, episodes_per_task=1, seed=5, num_envs=3, progress=False,
                   env_kwargs={"max_turns": 2}).records


# -- replay ------------------------------------------------------------------------------------------------------

def test_replay_reaches_the_recorded_state_and_flags_another():
    task = TASKS[0]
    env = make_env()
    env.reset(seed=0, options={"task_id": task.task_id})
    _, _, _, _, info = env.step("What is the input?")
    reply = info["messages"][-1]["content"]
    scripts = [ReplayScript(task.task_id, 0, ["What is the input?"], [reply]),
               ReplayScript(task.task_id, 0, ["What is the input?"], ["a reply the human never gave"])]
    replay = ReplayTurnState(make_env(), scripts)
    observation, info = replay.reset(seed=0, options={"task_id": task.task_id})
    assert info["replayed_turns"] == 1 and info["replay_mismatch"] is False
    assert info["messages"][-1]["content"] == reply and reply in observation
    _, reward, terminated, _, info = replay.step(right(task))
    assert terminated and reward == 1.0 and info["replayed_turns"] == 1
    assert replay.reset(seed=1)[1]["replay_mismatch"] is True


def test_replay_refuses_a_script_that_ends_the_episode_or_is_not_there():
    task = TASKS[0]
    replay = ReplayTurnState(make_env(), [ReplayScript(task.task_id, 0, [right(task)])])
    with pytest.raises(ValueError, match="ends its episode"):
        replay.reset(seed=0)
    with pytest.raises(ValueError, match="names the script"):
        replay.reset(seed=3)
    with pytest.raises(ValueError, match="replays task"):
        replay.reset(seed=0, options={"task_id": TASKS[1].task_id})


def test_the_collector_continues_replayed_episodes_and_annotates_only_the_policys_turns():
    task = TASKS[1]
    scripts = [ReplayScript(task.task_id, 0, ["A magic question?"]), ReplayScript(task.task_id, 0, ["Plain?"])]
    result = collect(KeywordPolicy(), tasks=TASKS, episodes=[(task.task_id, 0), (task.task_id, 1)], num_envs=2,
                     make_env=lambda: ReplayTurnState(make_env(), scripts), progress=False)
    magic, plain = sorted(result.records, key=lambda r: r["seed"])
    assert magic["reward"] == 1.0 and plain["reward"] == 0.0
    agent = [m for m in magic["dialogue_history"] if m["role"] == "assistant"]
    assert magic["replayed_turns"] == 1 and magic["turns"] == 2
    assert "logprobs" not in agent[0] and agent[1]["logprobs"] == [-0.5, -0.5]  # the replayed turn has no generation


# -- the ground truth --------------------------------------------------------------------------------------------

def test_held_out_states_take_one_turn_of_each_kind_per_episode(held_out_records):
    states = held_out_states(held_out_records, "ColBench-Backend-v0", max_turns=2, per_kind=10)
    assert sorted(s["kind"] for s in states) == ["answer"] * 3 + ["question"] * 3
    for state in states:
        assert state["privileged"] and state["episode_seed"] == 5
        assert len(state["replies"]) == state["turn"]  # the human's replies before the state
    assert len(held_out_states(held_out_records, "ColBench-Backend-v0", 2, per_kind=2)) == 4
    # question states at chosen turns only (these episodes ask at turn 0): the answers are drawn as before
    later = held_out_states(held_out_records, "ColBench-Backend-v0", 2, per_kind=10, question_turns=(1, 2))
    assert [s["kind"] for s in later] == ["answer"] * 3
    assert held_out_states(held_out_records, "ColBench-Backend-v0", 2, per_kind=10, question_turns=(0,)) == states
    # unset, the option stays out of the cache key, so ground truths made before it was added are read back
    assert "question_turns" not in MonteCarloSettings().to_dict()
    assert MonteCarloSettings(question_turns=(1, 2)).to_dict()["question_turns"] == [1, 2]


def test_candidate_values_are_exact_for_answers_and_continued_for_questions(held_out_records, tmp_path):
    settings = MonteCarloSettings(states_per_kind=3, num_candidates=4, continuations=3, seed=0, policy="keyword")
    policy = KeywordPolicy()
    rows = monte_carlo_values(tmp_path / "truth", held_out_records, policy, make_env, settings,
                              env_id="ColBench-Backend-v0", max_turns=2, sampling=None, num_envs=8, progress=False)
    questions = [r for r in rows if r["kind"] == "question"]
    answers = [r for r in rows if r["kind"] == "answer"]
    assert len(questions) == len(answers) == 3
    for row in questions:
        assert row["candidates"] == ["A magic question?", "A plain question?", right(
            next(t for t in TASKS if t.task_id == row["task_id"])), WRONG]
        # the magic question leads the same policy to the right answer every time; the plain one never does
        assert row["values"] == [1.0, 0.0, 1.0, 0.0] and row["exact"] == [False, False, True, True]
        assert row["samples"] == [3, 3, 1, 1] and row["value_se"][:2] == [0.0, 0.0]
        assert row["returns"] == [[1.0] * 3, [0.0] * 3, [1.0], [0.0]]  # each continuation's return, kept
    for row in answers:  # at the last turn every candidate ends the episode: its value is the grader's
        assert all(row["exact"]) and row["samples"] == [1, 1, 1, 1]
    # a continuation saw the candidate it continues: the history ends on the human's reply to it
    continued = [h for h in policy.histories if sum(m["role"] == "assistant" for m in h) == 1]
    assert {h[-2]["content"] for h in continued} == {"A magic question?", "A plain question?"}
    # and each continuation's first reply is kept with its candidate (none for a candidate that ended the episode)
    heard = {q: {h[-1]["content"] for h in continued if h[-2]["content"] == q}
             for q in ("A magic question?", "A plain question?")}
    for row in questions:
        assert [len(replies) for replies in row["first_replies"]] == [3, 3, 0, 0]
        assert {*row["first_replies"][0]} <= heard["A magic question?"]
        assert {*row["first_replies"][1]} <= heard["A plain question?"]

    calls = len(policy.histories)
    again = monte_carlo_values(tmp_path / "truth", held_out_records, policy, make_env, settings,
                               env_id="ColBench-Backend-v0", max_turns=2, sampling=None, progress=False)
    assert again == rows and len(policy.histories) == calls  # read back: nothing sampled or played again

    # a ground truth written before returns and first replies were kept gets them from its own continuations,
    # without playing any
    from sweet_trl.study.critic_eval import write_with_settings

    write_with_settings(tmp_path / "truth" / "values.jsonl", settings.to_dict(),
                        [{k: v for k, v in row.items() if k not in ("returns", "first_replies")} for row in rows])
    rebuilt = monte_carlo_values(tmp_path / "truth", held_out_records, policy, make_env, settings,
                                 env_id="ColBench-Backend-v0", max_turns=2, sampling=None, progress=False)
    assert rebuilt == rows and len(policy.histories) == calls


def test_failures_leave_a_candidate_without_value_not_a_crash():
    rows = [{"state_id": "s", "task_id": TASKS[0].task_id, "prompt": [], "replies": [], "candidates": ["q?", "a"]}]
    steps = [[{"ended": False, "reward": None, "success": False, "error": None, "replay_mismatch": False},
              {"ended": False, "reward": None, "success": False, "error": "RuntimeError: broken", "replay_mismatch":
               False}]]
    scripts, owners = continuation_plan(rows, steps, continuations=2)
    assert owners == [(0, 0), (0, 0)]  # the failed candidate is not continued
    assert [list(s.agent_messages) for s in scripts] == [["q?"], ["q?"]]  # each replays the candidate it continues
    records = {0: {"reward": 0.5, "success": False}, 1: {"reward": None, "outcome": "policy_error"}}
    (valued,) = candidate_values(rows, steps, owners, records)
    assert valued["values"][0] == 0.5 and valued["samples"] == [1, 0]
    assert math.isnan(valued["values"][1]) and math.isnan(valued["value_se"][0])


def test_first_steps_record_a_broken_environment_as_an_error():
    def broken_env():
        raise RuntimeError("no environment today")

    rows = [{"state_id": "s", "task_id": TASKS[0].task_id, "prompt": [{"role": "system", "content": "x"}],
             "replies": [], "candidates": ["q?"]}]
    (steps,) = first_steps(rows, broken_env, workers=1)
    assert steps[0]["error"].startswith("RuntimeError") and steps[0]["reward"] is None


# -- the metrics -------------------------------------------------------------------------------------------------

def test_spearman_handles_ties_and_constant_scores():
    assert metrics.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert metrics.spearman([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    assert metrics.spearman([1, 1, 1], [10, 20, 30]) == 0.0
    assert metrics.spearman([1, 2, 2], [1, 2, 3]) == pytest.approx(0.8660254)


def test_state_metrics_split_ties_at_the_top_and_skip_states_without_spread():
    assert metrics.state_metrics([0.0, 1.0, 0.5], [0.1, 0.9, 0.2]) == {"spearman": 1.0, "top1": 1.0,
                                                                       "pick_value": 1.0}
    tied = metrics.state_metrics([1.0, 0.0, 0.0, 0.0], [5.0, 5.0, 1.0, 1.0])
    assert tied["top1"] == 0.5 and tied["pick_value"] == 0.5
    assert metrics.state_metrics([0.5, 0.5], [1.0, 2.0]) is None  # every order is right
    assert metrics.state_metrics([0.0, 1.0, math.nan], [math.nan, 2.0, 3.0]) is None  # one candidate left
    assert metrics.chance_metrics([1.0, 0.0, 0.0, 1.0]) == {"spearman": 0.0, "top1": 0.5, "pick_value": 0.5}


def test_copies_of_one_message_are_one_candidate_whose_continuations_are_pooled():
    # three copies of one question whose continuations happened to differ, and one other question
    row = {"state_id": "s", "task_id": "t", "candidates": ["ask A", "ask A", "ask B", "ask A"],
           "values": [1.0, 0.0, 0.5, 0.5], "samples": [4, 4, 4, 0], "value_se": [0.0] * 4,
           "exact": [False] * 4, "kind": "question",
           "scores": {"likes_a": [2.0, 2.0, 1.0, 2.0], "likes_b": [0.0, 0.0, 1.0, 0.0]}}
    values, scores = metrics.distinct_values(row, "likes_a")
    assert values == [0.5, 0.5] and scores == [2.0, 1.0]  # the copy without a continuation adds no weight
    assert metrics.per_state([row], "likes_a") == {}  # pooled, the two questions are worth the same
    row["values"] = [1.0, 0.5, 0.25, 0.0]
    assert metrics.distinct_values(row)[0] == [0.75, 0.25]
    # unmerged, the copies' spread would split a tie at the top: top1 1/3 for the ranker that picks "ask A"
    assert metrics.per_state([row], "likes_a")["s"] == {"spearman": 1.0, "top1": 1.0, "pick_value": 0.75}
    assert metrics.per_state([row], "likes_b")["s"]["top1"] == 0.0
    # a random pick takes "ask A" three times in four, as often as it was sampled
    assert metrics.per_state([row], "random")["s"] == {"spearman": 0.0, "top1": 0.75, "pick_value": 0.625}
    # a state of one message has nothing to order
    single = {**row, "candidates": ["ask A"] * 4}
    assert metrics.per_state([single], "likes_a") == {} and metrics.per_state([single], "random") == {}
    summary = ground_truth_summary([row, single])["question_turns"]
    assert summary["states_with_one_message"] == 1 and summary["mean_distinct_candidates"] == 1.5
    assert summary["states_with_value_spread"] == 1


def test_summaries_and_paired_differences_resample_tasks():
    rows = [{"state_id": f"s{i}", "task_id": f"t{i // 2}", "values": [0.0, 1.0, 0.5],
             "scores": {"good": [0.0, 2.0, 1.0], "bad": [2.0, 0.0, 1.0]}} for i in range(6)]
    good = metrics.summarise(rows, "good", samples=200)
    assert good["states"] == 6 and good["top1"]["mean"] == 1.0 and good["top1"]["tasks"] == 3
    assert metrics.summarise(rows, "random", samples=200)["pick_value"]["mean"] == pytest.approx(0.5)
    difference = metrics.paired(rows, "good", "bad", samples=200)
    assert difference["spearman"]["mean"] == pytest.approx(2.0) and difference["top1"]["low"] == 1.0
    assert metrics.summarise(rows, "absent", samples=200) == {"states": 0, "spearman": None, "top1": None,
                                                             "pick_value": None}


def test_credit_report_prints_every_ranker_difference_and_scaling_row_as_markdown(tmp_path, capsys):
    import json

    from sweet_trl.cli import main
    from sweet_trl.pairs import DIFFERENCES as CLASSES
    from sweet_trl.study.credit.arguments import CreditArguments
    from sweet_trl.study.credit.results import credit_report

    def row(i, kind, values):
        return {"state_id": f"{kind}{i}", "task_id": f"t{i // 2}", "kind": kind, "candidates": ["a", "b", "c"],
                "values": values, "samples": [4, 4, 4], "value_se": [0.1] * 3, "exact": [kind == "answer"] * 3,
                "first_replies": [["No."] * 4, ["Yes."] * 4, ["Yes."] * 4]}

    rows = [row(i, kind, [0.0, 1.0, 0.5]) for i in range(6) for kind in ("question", "answer")]
    good, bad = [[0.0, 2.0, 1.0]] * len(rows), [[2.0, 0.0, 1.0]] * len(rows)
    scores = {"trained_with_c": good, "untrained_with_c": bad, "scaling:3x": good}
    three_x = {"pairs": 4, "counts": dict(zip(CLASSES, (1, 2, 1, 0, 0))),
               "fractions": dict(zip(CLASSES, (0.25, 0.5, 0.25, 0.0, 0.0)))}
    filtered = {"pairs": 1, "counts": dict(zip(CLASSES, (0, 0, 1, 0, 0))),
                "fractions": dict(zip(CLASSES, (0.0, 0.0, 1.0, 0.0, 0.0)))}
    result = credit_report(rows, scores, CreditArguments(bootstrap_samples=100),
                           scaling_runs={"1x": {"trajectories": 320, "critic_pairs": 236},
                                         "3x": {"trajectories": 960, "critic_pairs": 700,
                                                "pairs_by_what_the_human_told": three_x}},
                           variant_runs={"beta1": {"pairs_by_what_the_human_told": three_x},  # pairs shown above
                                         "filtered": {"pairs_by_what_the_human_told": filtered},
                                         "filtered_beta1": {"pairs_by_what_the_human_told": filtered}})
    path = tmp_path / "critic_credit.json"
    path.write_text(json.dumps(result))
    assert main(["credit-report", str(path)]) == 0
    assert "Written by" not in capsys.readouterr().out  # a file written before provenance was recorded
    result["provenance"] = {"command": "sweet-rl credit --config study_cpu", "git_commit": "d328505" + "0" * 33,
                            "git_dirty": True}
    path.write_text(json.dumps(result))
    assert main(["credit-report", str(path)]) == 0
    text = capsys.readouterr().out
    assert "Written by `sweet-rl credit --config study_cpu` at d328505000 (uncommitted changes)." in text
    rankers = {line.split("|")[1].strip(): line for line in text.split("| ranker ")[1].split("\n\n")[0].splitlines()}
    assert rankers["trained_with_c"].count(" 100.0 [100.0, 100.0] ") == 4  # top-1 and pick value, both kinds
    assert rankers["untrained_with_c"].count(" 0.0 [0.0, 0.0] ") == 4
    assert "| trained_with_c - untrained_with_c | +100.0 [+100.0, +100.0] | +100.0 [+100.0, +100.0] | " \
           "+2.00 [+2.00, +2.00] |" in text
    assert "| 3x | 960 | 700 | 6 / 6 | 100.0 [100.0, 100.0] |" in text
    assert "| 3x | 4 | 1 (25%) | 2 (50%) | 1 (25%) | 0 (0%) | 0 (0%) |" in text  # 1x's pairs were not counted
    # a variant's pairs get a row only when no row above holds the same pairs
    assert "| variant filtered | 1 | 0 (0%) | 0 (0%) | 1 (100%) |" in text
    assert "variant beta1 |" not in text and "variant filtered_beta1 |" not in text
    # "a" (0.0) drew "No.", "b" (1.0) and "c" (0.5) "Yes.": 0.375 of each state's 0.5 of spread lies between them
    assert "| question turns | 6 | 3 | 0 | 3.0 | 6 | 72 | 0.100 | 75% |" in text
    only_questions = main(["credit-report", str(path), "--kind", "question"])
    assert only_questions == 0 and "answer top-1" not in capsys.readouterr().out
    not_credit = tmp_path / "other.json"
    not_credit.write_text("{}")
    assert main(["credit-report", str(not_credit)]) == 2
    assert "not a credit file" in capsys.readouterr().err
    # a run folder stands for the credit files it holds, one per measurement
    (tmp_path / "run" / "credit").mkdir(parents=True)
    (tmp_path / "run" / "credit" / "critic_credit.json").write_text(path.read_text())
    assert main(["credit-report", str(tmp_path / "run")]) == 0
    assert f"### {tmp_path / 'run' / 'credit' / 'critic_credit.json'}" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["credit-report", str(tmp_path / "empty")]) == 2
    assert "holds no critic_credit.json" in capsys.readouterr().err


def test_the_noise_ceiling_values_each_candidate_from_disjoint_halves_of_its_continuations():
    # "ask A" twice (its returns pooled), "ask B" once, and an answer graded exactly
    row = {"state_id": "s", "task_id": "t", "kind": "question", "candidates": ["ask A", "ask B", "ask A", "answer"],
           "values": [0.5, 0.25, 0.5, 0.0], "exact": [False, False, False, True],
           "returns": [[1.0, 0.0], [0.0, 0.5, 0.0, 0.5], [1.0, 0.0], [0.0]]}
    values, scores, counts = metrics.split_half(row)
    # "ask A" plays 1, 0, 1, 0: the even half 1.0, the odd half 0.0; "ask B" 0.0 and 0.5; the answer 0 in both
    assert scores == [1.0, 0.0, 0.0] and values == [0.0, 0.5, 0.0] and counts == [2, 1, 1]
    ceiling = metrics.noise_ceiling([row], samples=100)
    # knowing the even half picks "ask A", whose odd half is worth nothing: the best is a matter of luck here
    assert ceiling["states"] == 1 and ceiling["split_half"]["top1"]["mean"] == 0.0
    assert ceiling["random"]["top1"]["mean"] == pytest.approx(0.25)  # "ask B" is one sample of four
    assert metrics.split_half({**row, "returns": [[1.0], [0.0, 0.5], [0.0], [0.0]]}) is not None  # copies pooled: 2
    assert metrics.split_half({**row, "returns": [[1.0], [0.5], [], [0.0]]}) is None  # "ask B": one continuation
    assert metrics.split_half({k: v for k, v in row.items() if k != "returns"}) is None


def test_pairs_are_classed_by_where_they_differ_before_the_answer(tmp_path):
    import json

    from sweet_trl.pairs import DIFFERENCES as CLASSES
    from sweet_trl.pairs import difference_before_answer as classify
    from sweet_trl.pairs import told
    from sweet_trl.study.credit.pair_signal import pair_signal, pair_signal_of_file

    opening = {"role": "user", "content": "Write f. The signature of the function is: def f(x)"}

    def side(*turns):
        dialogue = [opening]
        for question, reply in zip(turns[::2], turns[1::2]):
            dialogue += [{"role": "assistant", "content": question}, {"role": "user", "content": reply}]
        return [*dialogue, {"role": "assistant", "content": "I WANT TO ANSWER:\ndef f(x):\n    return x"}]

    limit, rule = "The limit is 5.", "A value at the limit counts."
    assert told(side("What limit?", f"{limit} {rule}", "Anything else?", "I don't know.")) == {limit, rule}
    assert told([opening, {"role": "assistant", "content": "?"}, {"role": "user", "content": None}]) == set()
    cases = {
        "same_questions": (side("What limit?", limit), side("What limit?", limit)),
        "same_told": (side("What limit?", limit), side("Which limit?", limit)),
        "chosen_told_more": (side("What limit?", limit, "Rule?", rule), side("Hm?", "I don't know.", "Limit?", limit)),
        "rejected_told_more": (side("Hm?", "I don't know."), side("What limit?", limit)),
        "told_different": (side("Rule?", rule), side("What limit?", limit)),
    }
    rows = [{"chosen": chosen, "rejected": rejected} for chosen, rejected in cases.values()]
    assert [classify(row) for row in rows] == list(cases) == list(CLASSES)
    # a trajectory record (its dialogue_history) reads as its messages
    assert classify({"chosen": {"dialogue_history": rows[1]["chosen"]}, "rejected": rows[1]["rejected"]}) == "same_told"
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in [*rows, rows[1]]))
    signal = pair_signal_of_file(path)
    assert signal == pair_signal([*rows, rows[1]])
    assert signal["pairs"] == 6 and signal["counts"]["same_told"] == 2 and signal["fractions"]["same_told"] == 2 / 6
    assert pair_signal([]) == {"pairs": 0, "counts": dict.fromkeys(CLASSES, 0), "fractions": dict.fromkeys(CLASSES)}


def test_the_reply_share_is_the_part_of_the_values_spread_between_questions_answered_alike():
    def state(values, replies, candidates=None):
        return {"state_id": "s", "task_id": "t", "kind": "question", "values": values, "samples": [2] * len(values),
                "candidates": candidates or [f"q{i}" for i in range(len(values))],
                "first_replies": [[reply, reply] if reply else [] for reply in replies]}

    # the reply orders the values exactly: all of the spread is between replies
    assert metrics.reply_share([state([1.0, 1.0, 0.0], ["Yes.", "Yes.", "No."])]) == {"states": 1, "share": 1.0}
    # every question drew the same reply: none of it is
    assert metrics.reply_share([state([1.0, 0.0], ["Yes.", "Yes."])])["share"] == 0.0
    # copies of one message are one candidate; a state without spread is left out; an answer (no reply) is a group
    rows = [state([1.0, 0.0, 1.0, 0.5], ["Yes.", "No.", "Yes.", None], ["a", "b", "a", "answer"]),
            state([0.5, 0.5], ["Yes.", "No."])]
    # distinct: a 1.0 (Yes.), b 0.0 (No.), answer 0.5 (none): every candidate a group of its own
    assert metrics.reply_share(rows) == {"states": 1, "share": 1.0}
    assert metrics.reply_share([{k: v for k, v in rows[0].items() if k != "first_replies"}]) is None


def test_a_results_file_is_not_rewritten_without_the_rows_it_holds(tmp_path):
    """A read-back with an older command line (fewer --credit.scaling / --credit.variants) would drop the critics
    scored since: refused before any work, naming them; the same rows, another path or overwrite_results go on."""
    from sweet_trl.pipeline_config import ConfigError
    from sweet_trl.study.credit.arguments import CreditArguments, check_results_path

    path = tmp_path / "credit.json"
    path.write_text(json.dumps({"scaling": [{"label": "1x"}, {"label": "3x"}],
                                "variants": [{"label": "beta1"}, {"label": "best_vs_rest"}]}))
    older = CreditArguments(results_path=str(path), variants=["beta1=runs/v/beta1"])
    with pytest.raises(ConfigError, match=r"scaling: 3x; variants: best_vs_rest"):
        check_results_path(older)
    check_results_path(CreditArguments(results_path=str(path), scaling=["3x=runs/c3"],
                                       variants=["beta1=a", "best_vs_rest=b", "new=c"]))
    check_results_path(CreditArguments(results_path=str(path), variants=["beta1=a"], overwrite_results=True))
    check_results_path(CreditArguments(results_path=str(tmp_path / "elsewhere.json")))
    path.write_text("not json")
    with pytest.raises(ConfigError, match="is not a credit results file"):
        check_results_path(CreditArguments(results_path=str(path)))


@pytest.mark.parametrize(("options", "refusal"), [
    ({"held_out_tasks": "procedural:test"}, "is a test split: settings are chosen on a validation split's states"),
    ({"held_out_tasks": "procedural:validation", "held_out": "episodes.jsonl"}, "name the states twice"),
    ({"num_candidates": 1}, "num_candidates must be >= 2"),
    ({"scaling": ["3x"]}, "scaling entries are label=run_dir"),
    ({"train_variants": ["a b=--beta 1"]}, "train_variants labels name folders")])
def test_credit_arguments_refuse_what_would_measure_the_wrong_thing(options, refusal):
    from sweet_trl.study.credit.arguments import CreditArguments

    with pytest.raises(ValueError, match=refusal):
        CreditArguments(**options)
