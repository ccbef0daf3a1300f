"""Idempotency-Key across crashes (issue 10, defect 2; product.md difference 13): a key's
record commits in the same transaction as the request's effect (for a saga, in the saga's own
commits), so a retry after a SIGKILL at any instant gets the original answer, replayed, or runs
the request exactly once if it never committed; two requests under one key in flight at once
never both run.

- 400 concurrent keyed floating-IP creates and a real SIGKILL of the server while some have
  committed and none has been answered (a slow-disk test fault holds the answers back), then
  every key retried: each committed create is replayed with its row's id, each other one
  creates its IP once.
- Keyed saga-driven operations (attach, detach, instance create) killed by the saga fault plan
  right after a node: the retry gets the saga's answer, replayed, never 503 for long and never
  a second effect.
- Two requests with one key in flight (the first held by a hung sled agent): the second gets
  503 with Retry-After; a kill while the first is in flight leaves a retry that gets the
  answer once its saga is recovered.
"""

import http.client
import json
import signal
import threading
import time

import pytest

from e2e_helpers import (assert_retry_later, expect, link, list_all, list_sagas, make_instance,
                         make_pool, make_project, metric, wait_run_state, wait_sagas_settled,
                         wait_until)

CREATES = 400
LATE = 100  # of which sent once the others committed: they are in flight, never committed
# Creates committed (by the server's commit counter) before the late ones are sent.
COMMITS_FIRST = 40
# The slow disk: each sync of the log takes this long, so committed creates stay unanswered and
# a request arriving after a commit waits in its first read (which answers only what is
# durable) until the kill.
SYNC_DELAY_MS = 500


def keyed(key):
    return {"Idempotency-Key": key}


def raw_post(port, token, path, body, key, sent=None):
    """One POST on its own connection; (status, body, headers) or None if the server gave no
    answer (it was killed). `sent` is called once the request is written."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=json.dumps(body),
                           headers={"Authorization": f"Bearer {token}",
                                    "Content-Type": "application/json", **keyed(key)})
        if sent:
            sent()
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null"), response.headers
    except (ConnectionError, http.client.HTTPException, OSError):
        return None
    finally:
        connection.close()


@pytest.mark.sqlite_only("the slow-disk fault (FLOATPLANE_TEST_SYNC_DELAY_MS) delays SQLite's "
                        "group-commit sync; PostgreSQL commits have no such hook")
def test_keyed_floating_ip_creates_killed_mid_burst_are_each_done_once(start_server):
    server = start_server(extra_args=["--enable-test-faults"],
                          env={"FLOATPLANE_TEST_SYNC_DELAY_MS": str(SYNC_DELAY_MS)})
    admin = server.admin
    make_pool(admin, "burst-pool", "10.128.0.1", "10.128.3.254")
    link(admin, "burst-pool", default=True)
    make_project(admin, "burst")
    path = "/v1/floating-ips?project=burst"
    names = [f"fip-{i}" for i in range(CREATES)]
    keys = {name: f"create-{name}" for name in names}
    bodies = {name: {"name": name, "description": "burst"} for name in names}

    # The burst: every create on its own connection, the first ones released at once, the late
    # ones once some creates committed; the kill once the late ones are sent.
    port, token = server.port, server.admin_token
    answers = {}
    early, late = names[:CREATES - LATE], names[CREATES - LATE:]
    barriers = {"early": threading.Barrier(len(early) + 1), "late": threading.Barrier(LATE + 1)}
    sent = threading.Semaphore(0)

    def create(name, wave):
        barriers[wave].wait(30)
        answers[name] = raw_post(port, token, path, bodies[name], keys[name],
                                 sent.release if wave == "late" else None)

    threads = [threading.Thread(target=create, args=(name, wave), daemon=True)
               for wave, group in (("early", early), ("late", late)) for name in group]
    for thread in threads:
        thread.start()
    baseline = metric(server, "floatplane_durable_commits_total")
    barriers["early"].wait(30)
    wait_until(lambda: metric(server, "floatplane_durable_commits_total")
               >= baseline + COMMITS_FIRST, 20.0, f"{COMMITS_FIRST} commits", interval=0.002)
    barriers["late"].wait(30)
    for _ in late:
        assert sent.acquire(timeout=10), "a late create was not sent"
    server.process.send_signal(signal.SIGKILL)  # the real process, mid-burst
    assert server.wait_for_exit() == -signal.SIGKILL
    for thread in threads:
        thread.join(30)
    answered = {name: a for name, a in answers.items() if a is not None}

    server.env = {}  # the same data dir, a healthy disk
    server.start()
    admin = server.admin
    listed = {f["name"]: f for f in list_all(admin, "/v1/floating-ips", project="burst")}
    assert set(listed) <= set(names), sorted(set(listed) - set(names))

    # Every key, retried: the committed ones replay, the others run once now.
    problems = []
    committed_unanswered = [n for n in listed if n not in answered]
    for name in names:
        reply = raw_post(server.port, server.admin_token, path, bodies[name], keys[name])
        assert reply is not None, f"{name}: no answer after the restart"
        status, body, headers = reply
        replayed = headers.get("idempotent-replayed") == "true"
        if name in listed:
            if status != 201 or not replayed or body.get("id") != listed[name]["id"]:
                problems.append(f"{name} committed as {listed[name]['id']}; the retry got "
                                f"{status} replayed={replayed} {body}")
            elif name in answered and answered[name][1] != body:
                problems.append(f"{name}: first answer {answered[name]}, replay {body}")
        elif status != 201 or replayed:
            problems.append(f"{name} never committed; the retry got {status} "
                            f"replayed={replayed} {body}")
    assert not problems, f"{len(problems)} keys wrong, e.g.:\n" + "\n".join(problems[:10])

    after = [f["name"] for f in list_all(admin, "/v1/floating-ips", project="burst")]
    assert sorted(after) == sorted(names), "each name exactly once"
    # Not vacuous: the kill landed between commits and their answers, and before some creates
    # ran at all.
    assert committed_unanswered, (
        f"no create committed without its answer: {len(listed)} committed, "
        f"{len(answered)} answered")
    assert not set(late) & set(listed), "a create sent after the first commits committed"


# ---------------------------------------------------------------------------------------------
# Saga-driven keyed operations killed after a node

POOL, POOL_FIRST, POOL_LAST = "idem-saga-pool", "198.51.100.40", "198.51.100.47"
PROJECT = "idem-saga"
RECOVER_S = 15.0  # a restarted server may answer 503 while it recovers the saga


def prepare(rack):
    make_pool(rack.admin, POOL, POOL_FIRST, POOL_LAST)
    link(rack.admin, POOL, default=True)
    make_project(rack.admin, PROJECT)


def keyed_post(client, path, body, key, params=None):
    """POST with an Idempotency-Key; `body` None sends none."""
    if body is None:
        return client.post(path, params=params, headers=keyed(key))
    return client.post(path, body, params=params, headers=keyed(key))


def retry_until_answered(server, send, timeout=RECOVER_S):
    """Sends `send(admin)` until it is not a 503 (which must carry Retry-After); returns it."""
    last = {}

    def attempt():
        reply = send(server.admin)
        last["reply"] = reply
        if reply.status == 503:
            assert_retry_later(reply)
            return None
        return reply

    return wait_until(attempt, timeout, "an answer other than 503", interval=0.1,
                      describe=lambda: f"last: {last.get('reply')}")


def saga_count(admin, name):
    return sum(1 for s in list_sagas(admin) if s["name"] == name)


def fip_body(name):
    return {"name": name, "description": ""}


class Scene:
    """A running instance and a floating IP in the saga test's project."""

    def __init__(self, rack):
        admin = rack.admin
        self.instance = make_instance(admin, PROJECT, "idem-vm")
        wait_run_state(admin, self.instance["id"], "running")
        self.fip = expect(admin.post("/v1/floating-ips", fip_body("idem-fip"),
                                     params={"project": PROJECT}), 201)

    def attach(self, key):
        body = {"kind": "instance", "parent": self.instance["id"]}
        return lambda admin: keyed_post(admin, f"/v1/floating-ips/{self.fip['id']}/attach",
                                        body, key)

    def detach(self, key):
        return lambda admin: keyed_post(admin, f"/v1/floating-ips/{self.fip['id']}/detach",
                                        None, key)

    def ephemeral(self, key):
        return lambda admin: keyed_post(
            admin, f"/v1/instances/{self.instance['id']}/external-ips/ephemeral", {}, key)

    def ephemeral_detach(self, key):
        return lambda admin: admin.delete(
            f"/v1/instances/{self.instance['id']}/external-ips/ephemeral", headers=keyed(key))

    def instance_delete(self, key):
        return lambda admin: admin.delete(f"/v1/instances/{self.instance['id']}",
                                          headers=keyed(key))


def create_vm(key):
    body = {"name": "idem-new", "description": "", "hostname": "idem-new", "ncpus": 1,
            "memory": 1 << 30, "start": False}
    return lambda admin: keyed_post(admin, "/v1/instances", body, key, params={"project": PROJECT})


# (operation, saga, node after which the server dies, expected status)
SAGA_CASES = {
    "attach-after-begin": ("attach", "ip_attach", 0, 202),
    "attach-after-complete": ("attach", "ip_attach", 2, 202),
    "detach-after-complete": ("detach", "ip_detach", 2, 202),
    "ephemeral-after-complete": ("ephemeral", "ip_attach", 2, 202),
    "ephemeral-detach-after-complete": ("ephemeral_detach", "ip_detach", 2, 204),
    "instance-delete-after-record": ("instance_delete", "instance_delete", 0, 204),
    "create-after-record": ("create", "instance_create", 0, 201),
    "create-after-finish": ("create", "instance_create", 2, 201),
}


@pytest.mark.sampled_on_postgres("case")
@pytest.mark.parametrize("case", SAGA_CASES, ids=SAGA_CASES)
def test_keyed_saga_operation_killed_after_a_node_is_replayed_after_restart(start_rack, case):
    op, saga, node, status = SAGA_CASES[case]
    rack = start_rack(server_args=["--enable-test-faults"],
                      env={"FLOATPLANE_TEST_SAGA_FAULTS":
                           json.dumps({"saga": saga, "exit_after_node": node})})
    prepare(rack)
    # The fault plan kills every instance_create saga: an instance create case needs no other.
    scene = None if op == "create" else Scene(rack)
    if op == "detach":
        expect(scene.attach("setup")(rack.admin), 202)
    elif op == "ephemeral_detach":
        expect(scene.ephemeral("setup")(rack.admin), 202)
    elif op == "instance_delete":
        expect(rack.admin.post(f"/v1/instances/{scene.instance['id']}/stop"), 202)
        wait_run_state(rack.admin, scene.instance["id"], "stopped")
    send = create_vm(case) if op == "create" else getattr(scene, op)(case)
    before = saga_count(rack.admin, saga)

    with pytest.raises(AssertionError, match="no HTTP response"):
        send(rack.admin)
    assert rack.server.wait_for_exit() == -signal.SIGKILL
    rack.restart_server()

    reply = retry_until_answered(rack.server, send)
    assert reply.status == status, reply
    assert reply.headers.get("idempotent-replayed") == "true", (reply, dict(reply.headers))
    again = send(rack.admin)
    assert (again.status, again.body) == (reply.status, reply.body), (reply, again)
    assert again.headers.get("idempotent-replayed") == "true"
    admin = rack.admin
    wait_sagas_settled(admin)
    assert saga_count(admin, saga) == before + 1, "the operation ran once"
    if op == "create":
        listed = [i for i in list_all(admin, "/v1/instances", project=PROJECT)
                  if i["name"] == "idem-new"]
        assert [i["id"] for i in listed] == [reply.body["id"]], (listed, reply.body)
        assert reply.body == listed[0], "the answer is the instance as created"
        return
    if op == "instance_delete":
        assert "idem-vm" not in [i["name"] for i in list_all(admin, "/v1/instances",
                                                            project=PROJECT)]
        return
    ips = expect(admin.get(f"/v1/instances/{scene.instance['id']}/external-ips"), 200)["items"]
    kinds = sorted(i["kind"] for i in ips)
    if op == "attach":
        assert reply.body["id"] == scene.fip["id"]
        assert reply.body["instance_id"] == scene.instance["id"], reply.body
        assert kinds == ["floating", "snat"], ips
    elif op in ("detach", "ephemeral_detach"):
        if op == "detach":
            assert reply.body["id"] == scene.fip["id"] and reply.body.get("instance_id") is None
        assert kinds == ["snat"], ips
    else:
        assert reply.body["kind"] == "ephemeral"
        assert kinds == ["ephemeral", "snat"], ips
        assert [i["ip"] for i in ips if i["kind"] == "ephemeral"] == [reply.body["ip"]]


def test_keyed_instance_create_replays_the_created_row_after_a_crash_and_a_delete(start_rack):
    # The replay comes from what the create saga committed, not from a read of the instance.
    rack = start_rack(server_args=["--enable-test-faults"],
                      env={"FLOATPLANE_TEST_SAGA_FAULTS":
                           json.dumps({"saga": "instance_create", "exit_after_node": 2})})
    prepare(rack)
    send = create_vm("create-then-delete")
    with pytest.raises(AssertionError, match="no HTTP response"):
        send(rack.admin)
    assert rack.server.wait_for_exit() == -signal.SIGKILL
    rack.restart_server()
    [created] = [i for i in list_all(rack.admin, "/v1/instances", project=PROJECT)
                 if i["name"] == "idem-new"]
    expect(rack.admin.delete(f"/v1/instances/{created['id']}"), 204)
    reply = send(rack.admin)
    assert (reply.status, reply.body) == (201, created), reply
    assert reply.headers.get("idempotent-replayed") == "true"
    assert "idem-new" not in [i["name"] for i in list_all(rack.admin, "/v1/instances",
                                                         project=PROJECT)]


def test_keyed_create_with_start_killed_before_its_start_starts_it_on_retry(start_rack):
    # The server dies after the create saga, before the start saga the request also asked for:
    # the retry must not answer "stopped" for good, but do the start, as the request would have.
    rack = start_rack(server_args=["--enable-test-faults"],
                      env={"FLOATPLANE_TEST_SAGA_FAULTS":
                           json.dumps({"saga": "instance_create", "exit_after_node": 2})})
    prepare(rack)
    body = {"name": "idem-up", "description": "", "hostname": "idem-up", "ncpus": 1,
            "memory": 1 << 30, "start": True}
    send = lambda admin: keyed_post(admin, "/v1/instances", body, "create-and-start",
                                    params={"project": PROJECT})
    with pytest.raises(AssertionError, match="no HTTP response"):
        send(rack.admin)
    assert rack.server.wait_for_exit() == -signal.SIGKILL
    rack.restart_server()
    [created] = [i for i in list_all(rack.admin, "/v1/instances", project=PROJECT)
                 if i["name"] == "idem-up"]
    assert created["run_state"] == "stopped", created  # the crash left it unstarted
    starts = saga_count(rack.admin, "instance_start")

    reply = retry_until_answered(rack.server, send)
    assert reply.status == 201, reply
    assert reply.headers.get("idempotent-replayed") == "true"
    assert reply.body["id"] == created["id"]
    assert reply.body["run_state"] in ("starting", "running"), reply.body
    wait_run_state(rack.admin, created["id"], "running")
    # Started once: a further retry answers from the record and starts nothing.
    again = send(rack.admin)
    assert (again.status, again.body) == (reply.status, reply.body), (reply, again)
    wait_sagas_settled(rack.admin)
    assert saga_count(rack.admin, "instance_start") == starts + 1


# ---------------------------------------------------------------------------------------------
# One key, two requests in flight; keys on attach, detach and instance create

def test_second_request_under_a_key_in_flight_is_503_and_a_kill_leaves_the_answer(start_rack):
    # A long agent timeout: the first attach stays in flight while the sled agent holds it.
    rack = start_rack(server_args=["--agent-timeout-ms", "20000"])
    prepare(rack)
    scene = Scene(rack)
    [(sled_id, _)] = [(s, vm) for s, vm in rack.vms(scene.instance["id"])]
    sled = rack.agent_by_id[sled_id]
    sled.add_fault("PUT /instances/*/external-ips/*", hang=True)
    first = scene.attach("overlap")
    started = threading.Thread(target=lambda: _swallow(first, rack.admin), daemon=True)
    started.start()
    wait_until(lambda: sled.faults()["held_calls"] == 1, 10.0, "the first attach at the sled")

    began = time.monotonic()
    second = first(rack.admin)
    assert time.monotonic() - began < 2.0, "the second request must not wait for the first"
    assert_retry_later(second, "overlap")
    assert sled.faults()["held_calls"] == 1, "the second request must not run"

    # The server dies with the first request in flight (its saga began); the agent recovers.
    rack.server.stop(signal.SIGKILL)
    rack.server.wait_for_exit()
    sled.clear_faults()
    started.join(10)
    rack.restart_server()
    reply = retry_until_answered(rack.server, scene.attach("overlap"))
    assert reply.status == 202, reply
    assert reply.headers.get("idempotent-replayed") == "true"
    assert reply.body["instance_id"] == scene.instance["id"], reply.body
    wait_sagas_settled(rack.admin)
    assert saga_count(rack.admin, "ip_attach") == 1

    # Keyed detach and instance create, answered normally, replay the same answer once.
    for send, status, saga in [(scene.detach("detach-key"), 202, "ip_detach"),
                               (create_vm("create-key"), 201, "instance_create")]:
        before = saga_count(rack.admin, saga)
        answer = send(rack.admin)
        assert answer.status == status, answer
        assert answer.headers.get("idempotent-replayed") is None
        replay = send(rack.admin)
        assert (replay.status, replay.body) == (answer.status, answer.body)
        assert replay.headers.get("idempotent-replayed") == "true"
        assert saga_count(rack.admin, saga) == before + 1
    assert [i["name"] for i in list_all(rack.admin, "/v1/instances", project=PROJECT)].count(
        "idem-new") == 1


def test_second_keyed_stop_in_flight_is_503_and_never_reaches_the_sled(start_rack):
    # A stop calls the sled before it writes anything: only the server's memory knows the key
    # is in flight.
    rack = start_rack(server_args=["--agent-timeout-ms", "20000"])
    prepare(rack)
    scene = Scene(rack)
    [(sled_id, _)] = rack.vms(scene.instance["id"])
    sled = rack.agent_by_id[sled_id]
    sled.add_fault("POST /instances/*/stop", hang=True)
    stop = lambda admin: keyed_post(  # noqa: E731
        admin, f"/v1/instances/{scene.instance['id']}/stop", None, "stop-key")
    first = {}
    thread = threading.Thread(target=lambda: first.setdefault("reply", stop(rack.admin)),
                              daemon=True)
    thread.start()
    wait_until(lambda: sled.faults()["held_calls"] == 1, 10.0, "the first stop at the sled")
    assert_retry_later(stop(rack.admin), "stop-key")
    assert sled.faults()["held_calls"] == 1, "the second stop must not reach the sled"
    sled.clear_faults()
    thread.join(20)
    assert first["reply"].status == 202, first
    replay = stop(rack.admin)
    assert (replay.status, replay.body) == (202, first["reply"].body)
    assert replay.headers.get("idempotent-replayed") == "true"


def test_keyed_attach_that_unwound_with_503_runs_again_on_retry(start_rack):
    # A 5xx is not an answer to keep: the saga undid its effect, so the retry does the work.
    rack = start_rack()
    prepare(rack)
    scene = Scene(rack)
    [(sled_id, _)] = rack.vms(scene.instance["id"])
    sled = rack.agent_by_id[sled_id]
    sled.add_fault("PUT /instances/*/external-ips/*", fail_next=1)
    send = scene.attach("unwound")
    assert_retry_later(send(rack.admin))
    wait_sagas_settled(rack.admin)
    reply = send(rack.admin)
    assert reply.status == 202, reply
    assert reply.headers.get("idempotent-replayed") is None
    assert reply.body["instance_id"] == scene.instance["id"]
    assert sorted(s["state"] for s in list_sagas(rack.admin) if s["name"] == "ip_attach") == [
        "done", "unwound"]
    replay = send(rack.admin)
    assert (replay.status, replay.body) == (202, reply.body)
    assert replay.headers.get("idempotent-replayed") == "true"


def _swallow(send, admin):
    """Runs a request whose connection the test kills; its outcome does not matter."""
    try:
        send(admin)
    except AssertionError:
        pass
