"""The key-value cache keyword bridge: a cached prefix continued under the name this transformers release takes.

The suite also turns transformers' FutureWarning about the old name into an error (pyproject.toml), so every
generation and critic test guards the call sites too.
"""

from __future__ import annotations

import inspect
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from helpers_tiny_models import tiny_causal_lm, tiny_tokenizer

from sweet_trl.transformers_compat import cache_argument, returned_cache, with_cache


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm(tiny_tokenizer()).eval()


def test_the_keyword_is_the_one_the_model_declares(model):
    declared = inspect.signature(type(model).forward).parameters
    assert cache_argument(model) in declared
    assert ("cache" in declared) == (cache_argument(model) == "cache")


def test_a_cached_prefix_continues_exactly_like_the_whole_sequence(model):
    ids = torch.arange(3, 19).unsqueeze(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        whole = model(input_ids=ids).logits
        prefix = model(input_ids=ids[:, :10], use_cache=True)
        cache = returned_cache(model, prefix)
        rest = model(input_ids=ids[:, 10:], use_cache=True, **with_cache(model, cache)).logits
    torch.testing.assert_close(rest, whole[:, 10:], atol=1e-5, rtol=1e-4)
    assert cache.get_seq_length() == 16  # the continuation extended the same cache in place


def test_generate_takes_the_cache_under_the_same_keyword(model):
    ids = torch.arange(3, 13).unsqueeze(0)
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=5, pad_token_id=0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        plain = model.generate(input_ids=ids, generation_config=config)
        cache = transformers.DynamicCache(config=model.config)
        cached = model.generate(input_ids=ids, generation_config=config, **with_cache(model, cache))
    assert torch.equal(plain, cached)
    assert cache.get_seq_length() > 0  # generate filled the cache it was given, so it took the keyword


def test_no_cache_adds_no_keyword(model):
    assert with_cache(model, None) == {}


def test_a_peft_model_is_read_through_to_its_base(model):
    peft = pytest.importorskip("peft")
    wrapped = peft.get_peft_model(tiny_causal_lm(tiny_tokenizer()),
                                  peft.LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    assert cache_argument(wrapped) == cache_argument(model)
