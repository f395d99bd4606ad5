"""scripts/gpu_critic_scaling.sh's way back: the GPU's run folders unpacked here read the same warm start as there.

A stage's fingerprint covers the files of the model it reads by size and modification time, so an unfinished critic
goes on from its checkpoint here only if the warm start's files carry the GPU's times. ``--unpack`` rebuilds that
folder from the local warm start, byte for byte the same (checked), with the GPU files' times; anything else is
refused with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from sweet_trl.pipeline.runner import _path_identity

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "gpu_critic_scaling.sh"
MERGED = "runs/credit_scaling_warm_start/warm_start/merged"
FILES = {"model.safetensors": b"weights" * 1000, "config.json": b'{"model_type": "llama"}'}


def _gpu_side(root: Path) -> Path:
    """The folders as the GPU machine left them: the warm start's model with its own times, then the manifest."""
    merged = root / MERGED
    merged.mkdir(parents=True)
    for i, (name, data) in enumerate(FILES.items()):
        (merged / name).write_bytes(data)
        os.utime(merged / name, ns=(1_700_000_000_000_000_000 + i, 1_700_000_000_000_000_000 + i))
    run = root / "runs/credit_10x"
    (run / "train_critic/model/checkpoint-8").mkdir(parents=True)
    (run / "train_critic/model/checkpoint-8/adapter_model.safetensors").write_bytes(b"adapter")
    (run / "warm_start").symlink_to("../credit_scaling_warm_start/warm_start")
    logs = root / "runs/credit_scaling_logs"
    logs.mkdir(parents=True)
    manifest = {name: [len(data), (merged / name).stat().st_mtime_ns, hashlib.sha256(data).hexdigest()]
                for name, data in FILES.items()}
    (logs / "warm_start_files.json").write_text(json.dumps(manifest))
    return merged


def _checkout(root: Path, local_files: dict[str, bytes]) -> Path:
    """A checkout with the script and runs/credit's own warm start (other times: made here)."""
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "scripts" / SCRIPT.name)
    local = root / "runs/credit/warm_start/merged"
    local.mkdir(parents=True)
    for name, data in local_files.items():
        (local / name).write_bytes(data)
    return root


def _pack(gpu: Path, out: Path) -> None:
    """What the call sends back: one archive in parts, without the model (as the script's tar leaves it out)."""
    out.mkdir()
    with tarfile.open(out / "whole.tgz", "w:gz") as tar:
        for path in ("runs/credit_10x", "runs/credit_scaling_logs"):
            tar.add(gpu / path, arcname=path)
    data = (out / "whole.tgz").read_bytes()
    (out / "whole.tgz").unlink()
    half = len(data) // 2
    (out / "scaling.tgz.00").write_bytes(data[:half])
    (out / "scaling.tgz.01").write_bytes(data[half:])


def _unpack(checkout: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(checkout / "scripts" / SCRIPT.name), "--unpack", str(out)], check=False,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable})


def test_the_unpacked_warm_start_fingerprints_as_on_the_gpu(tmp_path):
    gpu_merged = _gpu_side(tmp_path / "gpu")
    _pack(tmp_path / "gpu", tmp_path / "out")
    checkout = _checkout(tmp_path / "here", FILES)
    done = _unpack(checkout, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    here_merged = checkout / MERGED
    assert {p.name: p.read_bytes() for p in here_merged.iterdir()} == FILES
    # what the stage's fingerprint sees of the model: names, sizes and times, as on the GPU
    assert _path_identity(str(here_merged))[1] == _path_identity(str(gpu_merged))[1]
    # the critic's run reads it through its own link, and its checkpoint is there to go on from
    assert (checkout / "runs/credit_10x/warm_start/merged/model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert (checkout / "runs/credit_10x/train_critic/model/checkpoint-8/adapter_model.safetensors").exists()


def test_another_local_warm_start_is_refused_with_the_reason(tmp_path):
    _gpu_side(tmp_path / "gpu")
    _pack(tmp_path / "gpu", tmp_path / "out")
    checkout = _checkout(tmp_path / "here", {**FILES, "model.safetensors": b"other weights"})
    done = _unpack(checkout, tmp_path / "out")
    assert done.returncode == 1
    assert "is not the file the GPU's warm start had (model.safetensors" in done.stderr
    assert not (checkout / MERGED / "model.safetensors").exists()  # nothing half-made to resume from


def test_nothing_is_unpacked_over_runs_made_here(tmp_path):
    """Runs of the same names made here (the CPU's --collect-only, say) are not mixed with the GPU's."""
    _gpu_side(tmp_path / "gpu")
    _pack(tmp_path / "gpu", tmp_path / "out")
    checkout = _checkout(tmp_path / "here", FILES)
    (checkout / "runs/credit_10x/collect").mkdir(parents=True)
    done = _unpack(checkout, tmp_path / "out")
    assert done.returncode == 1 and "runs/credit_10x exists here" in done.stderr
    assert not (checkout / "runs/credit_10x/train_critic").exists() and not (checkout / MERGED).exists()
