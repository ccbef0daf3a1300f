"""Concurrent attach and detach (issue 4, "concurrency"): many clients at once, each request on
a connection of its own, released together by a barrier.

1. One floating IP attached to 16 running instances at once: exactly one 202; the others are
   refused as documented (400 "attached to another", naming the winner, or 503 with
   Retry-After naming it); the database, the switch agent and the sled agents all name the
   winner.
2. 40 floating IPs attached to one instance at once: exactly 32 win (§3.2 limit), the rest get
   the limit's 400 or a 503; the instance lists 32 + SNAT, the switch holds 33 entries.
3. Attach racing detach, floating IP delete, instance stop, start and delete on the same
   resources, several rounds: only documented outcomes (2xx, 400, 404, 503 with Retry-After;
   never 500), and afterwards database, switch NAT table and sled agents agree, no saga is
   left running or stuck, and no address leaked.
"""

import ipaddress
import re
from collections import Counter

from e2e_helpers import (ATTACHED_ELSEWHERE, DELETE_ATTACHED, MAX_EXTERNAL_IPS, NO_EPHEMERAL,
                         TOO_MANY_IPS, assert_error, assert_retry_later, attach_ephemeral,
                         attach_fip, auto_pool, detach_ephemeral, detach_fip, expect,
                         external_ip_key, from_pool, instance_action, instance_external_ips,
                         link, list_all, list_sagas, make_fip, make_instance, make_pool,
                         make_project, nat_key, run_together, same_ip, utilization,
                         wait_external_ip_agreement, wait_run_state, wait_sagas_settled,
                         wait_until)

SNAT_POOL = "race-snat"      # the silo's default IPv4 pool: SNAT and ephemeral IPs
FIP_POOL = "race-fip"        # floating IPs
PROJECT = "race"
ROUNDS = 6
DELETE_ROUNDS = 20


def prepare(rack, fip_last="10.21.0.255"):
    admin = rack.admin
    make_pool(admin, SNAT_POOL, "10.20.0.0", "10.20.0.63")
    link(admin, SNAT_POOL, default=True)
    make_pool(admin, FIP_POOL, "10.21.0.0", fip_last)
    link(admin, FIP_POOL)
    make_project(admin, PROJECT)
    return rack


def statuses(replies):
    return Counter(reply.status for reply in replies)


def describe(replies):
    return "\n".join(f"  {r.status} {r.body}" for r in replies)


def snat_entry(rack, instance_id):
    """The switch's NAT entry of the instance's SNAT block."""
    [snat] = [i for i in instance_external_ips(rack.admin, instance_id) if i["kind"] == "snat"]
    key = external_ip_key(snat)
    [entry] = [e for e in rack.nat_entries() if nat_key(e) == key]
    return entry


def start_all(admin, names, **kwargs):
    """Creates the instances (started) and waits until all run; returns their views."""
    created = [make_instance(admin, PROJECT, name, **kwargs) for name in names]
    return [wait_run_state(admin, c["id"], "running", timeout=15.0) for c in created]


# ---------------------------------------------------------------------------------------------
# 1. One floating IP, 16 instances

def test_one_floating_ip_attached_to_16_instances_at_once(start_rack):
    rack = prepare(start_rack())
    admin = rack.admin
    instances = start_all(admin, [f"racer-{i:02d}" for i in range(16)])
    by_id = {i["id"]: i for i in instances}

    # Round one by ids; round two, after a detach, by names (looked up in the FIP's project).
    for round_number, parent in enumerate(("id", "name")):
        fip = make_fip(admin, PROJECT, f"prize-{round_number}", from_pool(FIP_POOL))
        replies = run_together([
            (lambda i=i: attach_fip(admin, fip["id"], i[parent])) for i in instances])
        counts = statuses(replies)
        assert counts[202] == 1 and set(counts) <= {202, 400, 503}, (
            f"expected one 202 and only 400/503 otherwise: {counts}\n{describe(replies)}")
        [won] = [r.body for r in replies if r.status == 202]
        winner = by_id[won["instance_id"]]
        assert won["id"] == fip["id"] and won["ip"] == fip["ip"], won
        for reply in replies:
            if reply.status == 400:
                body = assert_error(reply, 400, "InvalidRequest", startswith=ATTACHED_ELSEWHERE)
                assert winner["name"] in body["message"], f"must name the holder: {body}"
            elif reply.status == 503:
                assert_retry_later(reply, fip["name"], winner["name"])

        # The database: the floating IP names the winner, and only the winner lists it.
        view = expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)
        assert view["instance_id"] == winner["id"], view
        holders = [i["name"] for i in instances
                   if any(x.get("id") == fip["id"] for x in instance_external_ips(admin, i["id"]))]
        assert holders == [winner["name"]], holders
        # The switch: one entry, every port, to the winner's sled (as its SNAT entry).
        entries = [e for e in rack.nat_entries() if same_ip(e["external_ip"], fip["ip"])]
        assert len(entries) == 1, f"one NAT entry for {fip['ip']} expected\n{rack.describe()}"
        assert nat_key(entries[0]) == (ipaddress.ip_address(fip["ip"]), 0, 65535)
        target = snat_entry(rack, winner["id"])
        assert [(e["sled_address"], e["vni"], e["mac"]) for e in entries] == [
            (target["sled_address"], target["vni"], target["mac"])], (entries, target)
        # The sleds: exactly the winner's VM has the address.
        listing = [vm["id"] for agent in rack.sleds for vm in agent.instances()
                   if any(same_ip(a, fip["ip"]) for a in vm["external_ips"])]
        assert listing == [winner["id"]], f"VMs listing {fip['ip']}: {listing}"

        sagas = wait_external_ip_agreement(rack, [PROJECT])
        attaches = Counter(s["state"] for s in sagas if s["name"] == "ip_attach")
        assert attaches["done"] == round_number + 1, attaches
        expect(detach_fip(admin, fip["id"]), 202)
    wait_external_ip_agreement(rack, [PROJECT])


# ---------------------------------------------------------------------------------------------
# 2. 40 floating IPs, one instance

def test_forty_floating_ips_attached_to_one_instance_at_once(start_rack):
    rack = prepare(start_rack())
    admin = rack.admin
    [instance] = start_all(admin, ["magnet"], nic="default_ipv4")
    iid = instance["id"]
    fips = [make_fip(admin, PROJECT, f"crowd-{i:02d}", from_pool(FIP_POOL)) for i in range(40)]

    replies = run_together([(lambda f=f: attach_fip(admin, f["id"], iid)) for f in fips])
    counts = statuses(replies)
    assert counts[202] == MAX_EXTERNAL_IPS and set(counts) <= {202, 400, 503}, (
        f"expected {MAX_EXTERNAL_IPS} 202s and only 400/503 otherwise: {counts}\n"
        f"{describe(replies)}")
    for reply in replies:
        if reply.status == 400:
            assert_error(reply, 400, "InvalidRequest", TOO_MANY_IPS)
        elif reply.status == 503:
            assert_retry_later(reply)
    won = {r.body["id"] for r in replies if r.status == 202}
    assert all(r.body["instance_id"] == iid for r in replies if r.status == 202)

    for fip in fips:
        view = expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)
        assert view["instance_id"] == (iid if fip["id"] in won else None), view
    items = instance_external_ips(admin, iid)
    assert Counter(i["kind"] for i in items) == {"floating": MAX_EXTERNAL_IPS, "snat": 1}, items
    assert {i["id"] for i in items if i["kind"] == "floating"} == won
    expected_keys = sorted(external_ip_key(i) for i in items)
    assert sorted(nat_key(e) for e in rack.nat_entries()) == expected_keys, rack.describe()
    assert len({e["sled_address"] for e in rack.nat_entries()}) == 1
    [(_, vm)] = rack.vms(iid)
    assert sorted(map(ipaddress.ip_address, vm["external_ips"])) == sorted(
        ipaddress.ip_address(i["ip"]) for i in items)
    sagas = wait_external_ip_agreement(rack, [PROJECT])
    assert Counter(s["state"] for s in sagas if s["name"] == "ip_attach")["done"] == 32

    # All 32 detached at once: all succeed and only the SNAT block stays.
    replies = run_together([(lambda f=f: detach_fip(admin, f)) for f in sorted(won)])
    assert statuses(replies) == {202: MAX_EXTERNAL_IPS}, describe(replies)
    assert all(r.body["instance_id"] is None for r in replies)
    [snat] = instance_external_ips(admin, iid)
    assert snat["kind"] == "snat"
    assert [nat_key(e) for e in rack.nat_entries()] == [external_ip_key(snat)]
    wait_external_ip_agreement(rack, [PROJECT])


# ---------------------------------------------------------------------------------------------
# 3. Attach racing detach, delete, stop, start and instance delete

# What each kind of request may answer, besides success (§2-§4, product.md differences 1, 2,
# 6, 11). A 503 must carry Retry-After; a 400 or 404 one of these messages.
NOT_FOUND = re.compile(r"not found: (floating-ip|instance) with (id|name) ")
DOCUMENTED_REFUSALS = {
    "attach": [ATTACHED_ELSEWHERE, NOT_FOUND],
    "attach ephemeral": [NOT_FOUND],
    "detach": [NOT_FOUND],
    "detach ephemeral": [NO_EPHEMERAL, NOT_FOUND],
    "delete fip": [DELETE_ATTACHED, NOT_FOUND],
    "stop": [NOT_FOUND],
    "start": [NOT_FOUND],
    "delete instance": ["cannot delete instance: instance is running or has not yet fully "
                        "stopped", NOT_FOUND],
}
SUCCESS = {"attach": 202, "attach ephemeral": 202, "detach": 202, "detach ephemeral": 204,
           "delete fip": 204, "stop": 202, "start": 202, "delete instance": 204}


def undocumented(server, label, kind, reply):
    """None if `reply` to a request of `kind` is a documented outcome, else what is wrong
    (with the server's log records of the request)."""
    what = f"{label}: {reply.status} {reply.body}"
    if reply.status == SUCCESS[kind]:
        return None
    if reply.status not in (400, 404, 503):
        request_id = (reply.body or {}).get("request_id")
        logged = [r for r in server.log_records() if request_id and request_id in str(r)]
        return f"undocumented status for {what}; server log of the request: {logged}"
    if reply.status == 503:
        if not reply.headers.get("Retry-After"):
            return f"503 without Retry-After for {what}"
        return None
    message = reply.body["message"]
    if not any(p.match(message) if isinstance(p, re.Pattern) else message.startswith(p)
               for p in DOCUMENTED_REFUSALS[kind]):
        return f"undocumented refusal for {what}"
    return None


def live_ephemeral_and_snat(admin):
    """How many addresses of the SNAT pool the project's instances hold: one per ephemeral
    IPv4 address, one per distinct SNAT address."""
    snat, ephemeral = set(), 0
    for instance in list_all(admin, "/v1/instances", project=PROJECT):
        for item in instance_external_ips(admin, instance["id"]):
            if item["kind"] == "snat":
                snat.add(item["ip"])
            elif item["kind"] == "ephemeral":
                ephemeral += 1
    return len(snat) + ephemeral


def test_attach_races_detach_delete_stop_start_and_instance_delete(start_rack):
    rack = prepare(start_rack())
    outcomes = Counter()
    problems = []  # undocumented outcomes: reported after the dataplane checks of every round
    for round_number in range(ROUNDS):
        race_round(rack, round_number, [rack.server], outcomes, problems)
    assert all(s["state"] in ("done", "unwound") for s in list_sagas(rack.admin))
    assert not problems, "\n".join(problems) + f"\nall outcomes: {dict(sorted(outcomes.items()))}"


def race_round(rack, round_number, servers, outcomes, problems):
    """One round of test 3 on fresh instances and floating IPs. The requests of job k go to
    servers[k mod len(servers)] (test_replicas.py races through several servers on one
    database). Counts each (request kind, status) in `outcomes`, appends undocumented outcomes
    to `problems`, and asserts what must hold whatever the interleaving."""
    admin = rack.admin
    tag = f"r{round_number}"
    runner, parked, doomed = (f"{tag}-runner", f"{tag}-parked", f"{tag}-doomed")
    a = make_instance(admin, PROJECT, runner)
    b = make_instance(admin, PROJECT, parked, start=False)
    c = make_instance(admin, PROJECT, doomed, start=False)
    wait_run_state(admin, a["id"], "running")
    loose, moving, orphan, parked_fip = (
        make_fip(admin, PROJECT, f"{tag}-{n}", from_pool(FIP_POOL))
        for n in ("loose", "moving", "orphan", "parked"))
    expect(attach_fip(admin, moving["id"], a["id"]), 202)
    expect(attach_fip(admin, parked_fip["id"], b["id"]), 202)
    expect(attach_ephemeral(admin, a["id"], auto_pool("v4")), 202)

    # Each job: its steps, (kind, call(api)), made one after the other on one server.
    jobs = {
        "loose to runner": [("attach", lambda api: attach_fip(api, loose["id"], a["id"]))],
        "loose to parked": [("attach", lambda api: attach_fip(api, loose["id"], b["id"]))],
        "loose to doomed": [("attach", lambda api: attach_fip(api, loose["id"], c["id"]))],
        "delete loose": [("delete fip", lambda api: api.delete(f"/v1/floating-ips/{loose['id']}"))],
        "move": [("detach", lambda api: detach_fip(api, moving["id"])),
                 ("attach", lambda api: attach_fip(api, moving["id"], b["id"]))],
        "stop runner": [("stop", lambda api: instance_action(api, a["id"], "stop"))],
        "start parked": [("start", lambda api: instance_action(api, b["id"], "start"))],
        "drop parked fip": [
            ("detach", lambda api: detach_fip(api, parked_fip["id"])),
            ("delete fip", lambda api: api.delete(f"/v1/floating-ips/{parked_fip['id']}"))],
        "orphan to doomed": [("attach", lambda api: attach_fip(api, orphan["id"], c["id"]))],
        "delete doomed": [
            ("delete instance", lambda api: api.delete(f"/v1/instances/{c['id']}"))],
        "cycle ephemeral": [
            ("detach ephemeral", lambda api: detach_ephemeral(api, a["id"])),
            ("attach ephemeral", lambda api: attach_ephemeral(api, a["id"], auto_pool("v4")))],
        "ephemeral to parked": [
            ("attach ephemeral", lambda api: attach_ephemeral(api, b["id"], auto_pool("v4")))],
    }
    server_of = {name: servers[k % len(servers)] for k, name in enumerate(jobs)}

    def run(name):
        api = server_of[name].admin
        return lambda: [(kind, call(api)) for kind, call in jobs[name]]

    done = dict(zip(jobs, run_together([run(name) for name in jobs], timeout=60.0)))
    for name, steps in done.items():
        for kind, reply in steps:
            problem = undocumented(server_of[name], f"round {round_number}, {name} ({kind})",
                                   kind, reply)
            if problem:
                problems.append(problem)
            outcomes[(kind, reply.status)] += 1

    # Let every instance reach running or stopped, then the three places must agree.
    def settled():
        states = [i["run_state"] for i in list_all(admin, "/v1/instances", project=PROJECT)]
        return all(s in ("running", "stopped") for s in states)

    wait_until(settled, 15.0, "every instance running or stopped")
    wait_external_ip_agreement(rack, [PROJECT], timeout=15.0)

    # Consequences that must hold whatever the interleaving.
    won = [reply.body for steps in done.values() for kind, reply in steps
           if kind == "attach" and reply.status == 202]
    doomed_deleted = done["delete doomed"][0][1].status == 204
    if doomed_deleted:
        assert_error(admin.get(f"/v1/instances/{c['id']}"), 404, "ObjectNotFound")
    if done["delete loose"][0][1].status == 204:
        # Only the instance delete detaches `loose` (§4.8), so an attach that succeeded
        # before its delete can only have been to the deleted instance.
        assert_error(admin.get(f"/v1/floating-ips/{loose['id']}"), 404, "ObjectNotFound")
        holders = {w["instance_id"] for w in won if w["id"] == loose["id"]}
        assert holders <= ({c["id"]} if doomed_deleted else set()), (
            f"{loose['name']} was deleted while attached to {holders}: {done}")
    initially = {moving["id"]: a["id"], parked_fip["id"]: b["id"]}
    for fip in (loose, moving, orphan, parked_fip):
        reply = admin.get(f"/v1/floating-ips/{fip['id']}")
        if reply.status == 404:
            continue
        holder = expect(reply, 200)["instance_id"]
        if holder is not None:
            given = any(w["id"] == fip["id"] and w["instance_id"] == holder for w in won)
            assert holder == initially.get(fip["id"]) or given, (
                f"{fip['name']} is held by {holder}, which no successful attach gave it")
            assert not (doomed_deleted and holder == c["id"]), (
                f"{fip['name']} is attached to a deleted instance")

    # No address leaked: every live floating IP, SNAT address and ephemeral IP accounts for
    # exactly one used address of its pool.
    capacity, remaining = utilization(admin, FIP_POOL)
    assert capacity - remaining == len(list_all(admin, "/v1/floating-ips", project=PROJECT))
    capacity, remaining = utilization(admin, SNAT_POOL)
    assert capacity - remaining == live_ephemeral_and_snat(admin)


def test_attach_racing_instance_delete(start_rack):
    """The narrowest of the races above, many times over: attaching a floating and an
    ephemeral IP to a stopped instance while it is deleted. Either the attach loses (404 or
    another documented refusal) or it wins and the delete then detaches the floating IP and
    releases the ephemeral address (§4.8); never a 500, never a leak."""
    rack = prepare(start_rack())
    admin = rack.admin
    outcomes = Counter()
    problems = []
    for round_number in range(DELETE_ROUNDS):
        instance = make_instance(admin, PROJECT, f"brief-{round_number}", start=False)
        fip = make_fip(admin, PROJECT, f"brief-fip-{round_number}", from_pool(FIP_POOL))
        jobs = {
            "attach": lambda: attach_fip(admin, fip["id"], instance["id"]),
            "attach ephemeral": lambda: attach_ephemeral(admin, instance["id"], auto_pool("v4")),
            "delete instance": lambda: admin.delete(f"/v1/instances/{instance['id']}"),
        }
        done = dict(zip(jobs, run_together(list(jobs.values()))))
        for kind, reply in done.items():
            problem = undocumented(rack.server, f"round {round_number}, {kind}", kind, reply)
            if problem:
                problems.append(problem)
            outcomes[(kind, reply.status)] += 1
        wait_sagas_settled(admin)
        holder = expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)["instance_id"]
        if done["delete instance"].status == 204:
            assert_error(admin.get(f"/v1/instances/{instance['id']}"), 404, "ObjectNotFound")
            assert holder is None, f"round {round_number}: floating IP held by a deleted instance"
        else:
            attached = done["attach"].status == 202
            assert holder == (instance["id"] if attached else None), (holder, done)

    wait_external_ip_agreement(rack, [PROJECT])
    capacity, remaining = utilization(admin, FIP_POOL)
    assert capacity - remaining == DELETE_ROUNDS
    capacity, remaining = utilization(admin, SNAT_POOL)
    assert capacity - remaining == live_ephemeral_and_snat(admin), "an address leaked"
    assert not problems, "\n".join(problems) + f"\nall outcomes: {dict(sorted(outcomes.items()))}"
