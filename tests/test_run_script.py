"""./run.sh's embedded engine: which llama.cpp flavour is built, the smoke test, the fallback.

No real build here (8 minutes of both cores): the install's steps are a stand-in that records what
was asked, and the smoke test runs a stand-in ``llama_cpp`` (tests/support/standin_llama_cpp) that
answers, dies with SIGSEGV or SIGILL, or hangs, as real builds did on an AVX-512 VM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.engines import llamacpp_install as li
from evalpipe.engines.smoke import SmokeResult, probe_command, run_probe
from evalpipe.engines.watch import ended

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "tests" / "support" / "standin_llama_cpp"


class FakeSteps:
    """Builds write an empty wheel file; the smoke test of flavour F answers as ``works[F]`` says."""

    def __init__(self, works: dict[str, bool], build_fails: tuple[str, ...] = ()) -> None:
        self.works = works
        self.build_fails = build_fails
        self.calls: list[tuple[str, str]] = []
        self.installed: str | None = None

    def build(self, flavour: str, folder: Path) -> str | None:
        self.calls.append(("build", flavour))
        if flavour in self.build_fails:
            return "cmake: no compiler"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"llama_cpp_python-{li.LLAMACPP_VERSION}-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
        return None

    def install(self, wheel: Path) -> str | None:
        self.installed = wheel.parent.name.rsplit("-", 1)[-1]
        self.calls.append(("install", self.installed))
        return None

    def smoke(self) -> SmokeResult:
        assert self.installed is not None
        self.calls.append(("smoke", self.installed))
        if self.works[self.installed]:
            return SmokeResult(True, "one token completed")
        return SmokeResult(False, "the engine killed by SIGSEGV on its first token", "ggml_cpu: AVX-512 kernel")

    def uninstall(self) -> None:
        self.calls.append(("uninstall", self.installed or ""))
        self.installed = None


def test_the_portable_build_is_the_default_and_native_is_opt_in():
    assert li.plan(native=False) == ["portable", "conservative"]
    assert li.plan(native=True) == ["native", "portable", "conservative"]
    assert li.FLAVOURS["portable"] == "-DGGML_NATIVE=OFF"
    conservative = li.FLAVOURS["conservative"].split()
    for flag in ("AVX", "AVX2", "AVX512", "FMA", "F16C", "AMX_INT8"):
        assert f"-DGGML_{flag}=OFF" in conservative
    assert "-DGGML_NATIVE=OFF" in conservative


def test_a_portable_build_that_answers_is_kept(tmp_path):
    steps = FakeSteps({"portable": True, "conservative": True})
    outcome = li.install(li.plan(False), steps, tmp_path)
    assert outcome.flavour == "portable"
    assert steps.calls == [("build", "portable"), ("install", "portable"), ("smoke", "portable")]


def test_a_crashing_build_is_replaced_by_the_conservative_one_and_it_says_so(tmp_path):
    said: list[str] = []
    steps = FakeSteps({"portable": False, "conservative": True})
    outcome = li.install(li.plan(False), steps, tmp_path, said.append)
    assert outcome.flavour == "conservative"
    assert steps.calls == [("build", "portable"), ("install", "portable"), ("smoke", "portable"),
                           ("build", "conservative"), ("install", "conservative"), ("smoke", "conservative")]
    crash = next(line for line in said if "does not work" in line)
    assert "SIGSEGV" in crash and "rebuilding with the conservative set" in crash


def test_kept_wheels_are_reused_per_flavour_and_never_rebuilt(tmp_path):
    """Wheels live in a folder per flavour: a native wheel is never installed as the portable one."""
    native = li.wheel_dir("native", tmp_path)
    native.mkdir(parents=True)
    (native / f"llama_cpp_python-{li.LLAMACPP_VERSION}-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    steps = FakeSteps({"portable": True, "conservative": True})
    li.install(li.plan(False), steps, tmp_path)
    assert steps.calls[0] == ("build", "portable")  # the native wheel beside it is not the portable one
    again = FakeSteps({"portable": True, "conservative": True})
    li.install(li.plan(False), again, tmp_path)
    assert again.calls == [("install", "portable"), ("smoke", "portable")]


def test_a_failed_build_falls_through_to_the_next_flavour(tmp_path):
    steps = FakeSteps({"native": True, "portable": True, "conservative": True}, build_fails=("native",))
    outcome = li.install(li.plan(True), steps, tmp_path)
    assert outcome.flavour == "portable"
    assert any("native build failed: cmake: no compiler" in line for line in outcome.lines)


def test_when_no_build_works_the_engine_is_uninstalled(tmp_path):
    steps = FakeSteps({"portable": False, "conservative": False})
    outcome = li.install(li.plan(False), steps, tmp_path)
    assert outcome.flavour is None
    assert steps.calls[-1][0] == "uninstall"
    assert "no llama.cpp build works on this machine" in outcome.lines[-1]


def test_wheel_folders_are_named_by_version_and_flavour(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALPIPE_WHEEL_CACHE", str(tmp_path))
    assert li.wheel_dir("portable") == tmp_path / f"llamacpp-{li.LLAMACPP_VERSION}-portable"
    monkeypatch.delenv("EVALPIPE_WHEEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert li.wheel_root() == tmp_path / "xdg" / "evalpipe" / "wheels"


def _probe(mode: str, timeout_s: float = 60.0) -> SmokeResult:
    env = {**os.environ, "STANDIN_LLAMA": mode, "PYTHONPATH": str(STANDIN)}
    return run_probe(probe_command(Path("/models/smollm2.gguf")), timeout_s, env)


def test_smoke_test_passes_when_one_token_comes_back():
    result = _probe("ok")
    assert result.ok and "one token completed" in result.line()


@pytest.mark.parametrize("mode, signal_name", [("segv", "SIGSEGV"), ("sigill", "SIGILL")])
def test_smoke_test_names_the_signal_an_engine_died_of(mode, signal_name):
    result = _probe(mode)
    assert not result.ok
    assert f"killed by {signal_name} on its first token" in result.line()
    if mode == "segv":
        assert "AVX-512 kernel" in result.line()  # its last output lines come along


def test_smoke_test_gives_up_on_a_hanging_engine():
    result = _probe("hang", timeout_s=3)
    assert not result.ok and "no token within 3s" in result.line()


def test_exit_statuses_in_words():
    assert ended(-11) == "killed by SIGSEGV" and ended(-4) == "killed by SIGILL" and ended(3) == "exit code 3"


def test_smoke_module_exit_code_follows_the_result(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STANDIN), str(REPO)])}
    good = subprocess.run([sys.executable, "-m", "evalpipe.engines.smoke", "--model", str(model)],
                          env={**env, "STANDIN_LLAMA": "ok"}, capture_output=True, text=True, timeout=60)
    bad = subprocess.run([sys.executable, "-m", "evalpipe.engines.smoke", "--model", str(model)],
                         env={**env, "STANDIN_LLAMA": "segv"}, capture_output=True, text=True, timeout=60)
    assert good.returncode == 0 and "one token completed" in good.stderr
    assert bad.returncode == 1 and "SIGSEGV" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_run_sh_builds_through_the_installer_and_its_stamp_covers_it():
    script = (REPO / "run.sh").read_text()
    assert "evalpipe.engines.llamacpp_install" in script
    assert "llamacpp_install.py" in script.split("want=", 1)[1].splitlines()[0]
    assert "EVALPIPE_LLAMACPP_NATIVE" in script.split("want=", 1)[1].splitlines()[0]
    assert "llama-cpp-python[server]>=" not in script  # never a plain source build with native flags
