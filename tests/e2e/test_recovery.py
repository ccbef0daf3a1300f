"""Saga recovery off the start path (issue 10, defect 4), with real processes: a server driving
external simulated agents, SIGKILLed (os.kill) while 16 floating-IP attaches hang on the sled
agent (`POST /faults` hang on the port's PUT), then restarted on the same data dir and agents.

- The restarted server answers at once (ping, an unrelated create) while the sled still hangs;
  the attaches resume in the background 8 at a time; a request on an address still in flux
  gets 503 with Retry-After and starts nothing; once the sled answers, every attach ends as its
  log decides (begin committed, nothing failed: done) and the three places agree.
- SIGTERM while recovery runs exits cleanly; the next start finishes what was left, each saga
  as its log at the SIGTERM decides (running: done; unwinding: unwound).
- A stop of an instance whose start saga has not registered its VM yet (interrupted after its
  NAT node, resumed but held by the sled) is refused as retryable; the start then completes.
- A saga whose log cannot be resumed (a corrupt DAG) is marked stuck and reported, and the
  server serves.
"""

import json
import os
import signal
import time

import pytest

from e2e_helpers import (Background, assert_retry_later, attach_fip, create_instance, detach_fip,
                         expect, instance_action, link, list_sagas, make_fip, make_instance,
                         make_pool, make_project, view_instance, wait_external_ip_agreement,
                         wait_run_state, wait_until)

POOL = "recovery-pool"
PROJECT = "recovery"
ATTACHES = 16
CONCURRENCY = 8  # sagas the server resumes at once
PORT_PUT = "PUT /instances/*/external-ips/*"
# Long enough that a held call is still waiting when the test releases it: the outcome is then
# decided by the log alone, not by a timeout.
PATIENT = ("--agent-timeout-ms", "30000")


def prepare(rack):
    admin = rack.admin
    make_pool(admin, POOL, "10.88.0.0", "10.88.0.63")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    target = make_instance(admin, PROJECT, "target")["id"]
    bystander = make_instance(admin, PROJECT, "bystander")["id"]
    for instance_id in (target, bystander):
        wait_run_state(admin, instance_id, "running")
    fips = [make_fip(admin, PROJECT, f"fip-{k}")["id"] for k in range(ATTACHES)]
    [(sled_id, _)] = rack.vms(target)
    return target, bystander, fips, rack.agent_by_id[sled_id]


def held(agent):
    return agent.faults()["held_calls"]


def kill_during_attaches(rack, target, fips, sled):
    """Starts the attaches, waits until every one hangs on the sled after its first node
    committed, and SIGKILLs the server. The dead server's held calls are then released (the
    sled applies them, as a real one would) and the port hangs again for the next server."""
    sled.add_fault(PORT_PUT, hang=True)
    client = rack.admin
    calls = [Background(lambda fip=fip: attach_fip(client, fip, target)) for fip in fips]
    wait_until(lambda: held(sled) == ATTACHES, 10.0, f"{ATTACHES} attaches held by the sled",
               describe=lambda: f"{sled.faults()}\n{rack.server.describe_output()}")
    os.kill(rack.server.process.pid, signal.SIGKILL)
    assert rack.server.wait_for_exit() == -signal.SIGKILL
    for call in calls:
        with pytest.raises(AssertionError):
            call.result()  # the connection died with the server
    sled.clear_faults()
    wait_until(lambda: held(sled) == 0, 5.0, "the dead server's calls released")
    sled.add_fault(PORT_PUT, hang=True)


def timed(call):
    started = time.monotonic()
    reply = call()
    return reply, time.monotonic() - started


def attach_sagas(admin):
    return [s for s in list_sagas(admin) if s["name"] == "ip_attach"]


def test_recovery_resumes_in_the_background_while_the_server_answers(start_rack):
    rack = start_rack(server_args=PATIENT)
    target, bystander, fips, sled = prepare(rack)
    kill_during_attaches(rack, target, fips, sled)

    rack.restart_server(extra_args=PATIENT)
    admin = rack.admin
    reply, took = timed(lambda: rack.server.anonymous.get("/v1/ping"))
    assert reply.status == 200 and took < 1.0, (reply.status, took)
    reply, took = timed(lambda: admin.post("/v1/projects",
                                           {"name": "unrelated", "description": ""}))
    assert reply.status == 201 and took < 1.0, (reply.status, reply.body, took)

    # Exactly CONCURRENCY resumed attaches wait on the sled; the others wait their turn.
    wait_until(lambda: held(sled) == CONCURRENCY, 10.0, f"{CONCURRENCY} resumed attaches held",
               describe=lambda: f"{sled.faults()}\n{rack.server.describe_output()}")
    interrupted = {s["id"] for s in attach_sagas(admin)}
    assert len(interrupted) == ATTACHES
    earlier = {s["id"] for s in list_sagas(admin)}
    assert {s["state"] for s in list_sagas(admin) if s["id"] in interrupted} == {"running"}
    # Every address is still in flux, whether its saga was resumed yet or not: requests on it
    # are refused as retryable, in the first node of the saga they would open, which therefore
    # leaves no saga behind (a saga whose first database step fails is never written).
    for fip in fips:
        assert_retry_later(detach_fip(admin, fip), "being attached")
        assert_retry_later(attach_fip(admin, fip, bystander), "being attached")
    others = [s for s in list_sagas(admin) if s["id"] not in earlier]
    assert others == [], others
    assert {s["state"] for s in list_sagas(admin) if s["id"] in interrupted} == {"running"}
    assert held(sled) == CONCURRENCY

    sled.clear_faults()

    def resumed():
        states = {s["id"]: s["state"] for s in list_sagas(admin) if s["id"] in interrupted}
        return states if "running" not in states.values() else None

    # The log decides: each attach's first node had committed and nothing failed, so each
    # completes.
    states = wait_until(resumed, 20.0, "every interrupted attach at rest",
                        describe=lambda: f"{list_sagas(admin)}")
    assert set(states.values()) == {"done"}, states
    wait_external_ip_agreement(rack, [PROJECT])
    for fip in fips:
        assert expect(admin.get(f"/v1/floating-ips/{fip}"), 200)["instance_id"] == target


def saga_states_on_disk(server, name):
    """{saga id: state} of the sagas named `name`, read from the stopped server's database."""
    return dict(server.sql("SELECT id, state FROM saga WHERE name = ?", (name,)))


def test_sigterm_during_recovery_exits_cleanly_and_the_next_start_finishes(start_rack):
    # Patient until the kill: with the default agent timeout the first held attach could end
    # (and answer its client) before the last one reached the sled. The restarted server has
    # the default timeout: a held call ends within 2 s, so its shutdown is bounded by it.
    rack = start_rack(server_args=PATIENT)
    target, _, fips, sled = prepare(rack)
    kill_during_attaches(rack, target, fips, sled)

    rack.restart_server()
    wait_until(lambda: held(sled) == CONCURRENCY, 10.0, f"{CONCURRENCY} resumed attaches held",
               describe=lambda: f"{sled.faults()}\n{rack.server.describe_output()}")
    assert rack.server.stop(signal.SIGTERM) == 0, rack.server.describe_output()
    left = saga_states_on_disk(rack.server, "ip_attach")
    assert len(left) == ATTACHES
    assert set(left.values()) <= {"running", "unwinding", "unwound"}, left

    sled.clear_faults()
    rack.restart_server()
    admin = rack.admin
    wait_until(lambda: all(s["state"] not in ("running", "unwinding")
                           for s in attach_sagas(admin)), 20.0, "every attach at rest",
               describe=lambda: f"{attach_sagas(admin)}")
    # Unwinding when the server stopped: unwound; never resumed (or not yet failed): done.
    expected = {sid: ("done" if state == "running" else "unwound") for sid, state in left.items()}
    assert {s["id"]: s["state"] for s in attach_sagas(admin) if s["id"] in left} == expected
    wait_external_ip_agreement(rack, [PROJECT])


def test_a_saga_that_cannot_resume_is_marked_stuck_and_the_server_serves(start_server):
    server = start_server()
    admin = server.admin
    make_project(admin, PROJECT)
    broken = expect(admin.post("/v1/instances", {
        "name": "broken", "description": "", "hostname": "broken", "ncpus": 1,
        "memory": 1 << 30, "start": False, "network_interfaces": {"type": "none"}},
        params={"project": PROJECT}), 201)["id"]
    [saga] = [s for s in list_sagas(admin) if s["name"] == "instance_create"]
    assert server.stop(signal.SIGTERM) == 0

    server.sql("UPDATE saga SET state = 'running', dag = '{\"corrupt\": true}' WHERE id = ?",
               (saga["id"],))

    server.start()
    reply = expect(server.admin.get("/v1/ping"), 200)
    assert reply is not None
    wait_until(lambda: [s["state"] for s in list_sagas(server.admin)
                        if s["id"] == saga["id"]] == ["stuck"], 10.0, "the saga marked stuck",
               describe=lambda: f"{list_sagas(server.admin)}")
    [record] = server.wait_for_log(lambda r: r.get("saga_id") == saga["id"]
                                   and r.get("outcome") == "stuck")
    assert record["level"] == "error" and "corrupt saga DAG" in record["error"], record
    make_project(server.admin, "still-serving")
    assert expect(server.admin.get(f"/v1/instances/{broken}"), 200)["id"] == broken


def test_a_stop_before_an_interrupted_start_reaches_the_sled_is_refused(start_rack):
    faults = {"saga": "instance_start", "exit_after_node": 1}  # placed, NAT written
    rack = start_rack(server_args=[*PATIENT, "--enable-test-faults"],
                      env={"FLOATPLANE_TEST_SAGA_FAULTS": json.dumps(faults)})
    admin = rack.admin
    make_pool(admin, POOL, "10.88.0.0", "10.88.0.63")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    with pytest.raises(AssertionError, match="no HTTP response"):
        create_instance(admin, PROJECT, "interrupted")
    assert rack.server.wait_for_exit() == -signal.SIGKILL

    for agent in rack.sleds:
        agent.add_fault("PUT /instances/*", hang=True)
    rack.restart_server(extra_args=PATIENT)
    admin = rack.admin
    wait_until(lambda: sum(held(agent) for agent in rack.sleds) == 1, 10.0,
               "the resumed start held by its sled")
    [instance] = [i for i in expect(admin.get("/v1/instances", params={"project": PROJECT}),
                                    200)["items"]]
    assert instance["run_state"] == "starting", instance
    assert_retry_later(instance_action(admin, instance["id"], "stop"), "starting")
    assert view_instance(admin, instance["id"])["run_state"] == "starting"

    for agent in rack.sleds:
        agent.clear_faults()
    wait_run_state(admin, instance["id"], "running")
    assert [s["state"] for s in list_sagas(admin) if s["name"] == "instance_start"] == ["done"]
    assert len(rack.vms(instance["id"])) == 1, rack.describe()
