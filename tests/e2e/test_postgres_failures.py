"""PostgreSQL itself failing under load (issue 12, item 6), with real processes: two floatplane
servers on a cluster of the test's own (scripts/pg-cluster in the test's temporary directory,
never the suite's shared cluster), sharing external simulated agents, and clients cycling
floating IPs through attach and detach on both servers. Every operation is retried with its
Idempotency-Key until the server gives a definite answer, so each one is acknowledged exactly
once and the test knows the state it must find.

1. PostgreSQL restarted (fast shutdown, start) during the load: the servers reconnect by
   themselves (no restart of theirs), the load goes on, and every acknowledged change is there.
2. Failover: a primary with a synchronous standby (synchronous_commit = on) and servers on the
   multi-host URL with target_session_attrs=read-write; the primary is SIGKILLed under load and
   the standby promoted: the servers reach the new primary by themselves and every
   acknowledged change is there.
"""

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import (expect, link, make_fip, make_instance, make_pool,
                         make_project, wait_external_ip_agreement, wait_run_state, wait_until)

pytestmark = pytest.mark.postgres_only("these tests fail PostgreSQL itself")

PG_CLUSTER = Path(__file__).resolve().parents[2] / "scripts" / "pg-cluster"
POOL = "pg-failures"
PROJECT = "pg-failures"
PAIRS = 4          # floating IP + instance pairs, cycled by one client each
ACKED_BEFORE = 3   # acknowledged operations per client before the failure
ACKED_AFTER = 3    # and after it
ANSWER_S = 60.0    # how long a client retries one operation


def pg_cluster(*args):
    completed = subprocess.run([str(PG_CLUSTER), *map(str, args)], capture_output=True,
                               text=True, timeout=120, check=False)
    assert completed.returncode == 0, (
        f"pg-cluster {' '.join(map(str, args))}: {completed.returncode}\n{completed.stderr}")
    return completed.stdout.strip()


def with_database(url, name):
    """`url` (postgresql://...[/db][?params]) naming database `name` instead."""
    head, _, query = url.partition("?")
    scheme, _, rest = head.partition("://")
    hosts = rest.split("/", 1)[0]
    return f"{scheme}://{hosts}/{name}" + (f"?{query}" if query else "")


@pytest.fixture
def own_cluster():
    """Requested before start_rack/start_server, so that it stops after the servers.
    Factory: own_cluster(standby=False) -> URL of a fresh cluster of this test (primary with
    a synchronous standby if asked: the multi-host URL), holding database `fp`. Stopped at
    teardown."""
    dirs = []
    # Not under pytest's tmp_path: its parents are private to root, and PostgreSQL runs as the
    # postgres user. On tmpfs where there is room (scripts/pg-cluster tmpdir).
    root = Path(pg_cluster("tmpdir", "floatplane-pg"))

    def start(standby=False):
        primary = root / "primary"
        dirs.append(primary)
        args = ["start", primary]
        if standby:
            dirs.append(root / "standby")
            args += ["--sync-standby", root / "standby"]
        url = pg_cluster(*args)
        subprocess.run(["/usr/bin/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d",
                        pg_cluster("url", primary), "-c", "CREATE DATABASE fp"],
                       check=True, capture_output=True, timeout=60)
        return with_database(url, "fp"), primary, (root / "standby" if standby else None)

    yield start
    for d in dirs:
        subprocess.run([str(PG_CLUSTER), "stop", str(d)], capture_output=True, timeout=120,
                       check=False)
    shutil.rmtree(root, ignore_errors=True)


class Cycler:
    """One client cycling one floating IP through attach to its instance and detach, through
    one server; `acked` lists the operations the server acknowledged, in order."""

    def __init__(self, server, fip_id, instance_id):
        self.server = server
        self.fip_id = fip_id
        self.instance_id = instance_id
        self.acked = []
        self.unexpected = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _answer(self, op):
        """Sends `op` until a definite answer, always with the same Idempotency-Key."""
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        deadline = time.monotonic() + ANSWER_S
        while True:
            api = self.server.admin
            try:
                if op == "attach":
                    reply = api.post(f"/v1/floating-ips/{self.fip_id}/attach",
                                     {"kind": "instance", "parent": self.instance_id},
                                     headers=headers)
                else:
                    reply = api.post(f"/v1/floating-ips/{self.fip_id}/detach", headers=headers)
            except AssertionError:  # no HTTP response
                reply = None
            if reply is not None and reply.status != 503:
                return reply
            if time.monotonic() > deadline:
                return reply
            time.sleep(0.1)

    def _run(self):
        op = "attach"
        while not self.stop.is_set():
            reply = self._answer(op)
            if reply is not None and reply.status == 202:
                self.acked.append(op)
                op = "detach" if op == "attach" else "attach"
            else:
                self.unexpected.append(
                    (op, None if reply is None else (reply.status, reply.body)))
                return

    def expected_holder(self):
        if not self.acked:
            return None
        return self.instance_id if self.acked[-1] == "attach" else None


def start_pair(start_rack, start_server, url):
    """Two servers on `url` sharing a switch agent and two sled agents; returns (rack,
    servers)."""
    lease = ["--lease-ttl-ms", "2000", "--lease-grace-ms", "500"]
    rack = start_rack(server_args=lease, database_url=url)
    second = start_server(extra_args=[*rack.dataplane_args, *lease], database_of=rack.server,
                          database_url=url)
    return rack, [rack.server, second]


def load(rack, servers):
    admin = rack.admin
    make_pool(admin, POOL, "10.40.0.0", "10.40.0.63")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    cyclers = []
    for k in range(PAIRS):
        vm = make_instance(admin, PROJECT, f"vm-{k}")
        fip = make_fip(admin, PROJECT, f"fip-{k}")
        wait_run_state(admin, vm["id"], "running", timeout=20.0)
        cyclers.append(Cycler(servers[k % len(servers)], fip["id"], vm["id"]))
    for c in cyclers:
        c.thread.start()
    return cyclers


def wait_acked(cyclers, at_least, what):
    def enough():
        for c in cyclers:
            assert not c.unexpected, f"a client got an indefinite answer: {c.unexpected}"
        return all(len(c.acked) >= at_least for c in cyclers)

    wait_until(enough, 90.0, what)


def finish_and_check(rack, cyclers):
    for c in cyclers:
        c.stop.set()
    for c in cyclers:
        c.thread.join(ANSWER_S + 10)
        assert not c.thread.is_alive()
        assert not c.unexpected, f"a client got an indefinite answer: {c.unexpected}"
    # Every acknowledged change is there: each floating IP is where its last acknowledged
    # operation put it.
    for c in cyclers:
        fip = expect(rack.admin.get(f"/v1/floating-ips/{c.fip_id}"), 200)
        assert fip["instance_id"] == c.expected_holder(), (
            f"floating IP {c.fip_id}: acknowledged {c.acked}, database says instance "
            f"{fip['instance_id']}")
    wait_external_ip_agreement(rack, [PROJECT], timeout=30.0)


def test_postgres_restarted_under_load_loses_no_acknowledged_change(own_cluster, start_rack,
                                                                    start_server):
    url, primary, _ = own_cluster()
    rack, servers = start_pair(start_rack, start_server, url)
    cyclers = load(rack, servers)
    wait_acked(cyclers, ACKED_BEFORE, "acknowledged operations before the restart")
    before = sum(len(c.acked) for c in cyclers)

    pg_cluster("stop", primary)
    pg_cluster("start", primary)

    wait_acked(cyclers, ACKED_BEFORE + ACKED_AFTER, "acknowledged operations after the restart")
    assert sum(len(c.acked) for c in cyclers) > before
    for server in servers:
        assert server.process.poll() is None, "a server died with the database"
    finish_and_check(rack, cyclers)


def test_failover_to_a_synchronous_standby_loses_no_acknowledged_change(own_cluster, start_rack,
                                                                        start_server):
    url, primary, standby = own_cluster(standby=True)
    assert "target_session_attrs=read-write" in url and url.count(",") == 1, url
    rack, servers = start_pair(start_rack, start_server, url)
    cyclers = load(rack, servers)
    wait_acked(cyclers, ACKED_BEFORE, "acknowledged operations before the failover")

    os.kill(int(pg_cluster("pid", primary)), signal.SIGKILL)
    pg_cluster("promote", standby)

    wait_acked(cyclers, ACKED_BEFORE + ACKED_AFTER, "acknowledged operations after the failover")
    for server in servers:
        assert server.process.poll() is None, "a server died with the primary"
    finish_and_check(rack, cyclers)
