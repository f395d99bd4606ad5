"""Shared prompts in the turn-level DPO trainer: each pair's prompt runs once, and nothing else changes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from helpers_tiny_models import DETAILS, synthetic_corpus, tiny_causal_lm, tiny_tokenizer
from test_policy_trainer import fast_config, turn_pairs

from sweet_trl.policy_trainer import TurnPreferenceTrainer
from sweet_trl.shared_prompt import backbone_of, shared_prompt_backbone, shared_prompt_lengths


def lora():
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")


def trainer_and_batch(tmp_path, share_prompt: bool, peft: bool = True, pairs: int = 4, seed: int = 0):
    from datasets import Dataset

    tokenizer = tiny_tokenizer(synthetic_corpus())
    rows = turn_pairs(DETAILS, 3, pairs)
    # prompts of different lengths (a later turn's history), so that rows carry padding
    assert len({len(r["prompt"]) for r in rows}) > 1
    trainer = TurnPreferenceTrainer(
        tiny_causal_lm(tokenizer, seed=seed), args=fast_config(tmp_path, per_device_train_batch_size=pairs,
                                                              share_prompt=share_prompt, seed=seed),
        train_dataset=Dataset.from_list(rows), processing_class=tokenizer, peft_config=lora() if peft else None)
    batch = next(iter(trainer.get_train_dataloader()))
    if peft:  # an untrained adapter is its own reference; move it so that the DPO term has a gradient
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, parameter in trainer.model.named_parameters():
                if "lora_B" in name:
                    parameter.copy_(0.05 * torch.randn(parameter.shape, generator=generator))
    else:
        with torch.no_grad():
            for parameter in trainer.model.parameters():
                parameter.add_(0.01 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(seed)))
    return trainer, batch


def loss_grads_and_tokens(trainer, batch):
    """The training loss, the gradients it gives and how many tokens went through the embedding (both models)."""
    embedded = []
    hooks = [backbone_of(m).embed_tokens.register_forward_hook(lambda mod, args, out: embedded.append(args[0].numel()))
             for m in {id(m): m for m in (trainer.model, trainer.ref_model) if m is not None}.values()]
    try:
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
    finally:
        for hook in hooks:
            hook.remove()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.item(), grads, sum(embedded)


@pytest.mark.parametrize("peft", [True, False], ids=["lora-adapter-off-reference", "full-finetune-ref-copy"])
def test_shared_prompts_give_the_plain_loss_and_gradients_with_fewer_tokens(tmp_path, peft):
    """Same loss and gradients as TRL's plain pass, for LoRA (the reference is the disabled adapter) and a full
    fine-tune (a frozen copy as reference); the policy and the reference each compute every prompt once."""
    plain, batch = trainer_and_batch(tmp_path / "plain", share_prompt=False, peft=peft)
    shared, same_batch = trainer_and_batch(tmp_path / "shared", share_prompt=True, peft=peft)
    assert torch.equal(batch["input_ids"], same_batch["input_ids"])
    plain_loss, plain_grads, plain_tokens = loss_grads_and_tokens(plain, batch)
    shared_loss, shared_grads, shared_tokens = loss_grads_and_tokens(shared, batch)

    assert shared_loss == pytest.approx(plain_loss, abs=1e-5)
    assert plain_grads.keys() == shared_grads.keys()
    assert sum(bool(grad.abs().sum() > 0) for grad in plain_grads.values()) > len(plain_grads) / 2
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)

    rows, width = batch["input_ids"].shape
    lengths = shared_prompt_lengths(batch)
    ends = batch["attention_mask"].sum(dim=1).tolist()
    # one call over the pairs' common starts (padded to the longest), one over every row's own tokens
    half = rows // 2
    own = max(ends[row] - lengths[row % half] for row in range(rows))
    per_pass = half * max(lengths) + rows * own
    assert plain_tokens == 2 * rows * width          # policy and reference, every row padded to the batch width
    assert shared_tokens == 2 * per_pass < 0.75 * plain_tokens


def test_training_with_shared_prompts_follows_the_plain_run(tmp_path):
    """Three optimizer steps: the logged losses and reward margins, and the trained adapter, match the plain run."""
    runs = {}
    for share in (False, True):
        trainer, _ = trainer_and_batch(tmp_path / str(share), share_prompt=share, pairs=4)
        trainer.args.num_train_epochs = 3
        trainer.train()
        logs = [e for e in trainer.state.log_history if "loss" in e]
        weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
        runs[share] = (logs, weights)
    (plain_logs, plain_weights), (shared_logs, shared_weights) = runs[False], runs[True]
    assert len(plain_logs) == len(shared_logs) == 3
    for plain, shared in zip(plain_logs, shared_logs):
        assert shared["loss"] == pytest.approx(plain["loss"], abs=1e-4)
        assert shared["rewards/margins"] == pytest.approx(plain["rewards/margins"], abs=1e-4)
    assert plain_logs[-1]["rewards/margins"] > plain_logs[0]["rewards/margins"]  # it did train
    for name, weight in plain_weights.items():
        torch.testing.assert_close(shared_weights[name], weight, atol=1e-5, rtol=1e-4, msg=name)


def test_rows_share_what_their_prompts_have_in_common(tmp_path):
    """Rows i and i + B that hold different prompts still share their common start (the system prompt and the
    request); the pass over it is shared and the hidden states are still the plain ones. Rows with nothing in
    common, an odd row count or left padding run plainly."""
    trainer, batch = trainer_and_batch(tmp_path, share_prompt=True)
    half = batch["input_ids"].shape[0] // 2
    lengths = shared_prompt_lengths(batch)
    order = list(range(half)) + [half + (i + 1) % half for i in range(half)]     # rejected rows of other pairs
    shuffled = {k: batch[k][order] for k in ("input_ids", "attention_mask")}
    common = shared_prompt_lengths(shuffled)
    assert common is not None and all(c <= p for c, p in zip(common, lengths)) and common != lengths
    backbone = backbone_of(trainer.model)
    real = shuffled["attention_mask"].bool()
    with torch.no_grad():
        plain = backbone(input_ids=shuffled["input_ids"], attention_mask=shuffled["attention_mask"]).last_hidden_state
        with shared_prompt_backbone([trainer.model], shuffled) as took:
            shared = backbone(input_ids=shuffled["input_ids"], attention_mask=shuffled["attention_mask"],
                              use_cache=False).last_hidden_state
    assert took is True
    torch.testing.assert_close(shared[real], plain[real], atol=1e-5, rtol=1e-4)

    unrelated = {**shuffled, "input_ids": shuffled["input_ids"].clone()}
    unrelated["input_ids"][half, 0] += 1
    assert shared_prompt_lengths(unrelated) is None
    unrelated["input_ids"][half, 0] -= 1
    unrelated["input_ids"][half, 3] += 1
    assert shared_prompt_lengths(unrelated)[0] == 3
    assert shared_prompt_lengths({k: v[:-1] for k, v in batch.items() if k in shuffled}) is None   # odd row count
    left_padded = {**batch, "attention_mask": batch["attention_mask"].clone()}
    left_padded["attention_mask"][0, 0] = 0
    assert shared_prompt_lengths(left_padded) is None
    twins = {k: torch.cat([batch[k][:1], batch[k][:1]]) for k in ("input_ids", "attention_mask")}
    assert shared_prompt_lengths(twins) == [int(batch["attention_mask"][0].sum()) - 1]   # one token each of its own


def test_unusable_batches_and_checkpointed_backbones_run_plainly(tmp_path):
    trainer, batch = trainer_and_batch(tmp_path, share_prompt=True)
    unrelated = {**batch, "input_ids": batch["input_ids"].clone()}
    unrelated["input_ids"][batch["input_ids"].shape[0] // 2, 0] += 1
    with shared_prompt_backbone([trainer.model], unrelated) as took:
        assert took is False
    backbone = backbone_of(trainer.model)
    trainer.model.train()
    trainer.model.gradient_checkpointing_enable()                         # checkpointed layers drop the cache
    with shared_prompt_backbone([trainer.model], batch) as took:
        assert took is False
    trainer.model.gradient_checkpointing_disable()
    with shared_prompt_backbone([trainer.model], batch) as took:
        assert took is True and "forward" in backbone.__dict__
    assert "forward" not in backbone.__dict__                                             # the class's own again


def test_other_calls_inside_the_context_run_plainly(tmp_path):
    """Only the batch it was opened for is shared: another input to the same backbone gets the plain forward."""
    trainer, batch = trainer_and_batch(tmp_path, share_prompt=True)
    backbone = backbone_of(trainer.model)
    other = batch["input_ids"][:1, :5]
    with torch.no_grad():
        expected = backbone(input_ids=other).last_hidden_state
        with shared_prompt_backbone([trainer.model], batch):
            inside = backbone(input_ids=other).last_hidden_state
            again = backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             use_cache=False).last_hidden_state
        plain = backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    torch.testing.assert_close(inside, expected)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(again[real], plain[real], atol=1e-5, rtol=1e-4)


def test_critic_pairs_share_their_common_start(tmp_path):
    """The critic trainer: two trajectories of a task share the system prompt, c and the request; one pass over
    them, the same Bradley-Terry loss (with the per-turn penalty) and gradients as the plain pass."""
    import copy

    from datasets import Dataset
    from helpers_tiny_models import collaborative_trajectories
    from test_critic_trainer import make_config

    from sweet_trl.critic_trainer import SweetCriticTrainer
    from sweet_trl.pairs import build_critic_pairs

    tokenizer = tiny_tokenizer(synthetic_corpus())
    pairs, _ = build_critic_pairs(collaborative_trajectories(4, seed=21))
    base = tiny_causal_lm(tokenizer, seed=5)
    critic = copy.deepcopy(base)
    with torch.no_grad():  # a critic that differs from its reference
        for parameter in critic.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(7)))
    results = {}
    for share in (False, True):
        trainer = SweetCriticTrainer(copy.deepcopy(critic), ref_model=copy.deepcopy(base),
                                     args=make_config(tmp_path / str(share), share_prompt=share, turn_advantage_l2=0.1,
                                                      per_device_train_batch_size=len(pairs)),
                                     train_dataset=Dataset.from_list(pairs), processing_class=tokenizer)
        batch = next(iter(trainer.get_train_dataloader()))
        results[share] = (*loss_grads_and_tokens(trainer, batch), batch)
    (plain_loss, plain_grads, plain_tokens, batch), (shared_loss, shared_grads, shared_tokens, _) = results.values()
    assert shared_loss == pytest.approx(plain_loss, abs=1e-5)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    assert min(shared_prompt_lengths(batch)) > 10                    # system prompt, c and request at least
    assert plain_tokens == 2 * batch["input_ids"].numel() and shared_tokens < plain_tokens
