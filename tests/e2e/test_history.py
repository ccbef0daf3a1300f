"""Bounded saga history (issue 10, defect 6): a refused instance create writes no saga;
GET /metrics shows the saga table's row count, the database file's size and what pruning
removed; finished sagas older than --history-retention are deleted in the background."""

import http.client
import re

from e2e_helpers import (assert_error, create_instance, link, list_sagas, make_instance,
                         make_pool, make_project, wait_sagas_settled, wait_until)

PROJECT = "hist"


def metrics(server):
    """GET /metrics (no token) as {name: value} for the lines without labels."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        reply = conn.getresponse()
        text = reply.read().decode()
        assert reply.status == 200, text
    finally:
        conn.close()
    values = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+) (\d+)", line)
        if match:
            values[match.group(1)] = int(match.group(2))
    return text, values


def prepare(server):
    admin = server.admin
    make_pool(admin, "hist-pool", "198.51.100.10", "198.51.100.19")
    link(admin, "hist-pool", default=True)
    make_project(admin, PROJECT)
    return admin


def test_a_duplicate_instance_create_writes_no_saga(server):
    admin = prepare(server)
    make_instance(admin, PROJECT, "twin", start=False)
    sagas = wait_sagas_settled(admin)
    _, before = metrics(server)
    for _ in range(3):
        assert_error(create_instance(admin, PROJECT, "twin", start=False), 400,
                     "ObjectAlreadyExists", 'already exists: instance "twin"')
    assert list_sagas(admin) == sagas
    _, after = metrics(server)
    assert after["floatplane_saga_rows"] == before["floatplane_saga_rows"] == len(sagas)


def test_metrics_show_the_history_and_its_pruning(start_server):
    server = start_server(extra_args=["--history-retention", "1s",
                                      "--history-prune-interval", "1s"])
    text, first = metrics(server)
    for name, kind in [("floatplane_saga_rows", "gauge"),
                       ("floatplane_sagas_pruned_total", "counter"),
                       ("floatplane_idempotency_keys_pruned_total", "counter"),
                       ("floatplane_database_size_bytes", "gauge"),
                       ("floatplane_log_size_bytes", "gauge")]:
        assert f"# TYPE {name} {kind}\n" in text, text
        assert name in first, text
    assert first["floatplane_database_size_bytes"] > 0

    admin = prepare(server)
    make_instance(admin, PROJECT, "short-lived", start=False)
    # The create saga is counted, then pruned a second after it came to rest.
    _, grown = metrics(server)
    assert grown["floatplane_saga_rows"] >= first["floatplane_saga_rows"] + 1, grown
    pruned = wait_until(
        lambda: (lambda m: m if m["floatplane_saga_rows"] == 0 else None)(metrics(server)[1]),
        10.0, "every finished saga pruned", describe=lambda: metrics(server)[0])
    assert pruned["floatplane_sagas_pruned_total"] >= (
        first["floatplane_sagas_pruned_total"] + grown["floatplane_saga_rows"]), pruned
    assert list_sagas(admin) == []
    records = server.wait_for_log(lambda r: r.get("msg") == "history pruned")
    assert sum(r["sagas"] for r in records) >= 1, records
