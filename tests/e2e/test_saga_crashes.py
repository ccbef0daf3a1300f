"""Crash recovery of the instance sagas beyond "after a node succeeded" (issue 10;
sagas-and-reliability.md A3, B2, B4), with real processes:

- the create, migrate and delete sagas are SIGKILLed after each node (start, attach and detach:
  test_instance_crashes.py, test_attach_crashes.py), and start and migrate inside their agent
  nodes (the call applied, "succeeded" not yet durable: `exit_in_node`);
- an injected node failure starts the unwind (of a create, start, attach, detach or
  migration), and the server is SIGKILLed right after an undo finished
  (`exit_after_undo_node`), or inside an undo: its effect applied, its "undo finished" event
  not yet durable (`exit_in_undo_node`);
- an agent applies a migration's change and then fails (`apply_then_fail`): the engine never
  undoes a failed node (saga.h), so the action must leave nothing behind when it answers.

The server restarts on the same data dir and the same (external, still running) agents without
faults. The log decides the outcome exactly: with no failed node and healthy agents the saga
finishes (done); once a node failed it ends unwound, every effect removed, never stuck.
Recovery may run after the server listens, so every check polls with a deadline.
"""

import ipaddress
import json
import signal
from typing import NamedTuple

import pytest

from e2e_helpers import (QUIET_SWITCH, assert_retry_later, expect, instance_external_ips, make_fip,
                         make_instance, migrate, utilization, view_instance, wait_agreement,
                         wait_run_state, wait_sagas_settled, wait_switches_checked, wait_until)
from test_attach_crashes import Case, ORIGIN, converge
from test_attach_crashes import prepare as prepare_attach
from test_instance_crashes import (POOL, PROJECT, SNAT, assert_usable_afterwards,
                                   instance_by_name, prepare, saga_states)

POOL_SIZE = 4  # test_instance_crashes.POOL
CREATE_NODES = ["record", "snat", "external_ip_0", "external_ip_1", "finish"]
MIGRATE_NODES = ["begin", "destination", "finish", "switch", "source"]
DELETE_NODES = ["record"]


def faulty_rack(start_rack, faults, prepare_rack=prepare):
    """A rack whose server applies the saga `faults` (test_instance_crashes' pool and project
    unless `prepare_rack` says otherwise)."""
    return prepare_rack(start_rack(server_args=["--enable-test-faults"],
                                   env={"FLOATPLANE_TEST_SAGA_FAULTS": json.dumps(faults)}))


def crash_and_restart(rack, call):
    """Makes `call` (which must never answer: the server kills itself), then restarts the
    server without faults; returns the sagas once they settled."""
    with pytest.raises(AssertionError, match="no HTTP response"):
        call()
    code = rack.server.wait_for_exit()
    assert code == -signal.SIGKILL, (
        f"expected the server to die by SIGKILL, exit {code}\n{rack.server.describe_output()}")
    rack.restart_server()
    return wait_sagas_settled(rack.admin)


def nat_sled_addresses(rack):
    return [entry["sled_address"] for entry in rack.nat_entries()]


def running_on(rack, instance_id):
    """(sled id, the switch's sled address for its SNAT) of a running instance."""
    wait_run_state(rack.admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    [(sled, _)] = rack.vms(instance_id)
    [address] = nat_sled_addresses(rack)
    return sled, address


class Mover(NamedTuple):
    """A running instance and the sled it is to migrate to."""
    instance_id: str
    source: str
    address: str  # the switch's sled address for it on its source
    destination: str


def running_instance(rack, name):
    instance_id = make_instance(rack.admin, PROJECT, name)["id"]
    source, address = running_on(rack, instance_id)
    [destination] = [s for s in rack.agent_by_id if s != source]
    return Mover(instance_id, source, address, destination)


def crash_a_migration(start_rack, faults):
    """Migrates a running instance on a server with saga `faults` that kill it; returns the
    rack (restarted without faults), the Mover and the sagas once they settled."""
    rack = faulty_rack(start_rack, {"saga": "instance_migrate", **faults})
    mover = running_instance(rack, "mover")
    sagas = crash_and_restart(
        rack, lambda: migrate(rack.admin, mover.instance_id, mover.destination))
    wait_run_state(rack.admin, mover.instance_id, "running")
    return rack, mover, sagas


def assert_runs_on(rack, instance_id, sled, address):
    """The instance runs on `sled` only, and the switch sends its traffic to `address` (within
    the NAT reconciler's period: a hung switch may apply a held change late)."""
    wait_agreement(rack, instance_id, SNAT)
    assert [s for s, vm in rack.vms(instance_id)] == [sled], rack.describe()
    wait_until(lambda: nat_sled_addresses(rack) == [address], 8.0,
               f"the switch sends the instance's traffic to {address}", describe=rack.describe)


# ---------------------------------------------------------------------------------------------
# Crash after each node of the create, migrate and delete sagas: recovery finishes them.

def crash_a_create(start_rack, faults):
    """Creates a stopped instance with a floating and an ephemeral IP on a server with saga
    `faults` that kill it; returns the rack (restarted without faults), the floating IP, the
    pool's free addresses before the create and the sagas once they settled."""
    rack = faulty_rack(start_rack, {"saga": "instance_create", **faults})
    fip = make_fip(rack.admin, PROJECT, "kept")
    free_before = utilization(rack.admin, POOL)[1]
    requested = [{"type": "floating", "floating_ip": fip["id"]}, {"type": "ephemeral"}]
    sagas = crash_and_restart(rack, lambda: rack.admin.post(
        "/v1/instances", {"name": "made", "description": "", "hostname": "made", "ncpus": 1,
                          "memory": 1 << 30, "start": False, "external_ips": requested},
        params={"project": PROJECT}))
    return rack, fip, free_before, sagas


@pytest.mark.sampled_on_postgres("node")
@pytest.mark.parametrize("node", range(len(CREATE_NODES) - 1),
                         ids=[f"after-{n}" for n in CREATE_NODES[:-1]])
def test_crash_after_create_saga_node_finishes_the_create(start_rack, node):
    rack, fip, free_before, sagas = crash_a_create(start_rack, {"exit_after_node": node})
    admin = rack.admin
    assert saga_states(sagas) == {"instance_create": ["done"]}, sagas
    instance = instance_by_name(admin, "made")
    assert instance["run_state"] == "stopped", instance
    listed = instance_external_ips(admin, instance["id"])
    assert sorted(ip["kind"] for ip in listed) == ["ephemeral", "floating", "snat"], listed
    [snat] = [ip for ip in listed if ip["kind"] == "snat"]
    assert expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)["instance_id"] == \
        instance["id"]
    # The SNAT and ephemeral addresses, allocated once each.
    assert utilization(admin, POOL)[1] == free_before - 2
    assert rack.vms(instance["id"]) == [] and rack.nat_entries() == [], rack.describe()
    expect(admin.post(f"/v1/instances/{instance['id']}/start"), 202)
    wait_run_state(admin, instance["id"], "running")
    wait_agreement(rack, instance["id"],
                   (ipaddress.ip_address(snat["ip"]), snat["first_port"], snat["last_port"]))
    assert len(rack.nat_entries()) == 3, rack.describe()  # SNAT, floating, ephemeral


@pytest.mark.sampled_on_postgres("node")
@pytest.mark.parametrize("node", range(len(MIGRATE_NODES) - 1),
                         ids=[f"after-{n}" for n in MIGRATE_NODES[:-1]])
def test_crash_after_migrate_saga_node_finishes_the_migration(start_rack, node):
    rack, mover, sagas = crash_a_migration(start_rack, {"exit_after_node": node})
    assert saga_states(sagas)["instance_migrate"] == ["done"], sagas
    wait_agreement(rack, mover.instance_id, SNAT)
    assert [s for s, vm in rack.vms(mover.instance_id)] == [mover.destination], rack.describe()
    [moved] = nat_sled_addresses(rack)
    assert moved != mover.address, rack.describe()
    assert_usable_afterwards(rack, mover.instance_id)


@pytest.mark.parametrize("node", range(len(DELETE_NODES)),
                         ids=[f"after-{n}" for n in DELETE_NODES])
def test_crash_after_delete_saga_node_finishes_the_delete(start_rack, node):
    rack = faulty_rack(start_rack, {"saga": "instance_delete", "exit_after_node": node})
    instance_id = make_instance(rack.admin, PROJECT, "doomed")["id"]
    running_on(rack, instance_id)
    expect(rack.admin.post(f"/v1/instances/{instance_id}/stop"), 202)
    wait_run_state(rack.admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, SNAT)

    sagas = crash_and_restart(rack, lambda: rack.admin.delete(f"/v1/instances/{instance_id}"))
    admin = rack.admin
    assert saga_states(sagas)["instance_delete"] == ["done"], sagas
    expect(admin.get(f"/v1/instances/{instance_id}"), 404)
    assert utilization(admin, POOL)[1] == POOL_SIZE
    wait_until(lambda: rack.vms(instance_id) == [] and rack.nat_entries() == [], 5.0,
               "no VM and no NAT entry left", describe=rack.describe)


# ---------------------------------------------------------------------------------------------
# Crash inside an agent-calling node: its agent call applied, its "succeeded" not yet durable.
# Recovery runs the action again (it is idempotent) and finishes the saga.

@pytest.mark.parametrize("node", [2, 3], ids=["in-sled", "in-switch"])
def test_crash_inside_a_start_saga_node_runs_it_again_and_finishes(start_rack, node):
    rack = faulty_rack(start_rack, {"saga": "instance_start", "exit_in_node": node})
    instance_id = make_instance(rack.admin, PROJECT, "again", start=False)["id"]
    sagas = crash_and_restart(rack, lambda: rack.admin.post(
        f"/v1/instances/{instance_id}/start"))
    assert saga_states(sagas) == {"instance_create": ["done"], "instance_start": ["done"]}, \
        sagas
    wait_run_state(rack.admin, instance_id, "running")
    wait_agreement(rack, instance_id, SNAT)
    assert len(rack.vms(instance_id)) == 1 and len(rack.nat_entries()) == 1, rack.describe()
    assert_usable_afterwards(rack, instance_id)


@pytest.mark.sampled_on_postgres("node")
@pytest.mark.parametrize("node", [1, 3, 4], ids=["in-destination", "in-switch", "in-source"])
def test_crash_inside_a_migrate_saga_node_runs_it_again_and_finishes(start_rack, node):
    rack, mover, sagas = crash_a_migration(start_rack, {"exit_in_node": node})
    assert saga_states(sagas)["instance_migrate"] == ["done"], sagas
    wait_agreement(rack, mover.instance_id, SNAT)
    assert [s for s, vm in rack.vms(mover.instance_id)] == [mover.destination], rack.describe()
    assert nat_sled_addresses(rack) != [mover.address], rack.describe()


# ---------------------------------------------------------------------------------------------
# Crash during the unwind: after an undo finished, or inside one. Recovery completes the unwind.

START_FAILING_NODE = 3  # switch: the undo runs sled (2), nat (1), place (0)
ATTACH_FAILING_NODE = 2  # complete: the undo runs dataplane (1), begin (0)
MIGRATE_FAILING_NODE = 4  # source: the undo runs switch (3), finish (2), destination (1), begin

UNWIND_CRASHES = [("exit_after_undo_node", n) for n in (2, 1, 0)] + \
    [("exit_in_undo_node", n) for n in (2, 1, 0)]


def crash_id(crash):
    point, node = crash
    return f"{point.replace('exit_', '').replace('_node', '')}-{node}"


@pytest.mark.sampled_on_postgres("crash")
@pytest.mark.parametrize("crash", UNWIND_CRASHES, ids=[crash_id(c) for c in UNWIND_CRASHES])
def test_crash_while_unwinding_a_start_ends_unwound_with_nothing_left(start_rack, crash):
    point, node = crash
    rack = faulty_rack(start_rack, {"saga": "instance_start", "fail_node": START_FAILING_NODE,
                                    point: node})
    instance_id = make_instance(rack.admin, PROJECT, "unlucky", start=False)["id"]

    sagas = crash_and_restart(rack, lambda: rack.admin.post(
        f"/v1/instances/{instance_id}/start"))
    assert saga_states(sagas) == {"instance_create": ["done"], "instance_start": ["unwound"]}, \
        sagas
    assert view_instance(rack.admin, instance_id)["run_state"] == "stopped"
    wait_until(lambda: rack.vms(instance_id) == [] and rack.nat_entries() == [], 5.0,
               "no VM and no NAT entry left", describe=rack.describe)
    wait_agreement(rack, instance_id, SNAT)
    assert utilization(rack.admin, POOL)[1] == POOL_SIZE - 1, "the SNAT block stays"
    assert_usable_afterwards(rack, instance_id)


CREATE_FAILING_NODE = 4  # finish: the undo runs external_ip_1, external_ip_0, snat, record
# Every create undo is a database undo: "inside" it is before its transaction commits.
CREATE_UNWIND_CRASHES = [("exit_after_undo_node", n) for n in (3, 2, 1)] + \
    [("exit_in_undo_node", n) for n in (3, 0)]


@pytest.mark.sampled_on_postgres("crash")
@pytest.mark.parametrize("crash", CREATE_UNWIND_CRASHES,
                         ids=[crash_id(c) for c in CREATE_UNWIND_CRASHES])
def test_crash_while_unwinding_a_create_leaves_no_instance_and_frees_its_ips(start_rack, crash):
    point, node = crash
    rack, fip, free_before, sagas = crash_a_create(
        start_rack, {"fail_node": CREATE_FAILING_NODE, point: node})
    admin = rack.admin
    assert saga_states(sagas) == {"instance_create": ["unwound"]}, sagas
    expect(admin.get("/v1/instances/made", params={"project": PROJECT}), 404)
    assert expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)["instance_id"] is None
    assert utilization(admin, POOL)[1] == free_before, "SNAT or ephemeral address not freed"
    # The name is free again.
    made = make_instance(admin, PROJECT, "made", start=False)
    assert made["run_state"] == "stopped", made


ATTACH_UNWIND_CRASHES = [("exit_after_undo_node", n) for n in (1, 0)] + \
    [("exit_in_undo_node", n) for n in (1, 0)]


@pytest.mark.sampled_on_postgres("crash")
@pytest.mark.parametrize("crash", ATTACH_UNWIND_CRASHES,
                         ids=[crash_id(c) for c in ATTACH_UNWIND_CRASHES])
@pytest.mark.parametrize("kind", ["floating", "ephemeral"])
@pytest.mark.parametrize("op", ["attach", "detach"])
def test_crash_while_unwinding_an_attach_or_detach_restores_the_ip(start_rack, op, kind, crash):
    point, node = crash
    saga = {"attach": "ip_attach", "detach": "ip_detach"}[op]
    rack = faulty_rack(start_rack, {"saga": saga, "fail_node": ATTACH_FAILING_NODE, point: node},
                       prepare_attach)
    case = Case(rack, kind, None)
    if op == "detach":
        case.succeed("attach")

    sagas = crash_and_restart(rack, lambda: case.call(op))
    assert [s["state"] for s in sagas if s["name"] == saga] == ["unwound"], sagas
    seen = converge(case)
    assert seen.state == ORIGIN[op], f"{seen}\n{rack.describe()}"
    case.succeed("detach" if ORIGIN[op] == "attached" else "attach")


MIGRATE_UNWIND_CRASHES = [("exit_after_undo_node", n) for n in (3, 2, 1, 0)] + \
    [("exit_in_undo_node", n) for n in (3, 2, 1, 0)]


@pytest.mark.sampled_on_postgres("crash")
@pytest.mark.parametrize("crash", MIGRATE_UNWIND_CRASHES,
                         ids=[crash_id(c) for c in MIGRATE_UNWIND_CRASHES])
def test_crash_while_unwinding_a_migration_leaves_the_instance_on_its_source(start_rack, crash):
    point, node = crash
    rack, mover, sagas = crash_a_migration(
        start_rack, {"fail_node": MIGRATE_FAILING_NODE, point: node})
    assert saga_states(sagas)["instance_migrate"] == ["unwound"], sagas
    wait_until(lambda: rack.agent_by_id[mover.destination].instances() == [], 5.0,
               "the destination sled has no VM", describe=rack.describe)
    assert_runs_on(rack, mover.instance_id, mover.source, mover.address)
    # A later migration succeeds.
    expect(migrate(rack.admin, mover.instance_id, mover.destination), 202)
    wait_run_state(rack.admin, mover.instance_id, "running")
    wait_agreement(rack, mover.instance_id, SNAT)
    assert [s for s, vm in rack.vms(mover.instance_id)] == [mover.destination], rack.describe()


# ---------------------------------------------------------------------------------------------
# An agent that applies a migration's change, then fails. A failed node is never undone
# (saga.h): the action itself, or the undo of the nodes before it, must remove the change by
# the time the migration answers 503.

def test_destination_applying_the_migration_then_failing_leaves_no_vm_there(start_rack):
    rack = prepare(start_rack())
    mover = running_instance(rack, "halfway")
    agent = rack.agent_by_id[mover.destination]

    agent.add_fault("PUT /instances/*", apply_then_fail=1)
    reply = migrate(rack.admin, mover.instance_id, mover.destination)
    assert_retry_later(reply, "sled agent", agent.url)
    # At once, not by a later reconciliation: the destination sled did start the VM before
    # answering 503, and the failed node (never undone) removed it before failing.
    assert agent.instances() == [], agent.instances()
    assert saga_states(wait_sagas_settled(rack.admin))["instance_migrate"] == ["unwound"]
    assert_runs_on(rack, mover.instance_id, mover.source, mover.address)


def test_switch_applying_the_migration_then_failing_points_back_at_the_source(start_rack):
    rack = prepare(start_rack(server_args=QUIET_SWITCH))
    wait_switches_checked(rack.server)
    mover = running_instance(rack, "rerouted")

    # Twice: the migration's own push and its undo's are each applied, then answered 503.
    rack.switch.add_fault("POST /nat/changes", apply_then_fail=2)
    reply = migrate(rack.admin, mover.instance_id, mover.destination)
    assert_retry_later(reply, "switch agent", rack.switch.url)
    assert rack.switch.faults()["faults"] == [], "the migration and its undo each pushed once"
    # The switch installed the move to the destination; by the answer, the undo of the nodes
    # before the failed one has moved it back.
    assert nat_sled_addresses(rack) == [mover.address], rack.describe()
    assert rack.agent_by_id[mover.destination].instances() == [], rack.describe()
    rack.switch.clear_faults()
    assert saga_states(wait_sagas_settled(rack.admin))["instance_migrate"] == ["unwound"]
    assert_runs_on(rack, mover.instance_id, mover.source, mover.address)


def test_switch_hanging_during_a_migration_leaves_the_instance_running_on_its_source(
        start_rack):
    """From the migration's finish node (the database moves the instance to the destination)
    until its undo moves it back, the source VM is the one the instance will keep: the reaper,
    which removes VMs the database does not place on their sled, must leave it alone while the
    migration saga is unfinished (here for a whole agent timeout)."""
    rack = prepare(start_rack(server_args=["--agent-timeout-ms", "500"]))
    mover = running_instance(rack, "patient")

    rack.switch.add_fault("POST /nat/changes", hang=True)
    reply = migrate(rack.admin, mover.instance_id, mover.destination)
    assert_retry_later(reply, "switch agent", rack.switch.url)
    rack.switch.clear_faults()
    assert saga_states(wait_sagas_settled(rack.admin))["instance_migrate"] == ["unwound"]
    assert view_instance(rack.admin, mover.instance_id)["run_state"] == "running"
    assert_runs_on(rack, mover.instance_id, mover.source, mover.address)
