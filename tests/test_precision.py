"""The trainers' precision: bf16 follows the GPU when unset, and bf16 asked for on a CPU runs there."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from sweet_trl.critic_config import SweetCriticConfig
from sweet_trl.precision import cpu_has_native_bf16, native_cpu_precision_args

CPUINFO = "processor\t: {n}\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2 {extra}\n\n"


@pytest.mark.parametrize("extra, native", [("avx512f avx512_bf16", True), ("amx_tile amx_bf16", True),
                                           ("avx512f avx512bw", False), ("", False)])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, extra, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(n=0, extra=extra) + CPUINFO.format(n=1, extra=extra))
    assert cpu_has_native_bf16(cpuinfo) is native
    assert cpu_has_native_bf16(tmp_path / "missing") is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_bf16_on_a_cpu_warns_only_where_it_is_emulated(tmp_path, caplog):
    """(Every trainer config keeping an explicit bf16 on the CPU: tests/test_policy_trainer.py.)"""
    assert SweetCriticConfig(output_dir=str(tmp_path), bf16=True).use_cpu
    emulated = "products are emulated" in caplog.text
    assert emulated is not cpu_has_native_bf16(), "the warning names an emulated bf16 CPU, and only that one"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
@pytest.mark.parametrize("extra", ["avx512f avx512_bf16", "avx512f avx512bw"])
def test_make_asks_for_bf16_only_on_a_cpu_that_computes_it(tmp_path, extra):
    """`make demo`/`make study` append these overrides; on a native-bf16 CPU they set the trainers and sampling."""
    from sweet_trl.study import Study

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(n=0, extra=extra))
    args = native_cpu_precision_args(cpuinfo)
    assert bool(args) is ("avx512_bf16" in extra)
    study = Study("demo_cpu", args)  # the stages' options as `sweet-rl study` routes the overrides
    critic_config, generation = study.stage_options("train_critic", [])[2], study.stage_options("collect", [])[1]
    assert critic_config.bf16 is bool(args) and generation.dtype == ("bfloat16" if args else "auto")
