"""Shared test settings: never reach the Hugging Face Hub, and point at the real ColBench sample."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads that wait by spinning hold a core while the graders' sandboxes and the rollout workers need it: on 2
# cores that makes some tests several times slower. Read once, when torch first loads: before any test imports it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Graders keep reference outputs on disk across processes: off in the suite, so that no test reads what another run
# (or the user's own work) left in ~/.cache; the tests of that cache point it at their tmp_path.
os.environ["COLBENCH_REFERENCE_CACHE"] = "off"

REPO_ROOT = Path(__file__).resolve().parents[1]
COLBENCH_DATA = Path(os.environ.get("COLBENCH_DATA", REPO_ROOT.parent / "shared" / "colbench-data"))


@pytest.fixture(scope="session")
def colbench_data() -> Path:
    """The real ColBench development rows (CC-BY-NC, never copied into the repository)."""
    if not (COLBENCH_DATA / "backend_dev.jsonl").exists():
        pytest.skip(f"real ColBench rows not found at {COLBENCH_DATA} (set COLBENCH_DATA to their folder)")
    return COLBENCH_DATA


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module: test runs share two cores, and OpenMP threads spinning against each other
    make tiny models many times slower. Modules opt in with ``pytestmark = pytest.mark.usefixtures(...)``."""
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pytest_collection_finish(session):
    """Import what the trainers import, then move every object that exists into the garbage collector's permanent
    generation. The pipeline collects garbage after each model it drops (``pipeline.models.release``); each full
    collection otherwise walks the half million functions, classes and tuples of these imports, about half a second a
    time, hundreds of times a suite. Only what imports made is frozen: no test or fixture has run yet."""
    import gc
    import importlib

    for name in ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "sweet_trl.pipeline"):
        try:
            importlib.import_module(name)
        except ImportError:  # the environment-only install: nothing heavy to freeze
            pass
    try:
        from transformers import AutoModelForCausalLM, Trainer  # noqa: F401 (lazy submodules)
        from trl import DPOTrainer, SFTTrainer  # noqa: F401
    except ImportError:
        pass
    gc.collect()
    gc.freeze()
