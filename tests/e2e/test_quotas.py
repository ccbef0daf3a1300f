"""IP quotas (issue 25, item 1): a silo's (fleet admin, Oxide's SiloQuotas with additive IP
fields) and a project's (floatplane's extension, set by a silo admin), enforced where addresses
are allocated: racing clients stop exactly at the quota, on each engine and through several
servers on one PostgreSQL database; an instance's SNAT block counts a quarter."""

import json
import subprocess
import threading

import pytest

from e2e_helpers import (assert_error, attach_ephemeral, create_fip, create_instance, expect,
                         from_pool, link, make_pool, make_project, make_silo, role_client,
                         unique, wait_run_state)


def set_project_quota(client, project, **limits):
    return client.put(f"/v1/system/projects/{project}/quotas", limits)


def set_silo_quota(admin, silo, **limits):
    return admin.put(f"/v1/system/silos/{silo}/quotas", limits)


def silo_with_pool(admin, first, last):
    """A silo of its own (its quotas are the test's) with a default pool first..last, and a
    silo admin of it."""
    silo = unique("quota-silo")
    pool = unique("quota-pool")
    make_silo(admin, silo)
    make_pool(admin, pool, first, last)
    link(admin, pool, silo, default=True)
    return silo, pool, role_client(admin, silo, "silo_admin")


def race_creates(clients, projects, count):
    """`count` floating IP creates at once, spread over `clients` and `projects`: the statuses
    and bodies."""
    results = [None] * count
    start = threading.Barrier(count)

    def create(i):
        start.wait()
        reply = create_fip(clients[i % len(clients)], projects[i % len(projects)], f"race-{i}")
        results[i] = (reply.status, reply.body)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_a_silos_quotas_are_oxides_with_ip_limits_and_use_added(module_server):
    admin = module_server.admin
    silo, pool, user = silo_with_pool(admin, "10.40.0.0", "10.40.0.15")
    view = expect(admin.get(f"/v1/system/silos/{silo}/quotas"), 200)
    # What silo create was given (make_silo's body), and no IP limit yet.
    assert (view["cpus"], view["memory"], view["storage"]) == (16, 64 << 30, 1 << 40)
    assert view["ipv4_addresses"] is None and view["ipv6_addresses"] is None
    assert view["ipv4_addresses_used"] == 0
    make_project(user, "web")
    expect(create_fip(user, "web", "a"), 201)
    expect(create_instance(user, "web", "vm", start=False), 201)  # its SNAT block: a quarter
    changed = expect(set_silo_quota(admin, silo, ipv4_addresses=2, cpus=32), 200)
    assert (changed["ipv4_addresses"], changed["ipv4_addresses_used"]) == (2, 1.25)
    assert (changed["cpus"], changed["memory"]) == (32, 64 << 30), "fields left out stay"
    # null removes a limit; Oxide's own fields ignore null.
    cleared = expect(set_silo_quota(admin, silo, ipv4_addresses=None, cpus=None), 200)
    assert (cleared["ipv4_addresses"], cleared["cpus"]) == (None, 32)
    listed = expect(admin.get("/v1/system/silo-quotas", params={"limit": 1000}), 200)["items"]
    assert_error(admin.get("/v1/system/silo-quotas", params={"sort_by": "name_ascending"}), 400,
                 "InvalidRequest", startswith="unable to parse query string: parameter "
                 '"sort_by"')
    assert [q["cpus"] for q in listed if q["silo_id"] == view["silo_id"]] == [32]
    assert_error(set_silo_quota(admin, silo, ipv4_addresses=-1), 400, "InvalidRequest",
                 'unable to parse JSON body: field "ipv4_addresses": expected an integer from 0 '
                 'to 9007199254740992')
    # Only a fleet admin reads or sets a silo's quotas.
    assert_error(user.get(f"/v1/system/silos/{silo}/quotas"), 403, "Forbidden")


def test_racing_clients_stop_exactly_at_the_project_quota(module_server):
    admin = module_server.admin
    silo, pool, user = silo_with_pool(admin, "10.40.1.0", "10.40.1.63")
    make_project(user, "race")
    expect(set_project_quota(user, "race", ipv4_addresses=5), 200)
    results = race_creates([user], ["race"], 16)
    created = [body for status, body in results if status == 201]
    refused = [body for status, body in results if status != 201]
    assert len(created) == 5, results
    for body in refused:
        assert body["error_code"] == "QuotaExceeded", body
        assert body["message"].startswith(
            'IPv4 address quota of project "race" exceeded: its limit is 5, 5 in use, and the '
            'floating IP "race-'), body
    quotas = expect(user.get("/v1/system/projects/race/quotas"), 200)
    assert (quotas["ipv4_addresses"], quotas["ipv4_addresses_used"]) == (5, 5)


def test_an_instance_counts_its_snat_block_and_is_refused_past_the_quota(module_server):
    admin = module_server.admin
    silo, pool, user = silo_with_pool(admin, "10.40.2.0", "10.40.2.15")
    make_project(user, "snat")
    expect(set_project_quota(user, "snat", ipv4_addresses=1), 200)
    for i in range(4):
        expect(create_instance(user, "snat", f"vm-{i}", start=False), 201)
    assert_error(create_instance(user, "snat", "vm-4", start=False), 400, "QuotaExceeded",
                 'IPv4 address quota of project "snat" exceeded: its limit is 1, 1 in use, and '
                 "the instance's SNAT block needs 0.25 more; release addresses or ask a silo "
                 "admin to raise it")
    # The refused create left nothing behind.
    names = [i["name"] for i in expect(user.get("/v1/instances", params={"project": "snat"}),
                                       200)["items"]]
    assert sorted(names) == [f"vm-{i}" for i in range(4)]


def test_a_silo_admin_sets_a_projects_quotas_a_collaborator_reads_them(module_server):
    admin = module_server.admin
    silo, pool, silo_admin = silo_with_pool(admin, "10.40.3.0", "10.40.3.15")
    collaborator = role_client(admin, silo, "silo_collaborator")
    make_project(silo_admin, "team")
    assert_error(set_project_quota(collaborator, "team", ipv4_addresses=1), 403, "Forbidden")
    view = expect(collaborator.get("/v1/system/projects/team/quotas"), 200)
    assert view["ipv4_addresses"] is None
    expect(set_project_quota(silo_admin, "team", ipv6_addresses=3), 200)
    # Another silo's project is not found by name (names are the caller's silo's); a fleet admin
    # reaches it by id, another silo's admin does not.
    assert_error(admin.get("/v1/system/projects/team/quotas"), 404, "ObjectNotFound")
    by_id = f"/v1/system/projects/{view['project_id']}/quotas"
    assert expect(admin.get(by_id), 200)["ipv6_addresses"] == 3
    outsider = role_client(admin, silo_with_pool(admin, "10.40.9.0", "10.40.9.3")[0],
                           "silo_admin")
    assert_error(outsider.get(by_id), 404, "ObjectNotFound")
    # The change is audited under its operation.
    entries = expect(admin.get("/v1/system/audit-log",
                               params={"start_time": "2020-01-01T00:00:00Z", "limit": 1000}),
                     200)["items"]
    updates = [e for e in entries if e["operation_id"] == "project_quotas_update"]
    assert [e["result"]["http_status_code"] for e in updates][-2:] == [403, 200]


def test_the_cli_sets_and_shows_quotas_in_tables(module_server, floatplane_bin):
    admin = module_server.admin
    silo, pool, user = silo_with_pool(admin, "10.40.4.0", "10.40.4.15")
    make_project(user, "cli")
    expect(create_fip(user, "cli", "a"), 201)
    env = {"OXIDE_HOST": f"http://127.0.0.1:{module_server.port}", "PATH": "/usr/bin:/bin"}

    def cli(token, *args):
        return subprocess.run([str(floatplane_bin), *args], capture_output=True, text=True,
                              env={**env, "OXIDE_TOKEN": token}, timeout=30, check=False)

    done = cli(admin.token, "silo", "quotas", "update", "--silo", silo, "--ipv4-addresses", "8",
               "--format", "table")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["SILO_ID", "CPUS", "MEMORY", "STORAGE", "IPV4_ADDRESSES",
                                "IPV4_ADDRESSES_USED", "IPV6_ADDRESSES",
                                "IPV6_ADDRESSES_USED"], done.stdout
    assert lines[1].split()[1:] == ["16", "64", "GiB", "1", "TiB", "8", "1", "none", "0"], \
        done.stdout
    done = cli(user.token, "project", "quotas", "update", "--project", "cli",
               "--ipv4-addresses", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ipv4_addresses"] == 1
    done = cli(user.token, "project", "quotas", "view", "--project", "cli", "--format", "table")
    assert [line.split() for line in done.stdout.splitlines()] == [
        ["IPV4_ADDRESSES", "IPV4_ADDRESSES_USED", "IPV6_ADDRESSES", "IPV6_ADDRESSES_USED"],
        ["1", "1", "none", "0"]], done.stdout
    done = cli(user.token, "floating-ip", "create", "--project", "cli", "--name", "b",
               "--description", "")
    assert done.returncode == 1, done.stdout
    assert "IPv4 address quota of project \"cli\" exceeded: its limit is 1, 1 in use" in \
        done.stderr, done.stderr
    bad = cli(user.token, "project", "quotas", "update", "--project", "cli",
              "--ipv4-addresses", "many")
    assert bad.returncode == 2
    assert 'not "many"' in bad.stderr


@pytest.mark.postgres_only("servers share one database only on PostgreSQL")
def test_clients_racing_through_three_servers_stop_exactly_at_the_silo_quota(start_server):
    first = start_server()
    others = [start_server(database_of=first) for _ in range(2)]
    admin = first.admin
    silo, pool, user = silo_with_pool(admin, "10.40.5.0", "10.40.5.63")
    for project in ("one", "two"):
        make_project(user, project)
    expect(set_silo_quota(admin, silo, ipv4_addresses=7), 200)
    # The same silo admin's token, through each server.
    clients = [user] + [server.client(user.token) for server in others]
    results = race_creates(clients, ["one", "two"], 24)
    assert sum(1 for status, _ in results if status == 201) == 7, results
    assert all(body["error_code"] == "QuotaExceeded" for status, body in results
               if status != 201), results
    view = expect(admin.get(f"/v1/system/silos/{silo}/quotas"), 200)
    assert view["ipv4_addresses_used"] == 7


def test_a_silos_users_see_what_their_silo_holds_of_each_pool_by_kind(module_server,
                                                                       floatplane_bin):
    admin = module_server.admin
    silo, pool, user = silo_with_pool(admin, "10.40.6.0", "10.40.6.15")
    make_project(user, "util")
    expect(create_fip(user, "util", "a"), 201)
    vm = expect(create_instance(user, "util", "vm", ncpus=2), 201)  # started: provisioned
    wait_run_state(user, vm["id"], "running")
    expect(set_project_quota(user, "util", ipv4_addresses=3), 200)
    expect(attach_ephemeral(user, vm["id"], {"type": "explicit", "pool": pool}), 202)
    # Another silo holding an address of the same pool: not counted, not seen.
    other, _, other_user = silo_with_pool(admin, "10.40.7.0", "10.40.7.3")
    link(admin, pool, other)
    make_project(other_user, "elsewhere")
    expect(create_fip(other_user, "elsewhere", "theirs", from_pool(pool)), 201)

    mine = expect(user.get("/v1/utilization"), 200)
    assert mine["provisioned"] == {"cpus": 2, "memory": vm["memory"], "storage": 0}
    assert mine["ipv4_addresses_used"] == 2.25 and mine["ipv4_addresses"] is None
    [held] = mine["ip_pools"]
    assert (held["name"], held["floating"], held["ephemeral"], held["snat_blocks"]) == \
        (pool, 1, 1, 1), held
    # The pool's size, but not what is left of it: with the silo's own holdings that would
    # tell what the other silo holds.
    assert held["capacity"] == 16 and "remaining" not in held, held
    # The ephemeral IP counted against the project's quota too: a fourth address is refused.
    assert_error(create_fip(user, "util", "b"), 400, "QuotaExceeded",
                 startswith='IPv4 address quota of project "util" exceeded: its limit is 3, '
                            '2.25 in use')
    # A fleet admin sees the same per silo, with what is left of each pool, and every silo.
    view = expect(admin.get(f"/v1/system/utilization/silos/{silo}"), 200)
    assert view["silo_name"] == silo and view["provisioned"]["cpus"] == 2
    [fleet_held] = view["ip_pools"]
    # 16 less a floating, an ephemeral and an SNAT address of this silo, and the other's.
    assert fleet_held == {**held, "remaining": 12}
    listed = expect(admin.get("/v1/system/utilization/silos", params={"limit": 1000}), 200)
    theirs = [s for s in listed["items"] if s["silo_name"] == other]
    assert [p["floating"] for p in theirs[0]["ip_pools"] if p["name"] == pool] == [1]
    assert_error(user.get(f"/v1/system/utilization/silos/{silo}"), 403, "Forbidden")

    done = subprocess.run([str(floatplane_bin), "utilization", "view", "--format", "table"],
                          capture_output=True, text=True, timeout=30, check=False,
                          env={"OXIDE_HOST": f"http://127.0.0.1:{module_server.port}",
                               "OXIDE_TOKEN": user.token, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines()] == [
        ["NAME", "IP_VERSION", "FLOATING", "EPHEMERAL", "SNAT_BLOCKS", "CAPACITY"],
        [pool, "v4", "1", "1", "1", "16"]], done.stdout


def test_an_instance_created_without_snat_holds_no_address_and_charges_no_quota(module_server):
    # Issue 25 item 3: `"snat": false` (default true) in the create body.
    admin = module_server.admin
    silo, pool, user = silo_with_pool(admin, "10.40.8.0", "10.40.8.3")
    make_project(user, "dark")
    expect(set_project_quota(user, "dark", ipv4_addresses=0), 200)
    vm = expect(create_instance(user, "dark", "batch", snat=False), 201)
    wait_run_state(user, vm["id"], "running")
    ips = expect(user.get(f"/v1/instances/{vm['id']}/external-ips"), 200)["items"]
    assert ips == []
    assert expect(user.get("/v1/system/projects/dark/quotas"), 200)["ipv4_addresses_used"] == 0
    # Without the field, SNAT as before: refused here by the quota of 0.
    assert_error(create_instance(user, "dark", "chatty", start=False), 400, "QuotaExceeded",
                 startswith='IPv4 address quota of project "dark" exceeded: its limit is 0')
    assert_error(create_instance(user, "dark", "odd", snat="no"), 400, "InvalidRequest",
                 startswith='unable to parse JSON body: field "snat": expected a boolean')
