"""Judging a credentialed run through a proxy that is not local is refused before any connection
(issue 22, item 1; the rule itself is tested in tests/test_data_locality.py)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from evalpipe.cli import app
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.hostile_server import connections_recorded
from tests.test_data_locality import OUTSIDE_PROXY, PROXY_VARIABLES


def test_judging_a_credentialed_run_through_an_outside_proxy_is_refused(medisumqa_copy, monkeypatch, tmp_path):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("HTTP_PROXY", OUTSIDE_PROXY)
    connections = connections_recorded(monkeypatch)
    with FakeOpenAIServer(models=("judge",)) as server:
        result = CliRunner().invoke(app, ["judge", str(medisumqa_copy), "--judge", f"judge={server.url}"])
        assert result.exit_code == 1, result.output
        assert "192.0.2.1:3128" in result.output and "credentialed" in result.output
        assert "proxy-secret" not in result.output and "Traceback" not in result.output
        assert server.total_requests == 0 and connections == []
    assert "judging" not in json.loads((medisumqa_copy / "config.json").read_text())
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the judge's host bypasses the proxy: judging may go ahead
    from evalpipe.judging.panel import Judge, check_patient_data

    check_patient_data(["clue_medisumqa"], [Judge(model="judge", url="http://127.0.0.1:8001/v1")], allowed=False)
