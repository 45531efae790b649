"""Check that the installed llama.cpp runtime decodes on this CPU (run by ``scripts/setup.sh``).

``python -m controlscope.models._runtime_check [--model 0.5b]`` decodes a few tokens through
:class:`~controlscope.models._local.LocalModel`, so in a child process exactly as runs do, and
prints one line on stdout (the full error, if any, on stderr). Exit status:

- 0: it decoded;
- 3: the runtime crashed (a signal such as SIGSEGV or SIGILL) or hung: the build does not suit
  this CPU;
- 4: it decoded, but this CPU has AMX and the build uses ggml's AMX kernels, which crash at the
  first decode on some prompts and CPUs (a known upstream fault in
  ``ggml_backend_amx_mul_mat``), so it is not safe either;
- 1: anything else (missing weights, unloadable file...).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from controlscope.core import Message, ModelRequest, ProviderError, escape_untrusted
from controlscope.models._weights import WeightsError

CRASHED = 3
USES_AMX = 4

_AMX_ACTIVE = re.compile(r"\bAMX\w* = 1\b")


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU's flags include AMX (``amx_tile``); False where there is no cpuinfo."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return "amx_tile" in value.split()
    return False


def runtime_uses_amx(system_info: str) -> bool:
    """True when llama.cpp's ``llama_print_system_info()`` text reports an AMX feature on."""
    return bool(_AMX_ACTIVE.search(system_info))


def check(model_name: str, timeout_s: float) -> tuple[int, str, str]:
    """Decode a few tokens with ``model_name``; return (exit status, one-line summary, detail)."""
    from controlscope.models._local import LocalModel

    request = ModelRequest(
        messages=(Message(role="user", content="Count on: 1, 2, 3,"),),
        temperature=0.0,
        max_tokens=6,
        purpose="other",
    )
    try:
        with LocalModel(
            model_name, n_ctx=512, request_timeout_s=timeout_s, start_timeout_s=timeout_s
        ) as model:
            response = model.complete(request)
            info = model.runtime_info
    except ProviderError as err:
        detail = escape_untrusted(str(err))
        if err.kind in ("runtime_crash", "timeout"):  # a crash, or a hang past the deadline
            match = re.search(r"killed by signal (\w+)|did not answer within [^;]*", str(err))
            what = match.group(0) if match else "crashed"
            return CRASHED, f"llama.cpp {what} at its first decode", detail
        return 1, f"llama.cpp failed: {err.kind}", detail
    except (WeightsError, ValueError) as err:
        return 1, f"cannot check the runtime: {escape_untrusted(str(err))}", ""
    if response.usage.output_tokens < 1:
        return 1, "llama.cpp decoded no token", ""
    if cpu_has_amx() and runtime_uses_amx(info):
        return (
            USES_AMX,
            "this CPU has AMX and the llama.cpp build uses ggml's AMX kernels, which crash",
            escape_untrusted(info),
        )
    return 0, f"llama.cpp decodes on this CPU ({escape_untrusted(info)})", ""


def main(argv: list[str] | None = None) -> int:
    """Run the check; print one line; return the exit status described in the module doc."""
    parser = argparse.ArgumentParser(description="check that the llama.cpp runtime decodes")
    parser.add_argument("--model", default="0.5b", help="known model name or .gguf path")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per step")
    args = parser.parse_args(argv)
    status, line, detail = check(args.model, args.timeout)
    print(line)
    if detail:
        print(detail, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
