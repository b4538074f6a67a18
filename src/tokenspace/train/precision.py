"""Which training precision a recipe's ``precision: auto`` means on this device.

bf16 pays only where the hardware has it: on a CPU without AVX512-BF16 / AMX the bf16 matrix products
are emulated and a STAIR step runs ~10x *slower* than in fp32 (measured: 11.7 s vs ~1 s per step of
stair-emoji on an AVX2-only AMD EPYC). So ``auto`` picks bf16 on GPUs that support it and on CPUs that
advertise native bf16, fp16 on older GPUs, and fp32 otherwise.
"""
from __future__ import annotations

from pathlib import Path

import torch

CHOICES = ("auto", "fp32", "bf16", "fp16")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags include avx512_bf16 or amx_bf16 (Linux /proc/cpuinfo; False elsewhere)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve(precision: str, device: torch.device, cpuinfo: str | None = None) -> str:
    """The concrete precision (fp32 | bf16 | fp16) for ``precision`` on ``device``."""
    if precision not in CHOICES:
        raise ValueError(f"precision must be one of {CHOICES}, not {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu":
        return "bf16" if cpu_has_native_bf16(cpuinfo) else "fp32"
    return "fp32"
