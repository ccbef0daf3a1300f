"""Crash recovery and agent failures with real processes (issue 3; sagas-and-reliability.md
B2, B4): the server is SIGKILLed right after each node of the instance start saga is logged and
restarted on the same data dir and the same (external, still running) agents; agents refuse,
hang, or apply and then fail during start, stop and migrate. Afterwards no saga may be left
running or stuck, and the three places must agree: the database (the API's view), the sled
agents (the VM runs iff the instance is running) and the switch agent (the SNAT entry exists
iff the instance is running).
"""

import ipaddress
import json
import signal
import time

import pytest

from e2e_helpers import (QUIET_SWITCH, assert_error, create_instance, disagreement, expect,
                         instance_action, link, make_instance, make_pool, make_project, migrate,
                         nat_keys, snat_block, utilization, view_instance, wait_agreement,
                         wait_run_state, wait_sagas_settled, wait_switches_checked, wait_until)

POOL = "crash-pool"
POOL_FIRST, POOL_LAST = "192.0.2.10", "192.0.2.13"
PROJECT = "crash"
SNAT = snat_block(POOL_FIRST, 0)  # the first instance's SNAT block on a fresh pool (§6.4)

START_SAGA_NODES = ["place", "nat", "sled", "switch"]


def prepare(rack):
    make_pool(rack.admin, POOL, POOL_FIRST, POOL_LAST)
    link(rack.admin, POOL, default=True)
    make_project(rack.admin, PROJECT)
    return rack


@pytest.fixture
def rack(start_rack):
    return prepare(start_rack())


def instance_by_name(admin, name):
    return expect(admin.get(f"/v1/instances/{name}", params={"project": PROJECT}), 200)


def saga_states(sagas):
    """{saga name: [states, newest first]}."""
    states = {}
    for saga in sagas:
        states.setdefault(saga["name"], []).append(saga["state"])
    return states


def assert_no_vm_anywhere(rack, instance_id):
    assert rack.vms(instance_id) == [], (
        f"a sled agent still has the VM\n{rack.describe()}")


def assert_unavailable_naming(reply, agent_kind, urls):
    """A 503 with Retry-After whose message names the agent (kind and address)."""
    body = assert_error(reply, 503, "ServiceNotAvailable")
    assert agent_kind in body["message"], body
    assert any(url in body["message"] for url in urls), (
        f"the message names none of {urls}: {body}")
    assert reply.headers.get("Retry-After"), f"503 without Retry-After: {dict(reply.headers)}"
    return body


def sled_urls(rack):
    return [agent.url for agent in rack.sleds]


def fault_all_sleds(rack, endpoint, **rule):
    for agent in rack.sleds:
        agent.add_fault(endpoint, **rule)


def clear_all_faults(rack):
    rack.switch.clear_faults()
    for agent in rack.sleds:
        agent.clear_faults()


def assert_usable_afterwards(rack, instance_id):
    """The instance can still be started, stopped and deleted, and its SNAT is released."""
    admin = rack.admin
    if view_instance(admin, instance_id)["run_state"] == "stopped":
        expect(instance_action(admin, instance_id, "start"), 202)
        wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    assert nat_keys(rack.nat_entries()) == [SNAT]
    expect(instance_action(admin, instance_id, "stop"), 202)
    wait_run_state(admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, SNAT)
    expect(admin.delete(f"/v1/instances/{instance_id}"), 204)
    assert utilization(admin, POOL)[1] == 4
    wait_until(lambda: rack.nat_entries() == [], 5.0, "empty NAT table", describe=rack.describe)
    wait_sagas_settled(admin)


# ---------------------------------------------------------------------------------------------
# Crash after each node of the start saga

@pytest.mark.sampled_on_postgres("node")
@pytest.mark.parametrize("node", range(len(START_SAGA_NODES)),
                         ids=[f"after-{n}" for n in START_SAGA_NODES])
def test_crash_after_start_saga_node_recovers_and_places_agree(start_rack, node):
    faults = {"saga": "instance_start", "exit_after_node": node}
    rack = prepare(start_rack(server_args=["--enable-test-faults"],
                              env={"FLOATPLANE_TEST_SAGA_FAULTS": json.dumps(faults)}))

    # The create (with start) never answers: the server kills itself mid-saga.
    with pytest.raises(AssertionError, match="no HTTP response"):
        create_instance(rack.admin, PROJECT, "crashy")
    code = rack.server.wait_for_exit()
    assert code == -signal.SIGKILL, (
        f"expected the server to die by SIGKILL, exit {code}\n{rack.server.describe_output()}")

    # Same data dir, same agents (they kept their state), no faults. Every node up to the
    # crash succeeded and the agents are healthy: recovery must finish the start, never unwind
    # it (sagas-and-reliability.md A3: forward unless the log says the saga is unwinding).
    rack.restart_server()
    admin = rack.admin
    sagas = wait_sagas_settled(admin)
    states = saga_states(sagas)
    assert states == {"instance_create": ["done"], "instance_start": ["done"]}, sagas

    instance = instance_by_name(admin, "crashy")
    view = wait_agreement(rack, instance["id"], SNAT)
    assert view["run_state"] == "running", view
    assert nat_keys(rack.nat_entries()) == [SNAT]
    [(_, vm)] = rack.vms(instance["id"])
    assert [ipaddress.ip_address(ip) for ip in vm["external_ips"]] == [SNAT[0]]
    # One SNAT address in use, nothing leaked by the re-run nodes.
    assert utilization(admin, POOL)[1] == 3
    assert_usable_afterwards(rack, instance["id"])


# ---------------------------------------------------------------------------------------------
# Agent faults during start

@pytest.mark.parametrize("via", ["create", "start"])
def test_sled_refusing_the_start_unwinds_it(rack, via):
    admin = rack.admin
    if via == "start":
        instance_id = make_instance(admin, PROJECT, "refused", start=False)["id"]
    fault_all_sleds(rack, "PUT /instances/*", fail_next=1)
    if via == "create":
        reply = create_instance(admin, PROJECT, "refused")
    else:
        reply = instance_action(admin, instance_id, "start")
    assert_unavailable_naming(reply, "sled agent", sled_urls(rack))
    clear_all_faults(rack)

    instance_id = instance_by_name(admin, "refused")["id"]
    assert view_instance(admin, instance_id)["run_state"] == "stopped"
    assert_no_vm_anywhere(rack, instance_id)
    assert rack.nat_entries() == []
    wait_agreement(rack, instance_id, SNAT)
    states = saga_states(wait_sagas_settled(admin))
    assert states == {"instance_create": ["done"], "instance_start": ["unwound"]}, states
    assert utilization(admin, POOL)[1] == 3, "the SNAT block stays with the instance"
    assert_usable_afterwards(rack, instance_id)


SWITCH_FAULTS = {
    # The switch refuses the start's push and the best-effort push of its undo.
    "refuses": {"fail_next": 2},
    # The switch installs each of the two, then answers 503: the unwind must take the entry away.
    "applies-then-fails": {"apply_then_fail": 2},
}

@pytest.mark.parametrize("fault", SWITCH_FAULTS.values(), ids=SWITCH_FAULTS.keys())
def test_switch_failing_the_nat_change_unwinds_the_start(start_rack, fault):
    rack = prepare(start_rack(server_args=QUIET_SWITCH))
    wait_switches_checked(rack.server)
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "no-switch", start=False)["id"]
    rack.switch.add_fault("POST /nat/changes", **fault)
    reply = instance_action(admin, instance_id, "start")
    assert_unavailable_naming(reply, "switch agent", [rack.switch.url])
    # The start and its undo each pushed once: the fault is spent (and so gone).
    assert rack.switch.faults()["faults"] == [], rack.switch.faults()
    rack.switch.clear_faults()

    assert view_instance(admin, instance_id)["run_state"] == "stopped"
    assert_no_vm_anywhere(rack, instance_id)
    states = saga_states(wait_sagas_settled(admin))
    assert states["instance_start"] == ["unwound"], states
    # By the answer the undo's push reached the switch (applied, or refused before the entry
    # ever was): no entry.
    assert rack.nat_entries() == [], rack.describe()
    wait_agreement(rack, instance_id, SNAT)
    assert_usable_afterwards(rack, instance_id)


def test_sled_hanging_on_start_times_out_and_state_agrees_after_it_recovers(start_rack):
    rack = prepare(start_rack(server_args=["--agent-timeout-ms", "500"]))
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "hung", start=False)["id"]
    fault_all_sleds(rack, "PUT /instances/*", hang=True)

    began = time.monotonic()
    reply = instance_action(admin, instance_id, "start")
    elapsed = time.monotonic() - began
    assert_unavailable_naming(reply, "sled agent", sled_urls(rack))
    assert elapsed < 3.0, f"the start took {elapsed:.1f} s with a 500 ms agent timeout"
    assert view_instance(admin, instance_id)["run_state"] == "stopped"
    assert rack.nat_entries() == []
    states = saga_states(wait_sagas_settled(admin))
    assert states["instance_start"] == ["unwound"], states

    # The sled wakes up and handles the call it was holding (it registers and starts the VM).
    # The control plane must converge: either it owns that VM (the instance is running and
    # everything agrees) or the VM goes away (the instance is stopped and no sled has it).
    held = sum(agent.faults()["held_calls"] for agent in rack.sleds)
    assert held == 1, [agent.faults() for agent in rack.sleds]
    clear_all_faults(rack)
    wait_until(lambda: sum(agent.faults()["held_calls"] for agent in rack.sleds) == 0, 5.0,
               "the held call is released")
    converged = {}

    def check():
        state = view_instance(admin, instance_id)["run_state"]
        converged["state"] = state
        if state == "stopped":
            return rack.vms(instance_id) == [] and rack.nat_entries() == []
        return state == "running" and disagreement(rack, instance_id, SNAT) is None

    wait_until(check, 8.0, "database and sled agents converge after the hang",
               describe=lambda: f"run_state {converged.get('state')}\n{rack.describe()}")
    wait_sagas_settled(admin)
    assert_usable_afterwards(rack, instance_id)


def test_sled_applying_the_start_then_failing_leaves_no_vm_running(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "half", start=False)["id"]
    fault_all_sleds(rack, "PUT /instances/*", apply_then_fail=1)
    reply = instance_action(admin, instance_id, "start")
    assert_unavailable_naming(reply, "sled agent", sled_urls(rack))
    clear_all_faults(rack)

    # The sled did register and start the VM before answering 503. A failed node is never
    # undone (saga.h): the sled action itself removes the VM before it fails, so it is gone by
    # the answer, not only after the orphan reaper's next pass (a VM left "starting" would run
    # a moment later).
    assert rack.vms(instance_id) == [], rack.describe()
    assert view_instance(admin, instance_id)["run_state"] == "stopped"
    assert rack.nat_entries() == []
    states = saga_states(wait_sagas_settled(admin))
    assert states["instance_start"] == ["unwound"], states
    wait_agreement(rack, instance_id, SNAT)
    assert_usable_afterwards(rack, instance_id)


# ---------------------------------------------------------------------------------------------
# Agent faults during stop and migrate

def test_sled_refusing_the_stop_leaves_the_instance_running_and_a_retry_stops_it(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "sticky")["id"]
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    [(sled_id, _)] = rack.vms(instance_id)
    sled = rack.agent_by_id[sled_id]

    sled.add_fault("POST /instances/*/stop", fail_next=1)
    reply = instance_action(admin, instance_id, "stop")
    assert_unavailable_naming(reply, "sled agent", [sled.url])
    assert sled.faults()["faults"] == [], "the fault was used up by the stop"

    assert view_instance(admin, instance_id)["run_state"] == "running"
    assert disagreement(rack, instance_id, SNAT) is None
    assert [vm["state"] for _, vm in rack.vms(instance_id)] == ["running"]
    assert nat_keys(rack.nat_entries()) == [SNAT]

    expect(instance_action(admin, instance_id, "stop"), 202)
    wait_run_state(admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, SNAT)
    assert rack.nat_entries() == []
    assert all(vm["state"] != "running" for _, vm in rack.vms(instance_id))
    wait_sagas_settled(admin)


def test_sled_applying_the_stop_then_failing_converges(rack):
    """The sled stops the VM but answers 503: the caller gets the 503, and the control plane
    then follows the sled (the VM stopped), so the instance ends stopped with no NAT entry."""
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "halfstop")["id"]
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    [(sled_id, _)] = rack.vms(instance_id)
    sled = rack.agent_by_id[sled_id]

    sled.add_fault("POST /instances/*/stop", apply_then_fail=1)
    reply = instance_action(admin, instance_id, "stop")
    assert_unavailable_naming(reply, "sled agent", [sled.url])
    sled.clear_faults()
    wait_run_state(admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, SNAT)
    wait_until(lambda: rack.nat_entries() == [], 5.0, "empty NAT table", describe=rack.describe)
    assert_usable_afterwards(rack, instance_id)


def test_destination_sled_refusing_a_migration_leaves_the_instance_on_its_source(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "homebody")["id"]
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    [(source, _)] = rack.vms(instance_id)
    [destination] = [s for s in rack.agent_by_id if s != source]
    address = rack.nat_entries()[0]["sled_address"]

    rack.agent_by_id[destination].add_fault("PUT /instances/*", fail_next=1)
    reply = migrate(admin, instance_id, destination)
    assert_unavailable_naming(reply, "sled agent", [rack.agent_by_id[destination].url])
    clear_all_faults(rack)

    states = saga_states(wait_sagas_settled(admin))
    assert states["instance_migrate"] == ["unwound"], states
    wait_agreement(rack, instance_id, SNAT)
    assert [s for s, vm in rack.vms(instance_id)] == [source]
    assert rack.agent_by_id[destination].instances() == []
    assert [e["sled_address"] for e in rack.nat_entries()] == [address]
    # A later migration succeeds.
    expect(migrate(admin, instance_id, destination), 202)
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    assert [s for s, vm in rack.vms(instance_id)] == [destination]
    assert [e["sled_address"] for e in rack.nat_entries()] != [address]
    wait_sagas_settled(admin)
