"""The pieces of the llama.cpp set-up that need no model: the build options chosen for a CPU, the
reading of llama.cpp's system info, and how a dead model process is described."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from controlscope.core import escape_untrusted
from controlscope.models._local_process import describe_exit
from controlscope.models._runtime_check import cpu_has_amx, runtime_uses_amx

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "llama_cmake_args.py"

SAPPHIRE_RAPIDS = (
    "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi2 avx2 avx512f avx512dq avx512cd "
    "avx512bw avx512vl avx512vbmi avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8"
)
HASWELL = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi2 avx2"


def _cmake_args(tmp_path: Path, flags: str | None) -> dict[str, str]:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: test\n" + (f"flags\t\t: {flags}\n" if flags else "")
    )
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(cpuinfo)],
        capture_output=True,
        text=True,
        check=True,
    )
    options = {}
    for arg in out.stdout.split():
        key, _, value = arg.removeprefix("-D").partition("=")
        options[key] = value
    return options


@pytest.mark.skipif(
    subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip() != "x86_64",
    reason="the script prints the native build's (empty) options on other architectures",
)
def test_cmake_args_enable_the_cpus_instruction_sets_but_never_amx(tmp_path: Path) -> None:
    spr = _cmake_args(tmp_path, SAPPHIRE_RAPIDS)
    assert spr["GGML_NATIVE"] == "OFF"  # -march=native would switch AMX back on
    assert all(spr[f"GGML_AMX_{k}"] == "OFF" for k in ("TILE", "INT8", "BF16"))
    for option in ("AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "FMA", "F16C"):
        assert spr[f"GGML_{option}"] == "ON", option
    assert spr["LLAVA_BUILD"] == "OFF"  # the multimodal library is not used

    old = _cmake_args(tmp_path, HASWELL)
    assert old["GGML_AVX2"] == "ON" and old["GGML_AVX512"] == "OFF"
    assert old["GGML_AVX_VNNI"] == "OFF"

    # no flags line (an odd container): keep llama.cpp's native build rather than a slow one
    assert _cmake_args(tmp_path, None) == {"LLAVA_BUILD": "OFF"}


def test_amx_is_read_from_cpuinfo_and_from_llamas_system_info(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {SAPPHIRE_RAPIDS}\n")
    assert cpu_has_amx(cpuinfo)
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {HASWELL}\n")
    assert not cpu_has_amx(cpuinfo)
    assert not cpu_has_amx(tmp_path / "missing")
    native = "CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | REPACK = 1 |"
    safe = "CPU : SSE3 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | REPACK = 1 |"
    assert runtime_uses_amx(native) and not runtime_uses_amx(safe)


def test_exit_descriptions_name_the_signal_and_its_usual_cause() -> None:
    segv = describe_exit(-signal.SIGSEGV)
    assert segv.startswith("was killed by signal SIGSEGV (11)") and "scripts/setup.sh" in segv
    assert "SIGILL" in describe_exit(-signal.SIGILL)
    assert "out-of-memory" in describe_exit(-signal.SIGKILL)
    assert describe_exit(1) == "exited with status 1"


def test_untrusted_text_is_escaped_to_one_inert_line() -> None:
    text = "ggml: fault\x1b[31m red\nnext line\r\tünï"
    escaped = escape_untrusted(text)
    assert "\x1b" not in escaped and "\n" not in escaped and "\r" not in escaped
    assert "\\x1b[31m" in escaped and "\\n" in escaped and "ünï" in escaped
