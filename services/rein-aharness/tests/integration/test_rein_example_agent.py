"""The example agent profile of examples/profiles.yaml runs as shipped, end to end.

Only what points at the real world is rewritten: the provider's address (in the argv and
the sandbox's allowlist: a stand-in provider the test starts on the host's loopback,
listed as the literal `127.0.0.1:<port>`) and where the key's file lives. The profile's
script, secret, report list and sandbox are the example's own. Through a real worker,
real bubblewrap, the real egress proxy and a real activity-core on PostgreSQL, the run
succeeds with exactly the model and tokens the provider answered, the key reached the
provider and nothing else, and the one connection is in the evidence.
"""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ops_runtime.threaded_servers import served_in_a_thread
from rein_worker_kit import (
    ActivityCore,
    RecordingTransport,
    Repos,
    git,
    run_worker_once,
    worker_settings,
)

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "profiles.yaml"
KEY = "sk-example-agent-key-0123456789"
TEXT = "# Today's brief\n\nNothing happened.\n"
ANSWER: dict[str, Any] = {
    "model": "provider-model-7",
    "text": TEXT,
    "usage": {"input_tokens": 1200, "output_tokens": 345, "total_tokens": 1545},
}


class _Provider(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str | None, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        _Provider.seen.append(
            (self.headers.get("Authorization"), json.loads(self.rfile.read(length)))
        )
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _provider() -> Iterator[int]:
    _Provider.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    with served_in_a_thread(server, "model-provider") as (_, port):
        yield port


def _example_catalogue(tmp_path: Path, port: int) -> Path:
    shipped = yaml.safe_load(EXAMPLES.read_text(encoding="utf-8"))
    [agent] = [p for p in shipped["profiles"] if p["id"] == "harness.agent-cli"]
    sandbox = shipped["sandbox_profiles"][agent["sandbox_profile"]]
    assert agent["command"]["argv"][-1] == "https://api.provider.example/v1/brief"
    assert sandbox["network"] == {"allow": ["api.provider.example:443"]}
    key_file = tmp_path / "provider-key"
    key_file.write_text(KEY + "\n")
    agent["command"]["argv"][-1] = f"http://127.0.0.1:{port}/v1/brief"
    [secret] = agent["command"]["secrets"]
    secret["file"] = str(key_file)
    sandbox["network"] = {"allow": [f"127.0.0.1:{port}"]}
    catalogue = tmp_path / "profiles.yaml"
    catalogue.write_text(
        yaml.safe_dump(
            {"profiles": [agent], "sandbox_profiles": {agent["sandbox_profile"]: sandbox}}
        )
    )
    return catalogue


async def test_the_example_agent_reports_what_its_provider_answered(
    activity_core: ActivityCore, repos: Repos, tmp_path: Path
) -> None:
    repo = repos.make()
    with _provider() as port:
        settings = worker_settings(tmp_path, repos, _example_catalogue(tmp_path, port))
        run_id = await activity_core.granted_run("agent-cli")
        runtime = await run_worker_once(settings, RecordingTransport(activity_core.transport()))
    [report] = runtime.worker.reports
    assert report.close is not None and report.close.state == "delivered"
    row = dict(await activity_core.row(run_id))
    assert row["state"] == "succeeded", row
    # the key reached the provider, through the proxy, and nothing else
    [(authorization, asked)] = _Provider.seen
    assert authorization == f"Bearer {KEY}"
    assert asked["task"] == "write today's brief"
    [ref] = Repos.landings(repo)
    assert git(repo, "show", f"{ref}:briefs/agent-brief.md") == TEXT.rstrip("\n")
    assert KEY not in json.dumps(row["result"], default=str)
    assert KEY not in git(repo, "log", "-p", "--all")
    evidence = row["result"]["execution_evidence"]
    assert evidence["resolved_model"] == "provider-model-7"
    assert (evidence["input_tokens"], evidence["output_tokens"], evidence["tokens_spent"]) == (
        1200,
        345,
        1545,
    )
    assert evidence["tool_events_count"] == 1
    assert evidence["tool_events_completeness"] == "complete"
    assert evidence["result_report"] == "accepted"
    egress = evidence["network_egress"]
    assert (egress["mode"], egress["allowed"], egress["refused"]) == ("allowlist", 1, 0)
