"""Install llama.cpp (``llama-cpp-python[server]``) so that it runs on *this* CPU: build, smoke-test,
fall back. ``./run.sh`` calls ``python -m evalpipe.engines.llamacpp_install``.

Why not ``pip install llama-cpp-python``: it builds from source with ``GGML_NATIVE=ON``
(``-march=native``), and on AVX-512/AMX cloud VMs that engine died with SIGSEGV on its first token
(issue 21). So evalpipe builds *flavours* of the one pinned version, in this order, and keeps the
first whose one-token smoke test (:mod:`evalpipe.engines.smoke`) passes:

``portable``
    ``GGML_NATIVE=OFF``: ggml's fixed x86-64 set (SSE4.2, AVX, AVX2, FMA, F16C, BMI2; no AVX-512,
    no AMX) — any x86-64 CPU of the last ten years, and the default.
``conservative``
    ``GGML_NATIVE=OFF`` with every optional x86 instruction set off (no SSE4.2/AVX/AVX2/AVX-512/
    FMA/F16C/BMI2/AMX): slow, but it runs wherever Python runs; built only when ``portable`` failed.
``native``
    ``GGML_NATIVE=ON``, tuned to the build machine: opt-in with ``EVALPIPE_LLAMACPP_NATIVE=1``
    (tried first, then the two above).

ggml's runtime-dispatched CPU variants (``GGML_BACKEND_DL=ON GGML_CPU_ALL_VARIANTS=ON``, one library
per instruction set, chosen when loaded) are not used: they multiply the build time, and they would
pick exactly the AVX-512 code path that crashed.

**Wheels per flavour.** pip's wheel cache is keyed by the sdist, not by ``CMAKE_ARGS``, so a native
wheel in it would silently be reused for a "portable" install. Each flavour is built with
``pip wheel --no-cache-dir`` into a folder of its own (``~/.cache/evalpipe/wheels/llamacpp-<version>-
<flavour>/``, ``$EVALPIPE_WHEEL_CACHE`` overrides the root) and installed from there only
(``--no-index --find-links``, ``--no-deps``); its dependencies come from the index afterwards, with
``--only-binary llama-cpp-python`` so pip can never build it again behind our back.

A marker in the environment (``.evalpipe-llamacpp.json``: version, flavour) makes a later call a
no-op; the steps (build, install, smoke test) are one injectable object, so the decisions are tested
without an 8-minute build (``tests/test_run_script.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evalpipe.engines.smoke import SmokeResult, smoke_test

#: the one place the embedded engine's version is pinned
LLAMACPP_VERSION = "0.3.36"
PACKAGE = "llama-cpp-python"

_NO_X86_EXTENSIONS = ("SSE42", "AVX", "AVX_VNNI", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
                      "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16", "FMA", "F16C")
#: flavour → CMAKE_ARGS
FLAVOURS: dict[str, str] = {
    "native": "-DGGML_NATIVE=ON",
    "portable": "-DGGML_NATIVE=OFF",
    "conservative": " ".join(["-DGGML_NATIVE=OFF", *(f"-DGGML_{name}=OFF" for name in _NO_X86_EXTENSIONS)]),
}
MARKER = ".evalpipe-llamacpp.json"


def plan(native: bool) -> list[str]:
    """The flavours to try, in order: the native one only when asked for."""
    return (["native"] if native else []) + ["portable", "conservative"]


def wheel_root() -> Path:
    given = os.environ.get("EVALPIPE_WHEEL_CACHE")
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalpipe" / "wheels"


def wheel_dir(flavour: str, root: Path | None = None) -> Path:
    return (root or wheel_root()) / f"llamacpp-{LLAMACPP_VERSION}-{flavour}"


def find_wheel(folder: Path) -> Path | None:
    """The pinned version's wheel in ``folder``, if one was built there."""
    wheels = sorted(folder.glob(f"llama_cpp_python-{LLAMACPP_VERSION}-*.whl")) if folder.is_dir() else []
    return wheels[-1] if wheels else None


class Steps(Protocol):
    """What an install does to the machine (pip, a compiler, the smoke test); tests pass stand-ins."""

    def build(self, flavour: str, folder: Path) -> str | None:
        """Build the flavour's wheel into ``folder``; None when done, else why it failed."""
        ...

    def install(self, wheel: Path) -> str | None:
        """Install ``wheel`` (and the server extra's dependencies); None when done, else why not."""
        ...

    def smoke(self) -> SmokeResult: ...

    def uninstall(self) -> None: ...


@dataclass(frozen=True)
class Outcome:
    """Which flavour works here (None: none did), and what was said on the way."""

    flavour: str | None
    lines: tuple[str, ...]


def install(flavours: Sequence[str], steps: Steps, root: Path, say: Callable[[str], None] = lambda line: None) -> Outcome:
    """Try each flavour in turn: build its wheel unless one is kept, install it, smoke-test it; stop
    at the first that answers. When none does, llama.cpp is uninstalled (an engine that crashes on
    its first token is worse than none: the demo then says why it cannot run)."""
    lines: list[str] = []

    def tell(line: str) -> None:
        lines.append(line)
        say(line)

    for i, flavour in enumerate(flavours):
        folder = wheel_dir(flavour, root)
        wheel = find_wheel(folder)
        if wheel is None:
            tell(f"building {PACKAGE} {LLAMACPP_VERSION} ({flavour}: CMAKE_ARGS={FLAVOURS[flavour]}); "
                 "about 8 minutes on 2 cores, once")
            problem = steps.build(flavour, folder)
            wheel = find_wheel(folder)
            if problem is not None or wheel is None:
                tell(f"the {flavour} build failed: {problem or 'no wheel was written'}")
                continue
        else:
            tell(f"installing {PACKAGE} {LLAMACPP_VERSION} ({flavour}) from {folder}")
        problem = steps.install(wheel)
        if problem is not None:
            tell(f"installing the {flavour} wheel failed: {problem}")
            continue
        result = steps.smoke()
        if result.ok:
            tell(f"llama.cpp ({flavour} build) answers on this machine")
            return Outcome(flavour, tuple(lines))
        following = flavours[i + 1] if i + 1 < len(flavours) else None
        tell(f"the {flavour} build does not work on this CPU: {result.line()}"
             + (f"; rebuilding with the {following} set" if following else ""))
    steps.uninstall()
    tell("no llama.cpp build works on this machine; the embedded engine is not installed (evaluate a "
         "server instead: --base-url URL --model NAME)")
    return Outcome(None, tuple(lines))


class PipSteps:
    """The real steps, with the pip of ``python`` (the environment being set up)."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def _pip(self, *args: str, env: dict[str, str] | None = None) -> str | None:
        done = subprocess.run([self.python, "-m", "pip", *args, "--disable-pip-version-check"],
                              env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
        if done.returncode == 0:
            return None
        tail = [line for line in done.stdout.strip().splitlines() if line.strip()][-3:]
        return f"pip exited with code {done.returncode}: " + " | ".join(tail)

    def build(self, flavour: str, folder: Path) -> str | None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as scratch:
            problem = self._pip("wheel", "--no-cache-dir", "--no-deps", "--wheel-dir", scratch,
                                f"{PACKAGE}=={LLAMACPP_VERSION}",
                                env={"CMAKE_ARGS": FLAVOURS[flavour], "FORCE_CMAKE": "1"})
            if problem is None:  # moved only once whole: an interrupted build leaves no wheel behind
                folder.mkdir(parents=True, exist_ok=True)
                for built in Path(scratch).glob("*.whl"):
                    shutil.move(str(built), folder / built.name)
        return problem

    def install(self, wheel: Path) -> str | None:
        return (self._pip("install", "--quiet", "--no-index", "--find-links", str(wheel.parent), "--no-deps",
                          "--force-reinstall", f"{PACKAGE}=={LLAMACPP_VERSION}")
                # the dependencies (numpy, jinja2, and the server's uvicorn, fastapi, …): the package
                # itself is installed at the pinned version, so pip keeps it and never builds one
                or self._pip("install", "--quiet", "--only-binary", PACKAGE, f"{PACKAGE}[server]=={LLAMACPP_VERSION}"))

    def smoke(self) -> SmokeResult:
        return smoke_test(python=self.python)

    def uninstall(self) -> None:
        self._pip("uninstall", "--yes", "--quiet", PACKAGE)


def installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Install the first flavour that works (see the module docstring); exit 0 when one does."""
    del argv
    native = os.environ.get("EVALPIPE_LLAMACPP_NATIVE", "") not in ("", "0")
    flavours = plan(native)
    marker = Path(sys.prefix) / MARKER
    say = lambda line: print(f"evalpipe: {line}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        kept = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    if (kept.get("version") == LLAMACPP_VERSION == installed_version() and kept.get("flavour") in flavours
            and kept.get("native") == native):
        return 0
    outcome = install(flavours, PipSteps(), wheel_root(), say)
    if outcome.flavour is None:
        marker.unlink(missing_ok=True)
        return 1
    marker.write_text(json.dumps({"version": LLAMACPP_VERSION, "flavour": outcome.flavour, "native": native,
                                  "cmake_args": FLAVOURS[outcome.flavour]}) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
