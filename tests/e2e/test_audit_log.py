"""The audit log (issue 23 item 1; product.md "Operations"): GET /v1/system/audit-log in Oxide's
shape, one entry per mutating request, refused ones and failed authentications included, none
for reads; an entry commits with the effect it describes, so a SIGKILL at any instant leaves
no effect without its entry and no success entry without its effect; an entry a crash cut
short is completed at the next start as an error that says so."""

import http.client
import json
import signal
import threading

import pytest

from e2e_helpers import (QUIET_SWITCH, assert_error, expect, is_uuid, link, list_all, make_pool,
                         make_project, metric, running_vm_with_fip, wait_sagas_settled,
                         wait_switches_checked, wait_until)

EPOCH = "1970-01-01T00:00:00Z"


def audit_log(admin, **params):
    """Every completed entry, following next_page."""
    entries, token = [], None
    while True:
        query = {"limit": 50, **({"page_token": token} if token else
                                 {"start_time": EPOCH, **params})}
        page = expect(admin.get("/v1/system/audit-log", params=query), 200)
        entries += page["items"]
        token = page["next_page"]
        if not token:
            return entries


def entry_of(admin, request_id):
    found = [e for e in audit_log(admin) if e["request_id"] == request_id]
    assert len(found) == 1, f"request {request_id}: {len(found)} entries"
    return found[0]


def test_each_mutating_request_has_one_entry_in_oxides_shape(server):
    admin = server.admin
    me = expect(admin.get("/v1/me"), 200)
    created = admin.post("/v1/projects", {"name": "audited", "description": "x"},
                         headers={"User-Agent": "audit-test/1.0"})
    expect(created, 201)
    refused = admin.post("/v1/projects", {"name": "audited", "description": "again"})
    assert_error(refused, 400, "ObjectAlreadyExists")
    bad_token = admin.with_token("not-a-token").post("/v1/projects",
                                                      {"name": "nope", "description": ""})
    assert bad_token.status == 401
    reads = len(audit_log(admin))
    expect(admin.get("/v1/projects"), 200)
    expect(admin.get("/v1/projects/audited"), 200)

    entry = entry_of(admin, created.headers["x-request-id"])
    assert entry["operation_id"] == "project_create"
    assert entry["request_uri"] == "/v1/projects"
    assert entry["source_ip"] == "127.0.0.1"
    assert entry["user_agent"] == "audit-test/1.0"
    assert entry["actor"] == {"kind": "silo_user", "silo_id": me["silo_id"],
                              "silo_user_id": me["id"]}
    assert entry["auth_method"] == "access_token"
    assert entry["credential_id"] == me["id"]
    assert entry["result"] == {"kind": "success", "http_status_code": 201}
    assert is_uuid(entry["id"])
    assert entry["time_started"] <= entry["time_completed"]

    entry = entry_of(admin, refused.headers["x-request-id"])
    assert entry["result"] == {
        "kind": "error", "http_status_code": 400, "error_code": "ObjectAlreadyExists",
        "error_message": refused.body["message"]}

    entry = entry_of(admin, bad_token.headers["x-request-id"])
    assert entry["actor"] == {"kind": "unauthenticated"}
    assert entry["auth_method"] is None and entry["credential_id"] is None
    assert entry["result"]["kind"] == "error" and entry["result"]["http_status_code"] == 401
    assert entry["operation_id"] == "project_create"

    # Reads write nothing (the list itself, a GET, is not audited either).
    assert len(audit_log(admin)) == reads
    assert metric(server, 'floatplane_audit_entries_total{result="success"}') >= 1
    assert metric(server, 'floatplane_audit_entries_total{result="error"}') >= 2


def test_the_list_is_fleet_admin_only_ordered_paged_and_bounded_by_time(server):
    admin = server.admin
    for i in range(7):
        expect(admin.post("/v1/projects", {"name": f"p-{i}", "description": ""}), 201)
    everything = audit_log(admin)
    completed = [e["time_completed"] for e in everything]
    assert completed == sorted(completed)
    assert [e["id"] for e in everything] == [e["id"] for e in audit_log(admin)], "stable"
    descending = expect(admin.get("/v1/system/audit-log", params={
        "start_time": EPOCH, "sort_by": "time_and_id_descending", "limit": 1000}), 200)["items"]
    assert [e["id"] for e in descending] == [e["id"] for e in reversed(everything)]
    # start_time inclusive, end_time exclusive.
    middle = everything[3]["time_completed"]
    later = audit_log(admin, start_time=middle)
    assert later[0]["id"] == everything[3]["id"]
    earlier = expect(admin.get("/v1/system/audit-log", params={
        "start_time": EPOCH, "end_time": middle, "limit": 1000}), 200)["items"]
    assert [e["id"] for e in earlier] == [e["id"] for e in everything[:3]]
    assert_error(admin.get("/v1/system/audit-log"), 400, "InvalidRequest",
                 startswith='unable to parse query string: parameter "start_time": required')
    assert_error(admin.get("/v1/system/audit-log", params={"start_time": "yesterday"}), 400,
                 "InvalidRequest", startswith='unable to parse query string: parameter '
                                              '"start_time": expected an RFC 3339 date-time')
    token = expect(admin.post("/v1/system/tokens", {"silo": "default", "role": "silo_admin",
                                                     "name": "not-fleet"}), 201)["token"]
    assert_error(admin.with_token(token).get("/v1/system/audit-log",
                                             params={"start_time": EPOCH}), 403, "Forbidden")


def test_a_saga_request_is_completed_when_its_saga_ends(start_rack):
    rack = start_rack()
    admin = rack.admin
    vm, fip, sled = running_vm_with_fip(rack, "audit-pool", "198.51.100.70", "198.51.100.79",
                                        "audit-sagas")
    # The sled fails to program the port: the attach unwinds, and its entry says why.
    sled.add_fault("PUT /instances/*/external-ips/*", fail_next=1)
    failed = admin.post(f"/v1/floating-ips/{fip['id']}/attach",
                        {"kind": "instance", "parent": vm["id"]})
    assert failed.status == 503, failed
    wait_sagas_settled(admin)
    attached = admin.post(f"/v1/floating-ips/{fip['id']}/attach",
                          {"kind": "instance", "parent": vm["id"]})
    expect(attached, 202)
    entry = entry_of(admin, attached.headers["x-request-id"])
    assert entry["operation_id"] == "floating_ip_attach"
    assert entry["result"] == {"kind": "success", "http_status_code": 202}
    entry = entry_of(admin, failed.headers["x-request-id"])
    assert entry["result"]["kind"] == "error"
    assert entry["result"]["http_status_code"] == failed.status
    assert entry["result"]["error_message"] == failed.body["message"]


def test_the_request_id_reaches_the_agents_and_the_log_lines_about_the_request(start_rack):
    # Issue 23 item 2 (product.md "Operations"): an agent's log line about a call names the API
    # request and the saga it was made for, and so does the server's line about a step that
    # failed on the way. The heartbeat is quiet: every NAT push is a saga's.
    rack = start_rack(server_args=QUIET_SWITCH)
    wait_switches_checked(rack.server)
    admin = rack.admin
    vm, fip, sled = running_vm_with_fip(rack, "trace-pool", "198.51.100.60", "198.51.100.69",
                                        "trace")
    # The sled applies the port change and answers 503, then refuses to take it back (a
    # best-effort step, logged); the saga unwinds, its undo pushing the NAT removal.
    sled.add_fault("PUT /instances/*/external-ips/*", apply_then_fail=1)
    sled.add_fault("DELETE /instances/*/external-ips/*", fail_next=1)
    failed = admin.post(f"/v1/floating-ips/{fip['id']}/attach",
                        {"kind": "instance", "parent": vm["id"]})
    assert failed.status == 503, failed
    request_id = failed.headers["x-request-id"]
    [saga] = expect(admin.get("/v1/system/sagas", params={"request_id": request_id}),
                    200)["items"]
    caller = (request_id, saga["id"])

    def calls(agent, method, path_part):
        return [(r.get("caller_request_id"), r.get("saga_id")) for r in agent.log_records()
                if r.get("msg") == "request" and r.get("method") == method
                and path_part in r.get("path", "")]

    assert calls(sled, "PUT", "/external-ips/") == [caller]
    # The watcher may later take the address off the port itself: a call for no request.
    assert [c for c in calls(sled, "DELETE", "/external-ips/") if c[0]] == [caller]
    # The attach's push and its undo's; the instance's start pushed for its own request.
    pushes = calls(rack.switch, "POST", "/nat/changes")
    assert pushes.count(caller) == 2 and all(p[0] for p in pushes), pushes
    best_effort = [(r.get("request_id"), r.get("saga_id"), r.get("step"))
                   for r in rack.server.log_records()
                   if r.get("msg") == "best-effort saga step failed"]
    assert best_effort == [(*caller, "sled remove")], best_effort


def test_a_request_cut_short_by_a_crash_is_completed_at_the_next_start(start_rack):
    # The server dies after the create saga, before the start saga the request also asked for:
    # nothing will complete the request's entry but the next start, which says what happened.
    rack = start_rack(server_args=["--enable-test-faults"],
                      env={"FLOATPLANE_TEST_SAGA_FAULTS":
                           json.dumps({"saga": "instance_create", "exit_after_node": 2})})
    make_pool(rack.admin, "cut-pool", "198.51.100.80", "198.51.100.89")
    link(rack.admin, "cut-pool", default=True)
    make_project(rack.admin, "cut")
    body = {"name": "cut-vm", "description": "", "hostname": "cut-vm", "ncpus": 1,
            "memory": 1 << 30, "start": True}
    with pytest.raises(AssertionError, match="no HTTP response"):
        rack.admin.post("/v1/instances", body, params={"project": "cut"},
                        headers={"User-Agent": "cut-short"})
    assert rack.server.wait_for_exit() == -signal.SIGKILL
    rack.restart_server()
    [entry] = [e for e in audit_log(rack.admin) if e["user_agent"] == "cut-short"]
    assert entry["operation_id"] == "instance_create"
    assert entry["result"]["kind"] == "error", entry
    assert entry["result"]["error_message"].startswith(
        "the server stopped before this request completed"), entry


SYNC_DELAY_MS = 500
CREATES = 120
# Of which sent only once 20 commits were counted, just before the kill: in flight then, their
# first read waiting on the slow disk, they cannot all have committed, so the kill always
# cuts the burst (sent all at once, a loaded machine could commit every create first).
LATE = 20


@pytest.mark.sqlite_only("the slow-disk fault (FLOATPLANE_TEST_SYNC_DELAY_MS) delays SQLite's "
                        "group-commit sync; PostgreSQL commits have no such hook")
def test_a_kill_mid_burst_leaves_no_effect_without_its_entry_nor_the_reverse(start_server):
    server = start_server(extra_args=["--enable-test-faults"],
                          env={"FLOATPLANE_TEST_SYNC_DELAY_MS": str(SYNC_DELAY_MS)})
    admin = server.admin
    make_pool(admin, "audit-burst", "10.129.0.1", "10.129.0.254")
    link(admin, "audit-burst", default=True)
    make_project(admin, "burst")
    port, token = server.port, server.admin_token
    waves = {"early": threading.Barrier(CREATES - LATE + 1), "late": threading.Barrier(LATE + 1)}
    sent = threading.Semaphore(0)

    def create(i, wave):
        waves[wave].wait(30)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            # The user agent names the create, so that its entry can be found without its
            # answer (the kill comes between commits and answers).
            connection.request("POST", "/v1/floating-ips?project=burst",
                               body=json.dumps({"name": f"fip-{i}", "description": ""}),
                               headers={"Authorization": f"Bearer {token}",
                                        "Content-Type": "application/json",
                                        "User-Agent": f"burst/fip-{i}"})
            if wave == "late":
                sent.release()
            connection.getresponse().read()
        except (ConnectionError, http.client.HTTPException, OSError):
            pass
        finally:
            connection.close()

    threads = [threading.Thread(target=create, daemon=True,
                                args=(i, "late" if i >= CREATES - LATE else "early"))
               for i in range(CREATES)]
    for thread in threads:
        thread.start()
    baseline = metric(server, "floatplane_durable_commits_total")
    waves["early"].wait(30)
    wait_until(lambda: metric(server, "floatplane_durable_commits_total") >= baseline + 20,
               20.0, "20 commits", interval=0.002)
    waves["late"].wait(30)
    for _ in range(LATE):
        assert sent.acquire(timeout=10), "a late create was not sent"
    server.process.send_signal(signal.SIGKILL)
    assert server.wait_for_exit() == -signal.SIGKILL
    for thread in threads:
        thread.join(30)

    server.env = {}
    server.start()
    admin = server.admin
    created = {f["name"] for f in list_all(admin, "/v1/floating-ips", project="burst")}
    succeeded = {e["user_agent"].split("/", 1)[1] for e in audit_log(admin)
                 if (e["user_agent"] or "").startswith("burst/")
                 and e["result"]["kind"] == "success"}
    assert created, "no create committed before the kill"
    assert len(created) < CREATES, "every create committed before the kill: nothing was cut"
    assert created - succeeded == set(), "effects without their entries"
    assert succeeded - created == set(), "success entries without their effects"
