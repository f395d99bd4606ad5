"""A self-contained HTML report of a pipeline run (no external assets: inline CSS, SVG plots, base64 images).

    sweet-rl report --config demo_cpu       # writes <run_dir>/report.html

    from sweet_trl.report import build_report
    build_report("runs/demo_cpu")                                 # returns the path of the report
"""

from __future__ import annotations

import os
from pathlib import Path

from sweet_trl.report.data import RunData, load_run
from sweet_trl.report.html import render_report


def build_report(run_dir: str | os.PathLike, path: str | os.PathLike | None = None, examples: int = 6) -> Path:
    """Write the report of the run in ``run_dir`` to ``path`` (default ``<run_dir>/report.html``)."""
    data = load_run(run_dir)
    out = Path(path) if path is not None else Path(run_dir) / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_report(data, examples=examples), encoding="utf-8")
    os.replace(tmp, out)
    return out


__all__ = ["RunData", "build_report", "load_run", "render_report"]
