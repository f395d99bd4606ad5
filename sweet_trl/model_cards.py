"""Model cards for models trained with SWEET-RL (arXiv 2503.15478): the critic and the policy.

    >>> card = sweet_model_card(role="critic", model_name="sweet-critic", base_model="meta-llama/Llama-3.1-8B-Instruct",
    ...                         hyperparameters={"beta": 0.1}, metrics={"eval_pair_accuracy": 0.83})
    >>> card.save("runs/critic/README.md")
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from colbench_gym._optional import require

SWEET_PAPER_ID = "2503.15478"
SWEET_PAPER_TITLE = "SWEET-RL: Training Multi-Turn LLM Agents on Collaborative Reasoning Tasks"
SWEET_CITATION = textwrap.dedent("""\
    @article{zhou2025sweetrl,
        title   = {{SWEET-RL: Training Multi-Turn LLM Agents on Collaborative Reasoning Tasks}},
        author  = {Yifei Zhou and Song Jiang and Yuandong Tian and Jason Weston and Sergey Levine and Sainbayar Sukhbaatar and Xian Li},
        year    = 2025,
        journal = {arXiv preprint arXiv:2503.15478},
        url     = {https://arxiv.org/abs/2503.15478},
    }""")
# What TRL's own model card reads from a trainer's ``_paper``.
SWEET_PAPER = {"title": SWEET_PAPER_TITLE, "id": SWEET_PAPER_ID, "citation": SWEET_CITATION}
SWEET_PAPER_URL = f"https://arxiv.org/abs/{SWEET_PAPER_ID}"
TRL_CITATION = textwrap.dedent("""\
    @software{vonwerra2020trl,
        title   = {{TRL: Transformers Reinforcement Learning}},
        author  = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallou{\\'e}dec, Quentin},
        license = {Apache-2.0},
        url     = {https://github.com/huggingface/trl},
        year    = {2020}
    }""")

_DESCRIPTIONS = {
    "critic": (
        "This is the **turn-level critic** of SWEET-RL (Step-WisE Evaluation from Training-time information). It is a "
        "causal language model that reads training-time information the agent never sees (the task's reference "
        "solution) before the dialogue. The advantage of an agent turn is the mean, over the turn's tokens, of "
        "`log pi_critic - log pi_ref` (the reference being the model it was initialised from). It was trained with "
        "the Bradley-Terry loss `-log sigmoid(beta * (score(chosen) - score(rejected)))` on pairs of trajectories "
        "of the same task with different rewards, where a trajectory's score aggregates its turns' advantages."
    ),
    "policy": (
        "This is a **multi-turn collaborative agent** trained with SWEET-RL (Step-WisE Evaluation from Training-time "
        "information): at sampled dialogue states, candidate next messages were ranked by an asymmetric turn-level "
        "critic that had access to the task's reference solution, and the policy was optimised with a turn-level "
        "preference (DPO) loss on the best against the worst candidates. The policy itself never sees that "
        "information."
    ),
}
# The policy trained by best-of-N fine-tuning (stage train_policy_best) instead of DPO.
_BEST_OF_N_POLICY = (
    "This is a **multi-turn collaborative agent** trained with SWEET-RL's critic (Step-WisE Evaluation from "
    "Training-time information): at sampled dialogue states, candidate next messages were ranked by an asymmetric "
    "turn-level critic that had access to the task's reference solution, and the policy was fine-tuned on the "
    "critic's top candidate of each state (best-of-N fine-tuning, in place of the paper's turn-level DPO). The "
    "policy itself never sees that information."
)

_USAGE = {
    "critic": textwrap.dedent("""\
        ```python
        from sweet_trl.critic import SweetCritic

        critic = SweetCritic.from_pretrained("{model_id}")
        # one advantage per agent turn; the reference solution is read from trajectory["task"]["ground_truth"]
        advantages = critic.advantages(trajectory)
        # rank candidate next messages for one dialogue state
        scores = critic.score_candidates(history, candidates, privileged=reference_solution)
        ```"""),
    "policy": textwrap.dedent("""\
        ```python
        from transformers import pipeline

        agent = pipeline("text-generation", model="{model_id}")
        messages = [{{"role": "user", "content": "Write a Python function that ..."}}]
        print(agent(messages, max_new_tokens=512, return_full_text=False)[0]["generated_text"])
        ```"""),
}


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _table(values: Mapping[str, Any]) -> str:
    rows = "\n".join(f"| `{key}` | {value:.4g} |" if isinstance(value, float) else f"| `{key}` | {value} |"
                     for key, value in values.items())
    return "| name | value |\n|---|---|\n" + rows


def sweet_model_card(
    *,
    role: Literal["critic", "policy"],
    model_name: str,
    base_model: str | None = None,
    hub_model_id: str | None = None,
    dataset_name: str | None = None,
    tags: list[str] | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    notes: str | None = None,
    best_of_n: bool = False,
):
    """A ``huggingface_hub.ModelCard`` naming SWEET-RL, citing arXiv 2503.15478, with usage and settings
    (``best_of_n``: a policy fine-tuned on the critic's top candidates rather than trained with DPO)."""
    if role not in _DESCRIPTIONS:
        raise ValueError(f"role must be one of {sorted(_DESCRIPTIONS)}, not {role!r}")
    hub = require("huggingface_hub", "hub")
    all_tags = ["sweet-rl", "trl", "colbench", "multi-turn", role, *(tags or [])]
    card_data = hub.ModelCardData(
        base_model=base_model,
        datasets=[dataset_name] if dataset_name else None,
        library_name="transformers",
        model_name=model_name,
        tags=list(dict.fromkeys(all_tags)),
    )
    model_id = hub_model_id or model_name
    sections = [
        f"# {model_name}",
        f"{'A SWEET-RL critic' if role == 'critic' else 'A SWEET-RL policy'}"
        + (f" fine-tuned from [{base_model}](https://huggingface.co/{base_model})." if base_model else "."),
        "## Method",
        (_BEST_OF_N_POLICY if best_of_n and role == "policy" else _DESCRIPTIONS[role]) + f"\n\nMethod: [{SWEET_PAPER_TITLE}](https://huggingface.co/papers/{SWEET_PAPER_ID}) "
        f"(arXiv [{SWEET_PAPER_ID}](https://arxiv.org/abs/{SWEET_PAPER_ID})).",
        "## Usage",
        _USAGE[role].format(model_id=model_id),
    ]
    if notes:
        sections += ["## Notes", notes]
    if hyperparameters:
        sections += ["## Training settings", _table(hyperparameters)]
    if metrics:
        sections += ["## Results", _table(metrics)]
    versions = {name: _package_version(name) for name in ("trl", "transformers", "torch", "peft", "datasets")}
    sections += [
        "## Framework versions",
        "\n".join(f"- {name}: {value}" for name, value in versions.items()),
        "## Citations",
        "Cite SWEET-RL as:\n\n```bibtex\n" + SWEET_CITATION + "\n```\n\nand TRL as:\n\n```bibtex\n"
        + TRL_CITATION + "\n```",
    ]
    content = f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n"
    return hub.ModelCard(content)
