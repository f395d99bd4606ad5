"""Export a finished warm start as a small adapter that any run can start from (``warm_start.adapter``).

The package ships one, ``sweet_trl/adapters/smollm2-135m-procedural`` (the warm start of ``warm_start_cpu``), made
by exactly these two commands:

    HF_HUB_OFFLINE=1 .venv/bin/sweet-rl warm-start --config warm_start_cpu        # 100 LoRA steps, 15-55 min on CPU
    .venv/bin/python scripts/export_warm_start.py runs/warm_start_cpu/warm_start \\
        sweet_trl/adapters/smollm2-135m-procedural --base_model_id HuggingFaceTB/SmolLM2-135M-Instruct

The LoRA weights are written as trained (float32: merged into the base, they give the run's policy bit for bit;
``--dtype bfloat16`` halves the file), beside ``warm_start.json``: the run's settings, its training figures and the
weights' SHA-256, which the stage checks before merging the adapter into the run's base.
"""

from __future__ import annotations

import argparse
import json
import sys

from sweet_trl.warm_start import export_adapter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage_dir", help="a finished warm start: <run_dir>/warm_start")
    parser.add_argument("out_dir", help="the adapter folder to write")
    parser.add_argument("--base_model_id", default=None,
                        help="the base model's Hub id, written into adapter_config.json (the run's is a local path)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = parser.parse_args(argv)
    try:
        provenance = export_adapter(args.stage_dir, args.out_dir, base_model_id=args.base_model_id, dtype=args.dtype)
    except (FileNotFoundError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({k: provenance[k] for k in ("base_model", "counts", "metrics", "sha256")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
