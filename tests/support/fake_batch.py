"""A loopback fake of the OpenAI Batch API (and of direct chat requests), on ``aiohttp.web``.

Routes, as the ``openai`` SDK calls them: ``POST /v1/files`` (multipart: ``file``, ``purpose``),
``GET /v1/files/{id}/content``, ``POST /v1/batches``, ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``; also ``GET /v1/models`` and ``POST /v1/chat/completions`` (direct
requests, counted apart) so one server answers a direct run and a batch run alike.

A batch moves ``validating`` → ``in_progress`` → ``completed`` by retrieves: ``in_progress`` after the
first, ``completed`` after ``polls_to_complete`` — unless the server *holds* batches (``hold``: they stay
``in_progress`` until ``/_admin/release``), or *expires* them (``expire``: half the lines answered, the
batch ``expired``). Lines whose request text contains a ``fail_marker`` go to the error file with HTTP
500 the first ``fail_times`` times they are seen. The answer of a line is the responder's (default:
:func:`tagging_responder`, deterministic in the prompt), with usage as the direct route gives it.

Run in a thread (``with FakeBatchServer() as server``) or as a process that outlives the runs it serves
(``python -m tests.support.fake_batch --port 0 [--hold]``; first stdout line: the base URL), driven by
``/_admin/stats``, ``/_admin/config`` and ``/_admin/release``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.fake_openai import echo_responder, request_text

#: words the tagging responder calls a disease
_DISEASE = re.compile(r"^\w*(cancer|disease|deficiency|syndrome|tumou?rs?|oma|omas|itis|emia|opathy)$", re.I)


def tagging_responder(body: dict[str, Any]) -> str:
    """The echo answer with every disease-looking word tagged ``<disease>`` (a non-trivial F1)."""
    echoed = echo_responder(body)
    inner = echoed[len("<response>"):-len("</response>")]
    words = [f"<disease>{w}</disease>" if _DISEASE.match(w) else w for w in inner.split(" ")]
    return "<response>" + " ".join(words) + "</response>"


def tokens_of(text: str) -> int:
    return max(1, len(text) // 4)


def completion_body(body: dict[str, Any], text: str, n: int) -> dict[str, Any]:
    prompt = json.dumps(body.get("messages") or body.get("prompt") or "")
    return {"id": f"chatcmpl-batch-{n}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens_of(prompt), "completion_tokens": tokens_of(text),
                      "total_tokens": tokens_of(prompt) + tokens_of(text)}}


class FakeBatchServer:
    def __init__(self, models: tuple[str, ...] = ("fake-model",), *, polls_to_complete: int = 2,
                 hold: bool = False, expire: bool = False, fail_marker: str | None = None, fail_times: int = 1,
                 responder: Any = tagging_responder, port: int = 0, reasoning: str | None = None,
                 require_max_completion_tokens: bool = False) -> None:
        self.models = models
        self.polls_to_complete = polls_to_complete
        self.hold, self.expire = hold, expire
        self.fail_marker, self.fail_times = fail_marker, fail_times
        self.responder = responder
        self.port = port
        #: reasoning text sent beside each answer (``message.reasoning_content``), with reasoning and
        #: cached token counts in the usage
        self.reasoning = reasoning
        #: refuse ``max_tokens`` with OpenAI's 400 (reasoning models want ``max_completion_tokens``)
        self.require_max_completion_tokens = require_max_completion_tokens
        self.bodies: list[dict[str, Any]] = []
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.polls: Counter[str] = Counter()
        self.failed_seen: Counter[str] = Counter()
        self.direct_requests = 0
        self.batch_lines = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # ---- the API ----------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}/content", self._content)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches/{id}", self._retrieve)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel)
        app.router.add_get("/_admin/stats", self._stats)
        app.router.add_post("/_admin/release", self._release)
        app.router.add_post("/_admin/config", self._config)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.direct_requests += 1
            self.bodies.append(body)
        if self.require_max_completion_tokens and "max_tokens" in body:
            return web.json_response({"error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                           "'max_completion_tokens' instead.", "type": "invalid_request_error",
                "param": "max_tokens", "code": "unsupported_parameter"}}, status=400)
        return web.json_response(self._reply(body))

    def _reply(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = completion_body(body, self.responder(body), next(self._ids))
        if self.reasoning is not None:
            reply["choices"][0]["message"]["reasoning_content"] = self.reasoning
            reply["usage"]["completion_tokens"] += tokens_of(self.reasoning)
            reply["usage"]["completion_tokens_details"] = {"reasoning_tokens": tokens_of(self.reasoning)}
            reply["usage"]["prompt_tokens_details"] = {"cached_tokens": reply["usage"]["prompt_tokens"] // 2}
        return reply

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form["file"]
        data = upload.file.read() if hasattr(upload, "file") else bytes(upload)
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = data
        return web.json_response({"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                  "filename": getattr(upload, "filename", "input.jsonl"),
                                  "purpose": form.get("purpose", "batch"), "status": "processed"})

    async def _content(self, request: web.Request) -> web.Response:
        file_id = request.match_info["id"]
        if file_id not in self.files:
            return web.json_response({"error": {"message": f"no file {file_id}"}}, status=404)
        return web.Response(body=self.files[file_id], content_type="application/octet-stream")

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("input_file_id") not in self.files:
            return web.json_response({"error": {"message": "unknown input_file_id"}}, status=400)
        batch_id = f"batch_{next(self._ids)}"
        lines = [line for line in self.files[body["input_file_id"]].decode().splitlines() if line.strip()]
        with self._lock:
            self.batches[batch_id] = {
                "id": batch_id, "object": "batch", "endpoint": body["endpoint"], "errors": None,
                "input_file_id": body["input_file_id"], "completion_window": body.get("completion_window", "24h"),
                "status": "validating", "output_file_id": None, "error_file_id": None,
                "created_at": int(time.time()), "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            }
            self.batch_lines += len(lines)
        return web.json_response(self.batches[batch_id])

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return web.json_response({"error": {"message": f"no batch {batch_id}"}}, status=404)
            self.polls[batch_id] += 1
            if batch["status"] == "validating":
                batch["status"] = "in_progress"
            elif batch["status"] == "in_progress" and not self.hold and self.polls[batch_id] >= self.polls_to_complete:
                self._end(batch, "expired" if self.expire else "completed")
            return web.json_response(batch)

    async def _cancel(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["id"]
        with self._lock:
            batch = self.batches[batch_id]
            if batch["status"] in ("validating", "in_progress"):
                self._end(batch, "cancelled")
            return web.json_response(batch)

    def _end(self, batch: dict[str, Any], status: str) -> None:
        """Answer the batch's lines (half of them when it expires or is cancelled) into its files."""
        lines = [json.loads(line) for line in self.files[batch["input_file_id"]].decode().splitlines() if line.strip()]
        if status != "completed":
            lines = lines[: len(lines) // 2]
        out, errors = [], []
        for line in lines:
            body = line["body"]
            marked = self.fail_marker is not None and self.fail_marker in request_text(body)
            if marked and self.failed_seen[line["custom_id"]] < self.fail_times:
                self.failed_seen[line["custom_id"]] += 1
                errors.append({"id": f"req-{next(self._ids)}", "custom_id": line["custom_id"], "error": None,
                               "response": {"status_code": 500, "body": {"error": {"message": "server busy"}}}})
                continue
            out.append({"id": f"req-{next(self._ids)}", "custom_id": line["custom_id"], "error": None,
                        "response": {"status_code": 200, "request_id": "r",
                                     "body": self._reply(body)}})
        for name, rows in (("output_file_id", out), ("error_file_id", errors)):
            if rows:
                file_id = f"file-{next(self._ids)}"
                self.files[file_id] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                batch[name] = file_id
        batch["status"] = status
        batch["request_counts"] = {"total": batch["request_counts"]["total"], "completed": len(out),
                                   "failed": len(errors)}

    # ---- admin ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"batches": {k: {"status": b["status"], "lines": b["request_counts"]["total"],
                                    "polls": self.polls[k]} for k, b in self.batches.items()},
                    "direct_requests": self.direct_requests, "batch_lines": self.batch_lines}

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _release(self, request: web.Request) -> web.Response:
        self.hold = False
        return web.json_response({"ok": True})

    async def _config(self, request: web.Request) -> web.Response:
        for name, value in (await request.json()).items():
            setattr(self, name, value)
        return web.json_response({"ok": True})

    # ---- running ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def serve_async(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def __enter__(self) -> FakeBatchServer:
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.serve_async())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


class FakeBatchProcess:
    """The server in a process of its own (it outlives the evalpipe runs of a kill-and-resume test)."""

    def __init__(self, *args: str) -> None:
        self.args = args

    def __enter__(self) -> FakeBatchProcess:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen([sys.executable, "-m", "tests.support.fake_batch", "--port", "0", *self.args],
                                        cwd=root, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        return self

    def admin(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        root = self.url.removesuffix("/v1")
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(root + path, data=data, method="POST" if data is not None else "GET",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read())

    def stats(self) -> dict[str, Any]:
        return self.admin("/_admin/stats")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--polls", type=int, default=2)
    args = parser.parse_args()
    server = FakeBatchServer(hold=args.hold, polls_to_complete=args.polls, port=args.port)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(server.serve_async())
    print(server.url, flush=True)
    loop.run_forever()


if __name__ == "__main__":
    main()
