"""An attached floating IP moved to another instance in one step (issue 25, item 4): an attach
with `"allow_reassociation": true` takes the address from the instance that holds it in one
ip_attach saga. Without the opt-in the answer stays the 400 naming the holder. The switch gets
the old entry's removal and the new one's addition in one batch (never the removal alone), the
new sled's port gains the address before the switch points at it and the old one loses it
after; a move survives a server crash after each node, unwinds to the old instance when the
new sled refuses, and works when the old sled is dead (failover). Races with detaches, other
moves and a stop of either instance end in one clean state."""

import ipaddress
import json
import signal

import pytest

from e2e_helpers import (assert_error, assert_retry_later, attach_fip, detach_fip, expect,
                         instance_action, instance_external_ips, link, list_sagas, make_fip,
                         make_instance, make_pool, make_project, nat_key, run_together, same_ip,
                         wait_external_ip_agreement, wait_run_state, wait_sagas_settled,
                         wait_until)

POOL = "move-pool"
PROJECT = "move"


def prepare(rack, instances=("a", "b")):
    """The pool, the project, running instances `instances` and floating IP "web" attached to
    the first; returns {name: instance}, the floating IP."""
    admin = rack.admin
    make_pool(admin, POOL, "198.51.100.40", "198.51.100.47")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    vms = {name: make_instance(admin, PROJECT, name) for name in instances}
    for vm in vms.values():
        wait_run_state(admin, vm["id"], "running")
    fip = make_fip(admin, PROJECT, "web")
    expect(attach_fip(admin, fip["id"], vms[instances[0]]["id"]), 202)
    return vms, fip


def move(client, fip, parent):
    return client.post(f"/v1/floating-ips/{fip}/attach",
                       {"kind": "instance", "parent": parent, "allow_reassociation": True})


def sled_address_of(rack, instance_id):
    """The underlay address the switch sends the instance's traffic to (its SNAT entry's)."""
    [snat] = [i for i in instance_external_ips(rack.admin, instance_id) if i["kind"] == "snat"]
    key = (ipaddress.ip_address(snat["ip"]), snat["first_port"], snat["last_port"])
    entries = [e for e in rack.nat_entries() if nat_key(e) == key]
    assert len(entries) == 1, rack.describe()
    return entries[0]["sled_address"]


def where(rack, fip):
    """(the sled addresses the switch's entries for the address point at, the instances whose
    VMs list the address)."""
    address = ipaddress.ip_address(fip["ip"])
    nat = [e["sled_address"] for e in rack.nat_entries() if same_ip(e["external_ip"], fip["ip"])]
    vms = sorted(vm["id"] for agent in rack.sleds if agent.process is not None
                 for vm in agent.instances()
                 if address in [ipaddress.ip_address(a) for a in vm["external_ips"]])
    return nat, vms


def assert_on(rack, fip, vm, what):
    """The database, the switch and the sleds all put the address on `vm`, right now."""
    view = expect(rack.admin.get(f"/v1/floating-ips/{fip['id']}"), 200)
    assert view["instance_id"] == vm["id"], (what, view)
    nat, vms = where(rack, fip)
    assert nat == [sled_address_of(rack, vm["id"])], (what, rack.describe())
    assert vms == [vm["id"]], (what, rack.describe())


def test_a_move_needs_the_opt_in_and_then_retargets_the_address_in_one_step(start_rack):
    rack = start_rack()
    vms, fip = prepare(rack)
    a, b = vms["a"], vms["b"]
    assert rack.vms(a["id"])[0][0] != rack.vms(b["id"])[0][0], "one instance per sled"
    admin = rack.admin

    assert_error(attach_fip(admin, fip["id"], b["id"]), 400, "InvalidRequest",
                 'floating IP cannot be attached to one instance while still attached to '
                 'another: floating IP "web" is attached to instance "a"; detach it first, or '
                 'attach with "allow_reassociation": true to move it in one step')
    assert_on(rack, fip, a, "after the refused attach")

    generation = rack.switch.nat()["generation"]
    moved = expect(move(admin, fip["id"], "b"), 202)
    assert (moved["id"], moved["instance_id"]) == (fip["id"], b["id"])
    # By the answer every place has it on b.
    assert_on(rack, fip, b, "right after the move")
    # The switch took two changes, the removal and the addition, and no others.
    assert rack.switch.nat()["generation"] == generation + 2
    # One saga, done.
    attaches = [s for s in list_sagas(admin) if s["name"] == "ip_attach"]
    assert [s["state"] for s in attaches] == ["done", "done"], attaches

    # To where it is: nothing to do. Back: another move.
    expect(move(admin, fip["id"], b["id"]), 202)
    expect(move(admin, fip["id"], a["id"]), 202)
    assert_on(rack, fip, a, "after moving it back")
    wait_external_ip_agreement(rack, [PROJECT])


def test_racing_moves_detaches_and_stops_end_in_one_clean_state(start_rack):
    rack = start_rack()
    vms, fip = prepare(rack, ("a", "b", "c"))
    admin = rack.admin
    ids = [vm["id"] for vm in vms.values()]
    for round_ in range(4):
        calls = [lambda i=i: move(admin, fip["id"], i) for i in ids]
        calls.append(lambda: detach_fip(admin, fip["id"]))
        if round_ == 3:
            calls.append(lambda: instance_action(admin, ids[0], "stop"))
        replies = run_together(calls)
        for reply in replies[:4]:
            # Done, or refused while another operation holds the IP or the instance.
            assert reply.status in (202, 503), (reply.status, reply.body)
            if reply.status == 503:
                assert_retry_later(reply)
        wait_external_ip_agreement(rack, [PROJECT])
        view = expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)
        nat, held = where(rack, fip)
        holder = view.get("instance_id")
        running = holder and expect(admin.get(f"/v1/instances/{holder}"),
                                    200)["run_state"] == "running"
        # One holder at most, and the address programmed exactly where it runs.
        assert held == ([holder] if running else []), (view, rack.describe())
        assert nat == ([sled_address_of(rack, holder)] if running else []), rack.describe()
    wait_sagas_settled(admin)
    assert {s["state"] for s in list_sagas(admin)} <= {"done", "unwound"}


NODES = ["begin", "dataplane", "complete"]


@pytest.mark.parametrize("node", range(len(NODES)), ids=[f"after-{n}" for n in NODES])
def test_a_server_crash_after_each_node_of_a_move_finishes_it(start_rack, node):
    faults = {"saga": "ip_attach", "exit_after_node": node}
    # The floating IP is attached at instance create (another saga), so that the faults meet
    # the move only.
    rack = start_rack(server_args=["--enable-test-faults"],
                      env={"FLOATPLANE_TEST_SAGA_FAULTS": json.dumps(faults)})
    admin = rack.admin
    make_pool(admin, POOL, "198.51.100.40", "198.51.100.47")
    link(admin, POOL, default=True)
    make_project(admin, PROJECT)
    fip = make_fip(admin, PROJECT, "web")
    a = make_instance(admin, PROJECT, "a",
                      external_ips=[{"type": "floating", "floating_ip": fip["id"]}])
    b = make_instance(admin, PROJECT, "b")
    for vm in (a, b):
        wait_run_state(admin, vm["id"], "running")
    wait_external_ip_agreement(rack, [PROJECT])

    with pytest.raises(AssertionError, match="no HTTP response"):
        move(admin, fip["id"], b["id"])
    assert rack.server.wait_for_exit() == -signal.SIGKILL, rack.server.describe_output()
    rack.restart_server()
    wait_sagas_settled(rack.admin)
    [saga] = [s for s in list_sagas(rack.admin) if s["name"] == "ip_attach"]
    # No node failed: recovery finishes the move forward.
    assert saga["state"] == "done", saga
    wait_external_ip_agreement(rack, [PROJECT])
    assert_on(rack, fip, b, f"after a crash after node {NODES[node]} and recovery")


def test_a_new_sled_that_refuses_unwinds_the_move_back_to_the_old_instance(start_rack):
    rack = start_rack()
    vms, fip = prepare(rack)
    a, b = vms["a"], vms["b"]
    [(b_sled, _)] = rack.vms(b["id"])
    new_sled = rack.agent_by_id[b_sled]
    new_sled.add_fault("PUT /instances/*/external-ips/*", fail_next=1)
    assert_retry_later(move(rack.admin, fip["id"], b["id"]), "sled agent", new_sled.url)
    # Unwound before the answer: the address is back on a everywhere.
    assert_on(rack, fip, a, "after the refused move")
    wait_external_ip_agreement(rack, [PROJECT])
    expect(move(rack.admin, fip["id"], b["id"]), 202)
    assert_on(rack, fip, b, "after the retry")


def test_a_move_away_from_a_dead_sled_fails_the_address_over(start_rack):
    """The old instance's sled is gone (its agent killed): the move still succeeds at once, the
    switch sends the address to the new sled, and the old sled's port is left to the watcher
    for when it comes back."""
    rack = start_rack(server_args=["--agent-timeout-ms", "500"])
    vms, fip = prepare(rack)
    a, b = vms["a"], vms["b"]
    [(a_sled, _)] = rack.vms(a["id"])
    b_address = sled_address_of(rack, b["id"])
    rack.agent_by_id[a_sled].kill()
    moved = expect(move(rack.admin, fip["id"], b["id"]), 202)
    assert moved["instance_id"] == b["id"]
    nat, held = where(rack, fip)
    assert (nat, held) == ([b_address], [b["id"]]), rack.describe()
    wait_until(lambda: all(s["state"] in ("done", "unwound") for s in list_sagas(rack.admin)),
               5.0, "the sagas settle")
