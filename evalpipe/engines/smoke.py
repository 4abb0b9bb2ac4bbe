"""Does the installed llama.cpp engine work on this CPU? One token from the bundled model, in a child.

Why a child process with a timeout: a llama.cpp built for instructions this CPU lacks (or one whose
kernels fault, as a ``-march=native`` build did on an AVX-512/AMX cloud VM) dies with SIGSEGV or
SIGILL on its first token, and a broken build may also hang; either must be a result ``./run.sh``
can act on (rebuild with safer flags), never a crash of the installer.

``python -m evalpipe.engines.smoke [--model GGUF] [--timeout S]`` prints one line and exits 0 when
the engine answered, 1 when it did not (the line says how: the signal's name, the exit code, or the
timeout, and the child's last output lines).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.engines.watch import ended

#: the child's program: load the model, complete one token, print what came back
PROBE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=int(sys.argv[2]), verbose=False)
out = llm.create_completion("The capital of France is", max_tokens=1, temperature=0.0)
print("smoke-ok", repr(out["choices"][0]["text"]), flush=True)
"""
DEFAULT_TIMEOUT_S = 120.0
_TAIL_LINES = 3


@dataclass(frozen=True)
class SmokeResult:
    """How the one-token completion went: ``ok``, and in words how it ended (for the one line)."""

    ok: bool
    how: str
    output: str = ""

    def line(self) -> str:
        tail = " | ".join(line for line in self.output.strip().splitlines()[-_TAIL_LINES:] if line.strip())
        return f"llama.cpp smoke test: {self.how}" + (f" (last output: {tail})" if tail and not self.ok else "")


def run_probe(command: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S,
              env: Mapping[str, str] | None = None) -> SmokeResult:
    """Run ``command`` (the probe; ``env``, default this process's) and say how it ended."""
    try:
        done = subprocess.run(list(command), env=None if env is None else dict(env), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        output = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else (exc.output or "")
        return SmokeResult(False, f"no token within {timeout_s:.0f}s (the engine hangs)", output)
    except OSError as exc:
        return SmokeResult(False, f"could not start the probe: {exc}")
    if done.returncode == 0 and "smoke-ok" in done.stdout:
        return SmokeResult(True, "one token completed", done.stdout)
    return SmokeResult(False, f"the engine {ended(done.returncode)} on its first token", done.stdout)


def probe_command(model: Path, threads: int = 1, python: str = sys.executable) -> list[str]:
    """The child that completes one token of ``model`` with the llama_cpp of ``python``."""
    return [python, "-c", PROBE, str(model), str(threads)]


def smoke_test(model: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
               python: str = sys.executable) -> SmokeResult:
    """The smoke test of the engine ``python`` imports, on ``model`` (default: the bundled SmolLM2)."""
    if model is None:
        from evalpipe.engines.llamacpp import EngineUnavailable, smollm2_path  # noqa: PLC0415

        try:
            model = smollm2_path()
        except EngineUnavailable as exc:
            return SmokeResult(False, f"no model to test with: {exc}")
    return run_probe(probe_command(model, python=python), timeout_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalpipe.engines.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF file (default: the bundled SmolLM2-135M)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds for load and one token")
    args = parser.parse_args(argv)
    result = smoke_test(args.model, args.timeout)
    print(result.line(), file=sys.stderr, flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
