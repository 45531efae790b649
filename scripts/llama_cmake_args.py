"""Print the CMAKE_ARGS that build llama.cpp (llama-cpp-python) for this CPU without AMX.

llama.cpp's default build uses ``-march=native``; on a CPU with AMX (Sapphire Rapids and later
Xeons) that enables ggml's AMX buffer type, whose matrix multiplication crashes at the first decode
(llama.cpp issue 20824), and ``-DGGML_AMX_*=OFF`` cannot switch it off while ``GGML_NATIVE`` is on.
So on x86-64 the build is not native: every instruction set this CPU reports in /proc/cpuinfo is
enabled by its own ggml option, and the AMX ones are left off. Elsewhere the native build is kept.

Usage: ``python scripts/llama_cmake_args.py [CPUINFO]``; prints one line (empty where the native
build is right).
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


def cpu_flags(cpuinfo: str) -> set[str]:
    """Return the flags of the first processor listed in ``cpuinfo`` text."""
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
    return " ".join(args)


def main(argv: list[str]) -> int:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        print("")
        return 0
    path = Path(argv[1] if len(argv) > 1 else "/proc/cpuinfo")
    print(cmake_args(cpu_flags(path.read_text(encoding="utf-8", errors="replace"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
