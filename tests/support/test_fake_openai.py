"""The fake OpenAI server itself: HTTP behaviour, answers, faults, counters, subprocess mode.

These talk to it with the standard library's ``http.client`` so that a server bug cannot hide
behind the backend under test.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import (
    LONE_SURROGATE,
    FakeOpenAIProcess,
    FakeOpenAIServer,
    Fault,
    ScriptedResponder,
    echo_responder,
    fake_vector,
    load_script,
    prompt_key,
)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=("m1", "m2")) as srv:
        yield srv


def chat_body(text: str, model: str = "m1", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 10, **extra}


def call(
    port: int, method: str, path: str, body: Any = None, conn: http.client.HTTPConnection | None = None
) -> tuple[int, dict[str, str], Any]:
    """One request; returns status, lower-cased headers and the decoded JSON (or raw text)."""
    connection = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    payload = None if body is None else json.dumps(body)
    connection.request(method, path, body=payload, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    raw = response.read().decode()
    headers = {k.lower(): v for k, v in response.getheaders()}
    if conn is None:
        connection.close()
    try:
        return response.status, headers, json.loads(raw)
    except ValueError:
        return response.status, headers, raw


def test_fault_spec_syntax() -> None:
    assert Fault.parse("500") == Fault("status", 500)
    assert Fault.parse("429:retry_after=1.5") == Fault("status", 429, 1.5)
    assert Fault.parse("429:retry_after_date=2") == Fault("status", 429, 2.0, retry_after_as_date=True)
    assert Fault.parse("slow:5") == Fault("slow", delay_s=5.0)
    for kind in ("ok", "malformed_json", "empty_content", "null_content", "drop", "drop_mid", "chunked",
                 "lone_surrogate", "wrong_shape"):
        assert Fault.parse(kind).kind == kind
    assert Fault.parse("echo_auth") == Fault("echo_auth", 401)
    for bad in ("teapot", "200", "slow", "slow:x", "429:wait=1", "drop:3"):
        with pytest.raises(ValueError):
            Fault.parse(bad)


def test_echo_responder_copies_the_last_text_to_process() -> None:
    few_shot = "Text to process:\nExample one.\n\nOutput: x\n\nText to process:\nThe real one.\n\nOutput:"
    assert echo_responder(chat_body(few_shot)) == "<response>The real one.</response>"
    assert echo_responder({"prompt": "no marker\nlast line"}) == "<response>last line</response>"


def test_scripted_responder_matches_substrings_in_order() -> None:
    script = ScriptedResponder({"cancer": "A", "breast": "B"})
    assert script(chat_body("breast cancer")) == "A"
    assert script(chat_body("breast")) == "B"
    assert script(chat_body("Text to process:\nother")) == "<response>other</response>"


def test_models_and_completions_json_shapes(server: FakeOpenAIServer) -> None:
    status, _, models = call(server.port or 0, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["m1", "m2"]

    status, _, chat = call(server.port or 0, "POST", "/v1/chat/completions", chat_body("Text to process:\nHi."))
    assert status == 200 and chat["object"] == "chat.completion" and chat["model"] == "m1"
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "<response>Hi.</response>"}
    assert chat["choices"][0]["finish_reason"] == "stop"
    usage = chat["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    status, _, completion = call(server.port or 0, "POST", "/v1/completions", {"model": "m2", "prompt": "x\ny"})
    assert status == 200 and completion["object"] == "text_completion"
    assert completion["choices"][0]["text"] == "<response>y</response>"


def test_unknown_model_and_route_are_openai_style_404s(server: FakeOpenAIServer) -> None:
    status, _, body = call(server.port or 0, "POST", "/v1/chat/completions", chat_body("hi", model="zz"))
    assert status == 404 and body["error"]["code"] == "model_not_found"
    status, _, body = call(server.port or 0, "GET", "/v2/nothing")
    assert status == 404 and "error" in body


def test_keep_alive_serves_several_requests_on_one_connection(server: FakeOpenAIServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    for i in range(3):
        status, headers, _ = call(0, "POST", "/v1/chat/completions", chat_body(f"q{i}"), conn=conn)
        assert status == 200 and headers.get("connection", "keep-alive").lower() == "keep-alive"
    conn.close()
    assert server.total_requests == 3 and server.connections == 1


def test_planned_faults_are_used_in_order(server: FakeOpenAIServer) -> None:
    server.plan_faults(["429:retry_after=2", "503", "empty_content", "malformed_json"])
    port = server.port or 0
    status, headers, body = call(port, "POST", "/v1/chat/completions", chat_body("a"))
    assert status == 429 and headers["retry-after"] == "2" and body["error"]["type"] == "rate_limit_error"
    assert call(port, "POST", "/v1/chat/completions", chat_body("a"))[0] == 503
    assert call(port, "POST", "/v1/chat/completions", chat_body("a"))[2]["choices"][0]["message"]["content"] == ""
    status, _, raw = call(port, "POST", "/v1/chat/completions", chat_body("a"))
    assert status == 200 and isinstance(raw, str)  # not decodable
    assert call(port, "POST", "/v1/chat/completions", chat_body("a"))[0] == 200  # plan used up
    assert server.stats()["faults_injected"] == {"429": 1, "503": 1, "empty_content": 1, "malformed_json": 1}


def test_drop_closes_without_a_response(server: FakeOpenAIServer) -> None:
    server.plan_faults(["drop"])
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        call(server.port or 0, "POST", "/v1/chat/completions", chat_body("a"))


def test_fault_policy_decides_per_request(server: FakeOpenAIServer) -> None:
    server.set_fault_policy(lambda request: "500" if "bad" in json.dumps(request.body) else None)
    assert call(server.port or 0, "POST", "/v1/chat/completions", chat_body("bad one"))[0] == 500
    assert call(server.port or 0, "POST", "/v1/chat/completions", chat_body("good one"))[0] == 200


def test_counters_per_prompt_and_reset(server: FakeOpenAIServer) -> None:
    for text in ("a", "a", "b"):
        call(server.port or 0, "POST", "/v1/chat/completions", chat_body(text))
    assert server.count_for(chat_body("a")) == 2 and server.count_for("b") == 1
    stats = server.stats()
    assert stats["distinct_prompts"] == 2 and stats["max_requests_per_prompt"] == 2
    assert stats["per_prompt"][prompt_key(chat_body("a"))] == 2
    server.reset_counters()
    assert server.total_requests == 0 and server.requests == []


def test_stop_cuts_slow_requests_promptly() -> None:
    srv = FakeOpenAIServer(models=("m1",), latency=30).start()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(chat_body("x")))
    time.sleep(0.1)
    started = time.perf_counter()
    srv.stop()
    assert time.perf_counter() - started < 2.0
    conn.close()


def test_load_script_accepts_both_forms(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"cancer": "<response>x</response>"}))
    assert load_script(plain) == ({"cancer": "<response>x</response>"}, [])
    structured = tmp_path / "structured.json"
    structured.write_text(json.dumps({"answers": {"a": "b"}, "faults": ["500"]}))
    assert load_script(structured) == ({"a": "b"}, ["500"])


def test_subprocess_mode_prints_its_url_and_answers_from_the_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"answers": {"colon": "<response>scripted</response>"}, "faults": ["500"]}))
    with FakeOpenAIProcess(models=("m1",), script=script, record=True) as proc:
        assert proc.url.startswith("http://127.0.0.1:") and proc.url.endswith("/v1")
        port = int(proc.url.rsplit(":", 1)[1].split("/")[0])
        assert call(port, "POST", "/v1/chat/completions", chat_body("colon cancer"))[0] == 500
        answer = call(port, "POST", "/v1/chat/completions", chat_body("colon cancer"))[2]
        assert answer["choices"][0]["message"]["content"] == "<response>scripted</response>"
        proc.plan_faults(["503"])
        assert call(port, "POST", "/v1/chat/completions", chat_body("other"))[0] == 503
        stats = proc.stats()
        assert stats["total_requests"] == 3 and stats["faults_injected"] == {"500": 1, "503": 1}
        assert len(proc.recorded_bodies()) == 3
        proc.reset()
        assert proc.stats()["total_requests"] == 0
    assert proc.proc is None


def test_hostile_answers(server: FakeOpenAIServer) -> None:
    """Fault plans for issue 14: a lone surrogate in valid JSON, a 401 quoting the Authorization
    header, a 200 that is no completion."""
    server.plan_faults(["lone_surrogate", "echo_auth", "wrong_shape"])
    port = server.port or 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(chat_body("a")),
                  headers={"Content-Type": "application/json"})
    raw = conn.getresponse().read()
    assert b"\\udcff" in raw  # the JSON escape, as a server would send it
    assert json.loads(raw)["choices"][0]["message"]["content"] == LONE_SURROGATE
    conn.request("POST", "/v1/chat/completions", body=json.dumps(chat_body("a")),
                 headers={"Content-Type": "application/json", "Authorization": "Basic YWxpY2U6c2VjcmV0"})
    response = conn.getresponse()
    assert response.status == 401 and "Basic YWxpY2U6c2VjcmV0" in json.loads(response.read())["error"]["message"]
    conn.close()
    status, _, body = call(port, "POST", "/v1/chat/completions", chat_body("a"))
    assert status == 200 and body["choices"] == []


def test_a_responders_lone_surrogate_is_sent_as_its_json_escape_and_whole_replies_are_recorded() -> None:
    """A scripted answer UTF-8 cannot carry goes out as valid JSON (``\\udcff``), not as a server
    error; ``delivered()`` lists the replies that carried a whole completion, not the cut ones."""
    with FakeOpenAIServer(models=("m1",), responder=lambda body: "x \udcff y") as srv:
        srv.plan_faults(["drop_mid", "malformed_json", "empty_content", "ok"])
        port = srv.port or 0
        with pytest.raises(http.client.IncompleteRead):  # drop_mid: half a reply, then the connection is cut
            call(port, "POST", "/v1/chat/completions", chat_body("a"))
        status, _, body = call(port, "POST", "/v1/chat/completions", chat_body("a"))
        assert status == 200 and isinstance(body, str)  # malformed_json: not JSON
        assert call(port, "POST", "/v1/chat/completions", chat_body("b"))[2]["choices"][0]["message"]["content"] == ""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(chat_body("c")),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        assert response.status == 200 and b"\\udcff" in raw
        assert json.loads(raw)["choices"][0]["message"]["content"] == "x \udcff y"
        assert srv.delivered() == [(prompt_key(chat_body("b")), ""), (prompt_key(chat_body("c")), "x \udcff y")]
        srv.reset_counters()
        assert srv.delivered() == []


def test_chunked_and_drop_mid_framing(server: FakeOpenAIServer) -> None:
    server.plan_faults(["chunked", "drop_mid"])
    status, headers, body = call(server.port or 0, "POST", "/v1/chat/completions", chat_body("Text to process:\nHi."))
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    assert body["choices"][0]["message"]["content"] == "<response>Hi.</response>"
    with pytest.raises(http.client.IncompleteRead):
        call(server.port or 0, "POST", "/v1/chat/completions", chat_body("a"))


def test_vllm_routes_max_model_len_and_tokenize() -> None:
    with FakeOpenAIServer(models=("m",), max_model_len=2048, tokenize=True) as srv:
        port = srv.port or 0
        assert call(port, "GET", "/v1/models")[2]["data"][0]["max_model_len"] == 2048
        assert call(port, "POST", "/tokenize", {"model": "m", "prompt": "one two three"})[2]["count"] == 3
        chat = {"model": "m", "messages": [{"role": "user", "content": "a b"}]}
        assert call(port, "POST", "/tokenize", chat)[2]["count"] == 1 + 2 + 1
        assert call(port, "POST", "/extras/tokenize/count", {"input": "a b"})[0] == 404
        assert call(port, "GET", "/health")[0] == 200
        assert srv.stats()["tokenize_requests"] == 2
    with FakeOpenAIServer(models=("m",), tokenize="llamacpp") as srv:
        assert call(srv.port or 0, "POST", "/extras/tokenize/count", {"input": "a b c d"})[2] == {"count": 4}
        assert call(srv.port or 0, "POST", "/tokenize", {"model": "m", "prompt": "x"})[0] == 404


def test_embeddings_route_and_large_bodies(server: FakeOpenAIServer) -> None:
    status, _, body = call(server.port or 0, "POST", "/v1/embeddings", {"model": "m1", "input": ["ab", "c"]})
    assert status == 200 and [row["index"] for row in body["data"]] == [1, 0]  # reordered on purpose
    assert {row["index"]: row["embedding"] for row in body["data"]} == {0: fake_vector("ab"), 1: fake_vector("c")}
    big = "Text to process:\n" + "word " * 400_000  # 2 MB, more than aiohttp's default body limit
    assert call(server.port or 0, "POST", "/v1/chat/completions", chat_body(big))[0] == 200


def test_timeline_records_arrival_and_reply() -> None:
    with FakeOpenAIServer(models=("m1",), latency=0.05) as srv:
        before = time.monotonic()
        call(srv.port or 0, "POST", "/v1/chat/completions", chat_body("a"))
        [(arrived, replied)] = srv.timeline()
    assert before <= arrived and replied - arrived >= 0.05


def test_subprocess_mode_serves_vllm_routes_and_the_timeline() -> None:
    with FakeOpenAIProcess(models=("m1",), extra_args=["--max-model-len", "1234", "--tokenize", "vllm"]) as proc:
        port = int(proc.url.rsplit(":", 1)[1].split("/")[0])
        assert call(port, "GET", "/v1/models")[2]["data"][0]["max_model_len"] == 1234
        assert call(port, "POST", "/tokenize", {"model": "m1", "prompt": "a b"})[2]["count"] == 2
        call(port, "POST", "/v1/chat/completions", chat_body("x"))
        [(arrived, replied)] = proc.timeline()
        assert replied >= arrived
