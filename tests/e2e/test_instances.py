"""Instances on sleds, end to end (issue 3): create (started and stopped), stop, start, reboot,
migrate, delete, with the dataplane inspected after each transition: the server drives
external simulated agents (`start_rack`), so the tests read the sled agents' VMs and the switch
agent's NAT table. SNAT (omicron-behaviour.md §4.4, §6.4) is on the switch exactly while the
instance runs. Also the instance selector rules (§2.0), the operator's sled views, the
`external_ips` validation of InstanceCreate (§2.3) and creation without a default IPv4 pool.
"""

import ipaddress
import uuid

import pytest

from e2e_helpers import (DEFAULT_SILO, make_fip, assert_error, create_instance, disagreement, expect,
                         instance_action, instance_body, link, list_all, list_sagas,
                         make_instance, make_pool, make_project, make_silo, migrate, nat_key,
                         nat_keys, pool_links, role_client, same_ip, sled_instance_ids,
                         snat_block, unique, unlink,
                         utilization, view_instance, wait_agreement, wait_run_state,
                         wait_sagas_settled, wait_until)

POOL = "snat-pool"
POOL_FIRST, POOL_LAST = "198.51.100.10", "198.51.100.19"  # 10 addresses
POOL_SIZE = 10
PROJECT = "proj"

RUNNING_DELETE_MESSAGE = (
    "cannot delete instance: instance is running or has not yet fully stopped")


@pytest.fixture
def rack(start_rack):
    """A server on external agents (a switch, two sleds) with a default IPv4 pool for the
    default silo (so instances get SNAT from it) and a project."""
    rack = start_rack()
    make_pool(rack.admin, POOL, POOL_FIRST, POOL_LAST)
    link(rack.admin, POOL, default=True)
    make_project(rack.admin, PROJECT)
    return rack


def snat_of(index):
    """The SNAT key of the index-th instance created on a fresh pool: four blocks per address,
    lowest address first (§6.4)."""
    address = ipaddress.ip_address(POOL_FIRST) + index // 4
    return snat_block(str(address), index % 4)


def remaining(admin):
    return utilization(admin, POOL)[1]


def only_vm(rack, instance_id):
    """(sled id, VM) of the one sled agent that knows the instance."""
    vms = rack.vms(instance_id)
    assert len(vms) == 1, f"expected the instance on exactly one sled: {vms}\n{rack.describe()}"
    return vms[0]


def nat_entry(rack, key):
    matching = [e for e in rack.nat_entries() if nat_key(e) == key]
    assert len(matching) == 1, f"expected one NAT entry {key}: {rack.nat_entries()}"
    return matching[0]


def other_sled(rack, sled_id):
    [other] = [s for s in rack.agent_by_id if s != sled_id]
    return other


# ---------------------------------------------------------------------------------------------
# Lifecycle

def test_create_started_instance_runs_on_a_sled_with_its_snat_on_the_switch(rack):
    admin = rack.admin
    created = make_instance(admin, PROJECT, "web-1")
    assert created["run_state"] == "starting", created
    assert created["name"] == "web-1" and created["hostname"] == "web-1"
    assert created["ncpus"] == 1 and created["memory"] == 1 << 30

    view = wait_run_state(admin, created["id"], "running")
    assert view["id"] == created["id"]
    wait_agreement(rack, created["id"], snat_of(0))

    sled_id, vm = only_vm(rack, created["id"])
    assert vm["state"] == "running"
    # The VM's port answers on its SNAT address (the only external address it has).
    assert [ipaddress.ip_address(ip) for ip in vm["external_ips"]] == [snat_of(0)[0]], vm

    # The switch holds exactly one entry: the SNAT block, pointing at the VM's port.
    [entry] = rack.nat_entries()
    assert nat_key(entry) == snat_of(0), entry
    assert ipaddress.ip_address(entry["sled_address"]).version == 6, entry
    assert isinstance(entry["vni"], int) and entry["vni"] > 0, entry
    assert len(entry["mac"].split(":")) == 6, entry

    # One address of the pool is in use (by the SNAT block).
    assert remaining(admin) == POOL_SIZE - 1
    listed = list_all(admin, "/v1/instances", project=PROJECT)
    assert [i["id"] for i in listed] == [created["id"]]
    assert [s["state"] for s in wait_sagas_settled(admin)] == ["done", "done"]


def test_create_stopped_instance_then_start_it(rack):
    admin = rack.admin
    created = make_instance(admin, PROJECT, "idle-1", start=False)
    assert created["run_state"] == "stopped", created
    # SNAT is allocated at create, even for a stopped instance (§4.4) ...
    assert remaining(admin) == POOL_SIZE - 1
    # ... but nothing is on the dataplane while it does not run.
    assert rack.vms(created["id"]) == []
    assert rack.nat_entries() == []
    assert disagreement(rack, created["id"], snat_of(0)) is None
    assert [s["name"] for s in wait_sagas_settled(admin)] == ["instance_create"]

    started = expect(instance_action(admin, created["id"], "start"), 202)
    assert started["run_state"] in ("starting", "running"), started
    wait_run_state(admin, created["id"], "running")
    wait_agreement(rack, created["id"], snat_of(0))
    assert nat_keys(rack.nat_entries()) == [snat_of(0)]
    assert remaining(admin) == POOL_SIZE - 1  # the same SNAT block, nothing new


def test_stop_start_and_reboot_keep_snat_on_the_switch_exactly_while_running(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "cycle-1")["id"]
    snat = snat_of(0)
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, snat)
    first_sled, _ = only_vm(rack, instance_id)

    # Stop: the VM stops, the NAT entry goes.
    stopping = expect(instance_action(admin, instance_id, "stop"), 202)
    assert stopping["run_state"] in ("stopping", "stopped"), stopping
    wait_run_state(admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, snat)
    assert rack.nat_entries() == []
    assert all(vm["state"] != "running" for _, vm in rack.vms(instance_id))
    # Stopping again is harmless.
    again = expect(instance_action(admin, instance_id, "stop"), 202)
    assert again["run_state"] == "stopped", again

    # Start again: the same SNAT block comes back (the IP stayed attached while stopped, §4.7).
    expect(instance_action(admin, instance_id, "start"), 202)
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, snat)
    assert nat_keys(rack.nat_entries()) == [snat]
    assert remaining(admin) == POOL_SIZE - 1

    # Reboot: the VM stops and comes up again (its sled counts one more boot), on the same
    # sled, with its SNAT entry.
    sled_before, vm_before = only_vm(rack, instance_id)
    assert vm_before["state"] == "running" and vm_before["boots"] >= 1, vm_before
    rebooting = expect(instance_action(admin, instance_id, "reboot"), 202)
    assert rebooting["run_state"] in ("rebooting", "starting", "running"), rebooting
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, snat)
    sled_after, vm = only_vm(rack, instance_id)
    assert sled_after == sled_before, "a reboot does not move the instance"
    assert vm["boots"] == vm_before["boots"] + 1, (
        f"the sled did not start the VM again: {vm_before} then {vm}")
    assert [ipaddress.ip_address(ip) for ip in vm["external_ips"]] == [snat[0]]
    assert nat_keys(rack.nat_entries()) == [snat]
    assert first_sled in rack.agent_by_id
    wait_sagas_settled(admin)


def test_reboot_of_a_stopped_instance_is_refused(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "cold-1", start=False)["id"]
    assert_error(instance_action(admin, instance_id, "reboot"), 400)
    assert view_instance(admin, instance_id)["run_state"] == "stopped"
    assert rack.vms(instance_id) == [] and rack.nat_entries() == []


def test_migrate_moves_the_vm_and_points_nat_at_the_destination(rack):
    admin = rack.admin
    moving = make_instance(admin, PROJECT, "mover-1")["id"]
    snat = snat_of(0)
    wait_run_state(admin, moving, "running")
    wait_agreement(rack, moving, snat)
    source, _ = only_vm(rack, moving)
    destination = other_sled(rack, source)
    source_address = nat_entry(rack, snat)["sled_address"]

    # To its own sled: refused, nothing changes.
    body = assert_error(migrate(admin, moving, source), 400, "InvalidRequest")
    assert source in body["message"] or "already" in body["message"], body
    assert only_vm(rack, moving)[0] == source

    moved = expect(migrate(admin, moving, destination), 202)
    assert moved["id"] == moving
    wait_run_state(admin, moving, "running")
    wait_agreement(rack, moving, snat)
    assert only_vm(rack, moving)[0] == destination, "the destination sled runs it"
    assert rack.agent_by_id[source].instances() == [], "the source sled no longer has it"
    assert sled_instance_ids(admin, destination) == [moving]
    assert sled_instance_ids(admin, source) == []
    destination_address = nat_entry(rack, snat)["sled_address"]
    assert destination_address != source_address, (
        f"the NAT entry still points at the source sled: {rack.nat_entries()}")
    assert nat_keys(rack.nat_entries()) == [snat]

    # Whatever sled another instance lands on, its NAT entry carries the same underlay address
    # the migrated instance's entry had on that sled.
    other = make_instance(admin, PROJECT, "mover-2")["id"]
    wait_run_state(admin, other, "running")
    wait_agreement(rack, other, snat_of(1))
    other_sled_id, _ = only_vm(rack, other)
    expected = {source: source_address, destination: destination_address}[other_sled_id]
    assert nat_entry(rack, snat_of(1))["sled_address"] == expected, rack.nat_entries()

    # And back: the entry points at the first sled again.
    expect(migrate(admin, moving, source), 202)
    wait_run_state(admin, moving, "running")
    wait_agreement(rack, moving, snat)
    assert only_vm(rack, moving)[0] == source
    assert nat_entry(rack, snat)["sled_address"] == source_address
    assert {s["name"] for s in wait_sagas_settled(admin)} >= {"instance_migrate"}


def test_fleet_admin_migrates_an_instance_of_another_silo(rack):
    """/v1/system operations act across silos for the fleet administrator: the token that lists
    another silo's instance on its sled can also migrate it (by id). Others keep getting 403."""
    admin = rack.admin  # a fleet admin of the default silo
    make_silo(admin, "tenant-b")
    make_pool(admin, "tenant-b-pool", "198.51.100.100", "198.51.100.109")
    link(admin, "tenant-b-pool", silo="tenant-b", default=True)
    tenant = role_client(admin, "tenant-b", "silo_admin")
    make_project(tenant, "b-project")
    instance_id = make_instance(tenant, "b-project", "b-vm")["id"]
    wait_run_state(tenant, instance_id, "running")
    source, _ = only_vm(rack, instance_id)
    destination = other_sled(rack, source)
    assert sled_instance_ids(admin, source) == [instance_id]

    # Not a fleet admin, in either silo: 403, and the VM stays.
    for client in (tenant, role_client(admin, DEFAULT_SILO, "silo_admin")):
        assert_error(migrate(client, instance_id, destination), 403, "Forbidden")
    assert only_vm(rack, instance_id)[0] == source

    moved = expect(migrate(admin, instance_id, destination), 202)
    assert moved["id"] == instance_id and moved["project_id"] == view_instance(
        tenant, instance_id)["project_id"]
    wait_run_state(tenant, instance_id, "running")
    assert only_vm(rack, instance_id)[0] == destination
    assert sled_instance_ids(admin, destination) == [instance_id]
    assert sled_instance_ids(admin, source) == []

    # Names still resolve in the token's own silo, where this project does not exist.
    reply = admin.post("/v1/system/instances/b-vm/migrate", {"dst_sled_id": source},
                       params={"project": "b-project"})
    assert_error(reply, 404, "ObjectNotFound", 'not found: project with name "b-project"')
    missing = str(uuid.uuid4())
    assert_error(migrate(admin, missing, source), 404, "ObjectNotFound",
                 f'not found: instance with id "{missing}"')
    assert only_vm(rack, instance_id)[0] == destination


def test_migrate_of_a_stopped_instance_is_refused(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "parked-1", start=False)["id"]
    for sled_id in rack.agent_by_id:
        assert_error(migrate(admin, instance_id, sled_id), 400, "InvalidRequest")
    assert view_instance(admin, instance_id)["run_state"] == "stopped"
    assert rack.vms(instance_id) == [] and rack.nat_entries() == []
    assert "instance_migrate" not in {s["name"] for s in list_sagas(admin)}


UNLINK_IN_USE = "IP addresses from this pool are in use in the linked silo"


def instance_ip(admin, instance_id, kind):
    items = expect(admin.get(f"/v1/instances/{instance_id}/external-ips"), 200)["items"]
    [ip] = [item["ip"] for item in items if item["kind"] == kind]
    return ip


def test_unlink_is_refused_while_an_instance_holds_snat_or_ephemeral_from_the_pool(rack):
    """A stopped instance keeps its SNAT and ephemeral addresses; the pool they come from
    cannot be unlinked from its silo until they are released (the message names the holder)."""
    admin = rack.admin
    make_pool(admin, "eph-only", "198.51.100.200", "198.51.100.209")
    link(admin, "eph-only")
    both = make_instance(admin, PROJECT, "holder-1", start=False,
                         external_ips=[{"type": "ephemeral", "pool_selector": {
                             "type": "explicit", "pool": POOL}}])["id"]
    eph = make_instance(admin, PROJECT, "holder-2", start=False,
                        external_ips=[{"type": "ephemeral", "pool_selector": {
                            "type": "explicit", "pool": "eph-only"}}])["id"]
    snat = instance_ip(admin, both, "snat")
    assert same_ip(snat, POOL_FIRST)
    eph_ip = instance_ip(admin, eph, "ephemeral")

    assert_error(unlink(admin, POOL), 400, "InvalidRequest",
                 f'{UNLINK_IN_USE} (instance "holder-1" in project "{PROJECT}" holds {snat} as '
                 f'its SNAT address)')
    assert_error(unlink(admin, "eph-only"), 400, "InvalidRequest",
                 f'{UNLINK_IN_USE} (instance "holder-2" in project "{PROJECT}" holds {eph_ip} '
                 f'as its ephemeral address)')
    assert [ln["is_default"] for ln in pool_links(admin, POOL)] == [True]
    assert len(pool_links(admin, "eph-only")) == 1
    assert instance_ip(admin, eph, "ephemeral") == eph_ip

    # Released, the addresses no longer hold the pools.
    expect(admin.delete(f"/v1/instances/{eph}/external-ips/ephemeral"), 204)
    assert unlink(admin, "eph-only").status == 204
    expect(admin.delete(f"/v1/instances/{eph}"), 204)
    assert_error(unlink(admin, POOL), 400, "InvalidRequest", startswith=UNLINK_IN_USE)
    expect(admin.delete(f"/v1/instances/{both}"), 204)
    assert unlink(admin, POOL).status == 204


def test_delete_is_refused_while_running_and_releases_snat_once_stopped(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "doomed-1")["id"]
    snat = snat_of(0)
    wait_run_state(admin, instance_id, "running")
    wait_agreement(rack, instance_id, snat)
    sled_id, _ = only_vm(rack, instance_id)
    assert remaining(admin) == POOL_SIZE - 1
    sagas_before = list_sagas(admin)

    assert_error(admin.delete(f"/v1/instances/{instance_id}"), 400, "InvalidRequest",
                 startswith=RUNNING_DELETE_MESSAGE)
    assert_error(admin.delete("/v1/instances/doomed-1", params={"project": PROJECT}), 400,
                 "InvalidRequest", startswith=RUNNING_DELETE_MESSAGE)

    # Nothing changed (product.md difference 11): the instance, its VM, its SNAT address and
    # its NAT entry are all still there, and no delete saga ran.
    assert view_instance(admin, instance_id)["run_state"] == "running"
    assert remaining(admin) == POOL_SIZE - 1
    assert only_vm(rack, instance_id)[1]["state"] == "running"
    assert [s["id"] for s in list_sagas(admin)] == [s["id"] for s in sagas_before]
    # Another start pushes every pending NAT change to the switch; the first instance's entry
    # must survive it (in Oxide the refused delete has already removed the NAT rows, §8.2).
    bystander = make_instance(admin, PROJECT, "bystander-1")["id"]
    wait_run_state(admin, bystander, "running")
    assert nat_keys(rack.nat_entries()) == sorted([snat, snat_of(1)])
    assert disagreement(rack, instance_id, snat) is None

    expect(instance_action(admin, instance_id, "stop"), 202)
    wait_run_state(admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, snat)
    assert expect(admin.delete(f"/v1/instances/{instance_id}"), 204) is None

    assert_error(admin.get(f"/v1/instances/{instance_id}"), 404, "ObjectNotFound",
                 f'not found: instance with id "{instance_id}"')
    assert_error(admin.get("/v1/instances/doomed-1", params={"project": PROJECT}), 404,
                 "ObjectNotFound", 'not found: instance with name "doomed-1"')
    assert [i["name"] for i in list_all(admin, "/v1/instances", project=PROJECT)] == [
        "bystander-1"]
    # The SNAT block is released: only the bystander's block keeps the first address in use.
    assert remaining(admin) == POOL_SIZE - 1
    assert nat_keys(rack.nat_entries()) == [snat_of(1)]
    assert rack.vms(instance_id) == []
    assert instance_id not in sled_instance_ids(admin, sled_id)

    # Once the bystander is gone too, the pool is back to where it started.
    expect(instance_action(admin, bystander, "stop"), 202)
    wait_run_state(admin, bystander, "stopped")
    expect(admin.delete(f"/v1/instances/{bystander}"), 204)
    assert remaining(admin) == POOL_SIZE
    wait_until(lambda: rack.nat_entries() == [], 5.0, "empty NAT table",
               describe=rack.describe)
    sagas = wait_sagas_settled(admin)
    assert [s["name"] for s in sagas].count("instance_delete") == 2


def test_delete_is_refused_until_the_instance_has_fully_stopped(start_rack):
    # Slow stops on the sleds, so that the instance is seen "stopping" for a while.
    rack = start_rack(sled_flags=("--start-delay-ms", "150", "--stop-delay-ms", "700"))
    make_pool(rack.admin, POOL, POOL_FIRST, POOL_LAST)
    link(rack.admin, POOL, default=True)
    make_project(rack.admin, PROJECT)
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "slow-1")["id"]
    wait_run_state(admin, instance_id, "running")

    stopping = expect(instance_action(admin, instance_id, "stop"), 202)
    assert stopping["run_state"] == "stopping", stopping
    assert_error(admin.delete(f"/v1/instances/{instance_id}"), 400, "InvalidRequest",
                 startswith=RUNNING_DELETE_MESSAGE)
    assert view_instance(admin, instance_id)["run_state"] in ("stopping", "stopped")
    assert remaining(admin) == POOL_SIZE - 1

    wait_run_state(admin, instance_id, "stopped")
    wait_agreement(rack, instance_id, snat_of(0))
    expect(admin.delete(f"/v1/instances/{instance_id}"), 204)
    assert remaining(admin) == POOL_SIZE
    assert rack.nat_entries() == [] and rack.vms(instance_id) == []
    wait_sagas_settled(admin)


def test_delete_of_a_never_started_instance_releases_its_snat(rack):
    admin = rack.admin
    instance_id = make_instance(admin, PROJECT, "brief-1", start=False)["id"]
    assert remaining(admin) == POOL_SIZE - 1
    expect(admin.delete("/v1/instances/brief-1", params={"project": PROJECT}), 204)
    assert remaining(admin) == POOL_SIZE
    assert_error(admin.get(f"/v1/instances/{instance_id}"), 404, "ObjectNotFound")
    # The name is free again and the next instance gets the same (lowest) SNAT block.
    again = make_instance(admin, PROJECT, "brief-1")
    assert again["id"] != instance_id
    wait_run_state(admin, again["id"], "running")
    wait_agreement(rack, again["id"], snat_of(0))
    assert nat_keys(rack.nat_entries()) == [snat_of(0)]


# ---------------------------------------------------------------------------------------------
# SNAT allocation (§6.4)

def test_four_instances_share_one_snat_address_and_the_fifth_gets_the_next(rack):
    admin = rack.admin
    ids = []
    for index in range(5):
        ids.append(make_instance(admin, PROJECT, f"snat-{index}")["id"])
        expected_used = 1 if index < 4 else 2
        assert remaining(admin) == POOL_SIZE - expected_used, f"after instance {index}"
    for index, instance_id in enumerate(ids):
        wait_run_state(admin, instance_id, "running")
        wait_agreement(rack, instance_id, snat_of(index))
    # Blocks [0,16383], [16384,32767], [32768,49151], [49152,65535] of the first address, then
    # block 0 of the second.
    assert nat_keys(rack.nat_entries()) == [snat_of(i) for i in range(5)]
    # Every instance's VM answers on its own SNAT address.
    for index, instance_id in enumerate(ids):
        _, vm = only_vm(rack, instance_id)
        assert [ipaddress.ip_address(ip) for ip in vm["external_ips"]] == [snat_of(index)[0]]
    macs = [e["mac"] for e in rack.nat_entries()]
    assert len(set(macs)) == 5, f"each NAT entry goes to its own VM port: {macs}"

    # A freed block is reused first: delete the second instance, and a new one gets its block.
    expect(instance_action(admin, ids[1], "stop"), 202)
    wait_run_state(admin, ids[1], "stopped")
    expect(admin.delete(f"/v1/instances/{ids[1]}"), 204)
    assert remaining(admin) == POOL_SIZE - 2
    reuse = make_instance(admin, PROJECT, "snat-reuse")["id"]
    wait_run_state(admin, reuse, "running")
    wait_agreement(rack, reuse, snat_of(1))
    assert nat_keys(rack.nat_entries()) == [snat_of(i) for i in range(5)]
    assert remaining(admin) == POOL_SIZE - 2
    wait_sagas_settled(admin)


@pytest.mark.parametrize("nic", ["default_ipv6", "none"])
def test_instance_without_ipv4_has_no_snat(rack, nic):
    admin = rack.admin
    created = make_instance(admin, PROJECT, f"nosnat-{nic.replace('_', '-')}", nic=nic)
    wait_run_state(admin, created["id"], "running")
    wait_agreement(rack, created["id"], None)
    _, vm = only_vm(rack, created["id"])
    assert vm["state"] == "running"
    assert vm["external_ips"] == [], vm
    assert vm.get("snat_ip") is None, vm
    assert rack.nat_entries() == []
    assert remaining(admin) == POOL_SIZE, "no SNAT address taken from the IPv4 pool"

    expect(instance_action(admin, created["id"], "stop"), 202)
    wait_run_state(admin, created["id"], "stopped")
    wait_agreement(rack, created["id"], None)
    expect(admin.delete(f"/v1/instances/{created['id']}"), 204)
    assert remaining(admin) == POOL_SIZE
    wait_sagas_settled(admin)


# ---------------------------------------------------------------------------------------------
# Sled views

def test_sled_views_show_one_sled_per_agent_and_the_instances_on_it(rack):
    admin = rack.admin
    # Once the watcher has heard from every agent, the views stand still (before that a
    # sled's "agent" part changes between the list and the view).
    def all_heard():
        items = expect(admin.get("/v1/system/hardware/sleds"), 200)["items"]
        return items if all(s["agent"]["answers"] for s in items) else None

    sleds = wait_until(all_heard, what="every sled agent heard from")
    assert sorted(s["baseboard"]["serial"] for s in sleds) == sorted(a.url for a in rack.sleds)
    for sled in sleds:
        assert expect(admin.get(f"/v1/system/hardware/sleds/{sled['id']}"), 200) == sled
        assert sled_instance_ids(admin, sled["id"]) == []
    missing = str(uuid.uuid4())
    assert_error(admin.get(f"/v1/system/hardware/sleds/{missing}"), 404, "ObjectNotFound")
    assert_error(admin.get(f"/v1/system/hardware/sleds/{missing}/instances"), 404,
                 "ObjectNotFound")

    created = make_instance(admin, PROJECT, "shown-1", ncpus=2, memory=2 << 30)
    wait_run_state(admin, created["id"], "running")
    sled_id, _ = only_vm(rack, created["id"])
    [item] = expect(admin.get(f"/v1/system/hardware/sleds/{sled_id}/instances"), 200)["items"]
    assert item["id"] == created["id"]
    assert item["name"] == "shown-1"
    assert item["project_name"] == PROJECT
    assert item["silo_name"] == DEFAULT_SILO
    assert item["active_sled_id"] == sled_id
    assert item["state"] == "running"
    assert item["ncpus"] == 2 and item["memory"] == 2 << 30
    assert item.get("migration_id") is None
    assert sled_instance_ids(admin, other_sled(rack, sled_id)) == []

    # Operator views and migration are for fleet admins only.
    for role in ("silo_admin", "silo_collaborator", "silo_viewer"):
        client = role_client(admin, DEFAULT_SILO, role)
        assert_error(client.get("/v1/system/hardware/sleds"), 403, "Forbidden")
        assert_error(client.get(f"/v1/system/hardware/sleds/{sled_id}"), 403, "Forbidden")
        assert_error(client.get(f"/v1/system/hardware/sleds/{sled_id}/instances"), 403,
                     "Forbidden")
        assert_error(migrate(client, created["id"], other_sled(rack, sled_id)), 403,
                     "Forbidden")
        assert_error(client.get("/v1/system/sagas"), 403, "Forbidden")
    assert only_vm(rack, created["id"])[0] == sled_id


# ---------------------------------------------------------------------------------------------
# Tests on one shared server with in-process agents (no dataplane inspection needed)

MOD_POOL = "inst-mod-v4"
MOD_V4_A, MOD_V4_B, MOD_V6_A = "inst-mod-v4a", "inst-mod-v4b", "inst-mod-v6a"
MOD_PROJECT = "inst-mod"


@pytest.fixture(scope="module")
def env(module_server):
    admin = module_server.admin
    make_pool(admin, MOD_POOL, "203.0.113.1", "203.0.113.40")
    link(admin, MOD_POOL, default=True)
    make_pool(admin, MOD_V4_A, "203.0.113.100", "203.0.113.110")
    link(admin, MOD_V4_A)
    make_pool(admin, MOD_V4_B, "203.0.113.120", "203.0.113.130")
    link(admin, MOD_V4_B)
    make_pool(admin, MOD_V6_A, "fd99:1::1", "fd99:1::ff", version="v6")
    link(admin, MOD_V6_A)
    make_project(admin, MOD_PROJECT)
    return module_server


ID_WITH_PROJECT = "when providing instance as an ID project should not be specified"
NAME_WITHOUT_PROJECT = "instance should either be UUID or project should be specified"


def selector_requests(admin, selector, params, other_sled_id):
    """Every instance endpoint, addressed by `selector` with query `params`."""
    base = f"/v1/instances/{selector}"
    return {
        "view": lambda: admin.get(base, params=params),
        "update": lambda: admin.put(base, {"ncpus": 2, "memory": 1 << 30}, params=params),
        "start": lambda: admin.post(f"{base}/start", params=params),
        "stop": lambda: admin.post(f"{base}/stop", params=params),
        "reboot": lambda: admin.post(f"{base}/reboot", params=params),
        "migrate": lambda: admin.post(f"/v1/system/instances/{selector}/migrate",
                                      {"dst_sled_id": other_sled_id}, params=params),
        "delete": lambda: admin.delete(base, params=params),
    }


def test_instance_selector_rules(env):
    admin = env.admin
    created = make_instance(admin, MOD_PROJECT, "selected-1", start=False)
    instance_id = created["id"]
    sled_id = expect(admin.get("/v1/system/hardware/sleds"), 200)["items"][0]["id"]
    missing_id = str(uuid.uuid4())

    cases = [
        (instance_id, {"project": MOD_PROJECT}, 400, ID_WITH_PROJECT),
        (instance_id, {"project": "no-such-project"}, 400, ID_WITH_PROJECT),
        ("selected-1", None, 400, NAME_WITHOUT_PROJECT),
        ("no-such-instance", {"project": MOD_PROJECT}, 404,
         'not found: instance with name "no-such-instance"'),
        (missing_id, None, 404, f'not found: instance with id "{missing_id}"'),
        ("selected-1", {"project": "no-such-project"}, 404,
         'not found: project with name "no-such-project"'),
    ]
    for selector, params, status, message in cases:
        for endpoint, send in selector_requests(admin, selector, params, sled_id).items():
            reply = send()
            assert (reply.status, reply.body["message"]) == (status, message), (
                f"{endpoint} of {selector!r} with {params}: {reply.status} {reply.body}")

    # None of those changed anything.
    view = view_instance(admin, instance_id)
    assert view["run_state"] == "stopped" and view["ncpus"] == 1, view

    # The good forms work: by id without project, by name with project (by name or id).
    project_id = view["project_id"]
    assert expect(admin.get(f"/v1/instances/{instance_id}"), 200)["id"] == instance_id
    for project in (MOD_PROJECT, project_id):
        got = expect(admin.get("/v1/instances/selected-1", params={"project": project}), 200)
        assert got["id"] == instance_id
    updated = expect(admin.put("/v1/instances/selected-1", {"ncpus": 3, "memory": 2 << 30},
                               params={"project": MOD_PROJECT}), 200)
    assert updated["ncpus"] == 3 and updated["memory"] == 2 << 30
    assert view_instance(admin, instance_id)["ncpus"] == 3
    expect(admin.delete("/v1/instances/selected-1", params={"project": MOD_PROJECT}), 204)
    assert_error(admin.get(f"/v1/instances/{instance_id}"), 404, "ObjectNotFound")


def ephemeral(pool=None, version=None, selector=True):
    if not selector:
        return {"type": "ephemeral"}
    if pool is not None:
        return {"type": "ephemeral", "pool_selector": {"type": "explicit", "pool": pool}}
    return {"type": "ephemeral", "pool_selector": {"type": "auto", "ip_version": version}}


def floating(name):
    return {"type": "floating", "floating_ip": name}


EXTERNAL_IP_REFUSALS = [
    ("33 floating", [floating(f"fip-{i}") for i in range(33)], 400,
     "An instance may not have more than 32 external IP addresses"),
    ("33 ephemeral", [ephemeral(version="v4")] * 33, 400,
     "An instance may not have more than 32 external IP addresses"),
    ("3 ephemeral", [ephemeral(version="v4"), ephemeral(version="v6"), ephemeral(MOD_V4_A)],
     400, "An instance may not have more than 2 ephemeral IP addresses"),
    ("two without version", [ephemeral(), ephemeral()], 400,
     "when requesting two ephemeral IPs, IP version or explicit pool name must be specified "
     "on each"),
    ("one without version", [ephemeral(version="v4"), ephemeral()], 400,
     "when requesting two ephemeral IPs, IP version or explicit pool name must be specified "
     "on each"),
    ("no selector and a pool", [ephemeral(selector=False), ephemeral(MOD_V6_A)], 400,
     "when requesting two ephemeral IPs, IP version or explicit pool name must be specified "
     "on each"),
    ("two auto v4", [ephemeral(version="v4"), ephemeral(version="v4")], 400,
     "cannot request two ephemeral IPs of the same version (v4)"),
    ("two auto v6", [ephemeral(version="v6"), ephemeral(version="v6")], 400,
     "cannot request two ephemeral IPs of the same version (v6)"),
    ("same pool twice", [ephemeral(MOD_V4_A), ephemeral(MOD_V4_A)], 400,
     "cannot request two ephemeral IPs from the same pool"),
    ("two v4 pools", [ephemeral(MOD_V4_A), ephemeral(MOD_V4_B)], 400,
     "cannot request two ephemeral IPs of the same version (v4): both pools are v4"),
    ("pool and auto v4", [ephemeral(MOD_V4_A), ephemeral(version="v4")], 400,
     "cannot request two ephemeral IPs of the same version (v4): explicit pool and auto "
     "selection both specify v4"),
    ("auto v6 and pool", [ephemeral(version="v6"), ephemeral(MOD_V6_A)], 400,
     "cannot request two ephemeral IPs of the same version (v6): explicit pool and auto "
     "selection both specify v6"),
    ("unknown pool", [ephemeral("no-such-pool"), ephemeral(version="v6")], 404,
     'not found: ip-pool with name "no-such-pool"'),
]


@pytest.mark.parametrize("external_ips,status,message",
                         [case[1:] for case in EXTERNAL_IP_REFUSALS],
                         ids=[case[0] for case in EXTERNAL_IP_REFUSALS])
def test_create_validates_external_ips(env, external_ips, status, message):
    admin = env.admin
    name = unique("extip")
    reply = create_instance(admin, MOD_PROJECT, name, external_ips=external_ips)
    assert_error(reply, status, None, message)
    assert_error(admin.get(f"/v1/instances/{name}", params={"project": MOD_PROJECT}), 404,
                 "ObjectNotFound")


VALID_EXTERNAL_IPS = [
    ("one ephemeral", [ephemeral()], 0),
    ("no selector", [ephemeral(selector=False)], 0),
    ("auto v4 and a v6 pool", [ephemeral(version="v4"), ephemeral(MOD_V6_A)], 0),
    ("two pools", [ephemeral(MOD_V4_A), ephemeral(MOD_V6_A)], 0),
    ("floating", None, 1),
    ("32 floating", None, 32),
]


@pytest.mark.parametrize("external_ips,fips", [(case[1], case[2]) for case in VALID_EXTERNAL_IPS],
                         ids=[case[0] for case in VALID_EXTERNAL_IPS])
def test_create_attaches_valid_external_ips(env, external_ips, fips):
    """Valid requests are attached in the create saga (§4.4): all of them, none dropped; the
    instance's delete gives them back."""
    admin = env.admin
    name = unique("extip-ok")
    fip_ids = []
    if fips:
        external_ips = []
        for k in range(fips):
            fip = make_fip(admin, MOD_PROJECT, unique(f"extip-fip{k}"))
            fip_ids.append(fip["id"])
            external_ips.append(floating(fip["name"]))
    created = expect(create_instance(admin, MOD_PROJECT, name, external_ips=external_ips), 201)
    listed = expect(admin.get(f"/v1/instances/{created['id']}/external-ips"), 200)["items"]
    non_snat = [ip for ip in listed if ip["kind"] != "snat"]
    assert len(non_snat) == len(external_ips), listed
    assert {ip["id"] for ip in non_snat if ip["kind"] == "floating"} == set(fip_ids)
    if created["run_state"] != "stopped":
        expect(instance_action(admin, created["id"], "stop"), 202)
        wait_run_state(admin, created["id"], "stopped")
    expect(admin.delete(f"/v1/instances/{created['id']}"), 204)
    for fip_id in fip_ids:
        assert expect(admin.get(f"/v1/floating-ips/{fip_id}"), 200)["instance_id"] is None
        expect(admin.delete(f"/v1/floating-ips/{fip_id}"), 204)
    wait_sagas_settled(admin)


def test_empty_external_ips_are_accepted(env):
    admin = env.admin
    created = make_instance(admin, MOD_PROJECT, unique("extip-none"), start=False,
                            external_ips=[])
    expect(admin.delete(f"/v1/instances/{created['id']}"), 204)


def test_create_without_a_default_ipv4_pool_fails_and_leaves_nothing(env):
    admin = env.admin
    silo = unique("nopool-silo")
    make_silo(admin, silo)
    client = role_client(admin, silo, "silo_admin")
    make_project(client, "nopool")

    for nic in ("default_dual_stack", "default_ipv4", None):
        for start in (True, False):
            name = unique("nopool")
            reply = create_instance(client, "nopool", name, nic=nic, start=start)
            assert_error(reply, 404, "ObjectNotFound",
                         "not found: default unicast IPv4 pool for current silo")
            assert_error(client.get(f"/v1/instances/{name}", params={"project": "nopool"}),
                         404, "ObjectNotFound")
    assert list_all(client, "/v1/instances", project="nopool") == []
    sagas = wait_sagas_settled(admin)
    assert all(s["state"] in ("done", "unwound") for s in sagas), sagas

    # A default IPv6 pool does not help: SNAT comes from the default IPv4 pool only.
    v6_pool = unique("nopool-v6")
    make_pool(admin, v6_pool, "fd99:2::1", "fd99:2::ff", version="v6")
    link(admin, v6_pool, silo=silo, default=True)
    assert_error(create_instance(client, "nopool", unique("nopool"), start=False), 404,
                 "ObjectNotFound", "not found: default unicast IPv4 pool for current silo")
    assert list_all(client, "/v1/instances", project="nopool") == []

    # An instance without an IPv4 stack needs no SNAT, so no IPv4 pool (§4.4).
    for nic in ("default_ipv6", "none"):
        created = make_instance(client, "nopool", unique("nopool-v6"), nic=nic, start=False)
        expect(client.delete(f"/v1/instances/{created['id']}"), 204)
    wait_sagas_settled(admin)


def test_create_body_defaults(env):
    """network_interfaces defaults to dual stack (so SNAT is taken) and start to true."""
    admin = env.admin
    # The module's tests delete their instances, so the default pool is unused here.
    before = utilization(admin, MOD_POOL)[1]
    body = instance_body(unique("defaults"), nic=None)
    del body["start"]
    created = expect(admin.post("/v1/instances", body, params={"project": MOD_PROJECT}), 201)
    assert created["run_state"] in ("starting", "running"), created
    assert utilization(admin, MOD_POOL)[1] == before - 1  # an SNAT block of the default pool
    wait_run_state(admin, created["id"], "running")
    expect(instance_action(admin, created["id"], "stop"), 202)
    wait_run_state(admin, created["id"], "stopped")
    expect(admin.delete(f"/v1/instances/{created['id']}"), 204)
    assert utilization(admin, MOD_POOL)[1] == before
