"""Monitoring on real lab nodes: targets up with their labels, the health and Slurm textfiles
in Prometheus, a rules change reloads (no restart), a re-apply restarts nothing, and a
failing health check (munge stopped) fires an alert that Alertmanager delivers to a
webhook this test serves on the lab bridge."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuforge.spec.load import load_spec
from tests.conftest import REPO, LabCluster
from tests.monitoring.panels import dashboard_queries

pytestmark = pytest.mark.lab

PROM = "http://localhost:9090"
SERVICES = {
    "node1": ("prometheus", "prometheus-alertmanager", "prometheus-node-exporter"),
    "node2": ("prometheus-node-exporter",),
    "node3": ("prometheus-node-exporter",),
}


class Webhook:
    """A tiny HTTP server collecting Alertmanager's webhook posts (JSON bodies)."""

    def __init__(self, address: str) -> None:
        self.posts: list[dict[str, Any]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def alerts(self) -> list[dict[str, Any]]:
        return [a for p in self.posts for a in p.get("alerts", [])]


@pytest.fixture(scope="module")
def webhook(lab_cluster: LabCluster) -> Iterator[Webhook]:
    hook = Webhook(lab_cluster.lab.state.bridge_address.split("/")[0])
    yield hook
    hook.close()


def fast_monitoring(url: str, disk_used_percent: int = 90) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        d["monitoring"].update(
            scrape_interval="5s",
            slurm_collector_interval=15,
            group_wait="1s",
            group_interval="5s",
            repeat_interval="1m",
            receivers=[{"name": "test", "webhook_url": url}],
            alerts={"check_failing_minutes": 1, "disk_used_percent": disk_used_percent},
        )

    return mutate


def query(cluster: LabCluster, path: str, **params: str) -> Any:
    """GET Prometheus' API on node1 (python3 on the node; the result's ``data``)."""
    url = f"{PROM}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    code = f"import urllib.request,sys; sys.stdout.write(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
    doc = json.loads(cluster.ssh("node1", f"python3 -c {json.dumps(code)}"))
    assert doc["status"] == "success", doc
    return doc["data"]


#: Each Slurm node's state class now: the series with value 1, of those scraped in the last 20 s.
SLURM_NODE_STATES = "last_over_time(gpuforge_slurm_node_state[20s]) == 1"

#: The Slurm collector on the controller as it is: its series, its timer and service, its last log lines.
COLLECTOR_STATE = (
    "grep -E '^gpuforge_slurm_(node_state.* 1$|collector)' /var/lib/gpuforge/textfile/slurm.prom; "
    "systemctl list-timers --all 'gpuforge-slurm-metrics*' --no-pager; "
    "systemctl status gpuforge-slurm-metrics.service --no-pager -n 15; sinfo -h -N -o '%N %T %E'"
)


def wait_for(what: str, probe: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def main_pids(cluster: LabCluster) -> dict[str, str]:
    out: dict[str, str] = {}
    for node, units in SERVICES.items():
        for unit in units:
            pid = cluster.ssh(node, f"systemctl show -p MainPID --value {unit}").strip()
            assert pid not in ("", "0"), f"{unit} is not running on {node}"
            out[f"{node}/{unit}"] = pid
    return out


def test_monitoring_in_the_lab(lab_cluster: LabCluster, webhook: Webhook) -> None:
    spec = lab_cluster.write("monitoring.yaml", mutate=fast_monitoring(webhook.url))
    result = lab_cluster.apply(spec)
    assert result["returncode"] == 0 and result["ok"], json.dumps(result, indent=2)

    # Every node-exporter target is up and its series carry node, node_group and cluster.
    def exporters_up() -> list[dict[str, Any]]:
        active = query(lab_cluster, "/api/v1/targets")["activeTargets"]
        ne = [t for t in active if t["labels"]["job"] == "node-exporter"]
        return ne if len(ne) == 3 and all(t["health"] == "up" for t in ne) else []

    targets = wait_for("3 node-exporter targets up", exporters_up, 120)
    assert sorted((t["labels"]["node"], t["labels"]["node_group"], t["labels"]["cluster"]) for t in targets) == [
        ("node1", "ctl", "gflab"),
        ("node2", "workers", "gflab"),
        ("node3", "workers", "gflab"),
    ]

    # Every job's targets up. Waited for, not read once: a scrape pool that Prometheus has just
    # (re)created reports "unknown" until its first scrape.
    def jobs_up() -> dict[str, set[str]]:
        jobs: dict[str, set[str]] = {}
        for t in query(lab_cluster, "/api/v1/targets")["activeTargets"]:
            jobs.setdefault(t["labels"]["job"], set()).add(t["health"])
        return jobs if all(h == {"up"} for h in jobs.values()) else {}

    jobs = wait_for("every target of every job up", jobs_up, 120)
    assert set(jobs) == {"prometheus", "alertmanager", "node-exporter"}
    # Only this job's series: the package's first start ran Debian's default config (job "node"),
    # and a restart writes no staleness markers, so those series stay visible for the 5 min lookback.
    loads = query(lab_cluster, "/api/v1/query", query='node_load1{job="node-exporter"}')["result"]
    assert sorted(s["metric"].get("node", "<no node label>") for s in loads) == ["node1", "node2", "node3"]
    assert {(s["metric"].get("node_group"), s["metric"].get("cluster")) for s in loads} == {
        ("ctl", "gflab"),
        ("workers", "gflab"),
    }

    # The health textfile (every node) and the Slurm collector's series (controller) are in Prometheus.
    def health_series() -> list[str]:
        res = query(lab_cluster, "/api/v1/query", query='count by (node) (gpuforge_check_status{job="node-exporter"})')[
            "result"
        ]
        nodes = sorted(s["metric"].get("node", "<no node label>") for s in res)
        return nodes if nodes == ["node1", "node2", "node3"] else []

    wait_for("gpuforge_check_status from every node", health_series, 120)

    seen: list[str] = []

    def slurm_series() -> list[dict[str, Any]]:
        # Only series scraped in the last 20 s (the scrape interval is 5 s): a Prometheus restarted by
        # an apply writes no staleness markers, so a state an earlier test left (a drained node) stays
        # in plain instant queries for the 5 min lookback. (timestamp() of "x == 1" cannot tell: a
        # comparison's samples carry the query's time, not the scrape's; a range selector can.)
        fresh = query(lab_cluster, "/api/v1/query", query=SLURM_NODE_STATES)["result"]
        seen[:] = [f"{s['metric'].get('slurm_node')}={s['metric'].get('state')}" for s in fresh]
        return fresh if len(fresh) == 3 else []

    try:
        states = wait_for("gpuforge_slurm_node_state of 3 nodes", slurm_series, 120)
    except AssertionError as e:  # what the collector wrote and why: its unit, its last runs, sinfo
        print(lab_cluster.ssh("node1", COLLECTOR_STATE, check=False))
        raise AssertionError(f"{e}; the latest scrape's states: {seen}") from None
    assert sorted(s["metric"]["slurm_node"] for s in states) == ["node1", "node2", "node3"]
    daemons = query(lab_cluster, "/api/v1/query", query="gpuforge_slurm_daemon_up")["result"]
    assert {s["metric"]["daemon"]: s["value"][1] for s in daemons} == {"slurmctld": "1", "slurmdbd": "1"}
    assert query(lab_cluster, "/api/v1/query", query='gpuforge_slurm_collector_success{source="sinfo"}')["result"]

    # Re-apply unchanged: nothing restarts. A rules change reloads Prometheus, never restarts it.
    before = main_pids(lab_cluster)
    again = lab_cluster.apply(spec)
    assert again["returncode"] == 0 and again["ok"], json.dumps(again, indent=2)
    assert main_pids(lab_cluster) == before
    changed = lab_cluster.write("monitoring-95.yaml", mutate=fast_monitoring(webhook.url, disk_used_percent=95))
    third = lab_cluster.apply(changed)
    assert third["returncode"] == 0 and third["ok"], json.dumps(third, indent=2)
    assert main_pids(lab_cluster) == before

    def rule_reloaded() -> bool:
        groups = query(lab_cluster, "/api/v1/rules")["groups"]
        exprs = [r["query"] for g in groups for r in g["rules"] if r["name"] == "DiskNearlyFull"]
        return len(exprs) == 1 and exprs[0].endswith("> 95")

    wait_for("the DiskNearlyFull rule at 95%", rule_reloaded, 60)

    # Stop munge on node2: its health check fails, the alert fires and reaches the webhook.
    lab_cluster.ssh("node2", "systemctl stop munge")
    try:

        def firing() -> list[dict[str, Any]]:
            alerts = query(lab_cluster, "/api/v1/alerts")["alerts"]
            return [
                a
                for a in alerts
                if a["labels"]["alertname"] == "GpuforgeCheckFailing"
                and a["labels"]["node"] == "node2"
                and a["state"] == "firing"
            ]

        fired = wait_for("GpuforgeCheckFailing firing for node2", firing, 240)
        assert all(a["annotations"]["runbook"] for a in fired)

        def delivered() -> list[dict[str, Any]]:
            return [
                a
                for a in webhook.alerts()
                if a["labels"].get("alertname") == "GpuforgeCheckFailing"
                and a["labels"].get("node") == "node2"
                and a["status"] == "firing"
            ]

        got = wait_for("the alert at the webhook", delivered, 90)
        assert got[0]["labels"]["cluster"] == "gflab" and got[0]["labels"]["component"] == "gpuforge"
        assert not [a for a in webhook.alerts() if a["labels"].get("node") in ("node1", "node3")
                    and a["labels"].get("alertname") == "GpuforgeCheckFailing"]  # fmt: skip

        # With an alert firing, a failing check, a held job and a drained node, every dashboard panel
        # whose series the lab has returns data from the lab's Prometheus.
        dashboards_answer_in_the_lab(lab_cluster)
    finally:
        lab_cluster.ssh("node3", "scontrol update NodeName=node3 State=RESUME", check=False)
        lab_cluster.ssh("node1", "scancel --name=gpuforge-dashboard-test", check=False)
        lab_cluster.ssh("node2", "systemctl start munge", check=False)


#: Series the lab cannot have, with why. Their panels must still parse and run; their result is empty.
NO_DATA_IN_THE_LAB = {
    "DCGM_FI_": "no GPU, so no dcgm-exporter target",
    "node_filesystem_": "the lab nodes' / is overlayfs, which node-exporter leaves out by default (fs-types-exclude)",
}


def dashboards_answer_in_the_lab(cluster: LabCluster) -> None:
    cluster.ssh(
        "node1",
        'su alice -c "sbatch --parsable --chdir=/tmp --hold -A research --job-name=gpuforge-dashboard-test '
        "--wrap 'sleep 600'\"",
    )
    cluster.ssh(
        "node1",
        'su alice -c "sbatch --parsable --chdir=/tmp -w node1 -A research --job-name=gpuforge-dashboard-test '
        "--wrap 'sleep 600'\"",
    )
    cluster.ssh("node1", "scontrol update NodeName=node3 State=DRAIN Reason='dashboard test'")

    wanted = (
        'gpuforge_slurm_jobs{state="pending"} > 0',
        'gpuforge_slurm_jobs{state="running"} > 0',
        'gpuforge_slurm_node_state{state="drain"} == 1',
    )
    missing: list[str] = list(wanted)

    def queue_seen() -> bool:
        missing[:] = [q for q in wanted if not query(cluster, "/api/v1/query", query=q)["result"]]
        return not missing

    try:
        wait_for("a held job, a running job and a drained node in the Slurm collector's series", queue_seen, 120)
    except AssertionError as e:  # say what was missing and what Slurm itself said
        jobs = query(cluster, "/api/v1/query", query="gpuforge_slurm_jobs")["result"]
        squeue = cluster.ssh("node1", "squeue -h -o '%i %T %r %N'; sinfo -h -N -o '%N %T %E'", check=False)
        raise AssertionError(f"{e}\nmissing: {missing}\ngpuforge_slurm_jobs: {jobs}\nslurm:\n{squeue}") from None
    queries = dashboard_queries(load_spec(REPO / "inventories" / "lab.yaml"))
    assert len(queries) >= 20
    empty = []
    for name, expr in queries:
        result = query(cluster, "/api/v1/query", query=expr)["result"]
        why = next((reason for prefix, reason in NO_DATA_IN_THE_LAB.items() if prefix in expr), None)
        if why is not None:
            assert result == [], f"{name}: {expr} has data in the lab, which cannot have it ({why}): {result}"
        elif not result:
            empty.append(f"{name}: {expr}")
    assert not empty, "dashboard panels without data in the lab:\n" + "\n".join(empty)
