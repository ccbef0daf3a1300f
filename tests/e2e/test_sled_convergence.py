"""What the sleds run converges to what the database says (issue 10, defect 3), with real
processes: a server driving external simulated agents whose `DELETE /instances/{id}` (the
unregister of a VM) fails on demand through `POST /faults`.

- The issue's run: an unregister fails once when a stopped VM is forgotten; the instance is
  deleted and its ephemeral address goes to a new instance. The deleted instance's VM must not
  stay on its sled holding the address.
- Unregisters failing around stop, delete and migrate on every sled: once the faults are used
  up, every sled runs exactly the VMs the database places there (`external_ip_disagreement`:
  no VM of a stopped or deleted instance anywhere, a migrated VM only on its destination).
"""

import ipaddress

import pytest

from e2e_helpers import (expect, instance_action, instance_external_ips, link, make_instance,
                         make_pool, make_project, migrate, wait_external_ip_agreement,
                         wait_run_state, wait_until)

POOL = "converge-pool"
POOL_FIRST, POOL_LAST = "10.77.0.5", "10.77.0.12"
PROJECT = "converge"
UNREGISTER = "DELETE /instances/*"
CONVERGE_S = 10.0


@pytest.fixture
def rack(start_rack):
    rack = start_rack()
    make_pool(rack.admin, POOL, POOL_FIRST, POOL_LAST)
    link(rack.admin, POOL, default=True)
    make_project(rack.admin, PROJECT)
    return rack


def ephemeral_of(admin, instance_id):
    [item] = [i for i in instance_external_ips(admin, instance_id) if i["kind"] == "ephemeral"]
    return ipaddress.ip_address(item["ip"])


def running_with_ephemeral(rack, name):
    """A running instance with an ephemeral address: (id, address, sled agent running it)."""
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, name, external_ips=[{"type": "ephemeral"}])["id"]
    wait_run_state(admin, instance_id, "running")
    wait_external_ip_agreement(rack, [PROJECT])
    [(sled_id, _)] = rack.vms(instance_id)
    return instance_id, ephemeral_of(admin, instance_id), rack.agent_by_id[sled_id]


def holders(rack, address):
    """[(sled id, instance id)] of every VM whose port carries `address`."""
    return sorted((rack.sled_id(agent), vm["id"]) for agent in rack.sleds
                  for vm in agent.instances()
                  if address in {ipaddress.ip_address(a) for a in vm["external_ips"]})


def test_a_deleted_instance_whose_unregister_failed_leaves_no_vm_holding_its_address(rack):
    admin = rack.admin
    old, address, sled = running_with_ephemeral(rack, "old")
    sled.add_fault(UNREGISTER, fail_next=1)

    expect(instance_action(admin, old, "stop"), 202)
    wait_run_state(admin, old, "stopped")
    assert expect(admin.delete(f"/v1/instances/{old}"), 204) is None
    # The failure was used up by the server's unregister after the stop: the fault did fire.
    wait_until(lambda: sled.faults()["faults"] == [], 5.0, "the unregister fault used up",
               describe=lambda: f"{sled.faults()}\n{rack.describe()}")

    # The address goes to a new instance (the lowest free address of the pool again).
    new, new_address, _ = running_with_ephemeral(rack, "new")
    assert new_address == address, (new_address, address)
    wait_external_ip_agreement(rack, [PROJECT], CONVERGE_S)
    assert rack.vms(old) == [], rack.describe()
    assert [holder for _, holder in holders(rack, address)] == [new], rack.describe()


def test_unregister_failures_around_stop_delete_and_migrate_converge(rack):
    admin = rack.admin
    stopped, _, stopped_on = running_with_ephemeral(rack, "stopped")
    deleted, _, deleted_on = running_with_ephemeral(rack, "deleted")
    moved, _, source = running_with_ephemeral(rack, "moved")
    [destination] = [s for s in rack.sleds if s is not source]
    # Every unregister on the sleds that will hold a VM to forget fails for a while: the one
    # after each stop, the migration's on its source, and the server's next retries.
    for agent in {stopped_on.url: stopped_on, deleted_on.url: deleted_on,
                  source.url: source}.values():
        agent.add_fault(UNREGISTER, fail_next=4)

    for instance_id in (stopped, deleted):
        expect(instance_action(admin, instance_id, "stop"), 202)
    expect(migrate(admin, moved, rack.sled_id(destination)), 202)
    for instance_id in (stopped, deleted):
        wait_run_state(admin, instance_id, "stopped")
    wait_run_state(admin, moved, "running")
    assert expect(admin.delete(f"/v1/instances/{deleted}"), 204) is None

    # The server keeps retrying until the sleds answer, and they converge on the database.
    wait_until(lambda: all(a.faults()["faults"] == [] for a in rack.sleds), CONVERGE_S,
               "every unregister fault used up",
               describe=lambda: "\n".join(f"{a.url}: {a.faults()}" for a in rack.sleds))
    wait_external_ip_agreement(rack, [PROJECT], CONVERGE_S)
    assert rack.vms(stopped) == [] and rack.vms(deleted) == [], rack.describe()
    assert [sled for sled, _ in rack.vms(moved)] == [rack.sled_id(destination)], rack.describe()
