"""Who holds which address (issue 25, item 2): an operator lists a pool's allocated addresses,
optionally of one range, in address order and paginated, with kind, ports, instance, project
and silo; removing a range that holds addresses names how many and the first holders. Its own
silo, so that the default pool it sets concerns no other test."""

import json
import subprocess

import pytest

from e2e_helpers import (add_range, assert_error, attach_ephemeral, expect, explicit_ip,
                         from_pool, link, list_all, list_pages, make_fip, make_instance,
                         make_pool, make_project, make_silo, remove_range, role_client,
                         wait_run_state)

SILO = "addr-silo"
POOL = "addr-pool"
PROJECT = "addr-project"


@pytest.fixture(scope="module")
def world(module_server):
    """A silo whose default pool (10.20.0.0-10.20.0.15, and a second range 10.20.1.0-3) holds:
    the SNAT blocks of running instances `vm` and `vm2` (one address), vm's ephemeral IP, a
    floating IP `web` attached to vm, a floating IP `spare` attached to nothing, and `pinned`
    at 10.20.1.2."""
    admin = module_server.admin
    make_silo(admin, SILO)
    make_pool(admin, POOL, "10.20.0.0", "10.20.0.15")
    add_range(admin, POOL, "10.20.1.0", "10.20.1.3")
    link(admin, POOL, silo=SILO, default=True)
    tenant = role_client(admin, SILO, "silo_admin")
    make_project(tenant, PROJECT)
    vm = make_instance(tenant, PROJECT, "vm", nic=None)
    wait_run_state(tenant, vm["id"], "running")
    # A second instance shares the SNAT address (another block of its ports).
    vm2 = make_instance(tenant, PROJECT, "vm2", nic=None)
    wait_run_state(tenant, vm2["id"], "running")
    web = make_fip(tenant, PROJECT, "web", from_pool(POOL))
    expect(tenant.post(f"/v1/floating-ips/{web['id']}/attach",
                       {"kind": "instance", "parent": vm["id"]}), 202)
    expect(attach_ephemeral(tenant, vm["id"], {"type": "explicit", "pool": POOL}), 202)
    make_fip(tenant, PROJECT, "spare", from_pool(POOL))
    make_fip(tenant, PROJECT, "pinned", explicit_ip("10.20.1.2"))
    return module_server, tenant, vm


def addresses(admin, **params):
    return list_all(admin, f"/v1/system/ip-pools/{POOL}/addresses", **params)


def test_every_allocated_address_is_listed_in_order_with_its_holder(world):
    server, _, vm = world
    items = addresses(server.admin)
    assert [(a["ip"], a["kind"], a["first_port"]) for a in items] == [
        ("10.20.0.0", "snat", 0), ("10.20.0.0", "snat", 16384), ("10.20.0.1", "floating", 0),
        ("10.20.0.2", "ephemeral", 0), ("10.20.0.3", "floating", 0),
        ("10.20.1.2", "floating", 0)], items
    snat, snat2, web, ephemeral, spare, pinned = items
    assert (snat["first_port"], snat["last_port"]) == (0, 16383)
    assert (snat2["instance_name"], snat2["last_port"]) == ("vm2", 32767)
    for held in (snat, web, ephemeral):
        assert (held["instance_id"], held["instance_name"]) == (vm["id"], "vm"), held
    assert snat["name"] is None and web["name"] == "web"
    for a in items:
        assert (a["project_name"], a["silo_name"]) == (PROJECT, SILO), a
        assert a["time_created"].endswith("Z")
    # A floating IP attached to nothing is still its project's.
    assert (spare["name"], spare["instance_id"]) == ("spare", None)
    assert pinned["name"] == "pinned"
    # Pages of one give the same list (the two blocks of one address on pages of their own).
    paged = list_pages(server.admin, f"/v1/system/ip-pools/{POOL}/addresses", 1)
    assert [a["external_ip_id"] for page in paged for a in page] == \
        [a["external_ip_id"] for a in items]


def test_one_ranges_addresses_and_a_range_the_pool_does_not_have(world):
    server = world[0]
    only = addresses(server.admin, first="10.20.1.0", last="10.20.1.3")
    assert [a["name"] for a in only] == ["pinned"]
    # A next page keeps to its range without the filter given again.
    first_page = expect(server.admin.get(f"/v1/system/ip-pools/{POOL}/addresses",
                                         params={"first": "10.20.0.0", "last": "10.20.0.15",
                                                 "limit": 3}), 200)
    rest = expect(server.admin.get(f"/v1/system/ip-pools/{POOL}/addresses",
                                   params={"page_token": first_page["next_page"]}), 200)
    assert [a["ip"] for a in first_page["items"] + rest["items"]] == \
        ["10.20.0.0", "10.20.0.0", "10.20.0.1", "10.20.0.2", "10.20.0.3"]
    assert_error(server.admin.get(f"/v1/system/ip-pools/{POOL}/addresses",
                                  params={"page_token": first_page["next_page"],
                                          "first": "10.20.1.0", "last": "10.20.1.3"}),
                 400, "InvalidRequest", startswith='unable to parse query string: parameter '
                                                   '"page_token"')
    assert_error(server.admin.get(f"/v1/system/ip-pools/{POOL}/addresses",
                                  params={"first": "10.20.2.0", "last": "10.20.2.3"}),
                 400, "InvalidRequest", "The provided range 10.20.2.0-10.20.2.3 does not exist")
    assert_error(server.admin.get(f"/v1/system/ip-pools/{POOL}/addresses",
                                  params={"first": "10.20.1.0"}), 400, "InvalidRequest",
                 startswith='unable to parse query string: parameter "last"')


def test_only_a_fleet_admin_sees_the_holders(world):
    _, tenant, _ = world
    assert tenant.get(f"/v1/system/ip-pools/{POOL}/addresses").status == 403


def test_a_range_that_holds_addresses_is_kept_naming_how_many_and_the_first_holders(world):
    server = world[0]
    assert_error(
        remove_range(server.admin, POOL, "10.20.0.0", "10.20.0.15"), 400, "InvalidRequest",
        'IP pool ranges cannot be deleted while external IP addresses are allocated from them: '
        '5 allocations remain in 10.20.0.0-10.20.0.15: the SNAT of instance "vm" '
        '(10.20.0.0 ports 0-16383), the SNAT of instance "vm2" (10.20.0.0 ports 16384-32767), '
        'floating IP "web" (10.20.0.1), ... (all of them: GET '
        '/v1/system/ip-pools/addr-pool/addresses)')
    assert_error(remove_range(server.admin, POOL, "10.20.1.0", "10.20.1.3"), 400,
                 "InvalidRequest",
                 'IP pool ranges cannot be deleted while external IP addresses are allocated '
                 'from them: 1 allocation remains in 10.20.1.0-10.20.1.3: floating IP "pinned" '
                 '(10.20.1.2)')


def test_the_cli_lists_the_holders_in_a_table(world, floatplane_bin):
    server = world[0]
    env = {"OXIDE_HOST": f"http://127.0.0.1:{server.port}", "OXIDE_TOKEN": server.admin.token,
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(floatplane_bin), "system", "networking", "ip-pool", "address",
                           "list", "--pool", POOL, "--format", "table"], capture_output=True,
                          text=True, env=env, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines[0] == ["IP", "KIND", "PORTS", "NAME", "INSTANCE_NAME", "PROJECT_NAME",
                        "SILO_NAME", "TIME_CREATED"], done.stdout
    assert lines[1][:3] == ["10.20.0.0", "snat", "0-16383"], done.stdout
    assert lines[2][:3] == ["10.20.0.0", "snat", "16384-32767"], done.stdout
    assert lines[3][:4] == ["10.20.0.1", "floating", "web", "vm"], done.stdout
    assert len(lines) == 7
    one_range = subprocess.run(
        [str(floatplane_bin), "system", "networking", "ip-pool", "address", "list", "--pool",
         POOL, "--first", "10.20.1.0", "--last", "10.20.1.3"], capture_output=True, text=True,
        env=env, timeout=30, check=False)
    assert [a["name"] for a in json.loads(one_range.stdout)] == ["pinned"], one_range.stderr
