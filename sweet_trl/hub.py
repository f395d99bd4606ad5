"""Hub export of a run: rollouts and pairs as datasets, the critic and the policy as models, each with a card.

Everything is first written to a local folder (``export_*``), exactly what would be uploaded, so the cards
and files can be checked offline; ``push_folder`` then uploads that folder::

    folder = export_dataset(records, "runs/demo/collect/hub", dataset_card(...))
    push_folder(folder, "me/sweet-demo-rollouts", repo_type="dataset")

Authentication is ``huggingface_hub``'s (``HF_TOKEN`` or ``huggingface-cli login``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from colbench_gym._optional import require
from sweet_trl.model_cards import SWEET_CITATION, SWEET_PAPER_URL

DATASET_KINDS = {
    "rollouts": (
        "Trajectories of a policy on ColBench tasks",
        "One episode per row in the ColBench rollout format (`task`, `dialogue_history`, `answer`, `reward`) plus "
        "`episode_id`, `task_id`, `seed`, `success`, `outcome`, per-test results, simulator errors and timing. "
        "In `dialogue_history`, `user` is the simulated human and `assistant` the agent; agent turns also carry the "
        "exact prompt, raw output, token ids and log-probabilities.",
    ),
    "critic-pairs": (
        "Trajectory pairs for the SWEET-RL critic",
        "Two trajectories of the same task with different rewards: `chosen` (higher reward) and `rejected` "
        "dialogues, their rewards, episode ids, and `privileged`: the training-time information (the task's "
        "reference solution) that the critic reads and the policy never sees.",
    ),
    "turn-pairs": (
        "Turn-level preference pairs ranked by the SWEET-RL critic",
        "TRL's conversational preference format: `prompt` (system instructions and the dialogue so far, no "
        "privileged information), `chosen` and `rejected` (one agent message each), and the critic's advantages of "
        "both. Candidates were sampled from the policy at the same dialogue state and split into the upper and "
        "lower halves of the critic's ranking.",
    ),
}


def _front_matter(meta: Mapping[str, Any]) -> str:
    yaml = require("yaml", "train", package="pyyaml")
    clean = {k: v for k, v in meta.items() if v not in (None, [], {})}
    return "---\n" + yaml.safe_dump(clean, sort_keys=False, allow_unicode=True) + "---\n"


def _metrics_table(metrics: Mapping[str, Any]) -> str:
    if not metrics:
        return "_none recorded_\n"
    rows = ["| metric | value |", "|---|---|"]
    for key, value in metrics.items():
        rows.append(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    return "\n".join(rows) + "\n"


def dataset_card(
    kind: str,
    repo_id: str,
    num_rows: int,
    env_id: str,
    policy: str | None = None,
    source: str | None = None,
    stats: Mapping[str, Any] | None = None,
    columns: Sequence[str] = (),
    license: str = "apache-2.0",
) -> str:
    """The README of a rollout or pair dataset: what a row is, where it came from, and its statistics."""
    if kind not in DATASET_KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {sorted(DATASET_KINDS)}")
    title, description = DATASET_KINDS[kind]
    meta = {
        "license": license,
        "tags": ["sweet-rl", "colbench", "multi-turn", "trl", kind],
        "task_categories": ["text-generation"],
        "size_categories": [_size_category(num_rows)],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train.jsonl"}]}],
    }
    lines = [
        _front_matter(meta),
        f"# {repo_id.split('/')[-1]}\n",
        f"{title}: {num_rows} rows, environment `{env_id}`" + (f", policy `{policy}`" if policy else "") + ".\n",
        "## Rows\n",
        description + "\n",
    ]
    if columns:
        lines.append("Columns: " + ", ".join(f"`{c}`" for c in columns) + ".\n")
    if source:
        lines.append(f"## Source\n\n{source}\n")
    lines += [
        "## Statistics\n",
        _metrics_table(dict(stats or {})),
        "## Usage\n",
        f"```python\nfrom datasets import load_dataset\n\nrows = load_dataset(\"{repo_id}\", split=\"train\")\n```\n",
        f"Made with the SWEET-RL pipeline (`sweet-rl`), a re-implementation of [SWEET-RL]({SWEET_PAPER_URL}).\n",
        "## Citation\n",
        f"```bibtex\n{SWEET_CITATION}\n```\n",
    ]
    return "\n".join(lines)


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


def model_card(
    repo_id: str,
    role: str,
    base_model: str,
    datasets: Sequence[str] = (),
    metrics: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
    adapter: bool = False,
    method: str | None = None,
    env_id: str = "ColBench-Backend-v0",
) -> str:
    """The README of a trained critic or policy: method, base model, data, metrics and how to load it."""
    if role not in ("critic", "policy", "baseline"):
        raise ValueError(f"role must be 'critic', 'policy' or 'baseline', got {role!r}")
    method = method or {
        "critic": "SWEET-RL critic (Bradley-Terry on trajectory pairs, turn advantages from log-ratios)",
        "policy": "SWEET-RL policy (turn-level DPO on critic-ranked candidates)",
        "baseline": "baseline",
    }[role]
    meta = {
        "base_model": base_model if not os.path.exists(base_model) else None,
        "library_name": "peft" if adapter else "transformers",
        "tags": ["sweet-rl", "trl", "colbench", role] + (["lora"] if adapter else []),
        "datasets": [d for d in datasets if "/" in d and not os.path.exists(d)],
        "pipeline_tag": "text-generation",
    }
    if adapter:
        load = (f"from peft import AutoPeftModelForCausalLM\n\n"
                f"model = AutoPeftModelForCausalLM.from_pretrained(\"{repo_id}\")")
    else:
        load = (f"from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
                f"model = AutoModelForCausalLM.from_pretrained(\"{repo_id}\")\n"
                f"tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\")")
    usage = {
        "critic": ("The critic scores each agent turn of a dialogue given the task's reference solution: "
                   f"`sweet_trl.critic.SweetCritic.from_pretrained(\"{repo_id}\")` loads it with its input format "
                   "(`sweet_critic.json`)."),
        "policy": (f"The policy plays the agent in `{env_id}`: "
                   "`sweet-rl evaluate --policy <this repo>` rolls it out on the test tasks."),
        "baseline": f"A baseline policy for `{env_id}`.",
    }[role]
    lines = [
        _front_matter(meta),
        f"# {repo_id.split('/')[-1]}\n",
        f"**Method:** {method}.  \n**Base model:** `{base_model}`" + (" (LoRA adapter)" if adapter else "") + ".  \n"
        f"**Environment:** `{env_id}`.\n",
        "## Training data\n",
        ("\n".join(f"- `{d}`" for d in datasets) or "_not recorded_") + "\n",
        "## Metrics\n",
        _metrics_table(dict(metrics or {})),
        "## Usage\n",
        f"```python\n{load}\n```\n",
        usage + "\n",
    ]
    if training:
        shown = {k: v for k, v in training.items() if v not in (None, "", [], {})}
        lines += ["## Training configuration\n", "```json\n" + json.dumps(shown, indent=1, default=str) + "\n```\n"]
    lines += [
        f"Trained with the SWEET-RL pipeline (`sweet-rl`), a re-implementation of [SWEET-RL]({SWEET_PAPER_URL}) on TRL.\n",
        "## Citation\n",
        f"```bibtex\n{SWEET_CITATION}\n```\n",
    ]
    return "\n".join(lines)


def export_dataset(records: Iterable[Mapping[str, Any]], folder: str | os.PathLike, card: str) -> Path:
    """Write ``data/train.jsonl`` and ``README.md`` to ``folder`` (replacing it): the dataset repository's files."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "data").mkdir(parents=True)
    count = 0
    with (folder / "data" / "train.jsonl").open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            count += 1
    if count == 0:
        raise ValueError("refusing to export an empty dataset")
    (folder / "README.md").write_text(card, encoding="utf-8")
    return folder


MODEL_FILES = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.bin")


def export_model(model_dir: str | os.PathLike, folder: str | os.PathLike, card: str, merge: bool = False,
                 base_model: str | None = None) -> Path:
    """Copy a saved model or LoRA adapter (or, with ``merge``, the adapter merged into its base) and its card.

    Training state (optimizer, checkpoints) is left out: only weights, configs, tokenizer files and the card.
    ``base_model``, the Hub id of the model trained from, replaces the local path that an adapter
    (``adapter_config.json``) or a critic (its reference model in ``sweet_critic.json``) names, so that the
    upload loads on another machine.
    """
    model_dir, folder = Path(model_dir), Path(folder)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"no saved model at {model_dir}")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    is_adapter = (model_dir / "adapter_config.json").exists()
    if merge and is_adapter:
        peft = require("peft", "train")
        transformers = require("transformers", "train")
        model = peft.AutoPeftModelForCausalLM.from_pretrained(str(model_dir)).merge_and_unload()
        model.save_pretrained(folder)
        transformers.AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(folder)
    else:
        for pattern in MODEL_FILES:
            for path in model_dir.glob(pattern):
                if path.name not in ("trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt"):
                    shutil.copy2(path, folder / path.name)
        if base_model:
            _point_at(folder / "adapter_config.json", "base_model_name_or_path", base_model)
    if base_model:
        _point_at(folder / "sweet_critic.json", "reference_model", base_model)
    (folder / "README.md").write_text(card, encoding="utf-8")
    return folder


def _point_at(path: Path, key: str, model_id: str) -> None:
    """Set ``key`` of the JSON file at ``path`` to ``model_id`` where it names a model (a missing file is fine)."""
    if not path.exists():
        return
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get(key):
        data[key] = model_id
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def push_folder(folder: str | os.PathLike, repo_id: str, repo_type: str = "model", private: bool | None = None,
                commit_message: str = "Upload from the SWEET-RL pipeline") -> str:
    """Create ``repo_id`` if needed and upload ``folder`` to it; returns the repository URL."""
    hub = require("huggingface_hub", "hub")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise RuntimeError(f"cannot push {repo_id}: HF_HUB_OFFLINE=1 (the export is ready in {folder})")
    api = hub.HfApi()
    url = api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type=repo_type, commit_message=commit_message)
    return str(url)


def hub_repo_id(prefix: str | None, suffix: str) -> str:
    """``<prefix>-<suffix>``; the prefix must name a namespace (``user/name``)."""
    if not prefix or "/" not in prefix:
        raise ValueError(
            f"push_to_hub needs hub_prefix as '<user or org>/<name>' (got {prefix!r}); "
            f"the {suffix} would go to '<hub_prefix>-{suffix}'"
        )
    return f"{prefix}-{suffix}"
