"""IP pools (operator API): pools, ranges, silo links and defaults, the silo-scoped view,
utilization. Ported from omicron's ip_pools.rs scenarios (omicron-behaviour.md §2.4, §7.1).

All tests share one server; each uses its own names and its own address block (10.<n>.x.x,
fd<n>::), because ranges may not overlap across pools."""

import ipaddress
import uuid

import pytest

from e2e_helpers import (DEFAULT_SILO, add_range, assert_error, create_fip, delete_fip,
                         expect, from_pool, link, list_all, list_pages, make_fip, make_pool,
                         make_project, make_silo, pool_links, remove_range, role_client, unlink,
                         utilization, timestamp_ns)

PROJECT = "ipp-project"


@pytest.fixture(scope="module")
def env(module_server):
    make_project(module_server.admin, PROJECT)
    return module_server


@pytest.fixture
def admin(env):
    return env.admin


# -- pools -------------------------------------------------------------------------------------

def test_pool_create_view_update_delete(admin):
    pool = make_pool(admin, "ipp-crud", description="for crud")
    assert pool["name"] == "ipp-crud"
    assert pool["description"] == "for crud"
    assert pool["ip_version"] == "v4"
    assert pool["pool_type"] == "unicast"
    assert pool["assignment"] == "silos"
    assert expect(admin.get("/v1/system/ip-pools/ipp-crud"), 200) == pool
    assert expect(admin.get(f"/v1/system/ip-pools/{pool['id']}"), 200) == pool

    updated = expect(admin.put("/v1/system/ip-pools/ipp-crud",
                               {"name": "ipp-crud-renamed", "description": "renamed"}), 200)
    assert updated["id"] == pool["id"]
    assert (updated["name"], updated["description"]) == ("ipp-crud-renamed", "renamed")
    assert updated["time_created"] == pool["time_created"]
    assert timestamp_ns(updated["time_modified"]) > timestamp_ns(pool["time_modified"])
    assert_error(admin.get("/v1/system/ip-pools/ipp-crud"), 404, "ObjectNotFound",
                 'not found: ip-pool with name "ipp-crud"')

    assert admin.delete("/v1/system/ip-pools/ipp-crud-renamed").status == 204
    assert_error(admin.get(f"/v1/system/ip-pools/{pool['id']}"), 404, "ObjectNotFound",
                 f'not found: ip-pool with id "{pool["id"]}"')
    assert_error(admin.delete("/v1/system/ip-pools/ipp-crud-renamed"), 404, "ObjectNotFound",
                 'not found: ip-pool with name "ipp-crud-renamed"')


def test_pool_create_explicit_fields(admin):
    body = {"name": "ipp-explicit", "description": "", "ip_version": "v6",
            "pool_type": "unicast", "assignment": "silos"}
    pool = expect(admin.post("/v1/system/ip-pools", body), 201)
    assert (pool["ip_version"], pool["pool_type"], pool["assignment"]) == (
        "v6", "unicast", "silos")


def test_pool_list_filters_and_sorts(admin):
    make_pool(admin, "ipp-list-b")
    make_pool(admin, "ipp-list-a", version="v6")
    everything = list_all(admin, "/v1/system/ip-pools", limit=1, sort_by="name_ascending")
    listed = [p["name"] for p in everything]
    assert listed == sorted(listed)
    assert {"ipp-list-a", "ipp-list-b"} <= set(listed)

    make_pool(admin, "ipp-list-c", version="v6")
    make_pool(admin, "ipp-list-d")
    # One item per page: later pages carry only the page token, which must keep the filter.
    v6_only = list_all(admin, "/v1/system/ip-pools", limit=1, ip_version="v6")
    assert all(p["ip_version"] == "v6" for p in v6_only), v6_only
    assert {"ipp-list-a", "ipp-list-c"} <= {p["name"] for p in v6_only}
    assert "ipp-list-a" in [p["name"] for p in v6_only]
    assert "ipp-list-b" not in [p["name"] for p in v6_only]


def test_pool_duplicate_name_is_400(admin):
    make_pool(admin, "ipp-dup")
    reply = admin.post("/v1/system/ip-pools", {"name": "ipp-dup", "description": ""})
    assert_error(reply, 400, "ObjectAlreadyExists", 'already exists: ip-pool "ipp-dup"')


def test_pool_rename_to_used_name_is_400(admin):
    make_pool(admin, "ipp-rename-taken")
    make_pool(admin, "ipp-rename-mover")
    reply = admin.put("/v1/system/ip-pools/ipp-rename-mover", {"name": "ipp-rename-taken"})
    assert_error(reply, 400, "ObjectAlreadyExists", 'already exists: ip-pool "ipp-rename-taken"')
    assert admin.get("/v1/system/ip-pools/ipp-rename-mover").status == 200


def test_pool_delete_refused_while_it_has_ranges(admin):
    make_pool(admin, "ipp-has-ranges", "10.1.0.1", "10.1.0.10")
    assert_error(admin.delete("/v1/system/ip-pools/ipp-has-ranges"), 400, "InvalidRequest",
                 "IP Pool cannot be deleted while it contains IP ranges")
    assert admin.get("/v1/system/ip-pools/ipp-has-ranges").status == 200

    assert remove_range(admin, "ipp-has-ranges", "10.1.0.1", "10.1.0.10").status == 204
    assert admin.delete("/v1/system/ip-pools/ipp-has-ranges").status == 204
    # The freed addresses can go to another pool.
    make_pool(admin, "ipp-has-ranges-2", "10.1.0.1", "10.1.0.10")


def test_pool_delete_removes_its_silo_links(admin):
    make_silo(admin, "ipp-link-gone-silo")
    make_pool(admin, "ipp-link-gone")
    link(admin, "ipp-link-gone", "ipp-link-gone-silo", default=True)
    assert admin.delete("/v1/system/ip-pools/ipp-link-gone").status == 204
    assert list_all(admin, "/v1/system/silos/ipp-link-gone-silo/ip-pools") == []
    # A new pool of the same name starts unlinked, and can become the default again.
    make_pool(admin, "ipp-link-gone")
    assert pool_links(admin, "ipp-link-gone") == []
    link(admin, "ipp-link-gone", "ipp-link-gone-silo", default=True)


# -- ranges ------------------------------------------------------------------------------------

def test_range_add_list_remove(admin):
    pool = make_pool(admin, "ipp-ranges")
    high = add_range(admin, "ipp-ranges", "10.2.5.0", "10.2.5.9")
    assert high["ip_pool_id"] == pool["id"]
    assert high["range"] == {"first": "10.2.5.0", "last": "10.2.5.9"}
    low = add_range(admin, "ipp-ranges", "10.2.1.0", "10.2.1.9")
    single = add_range(admin, "ipp-ranges", "10.2.3.3", "10.2.3.3")
    assert len({high["id"], low["id"], single["id"]}) == 3

    # Listed by first address, paginated.
    pages = list_pages(admin, "/v1/system/ip-pools/ipp-ranges/ranges", 2)
    listed = [r["range"]["first"] for page in pages for r in page]
    assert listed == ["10.2.1.0", "10.2.3.3", "10.2.5.0"]

    # Removal needs an exact match: no part of a range, no superset.
    for first, last in [("10.2.5.0", "10.2.5.5"), ("10.2.5.1", "10.2.5.9"),
                        ("10.2.5.0", "10.2.5.10"), ("10.2.9.0", "10.2.9.9")]:
        assert_error(remove_range(admin, "ipp-ranges", first, last), 400, "InvalidRequest",
                     f"The provided range {first}-{last} does not exist")
    assert remove_range(admin, "ipp-ranges", "10.2.5.0", "10.2.5.9").status == 204
    assert_error(remove_range(admin, "ipp-ranges", "10.2.5.0", "10.2.5.9"), 400,
                 "InvalidRequest", "The provided range 10.2.5.0-10.2.5.9 does not exist")
    remaining = list_all(admin, "/v1/system/ip-pools/ipp-ranges/ranges")
    assert [r["id"] for r in remaining] == [low["id"], single["id"]]


def test_range_of_another_pool_cannot_be_removed(admin):
    make_pool(admin, "ipp-range-owner", "10.2.20.0", "10.2.20.9")
    make_pool(admin, "ipp-range-thief")
    assert_error(remove_range(admin, "ipp-range-thief", "10.2.20.0", "10.2.20.9"), 400,
                 "InvalidRequest", "The provided range 10.2.20.0-10.2.20.9 does not exist")
    assert len(list_all(admin, "/v1/system/ip-pools/ipp-range-owner/ranges")) == 1


def test_ipv6_range_add_and_remove(admin):
    make_pool(admin, "ipp-v6-ranges", version="v6")
    added = add_range(admin, "ipp-v6-ranges", "fd02::1", "fd02::ff")
    assert ipaddress.ip_address(added["range"]["first"]) == ipaddress.ip_address("fd02::1")
    assert ipaddress.ip_address(added["range"]["last"]) == ipaddress.ip_address("fd02::ff")
    assert remove_range(admin, "ipp-v6-ranges", "fd02::1", "fd02::ff").status == 204
    assert list_all(admin, "/v1/system/ip-pools/ipp-v6-ranges/ranges") == []


def test_range_add_to_missing_pool_is_404(admin):
    reply = admin.post("/v1/system/ip-pools/ipp-missing/ranges/add",
                       {"first": "10.2.30.0", "last": "10.2.30.1"})
    assert_error(reply, 404, "ObjectNotFound", 'not found: ip-pool with name "ipp-missing"')


@pytest.fixture(scope="module")
def overlap_pools(env):
    admin = env.admin
    make_pool(admin, "ipp-overlap", "10.3.0.10", "10.3.0.20")
    make_pool(admin, "ipp-overlap-other")
    make_pool(admin, "ipp-overlap-v6", "fd03::10", "fd03::20", version="v6")
    return admin


@pytest.mark.parametrize("first,last", [
    ("10.3.0.10", "10.3.0.20"),
    ("10.3.0.5", "10.3.0.10"),
    ("10.3.0.20", "10.3.0.25"),
    ("10.3.0.0", "10.3.0.30"),
    ("10.3.0.12", "10.3.0.15"),
], ids=["exact", "below", "above", "containing", "contained"])
@pytest.mark.parametrize("pool", ["ipp-overlap", "ipp-overlap-other"],
                         ids=["same-pool", "other-pool"])
def test_overlapping_range_is_400(overlap_pools, pool, first, last):
    admin = overlap_pools
    reply = admin.post(f"/v1/system/ip-pools/{pool}/ranges/add", {"first": first, "last": last})
    assert_error(reply, 400, "InvalidRequest",
                 f"The provided IP range {first}-{last} overlaps with an existing IP pool "
                 f"range or subnet pool member")
    ranges = list_all(admin, "/v1/system/ip-pools/ipp-overlap/ranges")
    assert [r["range"] for r in ranges] == [{"first": "10.3.0.10", "last": "10.3.0.20"}]
    assert list_all(admin, "/v1/system/ip-pools/ipp-overlap-other/ranges") == []


@pytest.mark.parametrize("first,last", [
    ("fd03::10", "fd03::20"), ("fd03::1", "fd03::10"), ("fd03::20", "fd03::30"),
    ("fd03::", "fd03::ffff"), ("fd03::11", "fd03::12"),
], ids=["exact", "below", "above", "containing", "contained"])
def test_overlapping_ipv6_range_is_400(overlap_pools, first, last):
    reply = overlap_pools.post("/v1/system/ip-pools/ipp-overlap-v6/ranges/add",
                               {"first": first, "last": last})
    assert_error(reply, 400, "InvalidRequest",
                 f"The provided IP range {first}-{last} overlaps with an existing IP pool "
                 f"range or subnet pool member")


def test_adjacent_ranges_do_not_overlap(admin):
    make_pool(admin, "ipp-adjacent", "10.4.0.10", "10.4.0.20")
    add_range(admin, "ipp-adjacent", "10.4.0.21", "10.4.0.30")
    add_range(admin, "ipp-adjacent", "10.4.0.0", "10.4.0.9")
    assert len(list_all(admin, "/v1/system/ip-pools/ipp-adjacent/ranges")) == 3


def test_range_version_must_match_pool(admin):
    v4 = make_pool(admin, "ipp-version-v4")
    v6 = make_pool(admin, "ipp-version-v6", version="v6")
    reply = admin.post("/v1/system/ip-pools/ipp-version-v4/ranges/add",
                       {"first": "fd04::1", "last": "fd04::9"})
    assert_error(reply, 400, "InvalidRequest",
                 f'Cannot add IPv6 address range to IPv4 pool with ID "{v4["id"]}"')
    reply = admin.post("/v1/system/ip-pools/ipp-version-v6/ranges/add",
                       {"first": "10.4.9.1", "last": "10.4.9.9"})
    assert_error(reply, 400, "InvalidRequest",
                 f'Cannot add IPv4 address range to IPv6 pool with ID "{v6["id"]}"')


def test_range_remove_refused_while_an_address_is_allocated(admin):
    make_pool(admin, "ipp-busy-range", "10.5.0.1", "10.5.0.4")
    link(admin, "ipp-busy-range")
    fip = make_fip(admin, PROJECT, "ipp-busy-fip", from_pool("ipp-busy-range"))
    # Omicron's message; floatplane may go on to name the holder (product.md).
    assert_error(remove_range(admin, "ipp-busy-range", "10.5.0.1", "10.5.0.4"), 400,
                 "InvalidRequest",
                 startswith="IP pool ranges cannot be deleted while external IP addresses are "
                            "allocated from them")
    assert len(list_all(admin, "/v1/system/ip-pools/ipp-busy-range/ranges")) == 1

    delete_fip(admin, fip["id"])
    assert remove_range(admin, "ipp-busy-range", "10.5.0.1", "10.5.0.4").status == 204


# -- silo links --------------------------------------------------------------------------------

def test_silo_link_list_update_unlink(admin):
    silo = make_silo(admin, "ipp-link-silo")
    pool = make_pool(admin, "ipp-link")
    created = link(admin, "ipp-link", "ipp-link-silo")
    assert created == {"ip_pool_id": pool["id"], "silo_id": silo["id"], "is_default": False}
    assert pool_links(admin, "ipp-link") == [created]

    reply = admin.post("/v1/system/ip-pools/ipp-link/silos",
                       {"silo": silo["id"], "is_default": False})
    assert_error(reply, 400, "ObjectAlreadyExists", startswith="already exists: ip-pool-resource")

    promoted = expect(admin.put("/v1/system/ip-pools/ipp-link/silos/ipp-link-silo",
                                {"is_default": True}), 200)
    assert promoted == dict(created, is_default=True)
    assert pool_links(admin, "ipp-link") == [promoted]
    demoted = expect(admin.put(f"/v1/system/ip-pools/{pool['id']}/silos/{silo['id']}",
                               {"is_default": False}), 200)
    assert demoted == created

    assert unlink(admin, "ipp-link", "ipp-link-silo").status == 204
    assert pool_links(admin, "ipp-link") == []
    assert list_all(admin, "/v1/system/silos/ipp-link-silo/ip-pools") == []


def test_pool_links_to_several_silos(admin):
    silos = [make_silo(admin, name) for name in ("ipp-multi-a", "ipp-multi-b")]
    make_pool(admin, "ipp-multi")
    link(admin, "ipp-multi", "ipp-multi-a", default=True)
    link(admin, "ipp-multi", "ipp-multi-b")
    links = pool_links(admin, "ipp-multi")
    assert {(l["silo_id"], l["is_default"]) for l in links} == {
        (silos[0]["id"], True), (silos[1]["id"], False)}
    # Listed by silo id.
    assert [l["silo_id"] for l in links] == sorted((l["silo_id"] for l in links), key=uuid.UUID)


def test_link_to_missing_silo_or_pool_is_404(admin):
    make_pool(admin, "ipp-link-nowhere")
    reply = admin.post("/v1/system/ip-pools/ipp-link-nowhere/silos",
                       {"silo": "ipp-no-such-silo", "is_default": False})
    assert_error(reply, 404, "ObjectNotFound", 'not found: silo with name "ipp-no-such-silo"')
    reply = admin.post("/v1/system/ip-pools/ipp-no-such-pool/silos",
                       {"silo": DEFAULT_SILO, "is_default": False})
    assert_error(reply, 404, "ObjectNotFound", 'not found: ip-pool with name "ipp-no-such-pool"')


def test_second_default_of_same_version_is_400(admin):
    make_silo(admin, "ipp-two-defaults")
    make_pool(admin, "ipp-default-a")
    make_pool(admin, "ipp-default-b")
    make_pool(admin, "ipp-default-v6", version="v6")
    link(admin, "ipp-default-a", "ipp-two-defaults", default=True)

    reply = admin.post("/v1/system/ip-pools/ipp-default-b/silos",
                       {"silo": "ipp-two-defaults", "is_default": True})
    # Oxide's status and code; the message names the default the silo has and what to do.
    assert_error(reply, 400, "ObjectAlreadyExists",
                 'silo "ipp-two-defaults" already has a default unicast IPv4 pool, '
                 '"ipp-default-a": link "ipp-default-b" with is_default false, then set '
                 'is_default on that link (PUT /v1/system/ip-pools/ipp-default-b/silos/'
                 'ipp-two-defaults), which makes "ipp-default-a" no longer the default')
    assert pool_links(admin, "ipp-default-b") == []

    # A default of the other IP version is fine, and a non-default link of the same version too.
    link(admin, "ipp-default-v6", "ipp-two-defaults", default=True)
    link(admin, "ipp-default-b", "ipp-two-defaults", default=False)
    defaults = {p["name"] for p in list_all(admin, "/v1/system/silos/ipp-two-defaults/ip-pools")
                if p["is_default"]}
    assert defaults == {"ipp-default-a", "ipp-default-v6"}


def test_put_is_default_switches_the_default(admin):
    make_silo(admin, "ipp-switch")
    make_pool(admin, "ipp-switch-old")
    make_pool(admin, "ipp-switch-new")
    make_pool(admin, "ipp-switch-v6", version="v6")
    link(admin, "ipp-switch-old", "ipp-switch", default=True)
    link(admin, "ipp-switch-new", "ipp-switch")
    link(admin, "ipp-switch-v6", "ipp-switch", default=True)

    switched = expect(admin.put("/v1/system/ip-pools/ipp-switch-new/silos/ipp-switch",
                                {"is_default": True}), 200)
    assert switched["is_default"] is True
    assert [l["is_default"] for l in pool_links(admin, "ipp-switch-old")] == [False]
    flags = {p["name"]: p["is_default"]
             for p in list_all(admin, "/v1/system/silos/ipp-switch/ip-pools")}
    # The old default stays linked; the default of the other version is untouched.
    assert flags == {"ipp-switch-old": False, "ipp-switch-new": True, "ipp-switch-v6": True}

    # Making the current default default again changes nothing.
    again = expect(admin.put("/v1/system/ip-pools/ipp-switch-new/silos/ipp-switch",
                             {"is_default": True}), 200)
    assert again == switched


@pytest.mark.parametrize("is_default", [True, False])
def test_put_on_missing_link_is_404(admin, is_default):
    name = f"ipp-put-missing-{str(is_default).lower()}"
    make_silo(admin, name)
    make_pool(admin, name)
    reply = admin.put(f"/v1/system/ip-pools/{name}/silos/{name}", {"is_default": is_default})
    assert_error(reply, 404, "ObjectNotFound", startswith="not found: ip-pool-resource")
    assert pool_links(admin, name) == []


def test_unlink_missing_link_is_404(admin):
    make_silo(admin, "ipp-unlink-missing")
    make_pool(admin, "ipp-unlink-missing")
    assert_error(unlink(admin, "ipp-unlink-missing", "ipp-unlink-missing"), 404,
                 "ObjectNotFound")


def test_unlink_refused_while_a_floating_ip_of_the_pool_is_in_the_silo(admin):
    make_silo(admin, "ipp-in-use")
    make_silo(admin, "ipp-in-use-idle")
    make_pool(admin, "ipp-in-use", "10.6.0.0", "10.6.0.15")
    link(admin, "ipp-in-use", "ipp-in-use", default=True)
    link(admin, "ipp-in-use", "ipp-in-use-idle", default=True)
    user = role_client(admin, "ipp-in-use", "silo_collaborator")
    make_project(user, "in-use-project")
    fip = make_fip(user, "in-use-project", "in-use-fip")

    assert_error(unlink(admin, "ipp-in-use", "ipp-in-use"), 400, "InvalidRequest",
                 startswith="IP addresses from this pool are in use in the linked silo")
    # A silo without addresses from the pool can be unlinked.
    assert unlink(admin, "ipp-in-use", "ipp-in-use-idle").status == 204

    delete_fip(user, fip["id"])
    assert unlink(admin, "ipp-in-use", "ipp-in-use").status == 204
    assert pool_links(admin, "ipp-in-use") == []


# -- silo-scoped view --------------------------------------------------------------------------

def test_silo_users_see_only_pools_linked_to_their_silo(admin):
    make_silo(admin, "ipp-scoped")
    v4 = make_pool(admin, "ipp-scoped-v4", "10.7.0.0", "10.7.0.255")
    make_pool(admin, "ipp-scoped-v6", "fd07::", "fd07::ff", version="v6")
    make_pool(admin, "ipp-scoped-unlinked", "10.7.1.0", "10.7.1.255")
    make_pool(admin, "ipp-scoped-elsewhere", "10.7.2.0", "10.7.2.255")
    link(admin, "ipp-scoped-v4", "ipp-scoped", default=True)
    link(admin, "ipp-scoped-v6", "ipp-scoped")
    link(admin, "ipp-scoped-elsewhere", DEFAULT_SILO)
    viewer = role_client(admin, "ipp-scoped", "silo_viewer")

    visible = {p["name"]: p for p in list_all(viewer, "/v1/ip-pools", limit=1)}
    assert set(visible) == {"ipp-scoped-v4", "ipp-scoped-v6"}
    assert (visible["ipp-scoped-v4"]["is_default"], visible["ipp-scoped-v4"]["ip_version"]) == (
        True, "v4")
    assert (visible["ipp-scoped-v6"]["is_default"], visible["ipp-scoped-v6"]["ip_version"]) == (
        False, "v6")
    assert [p["name"] for p in list_all(viewer, "/v1/ip-pools", ip_version="v6")] == [
        "ipp-scoped-v6"]

    by_name = expect(viewer.get("/v1/ip-pools/ipp-scoped-v4"), 200)
    assert by_name == visible["ipp-scoped-v4"]
    assert expect(viewer.get(f"/v1/ip-pools/{v4['id']}"), 200) == by_name
    for hidden in ("ipp-scoped-unlinked", "ipp-scoped-elsewhere"):
        assert_error(viewer.get(f"/v1/ip-pools/{hidden}"), 404, "ObjectNotFound",
                     f'not found: ip-pool with name "{hidden}"')


# -- utilization -------------------------------------------------------------------------------

def test_utilization_ipv4(admin):
    make_pool(admin, "ipp-util-v4")
    assert utilization(admin, "ipp-util-v4") == (0, 0)
    add_range(admin, "ipp-util-v4", "10.9.0.0", "10.9.0.15")
    add_range(admin, "ipp-util-v4", "10.9.1.0", "10.9.1.3")
    link(admin, "ipp-util-v4")
    assert utilization(admin, "ipp-util-v4") == (20, 20)

    first = make_fip(admin, PROJECT, "util-v4-a", from_pool("ipp-util-v4"))
    make_fip(admin, PROJECT, "util-v4-b", from_pool("ipp-util-v4"))
    assert utilization(admin, "ipp-util-v4") == (20, 18)
    delete_fip(admin, first["id"])
    assert utilization(admin, "ipp-util-v4") == (20, 19)


def test_utilization_ipv6(admin):
    make_pool(admin, "ipp-util-v6", "fd09::", "fd09::ffff", version="v6")
    link(admin, "ipp-util-v6")
    assert utilization(admin, "ipp-util-v6") == (65536, 65536)
    fip = make_fip(admin, PROJECT, "util-v6", from_pool("ipp-util-v6"))
    assert ipaddress.ip_address(fip["ip"]) == ipaddress.ip_address("fd09::")
    assert utilization(admin, "ipp-util-v6") == (65536, 65535)


def test_utilization_of_a_huge_ipv6_range(admin):
    make_pool(admin, "ipp-util-huge", "fd0a::", "fd0a::ffff:ffff:ffff:ffff", version="v6")
    capacity, remaining = utilization(admin, "ipp-util-huge")
    assert capacity == float(2 ** 64)
    assert remaining == float(2 ** 64)


def test_utilization_of_missing_pool_is_404(admin):
    assert_error(admin.get("/v1/system/ip-pools/ipp-util-none/utilization"), 404,
                 "ObjectNotFound", 'not found: ip-pool with name "ipp-util-none"')


def test_floating_ip_from_unlinked_pool_is_404(admin):
    make_pool(admin, "ipp-never-linked", "10.8.0.0", "10.8.0.3")
    # Oxide's 404; a fleet admin is also told why and what to do (issue 23 item 8).
    assert_error(create_fip(admin, PROJECT, "ipp-orphan", from_pool("ipp-never-linked")), 404,
                 "ObjectNotFound",
                 'not found: ip-pool with name "ipp-never-linked" (it exists, but is not linked '
                 'to silo "default": link it with POST /v1/system/ip-pools/ipp-never-linked/silos)')
    assert utilization(admin, "ipp-never-linked") == (4, 4)
