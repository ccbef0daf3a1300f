"""Floating IPs: omicron's external_ips.rs scenarios 1-9 and 16 (omicron-behaviour.md §7.1),
then allocation (§6: every address_allocator form, lowest free address over ranges, reuse,
exhaustion, no fallback to another pool), update, delete, list pagination and sorting.

Scenarios that assert exact addresses of the default pools get a server of their own
(`rootbeer`); the others share one server (`env`) and use their own pools and silos."""

import ipaddress
import uuid
from types import SimpleNamespace

import pytest

from e2e_helpers import (DEFAULT_SILO, NO_ALLOCATOR, assert_error, create_fip, create_instance,
                         delete_fip, expect, explicit_ip, from_default, from_pool, ip_list, ips,
                         link, list_all, list_pages, make_fip, make_pool, make_project,
                         make_silo, names, role_client, same_ip, timestamp_ns, unlink,
                         utilization)

PROJECT = "rootbeer-float"
MULTIPLE_DEFAULTS = ("Multiple default unicast IP pools exist with different IP versions. "
                     "Please specify ip_version (v4 or v6) or provide an explicit pool.")
def not_linked(pool, by="name", silo=DEFAULT_SILO):
    """Oxide's 404 for a pool not linked to the caller's silo, as a fleet admin reads it: with
    why and what to do (issue 23 item 8). A silo's users get Oxide's words alone."""
    return (f'not found: ip-pool with {by} "{pool}" (it exists, but is not linked to silo '
            f'"{silo}": link it with POST /v1/system/ip-pools/{pool}/silos)')


def no_addresses(pool, fip):
    """Oxide's message, then the pool that is full and the floating IP it was for."""
    return (f'Insufficient capacity: No external IP addresses available in pool "{pool}" for '
            f'floating IP "{fip}"')


def create_default_ip_pools(admin):
    """omicron's create_default_ip_pools: default-v4 and default-v6 as the silo's defaults."""
    v4 = make_pool(admin, "default-v4", "10.0.0.0", "10.0.255.255")
    v6 = make_pool(admin, "default-v6", "fd00::", "fd00::ffff", version="v6")
    link(admin, "default-v4", DEFAULT_SILO, default=True)
    link(admin, "default-v6", DEFAULT_SILO, default=True)
    return v4, v6


def prepare_rootbeer(server):
    v4, v6 = create_default_ip_pools(server.admin)
    project = make_project(server.admin, PROJECT)
    return SimpleNamespace(server=server, admin=server.admin, v4=v4, v6=v6, project=project)


@pytest.fixture
def rootbeer(server):
    """A server of the test's own with the default pools and project `rootbeer-float`."""
    return prepare_rootbeer(server)


@pytest.fixture(scope="module")
def env(module_server):
    """The shared server, with the same setup."""
    return prepare_rootbeer(module_server)


def fip_path(fip):
    return f"/v1/floating-ips/{fip['id']}"


# -- §7.1 scenarios ----------------------------------------------------------------------------

def test_floating_ip_access(rootbeer):
    admin = rootbeer.admin
    fip = make_fip(admin, PROJECT, "access", from_pool("default-v6"))
    assert ipaddress.ip_address(fip["ip"]).version == 6

    by_id = expect(admin.get(fip_path(fip)), 200)
    by_name_and_project_id = expect(
        admin.get("/v1/floating-ips/access", params={"project": rootbeer.project["id"]}), 200)
    by_name_and_project_name = expect(
        admin.get("/v1/floating-ips/access", params={"project": PROJECT}), 200)
    assert by_id == by_name_and_project_id == by_name_and_project_name == fip


def test_floating_ip_create(rootbeer):
    admin = rootbeer.admin
    assert utilization(admin, "default-v4") == (65536, 65536)

    auto = make_fip(admin, PROJECT, "auto", from_pool("default-v4"))
    assert auto["ip"] == "10.0.0.0"
    assert auto["project_id"] == rootbeer.project["id"]
    assert auto["ip_pool_id"] == rootbeer.v4["id"]
    assert auto.get("instance_id") is None
    assert auto["name"] == "auto"
    assert auto["description"] == "floating IP auto"
    assert utilization(admin, "default-v4") == (65536, 65535)

    explicit = make_fip(admin, PROJECT, "explicit", explicit_ip("10.0.12.34"))
    assert explicit["ip"] == "10.0.12.34"
    assert explicit["ip_pool_id"] == rootbeer.v4["id"]
    assert utilization(admin, "default-v4") == (65536, 65534)

    other = make_pool(admin, "other-pool", "10.1.0.1", "10.1.0.5")
    assert_error(create_fip(admin, PROJECT, "from-other", from_pool("other-pool")), 404,
                 "ObjectNotFound", not_linked("other-pool"))
    assert utilization(admin, "other-pool") == (5, 5)

    link(admin, "other-pool", DEFAULT_SILO, default=False)
    from_other = make_fip(admin, PROJECT, "from-other", from_pool("other-pool"))
    assert from_other["ip"] == "10.1.0.1"
    assert from_other["ip_pool_id"] == other["id"]

    inferred = make_fip(admin, PROJECT, "inferred", explicit_ip("10.1.0.5"))
    assert inferred["ip_pool_id"] == other["id"]
    assert utilization(admin, "other-pool") == (5, 3)
    assert utilization(admin, "default-v4") == (65536, 65534)


def test_floating_ip_create_non_admin(env):
    admin = env.admin
    make_silo(admin, "fip-user-silo")
    make_pool(admin, "fip-user-default", "10.10.0.0", "10.10.0.255")
    make_pool(admin, "fip-user-linked", "10.11.0.0", "10.11.0.255")
    make_pool(admin, "unlinked-pool", "10.12.0.0", "10.12.0.255")
    link(admin, "fip-user-default", "fip-user-silo", default=True)
    link(admin, "fip-user-linked", "fip-user-silo")

    user = role_client(admin, "fip-user-silo", "silo_collaborator")
    make_project(user, "user-project")
    auto = make_fip(user, "user-project", "auto")
    assert ipaddress.ip_address(auto["ip"]) in ipaddress.ip_network("10.10.0.0/24")
    linked = make_fip(user, "user-project", "linked", from_pool("fip-user-linked"))
    assert ipaddress.ip_address(linked["ip"]) in ipaddress.ip_network("10.11.0.0/24")
    assert_error(create_fip(user, "user-project", "unlinked", from_pool("unlinked-pool")), 404,
                 "ObjectNotFound", 'not found: ip-pool with name "unlinked-pool"')


def test_floating_ip_create_fails_in_other_silo_pool(env):
    admin = env.admin
    make_pool(admin, "external-silo-pool", "10.13.0.0", "10.13.0.255")
    message = not_linked("external-silo-pool")
    assert_error(create_fip(admin, PROJECT, "elsewhere", from_pool("external-silo-pool")), 404,
                 "ObjectNotFound", message)

    make_silo(admin, "fip-external-silo")
    link(admin, "external-silo-pool", "fip-external-silo", default=True)
    assert_error(create_fip(admin, PROJECT, "elsewhere", from_pool("external-silo-pool")), 404,
                 "ObjectNotFound", message)
    # Nor can its addresses be reserved explicitly from this silo.
    assert_error(create_fip(admin, PROJECT, "elsewhere", explicit_ip("10.13.0.7")), 400,
                 "InvalidRequest", "IP address 10.13.0.7 is not in any configured pool")
    assert utilization(admin, "external-silo-pool") == (256, 256)


def test_floating_ip_create_ip_in_use(rootbeer):
    admin = rootbeer.admin
    make_fip(admin, PROJECT, "first", explicit_ip("10.0.0.0"))
    assert_error(create_fip(admin, PROJECT, "second", explicit_ip("10.0.0.0")), 400,
                 "InvalidRequest", "Requested external IP address not available")
    assert utilization(admin, "default-v4") == (65536, 65535)


def test_floating_ip_create_ip_not_in_pool(env):
    assert_error(create_fip(env.admin, PROJECT, "nowhere", explicit_ip("192.168.1.100")), 400,
                 "InvalidRequest", "IP address 192.168.1.100 is not in any configured pool")


def test_floating_ip_create_name_in_use(env):
    admin = env.admin
    make_fip(admin, PROJECT, "in-use", from_default("v4"))
    assert_error(create_fip(admin, PROJECT, "in-use", from_default("v4")), 400,
                 "ObjectAlreadyExists", 'already exists: floating-ip "in-use"')
    # The same name in another project is fine.
    make_project(admin, "other-float")
    make_fip(admin, "other-float", "in-use", from_default("v4"))


def test_floating_ip_update(env):
    admin = env.admin
    fip = make_fip(admin, PROJECT, "before-update", from_default("v4"))
    updated = expect(admin.put(fip_path(fip), {"name": "after-update",
                                               "description": "updated"}), 200)
    assert updated["name"] == "after-update"
    assert updated["description"] == "updated"
    for unchanged in ("id", "ip", "ip_pool_id", "project_id", "time_created"):
        assert updated[unchanged] == fip[unchanged], unchanged
    assert updated.get("instance_id") is None
    assert timestamp_ns(updated["time_modified"]) > timestamp_ns(fip["time_modified"])
    assert expect(admin.get(fip_path(fip)), 200) == updated
    assert_error(admin.get("/v1/floating-ips/before-update", params={"project": PROJECT}), 404,
                 "ObjectNotFound", 'not found: floating-ip with name "before-update"')


def test_floating_ip_delete(rootbeer):
    admin = rootbeer.admin
    fip = make_fip(admin, PROJECT, "doomed", from_default("v4"))
    # Omicron's message; floatplane may go on to name the holder (product.md).
    assert_error(unlink(admin, "default-v4"), 400, "InvalidRequest",
                 startswith="IP addresses from this pool are in use in the linked silo")

    delete_fip(admin, fip["id"])
    assert_error(admin.get(fip_path(fip)), 404, "ObjectNotFound",
                 f'not found: floating-ip with id "{fip["id"]}"')
    assert unlink(admin, "default-v4").status == 204
    assert [p["name"] for p in list_all(admin, "/v1/system/silos/default/ip-pools")] == [
        "default-v6"]


def test_floating_ip_ip_version_conflict(env):
    admin = env.admin
    assert_error(create_fip(admin, PROJECT, "no-version", from_default()), 400,
                 "InvalidRequest", MULTIPLE_DEFAULTS)
    v4 = make_fip(admin, PROJECT, "version-v4", from_default("v4"))
    assert ipaddress.ip_address(v4["ip"]).version == 4
    assert v4["ip_pool_id"] == env.v4["id"]
    v6 = make_fip(admin, PROJECT, "version-v6", from_default("v6"))
    assert ipaddress.ip_address(v6["ip"]).version == 6
    assert v6["ip_pool_id"] == env.v6["id"]


# -- selectors ---------------------------------------------------------------------------------

def test_floating_ip_selector_rules(env):
    admin = env.admin
    fip = make_fip(admin, PROJECT, "selected", from_default("v4"))
    assert_error(admin.get(fip_path(fip), params={"project": PROJECT}), 400, "InvalidRequest",
                 "when providing Floating IP as an ID project should not be specified")
    assert_error(admin.get("/v1/floating-ips/selected"), 400, "InvalidRequest",
                 "Floating IP should either be UUID or project should be specified")
    for method, body in (("PUT", {"description": "x"}), ("DELETE", None)):
        kwargs = {"body": body} if body is not None else {}
        assert_error(admin.request(method, "/v1/floating-ips/selected", **kwargs), 400,
                     "InvalidRequest",
                     "Floating IP should either be UUID or project should be specified")
        assert_error(admin.request(method, fip_path(fip), params={"project": PROJECT},
                                   **kwargs), 400, "InvalidRequest",
                     "when providing Floating IP as an ID project should not be specified")
    assert expect(admin.get(fip_path(fip)), 200) == fip

    missing = str(uuid.uuid4())
    assert_error(admin.get(f"/v1/floating-ips/{missing}"), 404, "ObjectNotFound",
                 f'not found: floating-ip with id "{missing}"')
    assert_error(admin.get("/v1/floating-ips/never-made", params={"project": PROJECT}), 404,
                 "ObjectNotFound", 'not found: floating-ip with name "never-made"')
    assert_error(admin.get("/v1/floating-ips/selected", params={"project": "no-project"}), 404,
                 "ObjectNotFound", 'not found: project with name "no-project"')


# -- allocation --------------------------------------------------------------------------------

def test_every_address_allocator_form(rootbeer):
    admin = rootbeer.admin
    v4, v6 = rootbeer.v4["id"], rootbeer.v6["id"]

    # Both versions have a default, so every form that names no version is refused.
    for allocator in ({"type": "auto"},
                      {"type": "auto", "pool_selector": {"type": "auto"}},
                      {"type": "auto", "pool_selector": {"type": "auto", "ip_version": None}}):
        assert_error(create_fip(admin, PROJECT, "ambiguous", allocator), 400, "InvalidRequest",
                     MULTIPLE_DEFAULTS)
    assert_error(create_fip(admin, PROJECT, "ambiguous"), 400, "InvalidRequest",
                 MULTIPLE_DEFAULTS)

    cases = [
        ("default-v4", from_default("v4"), "10.0.0.0", v4),
        ("default-v6", from_default("v6"), "fd00::", v6),
        ("pool-by-name", from_pool("default-v4"), "10.0.0.1", v4),
        ("pool-by-id", from_pool(v6), "fd00::1", v6),
        ("explicit-v4", explicit_ip("10.0.0.200"), "10.0.0.200", v4),
        ("explicit-v6", explicit_ip("fd00::ab"), "fd00::ab", v6),
        ("lowest-again", from_default("v4"), "10.0.0.2", v4),
    ]
    for name, allocator, ip, pool_id in cases:
        fip = make_fip(admin, PROJECT, name, allocator)
        assert same_ip(fip["ip"], ip), (name, fip)
        assert fip["ip_pool_id"] == pool_id, (name, fip)
    assert utilization(admin, "default-v4") == (65536, 65532)
    assert utilization(admin, "default-v6") == (65536, 65533)


def test_forms_without_version_use_the_only_default(env):
    admin = env.admin
    make_silo(admin, "fip-one-default")
    pool = make_pool(admin, "fip-one-default", "10.14.0.0", "10.14.0.255")
    link(admin, "fip-one-default", "fip-one-default", default=True)
    user = role_client(admin, "fip-one-default", "silo_collaborator")
    make_project(user, "one-default")
    allocators = [NO_ALLOCATOR, {"type": "auto"},
                  {"type": "auto", "pool_selector": {"type": "auto"}},
                  from_default(None), from_default("v4")]
    fips = [make_fip(user, "one-default", f"form-{i}", allocator)
            for i, allocator in enumerate(allocators)]
    assert ips(fips) == ip_list("10.14.0.0", "10.14.0.1", "10.14.0.2", "10.14.0.3", "10.14.0.4")
    assert {f["ip_pool_id"] for f in fips} == {pool["id"]}
    assert_error(create_fip(user, "one-default", "form-v6", from_default("v6")), 404,
                 "ObjectNotFound", "not found: default unicast IPv6 pool for current silo")


def test_lowest_free_address_wins_across_ranges(env):
    admin = env.admin
    make_pool(admin, "fip-multi", "10.40.0.10", "10.40.0.11")
    make_project(admin, "multi-range")
    link(admin, "fip-multi")
    # Added second, but lower: its addresses go first.
    make_fip(admin, "multi-range", "before-low-range", from_pool("fip-multi"))
    expect(admin.post("/v1/system/ip-pools/fip-multi/ranges/add",
                      {"first": "10.40.0.1", "last": "10.40.0.2"}), 201)
    fips = [make_fip(admin, "multi-range", f"multi-{i}", from_pool("fip-multi"))
            for i in range(3)]
    assert ips(fips) == ip_list("10.40.0.1", "10.40.0.2", "10.40.0.11")
    assert_error(create_fip(admin, "multi-range", "multi-full", from_pool("fip-multi")), 507,
                 "InsufficientCapacity", no_addresses("fip-multi", "multi-full"))


def test_exhausted_range_is_skipped(env):
    admin = env.admin
    make_pool(admin, "fip-skip", "10.41.0.1", "10.41.0.2")
    expect(admin.post("/v1/system/ip-pools/fip-skip/ranges/add",
                      {"first": "10.41.0.100", "last": "10.41.0.101"}), 201)
    link(admin, "fip-skip")
    make_project(admin, "skip-range")
    make_fip(admin, "skip-range", "fill-1", explicit_ip("10.41.0.1"))
    make_fip(admin, "skip-range", "fill-2", explicit_ip("10.41.0.2"))
    fip = make_fip(admin, "skip-range", "next", from_pool("fip-skip"))
    assert fip["ip"] == "10.41.0.100"
    assert_error(create_fip(admin, "skip-range", "again", explicit_ip("10.41.0.2")), 400,
                 "InvalidRequest", "Requested external IP address not available")


def test_freed_address_is_reused(env):
    admin = env.admin
    make_pool(admin, "fip-reuse", "10.42.0.1", "10.42.0.10")
    link(admin, "fip-reuse")
    make_project(admin, "reuse")
    a, b, c = (make_fip(admin, "reuse", n, from_pool("fip-reuse")) for n in "abc")
    assert ips([a, b, c]) == ip_list("10.42.0.1", "10.42.0.2", "10.42.0.3")

    delete_fip(admin, b["id"])
    assert make_fip(admin, "reuse", "b", from_pool("fip-reuse"))["ip"] == "10.42.0.2"
    assert make_fip(admin, "reuse", "d", from_pool("fip-reuse"))["ip"] == "10.42.0.4"
    delete_fip(admin, a["id"])
    assert make_fip(admin, "reuse", "e", from_pool("fip-reuse"))["ip"] == "10.42.0.1"
    # An explicitly freed address can be reserved explicitly again.
    delete_fip(admin, c["id"])
    assert make_fip(admin, "reuse", "f", explicit_ip("10.42.0.3"))["ip"] == "10.42.0.3"


def test_exhaustion_is_507_and_never_falls_back_to_another_pool(env):
    admin = env.admin
    make_silo(admin, "fip-exhaust")
    make_pool(admin, "fip-tiny", "10.30.0.1", "10.30.0.2")
    make_pool(admin, "fip-roomy", "10.31.0.0", "10.31.0.255")
    link(admin, "fip-tiny", "fip-exhaust", default=True)
    link(admin, "fip-roomy", "fip-exhaust")
    user = role_client(admin, "fip-exhaust", "silo_collaborator")
    make_project(user, "exhaust")

    taken = [make_fip(user, "exhaust", f"tiny-{i}") for i in range(2)]
    assert ips(taken) == ip_list("10.30.0.1", "10.30.0.2")
    for name, allocator in (("by-default", NO_ALLOCATOR), ("by-version", from_default("v4")),
                            ("by-pool", from_pool("fip-tiny"))):
        assert_error(create_fip(user, "exhaust", name, allocator), 507,
                     "InsufficientCapacity", no_addresses("fip-tiny", name))
    assert utilization(admin, "fip-roomy") == (256, 256)
    assert utilization(admin, "fip-tiny") == (2, 0)
    assert names(list_all(user, "/v1/floating-ips", project="exhaust")) == ["tiny-0", "tiny-1"]

    roomy = make_fip(user, "exhaust", "roomy", from_pool("fip-roomy"))
    assert roomy["ip"] == "10.31.0.0"


def test_an_instance_whose_snat_block_finds_no_room_is_told_which_pool_is_full(env):
    # Issue 23 item 8: the capacity error at instance create names the pool and the kind of
    # address (its SNAT block), not only Oxide's "No external IP addresses available".
    admin = env.admin
    make_silo(admin, "snat-full")
    make_pool(admin, "snat-one", "10.32.0.1", "10.32.0.1")  # one address: four SNAT blocks
    link(admin, "snat-one", "snat-full", default=True)
    user = role_client(admin, "snat-full", "silo_collaborator")
    make_project(user, "snat-full")
    for i in range(4):
        expect(create_instance(user, "snat-full", f"vm-{i}", start=False), 201)
    assert_error(create_instance(user, "snat-full", "vm-4", start=False), 507,
                 "InsufficientCapacity",
                 'Insufficient capacity: No external IP addresses available in pool "snat-one" '
                 "for the instance's SNAT address (every instance with an IPv4 interface takes "
                 "a quarter of an address from the silo's default IPv4 pool)")


def test_explicit_pool_must_exist_and_be_linked(env):
    admin = env.admin
    unlinked = make_pool(admin, "fip-unlinked", "10.43.0.0", "10.43.0.15")
    assert_error(create_fip(admin, PROJECT, "unlinked", from_pool("fip-unlinked")), 404,
                 "ObjectNotFound", not_linked("fip-unlinked"))
    assert_error(create_fip(admin, PROJECT, "unlinked", from_pool(unlinked["id"])), 404,
                 "ObjectNotFound", not_linked(unlinked["id"], by="id"))
    assert_error(create_fip(admin, PROJECT, "unlinked", from_pool("fip-no-such-pool")), 404,
                 "ObjectNotFound", 'not found: ip-pool with name "fip-no-such-pool"')
    missing = str(uuid.uuid4())
    assert_error(create_fip(admin, PROJECT, "unlinked", from_pool(missing)), 404,
                 "ObjectNotFound", f'not found: ip-pool with id "{missing}"')
    assert utilization(admin, "fip-unlinked") == (16, 16)


def test_no_default_pool_is_404(env):
    admin = env.admin
    make_silo(admin, "fip-no-default")
    make_pool(admin, "fip-not-default", "10.44.0.0", "10.44.0.15")
    link(admin, "fip-not-default", "fip-no-default", default=False)
    user = role_client(admin, "fip-no-default", "silo_collaborator")
    make_project(user, "no-default")

    assert_error(create_fip(user, "no-default", "v4", from_default("v4")), 404,
                 "ObjectNotFound", "not found: default unicast IPv4 pool for current silo")
    assert_error(create_fip(user, "no-default", "v6", from_default("v6")), 404,
                 "ObjectNotFound", "not found: default unicast IPv6 pool for current silo")
    assert_error(create_fip(user, "no-default", "any", from_default()), 404,
                 "ObjectNotFound", "not found: default unicast IP pool for current silo")
    assert_error(create_fip(user, "no-default", "omitted"), 404,
                 "ObjectNotFound", "not found: default unicast IP pool for current silo")
    # The linked pool still serves explicit requests.
    assert make_fip(user, "no-default", "explicit", from_pool("fip-not-default"))["ip"] == (
        "10.44.0.0")


def test_create_in_missing_project_is_404(env):
    assert_error(create_fip(env.admin, "no-such-project", "lost", from_default("v4")), 404,
                 "ObjectNotFound", 'not found: project with name "no-such-project"')
    missing = str(uuid.uuid4())
    assert_error(create_fip(env.admin, missing, "lost", from_default("v4")), 404,
                 "ObjectNotFound", f'not found: project with id "{missing}"')


# -- update and delete -------------------------------------------------------------------------

def test_update_by_name_and_partial_updates(env):
    admin = env.admin
    fip = make_fip(admin, PROJECT, "partial", from_default("v4"))
    described = expect(admin.put("/v1/floating-ips/partial", {"description": "only this"},
                                 params={"project": PROJECT}), 200)
    assert (described["name"], described["description"]) == ("partial", "only this")
    renamed = expect(admin.put(fip_path(fip), {"name": "partial-2"}), 200)
    assert (renamed["name"], renamed["description"]) == ("partial-2", "only this")
    nulls = expect(admin.put(fip_path(fip), {"name": None, "description": None}), 200)
    assert (nulls["name"], nulls["description"]) == ("partial-2", "only this")
    assert nulls["ip"] == fip["ip"]


def test_rename_to_used_name_is_400(env):
    admin = env.admin
    make_fip(admin, PROJECT, "rename-taken", from_default("v4"))
    mover = make_fip(admin, PROJECT, "rename-mover", from_default("v4"))
    assert_error(admin.put(fip_path(mover), {"name": "rename-taken"}), 400,
                 "ObjectAlreadyExists", 'already exists: floating-ip "rename-taken"')
    assert expect(admin.get(fip_path(mover)), 200)["name"] == "rename-mover"


def test_delete(env):
    admin = env.admin
    fip = make_fip(admin, PROJECT, "delete-me", from_default("v4"))
    capacity, remaining = utilization(admin, "default-v4")
    assert admin.delete("/v1/floating-ips/delete-me", params={"project": PROJECT}).status == 204
    assert utilization(admin, "default-v4") == (capacity, remaining + 1)
    assert_error(admin.get(fip_path(fip)), 404, "ObjectNotFound",
                 f'not found: floating-ip with id "{fip["id"]}"')
    assert_error(admin.delete(fip_path(fip)), 404, "ObjectNotFound",
                 f'not found: floating-ip with id "{fip["id"]}"')
    assert fip["id"] not in [f["id"] for f in list_all(admin, "/v1/floating-ips",
                                                       project=PROJECT)]
    # The name is free again.
    again = make_fip(admin, PROJECT, "delete-me", from_default("v4"))
    assert again["id"] != fip["id"]


# -- listing -----------------------------------------------------------------------------------

PAGE_NAMES = ["page-g", "page-c", "page-a", "page-f", "page-b", "page-e", "page-d"]


@pytest.fixture(scope="module")
def paging(env):
    make_project(env.admin, "paging")
    return [make_fip(env.admin, "paging", name, from_default("v4")) for name in PAGE_NAMES]


@pytest.mark.parametrize("sort_by", ["name_ascending", "name_descending", "id_ascending", None])
def test_list_pagination_and_sorting(env, paging, sort_by):
    pages = list_pages(env.admin, "/v1/floating-ips", 3, project="paging", sort_by=sort_by)
    assert len(pages[0]) == 3
    listed = [fip for page in pages for fip in page]
    assert sorted(f["id"] for f in listed) == sorted(f["id"] for f in paging)
    if sort_by in ("name_ascending", None):
        assert names(listed) == sorted(PAGE_NAMES)
    elif sort_by == "name_descending":
        assert names(listed) == sorted(PAGE_NAMES, reverse=True)
    else:
        assert [f["id"] for f in listed] == sorted((f["id"] for f in paging), key=uuid.UUID)
    by_id = {f["id"]: f for f in paging}
    assert all(f == by_id[f["id"]] for f in listed)


def test_next_page_with_scan_parameters_repeated(env, paging):
    # Clients other than Oxide's SDK send the scan parameters with every page; they must not
    # change what the token selects.
    first = expect(env.admin.get("/v1/floating-ips", params={
        "project": "paging", "sort_by": "name_descending", "limit": 4}), 200)
    rest = expect(env.admin.get("/v1/floating-ips", params={
        "project": "paging", "sort_by": "name_descending", "limit": 4,
        "page_token": first["next_page"]}), 200)
    assert names(first["items"] + rest["items"]) == sorted(PAGE_NAMES, reverse=True)


def test_list_is_scoped_to_the_project(env, paging):
    make_project(env.admin, "paging-empty")
    assert list_all(env.admin, "/v1/floating-ips", project="paging-empty") == []
    project_id = paging[0]["project_id"]
    assert len(list_all(env.admin, "/v1/floating-ips", project=project_id)) == len(PAGE_NAMES)


def test_list_in_missing_project_is_404(env):
    assert_error(env.admin.get("/v1/floating-ips", params={"project": "no-such-project"}), 404,
                 "ObjectNotFound", 'not found: project with name "no-such-project"')
