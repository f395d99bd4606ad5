"""SWEET-RL maths on hand-computed tensors."""

import math

import pytest

torch = pytest.importorskip("torch")

from sweet_trl import losses

# One sequence, 8 positions: template (0), agent turn 1 (1 token), human (0), agent turn 2 (3 tokens), template (0)
TURN_IDS = torch.tensor([[0, 1, 0, 0, 2, 2, 2, 0]])
LOGPS = torch.tensor([[-9.0, -1.0, -5.0, -5.0, -2.0, -2.0, -2.0, -7.0]])
REF_LOGPS = torch.tensor([[-3.0, -3.0, -1.0, -1.0, -2.0, -2.0, -2.0, -1.0]])


def test_token_logps_gathers_the_next_token_log_probability():
    logits = torch.tensor([[[0.0, 1.0, 2.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    input_ids = torch.tensor([[2, 1, 0]])
    out = losses.token_logps(logits, input_ids)
    expected_1 = 1.0 - math.log(math.exp(0) + math.exp(1) + math.exp(2))  # logits[0] scores token 1
    expected_2 = 2.0 - math.log(math.exp(2) + 2)  # logits[1] scores token 0
    assert out.shape == (1, 3)
    assert out[0, 0] == 0
    assert out[0, 1].item() == pytest.approx(expected_1)
    assert out[0, 2].item() == pytest.approx(expected_2)


def test_sums_and_counts_by_turn_ignore_positions_outside_agent_turns():
    assert losses.sum_by_turn(LOGPS, TURN_IDS, 2).tolist() == [[-1.0, -6.0]]
    assert losses.count_by_turn(TURN_IDS, 2).tolist() == [[1.0, 3.0]]
    # a third turn that this sequence does not have: zero sum, zero count
    assert losses.count_by_turn(TURN_IDS, 3).tolist() == [[1.0, 3.0, 0.0]]


def test_turn_advantage_is_the_mean_log_ratio_of_the_turn():
    turn_logps = losses.sum_by_turn(LOGPS, TURN_IDS, 3)
    ref = losses.sum_by_turn(REF_LOGPS, TURN_IDS, 3)
    advantages = losses.turn_advantages(turn_logps, ref, losses.count_by_turn(TURN_IDS, 3))
    # turn 1: -1 - (-3) = 2 over 1 token; turn 2: 0 over 3 tokens; missing turn 3: 0, not nan
    assert advantages.tolist() == [[2.0, 0.0, 0.0]]


def test_normalizations_differ_exactly_as_defined():
    turn_logps = losses.sum_by_turn(LOGPS, TURN_IDS, 2)
    ref = losses.sum_by_turn(REF_LOGPS, TURN_IDS, 2)
    counts = losses.count_by_turn(TURN_IDS, 2)
    assert losses.trajectory_scores(turn_logps, ref, counts, "per_turn_sum").item() == pytest.approx(2.0)
    assert losses.trajectory_scores(turn_logps, ref, counts, "trajectory_mean").item() == pytest.approx(2.0 / 4)


def test_normalizations_can_rank_a_pair_in_opposite_orders():
    # chosen: turn 1 = 1 token at +1, turn 2 = 4 tokens at -0.2; rejected: two 1-token turns at +0.3
    chosen_turn_ids = torch.tensor([[1, 2, 2, 2, 2]])
    chosen_ratio = torch.tensor([[1.0, -0.2, -0.2, -0.2, -0.2]])
    rejected_turn_ids = torch.tensor([[1, 2, 0, 0, 0]])
    rejected_ratio = torch.tensor([[0.3, 0.3, 0.0, 0.0, 0.0]])
    turn_ids = torch.cat([chosen_turn_ids, rejected_turn_ids])
    turn_logps = losses.sum_by_turn(torch.cat([chosen_ratio, rejected_ratio]), turn_ids, 2)
    counts = losses.count_by_turn(turn_ids, 2)
    zeros = torch.zeros_like(turn_logps)
    per_turn = losses.trajectory_scores(turn_logps, zeros, counts, "per_turn_sum")
    mean = losses.trajectory_scores(turn_logps, zeros, counts, "trajectory_mean")
    assert per_turn.tolist() == pytest.approx([0.8, 0.6])
    assert mean.tolist() == pytest.approx([0.04, 0.3])
    assert per_turn[0] > per_turn[1] and mean[0] < mean[1]
    # with turns of equal length the two agree up to the factor 1 / number of turns
    equal_ids = torch.tensor([[1, 1, 2, 2]])
    equal_logps = losses.sum_by_turn(torch.tensor([[0.5, 0.1, -0.4, 0.2]]), equal_ids, 2)
    equal_counts = losses.count_by_turn(equal_ids, 2)
    zeros = torch.zeros_like(equal_logps)
    assert losses.trajectory_scores(equal_logps, zeros, equal_counts, "trajectory_mean").item() == pytest.approx(
        losses.trajectory_scores(equal_logps, zeros, equal_counts, "per_turn_sum").item() / 2)


def test_unknown_normalization_is_an_error():
    with pytest.raises(ValueError, match="normalization"):
        losses.trajectory_scores(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "sum")


def test_preference_loss_is_bradley_terry_with_beta():
    chosen, rejected = torch.tensor([3.0, -1.0]), torch.tensor([1.0, 1.0])
    loss, metrics = losses.preference_loss(chosen, rejected, beta=0.1)
    expected = (math.log1p(math.exp(-0.2)) + math.log1p(math.exp(0.2))) / 2
    assert loss.item() == pytest.approx(expected)
    assert metrics["pair_accuracy"].tolist() == [1.0, 0.0]
    assert metrics["margin"].tolist() == pytest.approx([0.2, -0.2])
    assert metrics["scores/chosen"].tolist() == [3.0, -1.0]


def test_gradient_reaches_only_agent_tokens():
    logps = LOGPS.clone().requires_grad_(True)
    turn_logps = losses.sum_by_turn(logps, TURN_IDS, 2)
    counts = losses.count_by_turn(TURN_IDS, 2)
    score = losses.trajectory_scores(turn_logps, losses.sum_by_turn(REF_LOGPS, TURN_IDS, 2), counts)
    loss, _ = losses.preference_loss(score, torch.zeros(1), beta=0.1)
    loss.backward()
    scored = TURN_IDS[0] > 0
    assert torch.all(logps.grad[0, ~scored] == 0)
    assert torch.all(logps.grad[0, scored] < 0)  # raising a chosen token's log-prob lowers the loss
    # per-turn mean: the 1-token turn's token gets 3x the gradient of each token of the 3-token turn
    assert logps.grad[0, 1].item() == pytest.approx(3 * logps.grad[0, 4].item())


def test_candidate_ranking_scores():
    critic, ref, policy = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0]), torch.tensor([-0.5, -3.0])
    assert losses.candidate_ranking_scores(critic, ref).tolist() == [0.5, -1.0]
    assert losses.candidate_ranking_scores(critic, policy_mean_logps=policy, mode="critic_minus_policy_logprob").tolist() == [
        -0.5, 1.0]
    with pytest.raises(ValueError, match="ref_mean_logps"):
        losses.candidate_ranking_scores(critic)
    with pytest.raises(ValueError, match="policy_mean_logps"):
        losses.candidate_ranking_scores(critic, ref, mode="critic_minus_policy_logprob")
    with pytest.raises(ValueError, match="unknown ranking .max."):
        losses.candidate_ranking_scores(critic, ref, mode="max")
    assert losses.mean_logps(torch.tensor([[-4.0, 0.0]]), torch.tensor([[2.0, 0.0]])).tolist() == [[-2.0, 0.0]]
