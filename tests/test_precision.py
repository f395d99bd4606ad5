"""The trainers' precision: bf16 follows the GPU when unset, and bf16 asked for on a CPU runs there."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from sweet_trl.critic_config import SweetCriticConfig
from sweet_trl.precision import cpu_has_native_bf16

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
