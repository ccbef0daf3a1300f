#!/usr/bin/python3
"""Attach + detach cycles over HTTP against a dev server (issue 4's benchmark).

    bench/attach_bench.py [--binary build/release/floatplane] [--cycles 300] [--data-dir DIR]

Starts `floatplane server --dev` on a fresh data directory (in-process simulated agents),
creates one running instance and one floating IP per client, then for 1 and 16 concurrent
clients runs attach + detach cycles (each client its own keep-alive connection and its own IP
and instance). Prints cycles/s, attach and detach latency p50/p99, durable commits per attach
and per detach (from the server's /metrics), and, on the same disk, the raw rate of
single-row durable commits (SQLite WAL, synchronous=FULL: one sync per commit, the
machine's limit). Also prints write-ahead log syncs per cycle: under concurrency one sync
covers several commits (group commit).
"""

import argparse
import http.client
import json
import os
import re
import sqlite3
import subprocess
import tempfile
import threading
import time


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


class Client:
    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, json.dumps(body) if body is not None else None,
                          self.headers)
        reply = self.conn.getresponse()
        data = reply.read()
        return reply.status, (json.loads(data) if data else None)


def metrics(port):
    """(durable commits, write-ahead log syncs) so far."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    return (int(re.search(r"floatplane_durable_commits_total (\d+)", text).group(1)),
            int(re.search(r"floatplane_log_syncs_total (\d+)", text).group(1)))


def raw_commit_rate(directory, seconds=3.0):
    path = os.path.join(directory, "raw-commits.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    n, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (v) VALUES ('x')")
        db.execute("COMMIT")
        n += 1
    return n / (time.monotonic() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/release/floatplane")
    parser.add_argument("--cycles", type=int, default=300, help="cycles per client count")
    parser.add_argument("--data-dir", default=None, help="default: a new temporary directory")
    args = parser.parse_args()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="floatplane-bench-")
    server = subprocess.Popen([args.binary, "server", "--dev", "--data-dir", data_dir,
                               "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        token = open(os.path.join(data_dir, "admin-token")).read().strip()
        admin = Client(port, token)
        assert admin.call("POST", "/v1/system/ip-pools", {"name": "bench", "description": ""})[0] == 201
        assert admin.call("POST", "/v1/system/ip-pools/bench/ranges/add",
                          {"first": "10.0.0.0", "last": "10.0.3.255"})[0] == 201
        assert admin.call("POST", "/v1/system/ip-pools/bench/silos",
                          {"silo": "default", "is_default": True})[0] == 201
        assert admin.call("POST", "/v1/projects", {"name": "bench", "description": ""})[0] == 201
        pairs = []
        for k in range(16):
            status, vm = admin.call("POST", "/v1/instances?project=bench",
                                    {"name": f"vm-{k}", "description": "", "hostname": f"vm-{k}",
                                     "ncpus": 1, "memory": 1 << 30})
            assert status == 201, vm
            status, fip = admin.call("POST", "/v1/floating-ips?project=bench",
                                     {"name": f"fip-{k}", "description": ""})
            assert status == 201, fip
            pairs.append((vm["id"], fip["id"]))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [admin.call("GET", f"/v1/instances/{vm}")[1]["run_state"] for vm, _ in pairs]
            if all(s == "running" for s in states):
                break
            time.sleep(0.05)

        print(f"raw single-row durable commits on this disk: {raw_commit_rate(data_dir):.0f}/s")
        for clients in (1, 16):
            per_client = max(1, args.cycles // clients)
            attach_ms, detach_ms = [], []
            lock = threading.Lock()

            def run(k):
                c = Client(port, token)
                vm, fip = pairs[k]
                for _ in range(per_client):
                    t0 = time.monotonic()
                    s, body = c.call("POST", f"/v1/floating-ips/{fip}/attach",
                                     {"kind": "instance", "parent": vm})
                    t1 = time.monotonic()
                    assert s == 202, body
                    s, body = c.call("POST", f"/v1/floating-ips/{fip}/detach")
                    t2 = time.monotonic()
                    assert s == 202, body
                    with lock:
                        attach_ms.append((t1 - t0) * 1000)
                        detach_ms.append((t2 - t1) * 1000)

            commits_before, syncs_before = metrics(port)
            start = time.monotonic()
            threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - start
            cycles = clients * per_client
            commits_after, syncs_after = metrics(port)
            per_cycle = (commits_after - commits_before) / cycles
            syncs_per_cycle = (syncs_after - syncs_before) / cycles
            print(f"{clients:2d} client(s): {cycles} cycles in {elapsed:.2f} s = "
                  f"{cycles / elapsed:.0f} cycles/s; attach p50 {percentile(attach_ms, .5):.2f} ms "
                  f"p99 {percentile(attach_ms, .99):.2f} ms; detach p50 "
                  f"{percentile(detach_ms, .5):.2f} ms p99 {percentile(detach_ms, .99):.2f} ms; "
                  f"durable commits per cycle {per_cycle:.2f} (log syncs {syncs_per_cycle:.2f})")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
