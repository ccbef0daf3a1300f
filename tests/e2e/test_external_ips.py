"""Live attach and detach of floating and ephemeral IPs (issue 4): omicron's external_ips.rs
scenarios 10-27 (omicron-behaviour.md §7.1; scenario 16 is in test_floating_ips.py), the
instance-state and mid-operation 503s (§3.4, product.md differences 1, 2 and 6), instance
delete releasing its addresses (§4.8) and attach at instance create (§2.3, not implemented yet).

Every test runs its own server on external simulated agents (`start_rack`), so that it can
assert the exact addresses of the default pools and look at the dataplane: an attach to a
running instance answers only after the switch agent holds a NAT entry for the address (every
port, pointing at the instance's sled, like its SNAT entry) and the sled agent's VM lists it; a
detach only after both are gone; a stopped instance has neither.

Scenarios that create instances with `external_ips` create them without and attach live; the
create form is asserted separately.
"""

import ipaddress
from collections import Counter
from types import SimpleNamespace

import pytest

from e2e_helpers import (ATTACHED_ELSEWHERE, DELETE_ATTACHED, MAX_EXTERNAL_IPS, NO_ADDRESSES,
                         NO_EPHEMERAL, OTHER_PROJECT, TOO_MANY_IPS, TWO_EPHEMERAL, Background,
                         assert_error, assert_retry_later, attach_ephemeral, attach_fip,
                         auto_pool, create_instance, detach_ephemeral, detach_fip,
                         explicit_pool, expect, from_pool, instance_action, instance_external_ips,
                         link, list_sagas, make_fip, make_instance, make_pool, make_project,
                         migrate, missing_stack_message, nat_key, same_ip, snat_block,
                         utilization, version_first, view_instance, wait_external_ip_agreement,
                         wait_run_state, wait_until)

PROJECT = "rootbeer-float"


@pytest.fixture
def rootbeer(start_rack):
    """omicron's setup on a rack of our own: `default-v4` (10.0.0.0/16) and `default-v6`
    (fd00::/112) as the default silo's defaults, and project `rootbeer-float`."""
    rack = start_rack()
    return prepare(rack)


def prepare(rack):
    admin = rack.admin
    v4 = make_pool(admin, "default-v4", "10.0.0.0", "10.0.255.255")
    v6 = make_pool(admin, "default-v6", "fd00::", "fd00::ffff", version="v6")
    link(admin, "default-v4", default=True)
    link(admin, "default-v6", default=True)
    project = make_project(admin, PROJECT)
    return SimpleNamespace(rack=rack, admin=admin, v4=v4, v6=v6, project=project)


def used(admin, pool):
    capacity, remaining = utilization(admin, pool)
    return capacity - remaining


def running_instance(admin, name, **kwargs):
    created = make_instance(admin, PROJECT, name, **kwargs)
    return wait_run_state(admin, created["id"], "running")


def stopped_instance(admin, name, **kwargs):
    return make_instance(admin, PROJECT, name, start=False, **kwargs)


def fip_view(admin, fip):
    return expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)


# The SNAT blocks of a dual-stack instance here: IPv4 and IPv6, since the silo has a default
# pool of each (floatplane's IPv6 SNAT; Oxide would list one).
DUAL_STACK_SNAT = ["snat", "snat"]


def kinds(items):
    return sorted(item["kind"] for item in items)


def by_kind(items, kind):
    return [item for item in items if item["kind"] == kind]


def saga_states(admin, name):
    return [s["state"] for s in list_sagas(admin) if s["name"] == name]


# -- the dataplane -----------------------------------------------------------------------------

def nat_entries_for(rack, ip):
    return [e for e in rack.nat_entries() if same_ip(e["external_ip"], ip)]


def vms_listing(rack, ip):
    """[(sled id, VM)] of every VM whose external addresses include `ip`."""
    return [(rack.sled_id(agent), vm) for agent in rack.sleds for vm in agent.instances()
            if any(same_ip(a, ip) for a in vm["external_ips"])]


def assert_on_dataplane(rack, instance_id, ip):
    """Right now (no polling: the call that attached it has answered): the switch holds one
    NAT entry for every port of `ip`, to the same sled, VNI and MAC as the instance's SNAT
    entry (when it has one), and exactly the instance's VM lists the address."""
    entries = nat_entries_for(rack, ip)
    assert len(entries) == 1, f"expected one NAT entry for {ip}\n{rack.describe()}"
    [entry] = entries
    assert nat_key(entry) == (ipaddress.ip_address(ip), 0, 65535), entry
    snat = by_kind(instance_external_ips(rack.admin, instance_id), "snat")
    if snat:
        key = (ipaddress.ip_address(snat[0]["ip"]), snat[0]["first_port"], snat[0]["last_port"])
        [snat_entry] = [e for e in rack.nat_entries() if nat_key(e) == key]
        for field in ("sled_address", "vni", "mac"):
            assert entry[field] == snat_entry[field], (
                f"NAT entry for {ip} and the instance's SNAT entry differ in {field}: "
                f"{entry} vs {snat_entry}")
    listing = vms_listing(rack, ip)
    assert [vm["id"] for _, vm in listing] == [instance_id], (
        f"expected only the VM of {instance_id} to list {ip}\n{rack.describe()}")
    vms = rack.vms(instance_id)
    assert len(vms) == 1 and vms[0][1]["state"] == "running", (
        f"expected the instance running on one sled: {vms}")


def assert_off_dataplane(rack, ip):
    """Right now: no NAT entry for any port of `ip` and no VM lists it."""
    assert nat_entries_for(rack, ip) == [], f"NAT entry left for {ip}\n{rack.describe()}"
    assert vms_listing(rack, ip) == [], f"a VM still lists {ip}\n{rack.describe()}"


# ---------------------------------------------------------------------------------------------
# §7.1 scenarios

def test_floating_ip_create_attachment(rootbeer):
    """Scenario 10 (attached live instead of at create)."""
    admin, rack = rootbeer.admin, rootbeer.rack
    fip = make_fip(admin, PROJECT, "holdable", from_pool("default-v4"))
    instance = running_instance(admin, "holder-vm-10")

    attached = expect(attach_fip(admin, "holdable", "holder-vm-10", project=PROJECT), 202)
    assert attached["instance_id"] == instance["id"], attached
    assert (attached["id"], attached["ip"]) == (fip["id"], fip["ip"])
    assert fip_view(admin, fip)["instance_id"] == instance["id"]
    assert_on_dataplane(rack, instance["id"], fip["ip"])

    body = assert_error(admin.delete(f"/v1/floating-ips/{fip['id']}"), 400, "InvalidRequest",
                        startswith=DELETE_ATTACHED)
    assert "holder-vm-10" in body["message"], f"the refusal must name the instance: {body}"
    assert fip_view(admin, fip)["instance_id"] == instance["id"]
    assert_on_dataplane(rack, instance["id"], fip["ip"])

    # Stopped, it keeps the floating IP (in the database only).
    expect(instance_action(admin, instance["id"], "stop"), 202)
    wait_run_state(admin, instance["id"], "stopped")
    assert fip_view(admin, fip)["instance_id"] == instance["id"]
    wait_external_ip_agreement(rack, [PROJECT])
    assert_off_dataplane(rack, fip["ip"])

    expect(admin.delete(f"/v1/instances/{instance['id']}"), 204)
    assert fip_view(admin, fip)["instance_id"] is None
    expect(admin.delete(f"/v1/floating-ips/{fip['id']}"), 204)
    assert used(admin, "default-v4") == 0
    wait_external_ip_agreement(rack, [PROJECT])


def test_external_ip_live_attach_detach(rootbeer):
    """Scenario 11, on a stopped and a running instance, with the dataplane checked."""
    admin, rack = rootbeer.admin, rootbeer.rack
    fips = [make_fip(admin, PROJECT, f"live-fip-{i}", from_pool("default-v4")) for i in range(2)]
    assert used(admin, "default-v4") == 2
    instances = [stopped_instance(admin, "live-0", nic="default_ipv4"),
                 make_instance(admin, PROJECT, "live-1", nic="default_ipv4")]
    wait_run_state(admin, instances[1]["id"], "running")
    running = {instances[1]["id"]}
    for instance in instances:
        assert kinds(instance_external_ips(admin, instance["id"])) == ["snat"]
    assert used(admin, "default-v4") == 3, "the two SNAT blocks share one address"

    attached = {}
    for instance, fip in zip(instances, fips):
        iid = instance["id"]
        eph = expect(attach_ephemeral(admin, iid, explicit_pool("default-v4")), 202)
        assert eph["kind"] == "ephemeral" and eph["ip_pool_id"] == rootbeer.v4["id"], eph
        assert ipaddress.ip_address(eph["ip"]) in ipaddress.ip_network("10.0.0.0/16"), eph
        att = expect(attach_fip(admin, fip["name"], iid, project=PROJECT), 202)
        assert att["instance_id"] == iid and att["ip"] == fip["ip"], att

        items = instance_external_ips(admin, iid)
        assert kinds(items) == ["ephemeral", "floating", "snat"], items
        assert by_kind(items, "ephemeral") == [eph]
        [floating] = by_kind(items, "floating")
        assert floating["id"] == fip["id"] and floating["instance_id"] == iid, floating

        # Repeating either attach changes nothing and answers the same.
        assert expect(attach_ephemeral(admin, iid, explicit_pool("default-v4")), 202) == eph
        assert expect(attach_fip(admin, fip["name"], iid, project=PROJECT), 202) == att
        assert instance_external_ips(admin, iid) == items
        for ip in (eph["ip"], fip["ip"]):
            if iid in running:
                assert_on_dataplane(rack, iid, ip)
            else:
                assert_off_dataplane(rack, ip)
        attached[iid] = (eph, att)
    assert used(admin, "default-v4") == 5
    wait_external_ip_agreement(rack, [PROJECT])

    for instance, fip in zip(instances, fips):
        iid = instance["id"]
        eph, _ = attached[iid]
        assert expect(detach_ephemeral(admin, iid), 204) is None
        detached = expect(detach_fip(admin, fip["name"], project=PROJECT), 202)
        assert detached["ip"] == fip["ip"] and detached["instance_id"] is None, detached
        assert kinds(instance_external_ips(admin, iid)) == ["snat"]
        assert_off_dataplane(rack, eph["ip"])
        assert_off_dataplane(rack, fip["ip"])
        # A detached floating IP detaches again, unchanged; an ephemeral one is gone.
        assert expect(detach_fip(admin, fip["id"]), 202) == detached
        assert_error(detach_ephemeral(admin, iid), 400, "InvalidRequest", NO_EPHEMERAL)
    assert used(admin, "default-v4") == 3

    # Floating IP by name (project) to an instance by id ...
    by_name = expect(attach_fip(admin, fips[0]["name"], instances[0]["id"], project=PROJECT),
                     202)
    assert by_name["instance_id"] == instances[0]["id"]
    assert sorted((i["kind"], i.get("id")) for i in instance_external_ips(
        admin, instances[0]["id"])) == [("floating", fips[0]["id"]), ("snat", None)]
    # ... and by id to an instance by name (looked up in the floating IP's project).
    by_id = expect(attach_fip(admin, fips[1]["id"], instances[1]["name"]), 202)
    assert by_id["instance_id"] == instances[1]["id"]
    assert_on_dataplane(rack, instances[1]["id"], fips[1]["ip"])
    assert_off_dataplane(rack, fips[0]["ip"])
    assert used(admin, "default-v4") == 3
    sagas = wait_external_ip_agreement(rack, [PROJECT])
    done = Counter(s["name"] for s in sagas if s["state"] == "done")
    assert done["ip_attach"] >= 6 and done["ip_detach"] >= 4, done


def test_floating_ip_attach_fail_between_projects(rootbeer):
    """Scenario 12 (the create form is in test_instance_create_with_external_ips)."""
    admin, rack = rootbeer.admin, rootbeer.rack
    make_project(admin, "proj2")
    fip = make_fip(admin, "proj2", "elsewhere", from_pool("default-v4"))
    instance = running_instance(admin, "stay-home")

    assert_error(attach_fip(admin, fip["id"], instance["id"]), 400, "InvalidRequest",
                 OTHER_PROJECT)
    # A parent given by name is looked up in the floating IP's project, which has no such one.
    assert_error(attach_fip(admin, "elsewhere", "stay-home", project="proj2"), 404,
                 "ObjectNotFound", 'not found: instance with name "stay-home"')
    assert fip_view(admin, fip)["instance_id"] is None
    assert kinds(instance_external_ips(admin, instance["id"])) == DUAL_STACK_SNAT
    assert_off_dataplane(rack, fip["ip"])
    assert "done" not in saga_states(admin, "ip_attach")
    wait_external_ip_agreement(rack, [PROJECT, "proj2"])


def test_external_ip_attach_fail_if_in_use_by_other(rootbeer):
    """Scenario 13: the refusal names the instance holding the floating IP (difference 2)."""
    admin, rack = rootbeer.admin, rootbeer.rack
    fips = [make_fip(admin, PROJECT, f"owned-{i}", from_pool("default-v4")) for i in range(2)]
    instances = [make_instance(admin, PROJECT, name) for name in ("first-owner", "second-owner")]
    for instance, fip in zip(instances, fips):
        wait_run_state(admin, instance["id"], "running")
        expect(attach_fip(admin, fip["id"], instance["id"]), 202)
    nat_before = sorted(map(nat_key, rack.nat_entries()), key=version_first)

    body = assert_error(attach_fip(admin, fips[1]["id"], instances[0]["id"]), 400,
                        "InvalidRequest", startswith=ATTACHED_ELSEWHERE)
    assert "second-owner" in body["message"], f"the refusal must name the holder: {body}"
    assert fip_view(admin, fips[1])["instance_id"] == instances[1]["id"]
    assert sorted(map(nat_key, rack.nat_entries()), key=version_first) == nat_before
    assert_on_dataplane(rack, instances[1]["id"], fips[1]["ip"])
    assert_on_dataplane(rack, instances[0]["id"], fips[0]["ip"])
    wait_external_ip_agreement(rack, [PROJECT])


def test_external_ip_attach_fails_after_maximum(rootbeer):
    """Scenario 14: 32 floating IPs attached live to a running IPv4-only instance; the 33rd
    and an ephemeral IP (even of the missing IPv6 stack: the limit is checked first) are
    refused, and nothing leaks."""
    admin, rack = rootbeer.admin, rootbeer.rack
    fips = [make_fip(admin, PROJECT, f"max-{i}", from_pool("default-v4"))
            for i in range(MAX_EXTERNAL_IPS + 1)]
    instance = running_instance(admin, "crowded", nic="default_ipv4")
    iid = instance["id"]
    for fip in fips[:MAX_EXTERNAL_IPS]:
        expect(attach_fip(admin, fip["id"], iid), 202)
    items = instance_external_ips(admin, iid)
    assert len(items) == MAX_EXTERNAL_IPS + 1 and len(by_kind(items, "snat")) == 1, items
    assert len(rack.nat_entries()) == MAX_EXTERNAL_IPS + 1
    v4_used, v6_used = used(admin, "default-v4"), used(admin, "default-v6")

    assert_error(attach_fip(admin, fips[-1]["id"], iid), 400, "InvalidRequest", TOO_MANY_IPS)
    assert fip_view(admin, fips[-1])["instance_id"] is None
    for pool in ("default-v6", "default-v4"):
        assert_error(attach_ephemeral(admin, iid, explicit_pool(pool)), 400, "InvalidRequest",
                     TOO_MANY_IPS)
    assert (used(admin, "default-v4"), used(admin, "default-v6")) == (v4_used, v6_used), (
        "a refused ephemeral attach must release its address")
    assert instance_external_ips(admin, iid) == items
    assert_off_dataplane(rack, fips[-1]["ip"])
    assert len(rack.nat_entries()) == MAX_EXTERNAL_IPS + 1
    wait_external_ip_agreement(rack, [PROJECT])


def test_external_ip_attach_ephemeral_at_pool_exhaustion(rootbeer):
    """Scenario 15."""
    admin, rack = rootbeer.admin, rootbeer.rack
    make_pool(admin, "other-pool", "10.1.0.1", "10.1.0.1")
    first = stopped_instance(admin, "exhaust-1")
    second = stopped_instance(admin, "exhaust-2")
    # Not linked yet: a fleet admin is told so, and how to link it (issue 23 item 8).
    assert_error(attach_ephemeral(admin, first["id"], explicit_pool("other-pool")), 404,
                 "ObjectNotFound",
                 'not found: ip-pool with name "other-pool" (it exists, but is not linked to silo '
                 '"default": link it with POST /v1/system/ip-pools/other-pool/silos)')
    link(admin, "other-pool")

    eph = expect(attach_ephemeral(admin, first["id"], explicit_pool("other-pool")), 202)
    assert eph["ip"] == "10.1.0.1" and eph["kind"] == "ephemeral", eph
    assert_error(attach_ephemeral(admin, second["id"], explicit_pool("other-pool")), 507,
                 "InsufficientCapacity", NO_ADDRESSES + ' in pool "other-pool" for an ephemeral IP')
    assert kinds(instance_external_ips(admin, second["id"])) == DUAL_STACK_SNAT
    # Idempotent even though the pool is exhausted.
    assert expect(attach_ephemeral(admin, first["id"], explicit_pool("other-pool")), 202) == eph
    assert utilization(admin, "other-pool") == (1, 0)
    assert kinds(instance_external_ips(admin, first["id"])) == ["ephemeral", *DUAL_STACK_SNAT]
    wait_external_ip_agreement(rack, [PROJECT])


def test_ephemeral_ip_ip_version_conflict(rootbeer):
    """Scenario 17."""
    admin, rack = rootbeer.admin, rootbeer.rack
    iid = stopped_instance(admin, "dual-17")["id"]

    for selector in (auto_pool(), None):  # an explicit auto selector, and the default body
        assert_error(attach_ephemeral(admin, iid, selector), 400, "InvalidRequest",
                     contains="Multiple")
    assert kinds(instance_external_ips(admin, iid)) == DUAL_STACK_SNAT
    assert (used(admin, "default-v4"), used(admin, "default-v6")) == (1, 1)

    # By instance name and project this time.
    v4 = expect(attach_ephemeral(admin, "dual-17", auto_pool("v4"), project=PROJECT), 202)
    assert ipaddress.ip_address(v4["ip"]).version == 4 and v4["ip_pool_id"] == rootbeer.v4["id"]
    assert by_kind(instance_external_ips(admin, "dual-17", project=PROJECT), "ephemeral") == [v4]
    expect(detach_ephemeral(admin, "dual-17", project=PROJECT), 204)
    v6 = expect(attach_ephemeral(admin, iid, auto_pool("v6")), 202)
    assert ipaddress.ip_address(v6["ip"]).version == 6 and v6["ip_pool_id"] == rootbeer.v6["id"]
    assert sorted(i["ip"] for i in by_kind(instance_external_ips(admin, iid), "ephemeral")) == [
        v6["ip"]]
    wait_external_ip_agreement(rack, [PROJECT])


def test_ephemeral_ip_detach_requires_version_with_dual_stack(rootbeer):
    """Scenario 18, on a running instance: both ephemeral IPs reach the dataplane."""
    admin, rack = rootbeer.admin, rootbeer.rack
    iid = running_instance(admin, "dual-18")["id"]
    v4 = expect(attach_ephemeral(admin, iid, auto_pool("v4")), 202)
    v6 = expect(attach_ephemeral(admin, iid, auto_pool("v6")), 202)
    assert ipaddress.ip_address(v6["ip"]).version == 6, v6
    assert_on_dataplane(rack, iid, v4["ip"])
    assert_on_dataplane(rack, iid, v6["ip"])

    assert_error(detach_ephemeral(admin, iid), 400, "InvalidRequest", TWO_EPHEMERAL)
    assert kinds(instance_external_ips(admin, iid)) == ["ephemeral", "ephemeral", *DUAL_STACK_SNAT]
    assert_on_dataplane(rack, iid, v4["ip"])

    assert expect(detach_ephemeral(admin, iid, "v4"), 204) is None
    assert_off_dataplane(rack, v4["ip"])
    assert_on_dataplane(rack, iid, v6["ip"])
    assert expect(detach_ephemeral(admin, iid, "v6"), 204) is None
    assert_off_dataplane(rack, v6["ip"])
    assert kinds(instance_external_ips(admin, iid)) == DUAL_STACK_SNAT
    assert (used(admin, "default-v4"), used(admin, "default-v6")) == (1, 1)
    wait_external_ip_agreement(rack, [PROJECT])


MISSING_STACK = [
    # (scenario, kind, IP version, NIC of the instance)
    ("19-floating-v4", "floating", 4, "default_ipv6"),
    ("20-floating-v6", "floating", 6, "default_ipv4"),
    ("21-ephemeral-v4", "ephemeral", 4, "default_ipv6"),
    ("22-ephemeral-v6", "ephemeral", 6, "default_ipv4"),
]


@pytest.mark.parametrize("kind,version,nic", [case[1:] for case in MISSING_STACK],
                         ids=[case[0] for case in MISSING_STACK])
def test_cannot_attach_ip_to_instance_missing_its_stack(rootbeer, kind, version, nic):
    """Scenarios 19-22."""
    admin, rack = rootbeer.admin, rootbeer.rack
    pool = f"default-v{version}"
    iid = running_instance(admin, f"single-stack-{kind}", nic=nic)["id"]
    items = instance_external_ips(admin, iid)
    before = used(admin, pool)
    message = missing_stack_message(kind, version, iid)
    if kind == "floating":
        fip = make_fip(admin, PROJECT, "wrong-version", from_pool(pool))
        before += 1
        assert_error(attach_fip(admin, fip["id"], iid), 400, "InvalidRequest", message)
        assert fip_view(admin, fip)["instance_id"] is None
        assert_off_dataplane(rack, fip["ip"])
    else:
        assert_error(attach_ephemeral(admin, iid, explicit_pool(pool)), 400, "InvalidRequest",
                     message)
    assert used(admin, pool) == before, "nothing may stay allocated"
    assert instance_external_ips(admin, iid) == items
    wait_external_ip_agreement(rack, [PROJECT])


def test_can_list_instance_snat_ip(rootbeer):
    """Scenario 23."""
    admin, rack = rootbeer.admin, rootbeer.rack
    iid = running_instance(admin, "snat-23")["id"]
    # And, floatplane's, the IPv6 block a dual-stack instance takes from the default IPv6 pool.
    assert instance_external_ips(admin, iid) == [
        {"kind": "snat", "ip": "10.0.0.0", "ip_pool_id": rootbeer.v4["id"],
         "first_port": 0, "last_port": 16383},
        {"kind": "snat", "ip": "fd00::", "ip_pool_id": rootbeer.v6["id"],
         "first_port": 0, "last_port": 16383}]
    assert sorted((nat_key(e) for e in rack.nat_entries()), key=version_first) == [
        snat_block("10.0.0.0", 0), snat_block("fd00::", 0)]
    wait_external_ip_agreement(rack, [PROJECT])


def test_can_attach_ephemeral_ipv6_to_ipv6_only_instance(rootbeer):
    """Scenario 24 (attached live; by pool id)."""
    admin, rack = rootbeer.admin, rootbeer.rack
    iid = running_instance(admin, "v6-only-24", nic="default_ipv6")["id"]
    assert instance_external_ips(admin, iid) == []
    eph = expect(attach_ephemeral(admin, iid, explicit_pool(rootbeer.v6["id"])), 202)
    assert instance_external_ips(admin, iid) == [
        {"kind": "ephemeral", "ip": "fd00::", "ip_pool_id": rootbeer.v6["id"]}]
    assert eph == instance_external_ips(admin, iid)[0]
    assert_on_dataplane(rack, iid, "fd00::")
    assert used(admin, "default-v4") == 0, "no SNAT for an IPv6-only instance"
    wait_external_ip_agreement(rack, [PROJECT])


def test_can_attach_floating_ipv6_to_ipv6_only_instance(rootbeer):
    """Scenario 25 (attached live)."""
    admin, rack = rootbeer.admin, rootbeer.rack
    fip = make_fip(admin, PROJECT, "v6-fip", from_pool("default-v6"))
    assert fip["ip"] == "fd00::"
    iid = running_instance(admin, "v6-only-25", nic="default_ipv6")["id"]
    expect(attach_fip(admin, fip["id"], iid), 202)
    [item] = instance_external_ips(admin, iid)
    assert item["kind"] == "floating", item
    assert (item["id"], item["instance_id"], item["ip_pool_id"], item["ip"]) == (
        fip["id"], iid, rootbeer.v6["id"], "fd00::"), item
    assert_on_dataplane(rack, iid, "fd00::")
    wait_external_ip_agreement(rack, [PROJECT])


def test_ephemeral_ip_idempotent_attach_with_exhausted_explicit_pool(rootbeer):
    """Scenario 26."""
    admin, rack = rootbeer.admin, rootbeer.rack
    make_pool(admin, "tiny-v4", "10.2.0.1", "10.2.0.1")
    make_pool(admin, "extra-v6", "fd01::1", "fd01::ff", version="v6")
    link(admin, "tiny-v4")
    link(admin, "extra-v6")
    iid = running_instance(admin, "dual-26")["id"]

    v4 = expect(attach_ephemeral(admin, iid, explicit_pool("tiny-v4")), 202)
    assert v4["ip"] == "10.2.0.1", v4
    v6 = expect(attach_ephemeral(admin, iid, explicit_pool("extra-v6")), 202)
    assert v6["ip"] == "fd01::1", v6
    assert expect(attach_ephemeral(admin, iid, explicit_pool("tiny-v4")), 202) == v4
    assert utilization(admin, "tiny-v4") == (1, 0)
    assert kinds(instance_external_ips(admin, iid)) == ["ephemeral", "ephemeral", *DUAL_STACK_SNAT]
    assert_on_dataplane(rack, iid, v4["ip"])
    assert_on_dataplane(rack, iid, v6["ip"])
    wait_external_ip_agreement(rack, [PROJECT])


def test_a_dual_stack_instance_gets_an_ipv6_snat_block_too(rootbeer):
    """Scenario 27, where floatplane differs (product.md, issue 25 item 3): Oxide gives a
    dual-stack instance one SNAT block, IPv4 only; floatplane adds one from the silo's default
    IPv6 pool, and an IPv6-only instance still takes none."""
    admin, rack = rootbeer.admin, rootbeer.rack
    iid = running_instance(admin, "dual-27", nic="default_dual_stack")["id"]
    snat4, snat6 = instance_external_ips(admin, iid)
    assert snat4["kind"] == "snat" and ipaddress.ip_address(snat4["ip"]).version == 4, snat4
    assert snat6["kind"] == "snat" and ipaddress.ip_address(snat6["ip"]).version == 6, snat6
    assert (snat6["first_port"], snat6["last_port"]) == (0, 16383)
    [(_, vm)] = rack.vms(iid)
    assert same_ip(vm["snat_ip"], snat4["ip"]) and same_ip(vm["snat6_ip"], snat6["ip"]), vm
    assert sorted(ipaddress.ip_address(e["external_ip"]).version
                  for e in rack.nat_entries()) == [4, 6]
    assert used(admin, "default-v6") == 1
    v6_only = running_instance(admin, "v6-only-27", nic="default_ipv6")["id"]
    assert instance_external_ips(admin, v6_only) == []
    # Without SNAT asked for, neither.
    none = running_instance(admin, "no-snat-27", nic="default_dual_stack", snat=False)["id"]
    assert instance_external_ips(admin, none) == []
    wait_external_ip_agreement(rack, [PROJECT])


# ---------------------------------------------------------------------------------------------
# Instance states, operations in flight, instance delete

def test_attach_and_detach_wait_out_starting_migrating_and_stopping(start_rack):
    """While the instance starts, migrates or stops, attach and detach answer 503 with
    Retry-After and a message naming the instance (§3.4, difference 1); nothing changes, and
    once it is running or stopped again the same calls succeed."""
    rootbeer = prepare(start_rack(sled_flags=("--start-delay-ms", "1200",
                                              "--stop-delay-ms", "1200")))
    admin, rack = rootbeer.admin, rootbeer.rack
    fips = {name: make_fip(admin, PROJECT, name, from_pool("default-v4"))
            for name in ("kept", "late", "later")}
    iid = stopped_instance(admin, "slowpoke")["id"]
    expect(attach_fip(admin, "kept", iid, project=PROJECT), 202)
    expect(attach_ephemeral(admin, iid, auto_pool("v6")), 202)
    used_before = (used(admin, "default-v4"), used(admin, "default-v6"))

    def run_state():
        return view_instance(admin, iid)["run_state"]

    def refused_while(what, holds, detached_fip):
        assert holds(), f"the instance is not {what}"
        assert_retry_later(attach_fip(admin, detached_fip, iid, project=PROJECT), "slowpoke")
        assert_retry_later(attach_ephemeral(admin, iid, auto_pool("v4")), "slowpoke")
        assert_retry_later(detach_fip(admin, "kept", project=PROJECT), "slowpoke")
        assert_retry_later(detach_ephemeral(admin, iid, "v6"), "slowpoke")
        assert holds(), f"the instance stopped {what} during the test; sleds are too fast"
        assert fip_view(admin, fips["kept"])["instance_id"] == iid
        assert (used(admin, "default-v4"), used(admin, "default-v6")) == used_before

    expect(instance_action(admin, iid, "start"), 202)
    refused_while("starting", lambda: run_state() == "starting", "late")
    wait_run_state(admin, iid, "running")
    expect(attach_fip(admin, "late", iid, project=PROJECT), 202)
    assert_on_dataplane(rack, iid, fips["late"]["ip"])

    [(source, _)] = rack.vms(iid)
    [destination] = [s for s in rack.agent_by_id if s != source]
    # The destination sled takes its time to accept the VM, so that the migration stays in
    # flight; ask while the operator view shows it.
    rack.agent_by_id[destination].add_fault("PUT /instances/*", delay_ms=1500)
    migration = Background(lambda: migrate(admin, iid, destination))

    def migrating():
        items = expect(admin.get(f"/v1/system/hardware/sleds/{source}/instances"), 200)["items"]
        return migration.running() and any(
            item["id"] == iid and item.get("migration_id") for item in items)

    wait_until(migrating, 5.0, "the migration is under way")
    refused_while("migrating", migrating, "later")
    assert migration.running(), "the checks must run while the migration is in flight"
    expect(migration.result(), 202)
    rack.agent_by_id[destination].clear_faults()
    wait_run_state(admin, iid, "running", timeout=15.0)
    wait_external_ip_agreement(rack, [PROJECT])
    assert [s for s, _ in rack.vms(iid)] == [destination]
    assert_on_dataplane(rack, iid, fips["kept"]["ip"])

    expect(instance_action(admin, iid, "stop"), 202)
    refused_while("stopping", lambda: run_state() == "stopping", "later")
    wait_run_state(admin, iid, "stopped", timeout=15.0)
    expect(detach_fip(admin, "kept", project=PROJECT), 202)
    expect(attach_fip(admin, "later", iid, project=PROJECT), 202)
    expect(detach_ephemeral(admin, iid, "v6"), 204)
    assert sorted(i.get("name", i["kind"]) for i in instance_external_ips(admin, iid)) == [
        "late", "later", *DUAL_STACK_SNAT]
    wait_external_ip_agreement(rack, [PROJECT])


def test_ip_in_the_middle_of_an_attach_is_503_for_others(rootbeer):
    """While one attach waits for the switch, a second attach of the same floating IP to
    another instance and its detach answer 503 naming the IP and the instance it is being
    attached to (differences 1, 2, 6); its delete is refused; the instance's list does not
    show it yet (§2.2). The first attach then completes and the places agree."""
    admin, rack = rootbeer.admin, rootbeer.rack
    fip = make_fip(admin, PROJECT, "contested", from_pool("default-v4"))
    first = make_instance(admin, PROJECT, "first-comer")
    second = make_instance(admin, PROJECT, "second-comer")
    for instance in (first, second):
        wait_run_state(admin, instance["id"], "running")

    rack.switch.add_fault("POST /nat/changes", delay_ms=1500)
    attacher = Background(lambda: attach_fip(admin, fip["id"], first["id"]))
    try:
        wait_until(lambda: fip_view(admin, fip)["instance_id"] == first["id"], 5.0,
                   "the floating IP is being attached")
        assert attacher.running(), "the attach answered before the switch did"
        assert_retry_later(attach_fip(admin, fip["id"], second["id"]), "contested",
                           "first-comer")
        assert_retry_later(detach_fip(admin, fip["id"]), "contested", "first-comer")
        body = assert_error(admin.delete(f"/v1/floating-ips/{fip['id']}"), 400,
                            "InvalidRequest", startswith=DELETE_ATTACHED)
        assert "first-comer" in body["message"], body
        assert by_kind(instance_external_ips(admin, first["id"]), "floating") == []
        assert attacher.running(), "the checks above must run while the attach is in flight"
        attached = expect(attacher.result(15.0), 202)
    finally:
        rack.switch.clear_faults()
    assert attached["instance_id"] == first["id"]
    assert_on_dataplane(rack, first["id"], fip["ip"])
    assert fip_view(admin, fip)["instance_id"] == first["id"]
    wait_external_ip_agreement(rack, [PROJECT])


def test_instance_delete_detaches_floating_and_releases_ephemeral_and_snat(rootbeer):
    admin, rack = rootbeer.admin, rootbeer.rack
    make_pool(admin, "eph-pool", "10.3.0.1", "10.3.0.4")
    link(admin, "eph-pool")
    fip = make_fip(admin, PROJECT, "survivor", from_pool("default-v4"))
    iid = running_instance(admin, "short-lived")["id"]
    eph4 = expect(attach_ephemeral(admin, iid, explicit_pool("eph-pool")), 202)
    eph6 = expect(attach_ephemeral(admin, iid, auto_pool("v6")), 202)
    expect(attach_fip(admin, fip["id"], iid), 202)
    # default-v6: the IPv6 ephemeral address and the instance's IPv6 SNAT block's address.
    assert (used(admin, "default-v4"), used(admin, "eph-pool"), used(admin, "default-v6")) == (
        2, 1, 2)

    expect(instance_action(admin, iid, "stop"), 202)
    wait_run_state(admin, iid, "stopped")
    expect(admin.delete(f"/v1/instances/{iid}"), 204)
    assert fip_view(admin, fip)["instance_id"] is None
    assert (used(admin, "default-v4"), used(admin, "eph-pool"), used(admin, "default-v6")) == (
        1, 0, 0), "the SNAT and ephemeral addresses go back to their pools"
    for ip in (fip["ip"], eph4["ip"], eph6["ip"]):
        assert_off_dataplane(rack, ip)
    assert rack.nat_entries() == []

    # The floating IP is free for another instance; the ephemeral address is handed out again.
    other = running_instance(admin, "next-tenant")["id"]
    expect(attach_fip(admin, fip["id"], other), 202)
    again = expect(attach_ephemeral(admin, other, explicit_pool("eph-pool")), 202)
    assert again["ip"] == eph4["ip"]
    assert_on_dataplane(rack, other, fip["ip"])
    wait_external_ip_agreement(rack, [PROJECT])


# ---------------------------------------------------------------------------------------------
# Attach at instance create (§2.3, §4.4): being implemented

CREATE_WITH = [
    ("floating-and-ephemeral", "default_dual_stack", "v4-fip", "v6"),
    ("24-ephemeral-ipv6", "default_ipv6", None, "v6"),
    ("25-floating-ipv6", "default_ipv6", "v6-fip", None),
]


@pytest.mark.parametrize("nic,fip_name,ephemeral_version", [c[1:] for c in CREATE_WITH],
                         ids=[c[0] for c in CREATE_WITH])
def test_instance_create_with_external_ips(rootbeer, nic, fip_name, ephemeral_version):
    """Scenarios 10, 24 and 25 as Oxide runs them: 201, the IPs attached (the floating IP
    by name, looked up in the instance's project; the ephemeral one from the default pool of
    its version, by pool id), and on the dataplane once the instance runs."""
    admin, rack = rootbeer.admin, rootbeer.rack
    requested = []
    if fip_name:
        make_fip(admin, PROJECT, fip_name, from_pool(f"default-{fip_name[:2]}"))
        requested.append({"type": "floating", "floating_ip": fip_name})
    if ephemeral_version:
        pool = rootbeer.v4 if ephemeral_version == "v4" else rootbeer.v6
        requested.append({"type": "ephemeral", "pool_selector": explicit_pool(pool["id"])})
    created = expect(create_instance(admin, PROJECT, "born-with-ips", nic=nic,
                                     external_ips=requested), 201)
    iid = created["id"]
    wait_run_state(admin, iid, "running")
    items = instance_external_ips(admin, iid)
    expected_kinds = (["ephemeral"] if ephemeral_version else []) + (
        ["floating"] if fip_name else []) + (["snat"] if nic != "default_ipv6" else []) + (
        ["snat"] if nic == "default_dual_stack" else [])
    assert kinds(items) == expected_kinds, items
    if fip_name:
        fip = expect(admin.get(f"/v1/floating-ips/{fip_name}", params={"project": PROJECT}), 200)
        assert fip["instance_id"] == iid
        assert_on_dataplane(rack, iid, fip["ip"])
    if ephemeral_version == "v6":
        [eph] = by_kind(items, "ephemeral")
        # A dual-stack instance's IPv6 SNAT block took fd00:: first (its create's snat node).
        first = "fd00::1" if nic == "default_dual_stack" else "fd00::"
        assert (eph["ip"], eph["ip_pool_id"]) == (first, rootbeer.v6["id"]), eph
        assert_on_dataplane(rack, iid, eph["ip"])
    wait_external_ip_agreement(rack, [PROJECT])

    # Scenario 10's end: attached, so not deletable; stopping and deleting the instance frees it.
    if fip_name:
        assert_error(admin.delete(f"/v1/floating-ips/{fip_name}", params={"project": PROJECT}),
                     400, "InvalidRequest", startswith=DELETE_ATTACHED)
        expect(instance_action(admin, iid, "stop"), 202)
        wait_run_state(admin, iid, "stopped")
        expect(admin.delete(f"/v1/instances/{iid}"), 204)
        expect(admin.delete(f"/v1/floating-ips/{fip_name}", params={"project": PROJECT}), 204)


def test_instance_create_with_external_ips_refusals(rootbeer):
    """Scenarios 12 and 13 at create: a floating IP of another project (by id) or attached to
    another instance is refused with the attach messages, and no instance is left behind;
    scenario 14's instance created with 32 floating IPs refuses a 33rd."""
    admin = rootbeer.admin
    make_project(admin, "proj2")
    foreign = make_fip(admin, "proj2", "foreign", from_pool("default-v4"))
    taken = make_fip(admin, PROJECT, "taken", from_pool("default-v4"))
    holder = stopped_instance(admin, "holder")
    expect(attach_fip(admin, taken["id"], holder["id"]), 202)

    reply = create_instance(admin, PROJECT, "greedy-1", start=False,
                            external_ips=[{"type": "floating", "floating_ip": foreign["id"]}])
    assert_error(reply, 400, "InvalidRequest", OTHER_PROJECT)
    reply = create_instance(admin, PROJECT, "greedy-2", start=False,
                            external_ips=[{"type": "floating", "floating_ip": "taken"}])
    body = assert_error(reply, 400, "InvalidRequest", startswith=ATTACHED_ELSEWHERE)
    assert "holder" in body["message"], body
    for name in ("greedy-1", "greedy-2"):
        assert_error(admin.get(f"/v1/instances/{name}", params={"project": PROJECT}), 404,
                     "ObjectNotFound")
    assert fip_view(admin, foreign)["instance_id"] is None
    assert fip_view(admin, taken)["instance_id"] == holder["id"]

    fips = [make_fip(admin, PROJECT, f"many-{i}", from_pool("default-v4"))
            for i in range(MAX_EXTERNAL_IPS + 1)]
    created = expect(create_instance(
        admin, PROJECT, "full-at-birth", start=False, nic="default_ipv4",
        external_ips=[{"type": "floating", "floating_ip": f["name"]}
                      for f in fips[:MAX_EXTERNAL_IPS]]), 201)
    assert len(instance_external_ips(admin, created["id"])) == MAX_EXTERNAL_IPS + 1
    assert_error(attach_fip(admin, fips[-1]["id"], created["id"]), 400, "InvalidRequest",
                 TOO_MANY_IPS)
