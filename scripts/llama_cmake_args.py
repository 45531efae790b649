"""Print the CMAKE_ARGS that build llama.cpp (llama-cpp-python) for this CPU without AMX.

llama.cpp's default build uses ``-march=native``; on a CPU with AMX (Sapphire Rapids and later
Xeons) that enables ggml's AMX buffer type, whose matrix multiplication
(``ggml_backend_amx_mul_mat``) crashes at the first decode, and ``-DGGML_AMX_*=OFF`` cannot
switch it off while ``GGML_NATIVE`` is on (``-march=native`` defines the AMX macros anyway). So
on x86-64 the build is not native: every instruction set ggml has an option for is enabled when
this CPU reports it in /proc/cpuinfo, and the AMX ones are left off; ggml's kernels are chosen by
those options, so the build is as fast as the native one (see the README). Elsewhere, and where
/proc/cpuinfo lists no flags, llama.cpp's native build is kept.

Everywhere the multimodal library (``mtmd``, ``LLAVA_BUILD``) is left out: controlscope does not
use it, ``llama_cpp`` imports it only for multimodal chat handlers, and it adds build time.

Usage: ``python scripts/llama_cmake_args.py [CPUINFO]``; prints one line.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

# ggml option -> the /proc/cpuinfo flags it needs (all of them)
_X86_OPTIONS: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_F16C": ("f16c",),
    "GGML_FMA": ("fma",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}
_ALWAYS_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
_COMMON = ("-DLLAVA_BUILD=OFF",)


def cpu_flags(cpuinfo: str) -> set[str]:
    """Return the flags of the first processor listed in ``cpuinfo`` text (empty if none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def cmake_args(flags: set[str]) -> str:
    """Return CMAKE_ARGS for an x86-64 CPU with ``flags``: a non-native build without AMX."""
    args = ["-DGGML_NATIVE=OFF"]
    for option, needed in _X86_OPTIONS.items():
        args.append(f"-D{option}={'ON' if all(f in flags for f in needed) else 'OFF'}")
    args += [f"-D{option}=OFF" for option in _ALWAYS_OFF]
    return " ".join([*args, *_COMMON])


def main(argv: list[str]) -> int:
    """Print the CMAKE_ARGS line; returns the exit status."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        print(" ".join(_COMMON))
        return 0
    path = Path(argv[1] if len(argv) > 1 else "/proc/cpuinfo")
    try:
        flags = cpu_flags(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        flags = set()
    if not flags:
        print(f"llama_cmake_args: no CPU flags in {path}; native build", file=sys.stderr)
        print(" ".join(_COMMON))
        return 0
    print(cmake_args(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
