"""GET /metrics while things happen (issue 15): Prometheus text whose families follow its
conventions, every known label set at zero from the start, and values that move with the
events they count: API requests by route template, sagas by outcome, NAT on each of two
switches (applied generation, lag, full reconciliation, a restarted switch reloaded), sled
reports, pool capacity and allocations. And a server that rereads its switch agents on SIGHUP.
"""

import http.client
import re
import signal
import time

from e2e_helpers import (attach_fip, expect, link, make_fip, make_instance, make_pool,
                         make_project, wait_run_state, wait_until)

POOL = "metrics-pool"
PROJECT = "metrics"
LINE = re.compile(r'^([a-z_:][a-z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-z_][a-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(server):
    """{(name, ((label, value), ...)): value} of the server's /metrics, checking the format:
    every sample belongs to a family declared by HELP and TYPE, counters end in _total."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/plain; version=0.0.4"
        text = response.read().decode()
    finally:
        connection.close()
    types = {}
    samples = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            if kind == "counter":
                assert name.endswith("_total"), f"counter {name} does not end in _total"
            else:
                assert not name.endswith("_total"), f"{kind} {name} ends in _total"
            continue
        if line.startswith("#") or not line:
            continue
        match = LINE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, _, labels, value = match.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or types.get(family) == "histogram", f"undeclared: {line!r}"
        key = (name, tuple(sorted(LABEL.findall(labels or ""))))
        assert key not in samples, f"duplicate sample {key}"
        samples[key] = float(value)
    return samples


def value(samples, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"no {name}{labels} in /metrics"
    return samples[key]


def by_label(samples, name, label):
    """{label value: sample value} of the family `name`."""
    return {dict(key[1])[label]: v for key, v in samples.items() if key[0] == name}


def test_metrics_move_with_what_happens(start_rack):
    rack = start_rack(switches=2)
    admin = rack.admin
    before = scrape(rack.server)
    # Known label sets at zero from the start.
    for saga in ("instance_create", "instance_start", "ip_attach", "ip_detach"):
        assert value(before, "floatplane_sagas_started_total", saga=saga) == 0
        assert value(before, "floatplane_sagas_finished_total", saga=saga, outcome="done") == 0
        assert value(before, "floatplane_sagas_in_flight", saga=saga) == 0
    assert value(before, "floatplane_http_request_duration_seconds_count", method="POST",
                 route="/v1/floating-ips") == 0
    [build] = [k for k in before if k[0] == "floatplane_build_info"]
    assert {"version", "revision", "api_version"} <= {label for label, _ in build[1]}
    switches = sorted(s.url for s in rack.switches)
    assert sorted(by_label(before, "floatplane_nat_switch_up", "switch")) == switches
    # Nobody waits on an idle switch.
    assert by_label(before, "floatplane_nat_switch_waiting_syncs", "switch") == \
        {s: 0 for s in switches}
    sleds = by_label(before, "floatplane_sled_up", "sled")
    assert len(sleds) == 2
    # One server: it never loses the sled-watcher lease.
    assert by_label(before, "floatplane_sled_report_calls_set_aside_total", "sled") == \
        {sled: 0 for sled in sleds}
    for outcome in ("used", "dropped"):
        assert value(before, "floatplane_nat_feed_reads_at_commit_total", outcome=outcome) == 0
    assert value(before, "floatplane_nat_pushes_without_kept_read_total") == 0

    make_pool(admin, POOL, "10.88.0.0", "10.88.0.255")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    instance = make_instance(admin, PROJECT, "vm-1")
    wait_run_state(admin, instance["id"], "running")
    fip = make_fip(admin, PROJECT, "fip-1")
    expect(attach_fip(admin, fip["id"], instance["id"]), 202)

    def settled():
        now = scrape(rack.server)
        version = value(now, "floatplane_nat_datastore_version")
        applied = by_label(now, "floatplane_nat_applied_generation", "switch")
        return now if version > 0 and set(applied.values()) == {version} else None

    after = wait_until(settled, 10, "both switches at the datastore's NAT version")
    # Requests by route template (never by path), with their latency.
    assert value(after, "floatplane_http_requests_total", method="POST",
                 route="/v1/floating-ips", status="201") == 1
    assert value(after, "floatplane_http_request_duration_seconds_count", method="POST",
                 route="/v1/floating-ips") == 1
    assert value(after, "floatplane_http_requests_total", method="POST",
                 route="/v1/floating-ips/{floating_ip}/attach", status="202") == 1
    assert not [k for k in after if k[0] == "floatplane_http_requests_total"
                and fip["id"] in dict(k[1])["route"]]
    # Write transactions: a create refused inside its transaction (the name is in use) counts
    # as refused (that it costs no sync is db/sqlite's ARefusedWriteCostsNoSync: here the
    # server's lease renewals may sync meanwhile).
    refused = value(after, "floatplane_db_transactions_total", outcome="refused")
    again = admin.post("/v1/floating-ips", {"name": "fip-1", "description": "taken"},
                       params={"project": PROJECT})
    assert again.status == 400, again.body
    now = scrape(rack.server)
    assert value(now, "floatplane_db_transactions_total", outcome="refused") == refused + 1
    assert value(now, "floatplane_db_transactions_total", outcome="committed") > 0
    assert value(now, "floatplane_db_write_batch_size_count") > 0
    # The connections the requests and loops ran on, and nobody waiting for one once idle
    # (PostgreSQL's pool opens one at a time, up to its size; SQLite's readers): the control
    # loops go on meanwhile, so a scrape may catch one of them waiting.
    assert 1 <= value(now, "floatplane_db_connections_open") <= 16 + 2
    wait_until(lambda: value(scrape(rack.server), "floatplane_db_connection_waiters") == 0, 5,
               "no transaction waiting for a database connection")
    # The process's own CPU time and context switches (getrusage, every thread) grew with the
    # work: bench_attach divides the switches by its cycles.
    assert value(now, "process_cpu_seconds_total") > value(before, "process_cpu_seconds_total")
    for kind in ("voluntary", "involuntary"):
        assert value(before, "floatplane_process_context_switches_total", kind=kind) >= 0
    assert value(now, "floatplane_process_context_switches_total", kind="voluntary") > \
        value(before, "floatplane_process_context_switches_total", kind="voluntary")
    # Sagas.
    for saga in ("instance_create", "instance_start", "ip_attach"):
        assert value(after, "floatplane_sagas_started_total", saga=saga) == 1, saga
        assert value(after, "floatplane_sagas_finished_total", saga=saga, outcome="done") == 1
        assert value(after, "floatplane_sagas_in_flight", saga=saga) == 0
    # The start and the attach pushed their changes from the feed read as their NAT steps
    # committed (on PostgreSQL right after, in the COMMIT's exchange: db::NatChangesAtCommitIn).
    assert value(after, "floatplane_nat_feed_reads_at_commit_total", outcome="used") >= 2
    assert value(after, "floatplane_nat_feed_reads_at_commit_total", outcome="dropped") == 0
    # NAT on both switches: no lag, a recent complete reconciliation.
    for switch in switches:
        assert value(after, "floatplane_nat_lag_versions", switch=switch) == 0
        assert value(after, "floatplane_nat_switch_up", switch=switch) == 1
    reconciled = wait_until(
        lambda: (lambda s: s if min(by_label(
            s, "floatplane_nat_last_full_reconcile_timestamp_seconds", "switch").values())
            > time.time() - 5 else None)(scrape(rack.server)),
        10, "a recent full reconciliation of both switches")
    # Sleds reported.
    last_reports = by_label(reconciled, "floatplane_sled_last_report_timestamp_seconds", "sled")
    assert all(t > time.time() - 60 for t in last_reports.values()), last_reports
    assert sum(by_label(reconciled, "floatplane_sled_reports_total", "sled").values()) > 2
    # Pools: 256 addresses; one floating, one SNAT address.
    assert value(reconciled, "floatplane_ip_pool_capacity_addresses", pool=POOL,
                 ip_version="v4") == 256
    assert value(reconciled, "floatplane_ip_pool_allocated_addresses", pool=POOL,
                 kind="floating") == 1
    assert value(reconciled, "floatplane_ip_pool_allocated_addresses", pool=POOL,
                 kind="snat") == 1
    assert value(reconciled, "floatplane_ip_pool_allocated_addresses", pool=POOL,
                 kind="ephemeral") == 0

    # A switch agent restarts empty: the heartbeat reloads it, and the metrics say so.
    # Counted from before the reset: a switch may already have been loaded whole once, when a
    # heartbeat found it empty just after the first NAT entry committed.
    entries = len(rack.switches[1].nat()["entries"])
    assert entries == 2  # the SNAT block and the floating IP
    counters = ("floatplane_nat_reloads_total", "floatplane_nat_switch_restarts_total")
    before = scrape(rack.server)

    def grown(s, name, url, **labels):
        return value(s, name, switch=url, **labels) - value(before, name, switch=url, **labels)

    rack.switches[1].reset()
    reloaded = wait_until(
        lambda: (lambda s: s if grown(s, counters[0], rack.switches[1].url) == 1 else None)(
            scrape(rack.server)),
        5, "the restarted switch reloaded")
    assert grown(reloaded, counters[1], rack.switches[1].url) == 1
    assert grown(reloaded, "floatplane_nat_entries_repaired_total", rack.switches[1].url,
                 kind="missing") == entries
    assert grown(reloaded, counters[0], rack.switches[0].url) == 0
    assert len(rack.switches[1].nat()["entries"]) == entries


def test_sighup_rereads_the_switch_agents_of_the_config_file(start_agent, start_server, tmp_path):
    first, second = start_agent("switch"), start_agent("switch")
    sled = start_agent("sled", "--start-delay-ms", "50")
    config = tmp_path / "floatplane.toml"
    config.write_text(f'[server]\nswitch-agent = ["{first.url}"]\nsled-agent = ["{sled.url}"]\n')
    server = start_server(extra_args=["--config", str(config)])
    admin = server.admin
    make_pool(admin, POOL, "10.89.0.0", "10.89.0.15")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    instance = make_instance(admin, PROJECT, "vm-1")
    wait_run_state(admin, instance["id"], "running")
    wait_until(lambda: len(first.nat()["entries"]) == 1, 5, "the SNAT entry on the first switch")
    assert second.nat()["entries"] == []

    # The second switch is added: it is loaded with every entry without any request.
    config.write_text(f'[server]\nswitch-agent = ["{first.url}", "{second.url}"]\n'
                      f'sled-agent = ["{sled.url}"]\n')
    server.process.send_signal(signal.SIGHUP)
    wait_until(lambda: second.nat()["entries"] == first.nat()["entries"], 5,
               "the added switch loaded")
    [record] = server.wait_for_log(lambda r: r.get("msg") == "SIGHUP: switch agents read again")
    assert record["added"] == [second.url] and record["removed"] == []

    # The first is removed: it is sent no more changes.
    config.write_text(f'[server]\nswitch-agent = ["{second.url}"]\nsled-agent = ["{sled.url}"]\n')
    server.process.send_signal(signal.SIGHUP)
    server.wait_for_log(lambda r: r.get("msg") == "SIGHUP: switch agents read again"
                        and r.get("removed") == [first.url])
    fip = make_fip(admin, PROJECT, "fip-1")
    expect(attach_fip(admin, fip["id"], instance["id"]), 202)
    assert len(second.nat()["entries"]) == 2
    assert len(first.nat()["entries"]) == 1

    # A file that does not parse changes nothing.
    config.write_text("[server\n")
    server.process.send_signal(signal.SIGHUP)
    server.wait_for_log(lambda r: r.get("msg") == "SIGHUP: cannot read the switch agents; "
                        "nothing changed")
    assert server.process.poll() is None
