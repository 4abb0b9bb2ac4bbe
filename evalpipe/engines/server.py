"""Start and stop a local OpenAI-compatible inference server as a subprocess.

Why a subprocess and not an in-process engine: the evaluation then goes through the very same
HTTP backend as any remote server (one code path to test and trust), and a crashing engine cannot
take the run — or its response store — down with it.

A :class:`ManagedServer` picks a free loopback port, starts the command, waits until
``GET <base>/models`` answers (with a timeout, failing with the server's last log lines), and on
exit — normal, exception or Ctrl-C — terminates the whole process group, escalating to SIGKILL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from evalpipe.engines.watch import EngineDied, death_of, ended
from evalpipe.errors import EngineError


class ServerStartError(EngineError):
    """The server exited or did not become healthy in time; the message holds its last log lines."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerSpec:
    """How to launch one server: the command, where it will answer, and which model it serves."""

    name: str
    command: list[str]
    base_url: str
    model: str
    #: what is polled until it answers 200 (default: ``base_url + "/models"``)
    health_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: the context length the server was started with, if known (for context budgeting)
    context_length: int | None = None


class ManagedServer:
    def __init__(
        self,
        spec: ServerSpec,
        startup_timeout_s: float = 300.0,
        log: Callable[[str], None] | None = None,
        tail_lines: int = 40,
    ) -> None:
        self.spec = spec
        self.startup_timeout_s = startup_timeout_s
        self._log = log or (lambda line: None)
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        #: set once evalpipe itself stops the server: its exit is then no death
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ManagedServer:
        env = {**os.environ, **self.spec.env}
        self._process = subprocess.Popen(
            self.spec.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,  # its own process group: we can stop it and its children
        )
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        self._wait_healthy()
        return self

    def _pump(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            line = line.rstrip("\n")
            self._tail.append(line)
            self._log(line)

    def last_lines(self) -> str:
        return "\n".join(self._tail)

    def _wait_healthy(self) -> None:
        """Poll the health URL until it answers 2xx, the process exits, or the time is up."""
        assert self._process is not None
        url = self.spec.health_url or self.spec.base_url.rstrip("/") + "/models"
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # called from plain code (the CLI before a run)
            outcome = asyncio.run(self._poll(url, deadline))
        else:  # called from inside a running loop (a judge engine started when its judge gets work):
            # poll on a loop of its own in a worker thread; the caller waits for the server anyway
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                outcome = pool.submit(asyncio.run, self._poll(url, deadline)).result()
        if outcome == "healthy":
            return
        if outcome == "exited":
            time.sleep(0.2)  # let the reader collect the last lines
            code = self._process.poll() or 0
            how = f"with code {code}" if code >= 0 else f"({ended(code)})"
            raise ServerStartError(
                f"{self.spec.name} server exited {how} before becoming healthy; "
                f"last log lines:\n{self.last_lines()}"
            )
        self.stop()
        raise ServerStartError(
            f"{self.spec.name} server did not answer {url} within {self.startup_timeout_s:.0f}s; "
            f"last log lines:\n{self.last_lines()}"
        )

    async def _poll(self, url: str, deadline: float) -> str:
        """``"healthy"``, ``"exited"`` or ``"timeout"``: one keep-alive client (evalpipe's HTTP path,
        :class:`~evalpipe.backends.client.EndpointClient`) asks every 0.3 s, each try within 2 s."""
        from evalpipe.backends.base import Credentials  # noqa: PLC0415 - aiohttp only when a server starts
        from evalpipe.backends.client import EndpointClient  # noqa: PLC0415
        from evalpipe.backends.retry import RequestFailed  # noqa: PLC0415

        assert self._process is not None
        client = EndpointClient(url, Credentials(None), connections=1, timeout_s=2.0, connect_timeout_s=2.0)
        try:
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    return "exited"
                try:
                    await client.request("GET", url, decode=False)
                    return "healthy"
                except RequestFailed:
                    pass
                await asyncio.sleep(0.3)
            return "timeout"
        finally:
            await client.aclose()

    def died(self) -> EngineDied | None:
        """The one-line :class:`~evalpipe.engines.watch.EngineDied` of a server that ended by
        itself after it was started (None while it runs, or once evalpipe stops it)."""
        process = self._process
        if process is None or self._stopping:
            return None
        code = process.poll()
        if code is None:
            return None
        if self._reader is not None:
            self._reader.join(timeout=1.0)  # its last lines, as far as they came
        return death_of(code, self.spec.name, self.last_lines())

    def stop(self, grace_s: float = 10.0) -> None:
        self._stopping = True
        process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=5)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def python_module_command(module: str, args: Sequence[str]) -> list[str]:
    """Run a module with the same interpreter as evalpipe (so the venv's packages are used)."""
    return [sys.executable, "-m", module, *args]
