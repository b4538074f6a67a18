"""precision: auto picks bf16 only where the CPU computes it natively (emulated bf16 is ~10x slower)."""
import pytest
import torch

from tokenspace.train.precision import cpu_has_native_bf16, resolve

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
SPR = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512_ONLY = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw\n"


def test_cpu_flags_decide_auto():
    assert not cpu_has_native_bf16(AVX2) and not cpu_has_native_bf16(AVX512_ONLY)
    assert cpu_has_native_bf16(SPR)
    cpu = torch.device("cpu")
    assert resolve("auto", cpu, AVX2) == "fp32"
    assert resolve("auto", cpu, AVX512_ONLY) == "fp32"
    assert resolve("auto", cpu, SPR) == "bf16"


def test_explicit_precisions_pass_through_and_typos_fail():
    cpu = torch.device("cpu")
    for p in ("fp32", "bf16", "fp16"):
        assert resolve(p, cpu, AVX2) == p
    with pytest.raises(ValueError, match="precision"):
        resolve("bfloat16", cpu)


def test_recipe_accepts_auto_and_rejects_unknown():
    from tokenspace.train.recipe import Recipe

    assert Recipe.load("stair-emoji").precision == "auto"
    with pytest.raises(ValueError, match="precision"):
        Recipe.load("stair-emoji", precision="half")
