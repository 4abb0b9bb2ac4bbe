"""Running one evaluation to its end, from a config: start the local engine it asks for, run (or resume)
it, stop the engine — for ``evalpipe run`` and :func:`evalpipe.evaluate` alike.

The command line adds its printing and exit codes around :func:`run_config`; the Python API adds its
typed result. Failures come out as :class:`~evalpipe.errors.EvalpipeError` subclasses wherever the
user can act on them (an unwritable results folder, a full disk become a ``RunDirError``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sqlite3
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from evalpipe.backends.factory import make_backend
from evalpipe.config import RunConfig, local_model_fingerprint
from evalpipe.store.diskfull import disk_full_message, is_disk_full
from evalpipe.engines.launch import server_spec
from evalpipe.engines.server import ManagedServer
from evalpipe.engines.watch import run_watched
from evalpipe.outcome import RunOutcome
from evalpipe.results import RunDir, RunDirError, os_problem
from evalpipe.pipeline.progress import ProgressSink
from evalpipe.pipeline.execute import execute, run_dir_for

__all__ = ["local_engine", "run_config", "run_sync"]

T = TypeVar("T")


def run_sync(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(work())`` — in a thread of its own when this thread already runs an event loop
    (a Jupyter notebook does), where ``asyncio.run`` would refuse."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalpipe") as pool:
        return pool.submit(lambda: asyncio.run(work())).result()


def run_config(config: RunConfig, results_dir: Path, *, startup_timeout: float = 600.0,
               progress: ProgressSink | None = None,
               announce: Callable[[RunDir, int, int], None] | None = None,
               log: Callable[[str], None] = lambda line: None) -> RunOutcome:
    """Run (or resume) ``config`` into ``results_dir``, starting and stopping a local engine if it
    names one (llama.cpp, a vLLM server); the run stops within a second if that engine dies.

    ``log`` is told what happens to the engine (starting, ready); ``announce`` how many prompts the
    run has and how many are answered already. ``KeyboardInterrupt`` passes through: every answer
    received is stored, and the same call resumes."""
    try:
        with local_engine(config, startup_timeout, log) as (config, server):
            engines = [server] if server is not None else []
            return run_sync(lambda: run_watched(execute(config, make_backend, results_dir, progress, announce),
                                                engines))
    except (OSError, sqlite3.OperationalError) as exc:  # writing results: no permission, disk full …
        if is_disk_full(exc):
            raise RunDirError(disk_full_message(exc, run_dir_for(config, results_dir).path)) from None
        if not isinstance(exc, OSError):
            raise
        raise RunDirError(os_problem(exc)) from None  # (network errors are the backend's)


@contextlib.contextmanager
def local_engine(config: RunConfig, startup_timeout: float = 600.0,
                 log: Callable[[str], None] = lambda line: None) -> Iterator[tuple[RunConfig, ManagedServer | None]]:
    """The config with the local engine it names started (llama.cpp, a vLLM server: its URL and model
    filled in; stopped when the block ends) and a local model's fingerprint, with the started server
    (None without one) for :func:`evalpipe.engines.watch.run_watched` to watch. A run and a
    contamination probe start their engines here."""
    if config.engine is not None and config.model != "default":
        config = replace(config, model_fingerprint=local_model_fingerprint(config.model))
    if config.engine not in ("llamacpp", "vllm"):
        yield config, None
        return
    spec = server_spec(config.engine, None if config.model == "default" else config.model,
                       config.context_length, dict(config.engine_options))
    config = replace(config, base_url=spec.base_url, model=spec.model,
                     context_length=config.context_length or spec.context_length)
    log(f"starting {spec.name} ({spec.model}) on {spec.base_url} …")
    server = ManagedServer(spec, startup_timeout_s=startup_timeout)
    try:
        started = time.monotonic()
        server.start()
        log(f"{spec.name} server ready in {time.monotonic() - started:.1f}s")
        yield config, server
    finally:
        server.stop()
