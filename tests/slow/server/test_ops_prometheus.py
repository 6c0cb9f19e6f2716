"""The Grafana dashboard in docs/ops/: its every query through a real Prometheus server
scraping a real ``speechpipe serve`` during a real session (real models, a real recording
streamed over a real WebSocket client, all on 127.0.0.1).

Grafana itself is not in the package registries here: the test runs what it would query."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT

OPS = ROOT / "docs" / "ops"
ALERTS = OPS / "alerts.yml"

DASHBOARD = OPS / "dashboard.json"

PROMETHEUS = shutil.which("prometheus")
STEP_TIMEOUT_S = 60


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel, rows included."""
    out = []
    panels = json.loads(DASHBOARD.read_text())["panels"]
    for panel in panels + [p for row in panels for p in row.get("panels", [])]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


# -- dashboard against a real Prometheus -------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prom_get(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else base + path
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


async def prom_query(base: str, query: str) -> dict[str, Any]:
    try:
        return await asyncio.to_thread(prom_get, base, "/api/v1/query", query=query)  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:  # 400/422: the query is wrong
        return json.loads(exc.read())  # type: ignore[no-any-return]


async def wait_until(what: str, check: Any, within: float = STEP_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except OSError as exc:  # not listening yet
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def finite_series(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in answer.get("data", {}).get("result", [])
            if math.isfinite(float(s["value"][1]))]


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian: apt-get "
                                               "install prometheus)")
@pytest.mark.asyncio(loop_scope="session")
async def test_every_dashboard_query_answers_during_a_real_session(
    pipeline: Any, spanish_clip: tuple[Any, dict[str, Any]], stream_ws: Any, tmp_path: Path,
) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from speechpipe.server.admission import AdmissionOptions
    from speechpipe.server.options import LoadOptions
    from speechpipe.server.serve import ServerApp
    from speechpipe.transport.codes import CloseCode
    from speechpipe.transport.file_replay import read_audio

    queries = dashboard_queries()
    assert len(queries) >= 20
    app = ServerApp("127.0.0.1", 0, pipeline=pipeline,
                    load=LoadOptions(admission=AdmissionOptions(capacity=4)))
    await app.start()
    prometheus: asyncio.subprocess.Process | None = None
    log = tmp_path / "prometheus.log"
    try:
        await app.load()
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [{"job_name": "speechpipe", "static_configs": [
                {"targets": [f"127.0.0.1:{app.server.port}"]}]}],
        }))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with log.open("wb") as sink:
            prometheus = await asyncio.create_subprocess_exec(
                str(PROMETHEUS), f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                stdout=sink, stderr=subprocess.STDOUT,
            )

        async def target_up() -> bool:
            answer = await prom_query(base, 'up{job="speechpipe"}')
            return any(s["value"][1] == "1" for s in answer["data"]["result"])

        await wait_until("Prometheus to scrape the server", target_up)

        # a refusal at the upgrade (403: an origin that is not allowed) and a real session
        with pytest.raises(InvalidStatus):
            async with connect(f"ws://127.0.0.1:{app.server.port}/ws",
                               origin="https://elsewhere.example"):  # type: ignore[arg-type]
                pass
        path, _ = spanish_clip
        run = await asyncio.wait_for(stream_ws(
            f"ws://127.0.0.1:{app.server.port}/ws", read_audio(path),
            start={"source_lang": "es"}), 120)
        assert run.close_code == CloseCode.NORMAL and run.audio

        async def scraped_after_the_session() -> bool:
            answer = await prom_query(base, "speechpipe_speech_end_offset_seconds_count")
            return any(float(s["value"][1]) > 0 for s in answer["data"]["result"])

        await wait_until("the session's figures in Prometheus", scraped_after_the_session)
        await asyncio.sleep(2.5)  # a couple more scrapes: the rates see the session end

        failures = []
        for title, expr in queries:
            promql = expr.replace("$__rate_interval", "2m").replace("$instance", ".*")
            answer = await prom_query(base, promql)
            if answer.get("status") != "success":
                failures.append(f"{title}: {expr}: {answer.get('error')}")
            elif not answer["data"]["result"]:
                failures.append(f"{title}: {expr}: no series")
            elif not finite_series(answer):
                failures.append(f"{title}: {expr}: only NaN/Inf")
        assert not failures, "\n".join(failures)

        refusals = next(e for t, e in queries if t == "Refusals by reason")
        answer = await prom_query(base, refusals.replace("$__rate_interval", "2m")
                                  .replace("$instance", ".*"))
        by_code = {s["metric"]["code"]: float(s["value"][1]) for s in answer["data"]["result"]}
        assert by_code.get("403", 0) > 0, by_code

        async def rules_evaluated() -> list[dict[str, Any]]:
            groups = (await asyncio.to_thread(prom_get, base, "/api/v1/rules"))["data"]["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            return rules if all(rule["health"] != "unknown" for rule in rules) else []

        rules = await wait_until("the alert rules to be evaluated", rules_evaluated)
        assert {r["name"] for r in rules} == {r["alert"] for r in alerts()}
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError"))
                                                          for r in rules]
    except BaseException:
        if log.exists():
            print(log.read_text()[-4000:])
        raise
    finally:
        if prometheus is not None and prometheus.returncode is None:
            prometheus.terminate()
            try:
                await asyncio.wait_for(prometheus.wait(), 15)
            except TimeoutError:
                prometheus.kill()
                await asyncio.wait_for(prometheus.wait(), 5)
        await app.stop(close_pipeline=False)
