"""Setup and assertion helpers shared by the end-to-end tests.

Everything goes through the public API with a `Client` from conftest.py; the helpers assert
the status of the setup calls they make, so a test fails where its setup broke.
"""

import http.client
import ipaddress
import itertools
import json
import os
import re
import threading
import time
import urllib.request
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

DEFAULT_SILO = "default"

# The binary under test was built with sanitizers (CMake sets FLOATPLANE_SANITIZE for the e2e
# tests of such a build): several times slower, so the few tests that load the server to its
# bounds scale their load down there (the unsanitized passes run them at full size).
SANITIZED = bool(os.environ.get("FLOATPLANE_SANITIZE"))

_unique_counter = itertools.count(1)


def unique(prefix):
    """A fresh valid Name with the given prefix (for tests sharing one server)."""
    return f"{prefix}-{next(_unique_counter)}"


# -- wire formats ------------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})")


def is_uuid(text):
    return isinstance(text, str) and _UUID.fullmatch(text) is not None


def timestamp_ns(text):
    """Parses an RFC 3339 timestamp (any fraction length) into nanoseconds since the epoch."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 date-time: {text!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    nanos = int(((match.group(7) or ".")[1:] + "000000000")[:9])
    offset = match.group(8)
    if offset in ("Z", "z"):
        tz = timezone.utc
    else:
        sign = 1 if offset[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
    moment = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (moment - epoch) // timedelta(seconds=1) * 1_000_000_000 + nanos


def agent_request(url, path, secret_path, method="GET", body=None):
    """One call to an agent (e.g. the dev server's in-process ones, at the URLs its "agents"
    log line names) as the control plane makes it, with the agent secret of `secret_path`;
    returns the decoded JSON answer (2xx only)."""
    secret = Path(secret_path).read_text().strip()
    request = urllib.request.Request(
        f"{url}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def metrics_text(server):
    """The server's GET /metrics (Prometheus text)."""
    if server.tls is not None:
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5,
                                                 context=server.tls)
    else:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def metric(server, name):
    """The value of metric `name` in the server's GET /metrics (Prometheus text); `name` may
    carry labels, e.g. 'floatplane_http_refused_total{reason="busy"}'."""
    text = metrics_text(server)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(f"/metrics has no {name}: {text}")


# -- assertions --------------------------------------------------------------------------------

def expect(reply, status):
    """Asserts the status and returns the decoded body."""
    assert reply.status == status, f"expected {status}, got {reply.status}: {reply.body}"
    return reply.body


def assert_error(reply, status, error_code=None, message=None, *, startswith=None,
                 contains=None):
    """Asserts an error reply: status, error_code and (exact, prefix or substring) message."""
    assert reply.status == status, f"expected {status}, got {reply.status}: {reply.body}"
    body = reply.body
    if error_code is not None:
        assert body.get("error_code") == error_code, (
            f"expected error_code {error_code!r}: {body}")
    if message is not None:
        assert body["message"] == message, f"expected message {message!r}: {body}"
    if startswith is not None:
        assert body["message"].startswith(startswith), (
            f"expected message starting {startswith!r}: {body}")
    if contains is not None:
        assert contains in body["message"], f"expected message containing {contains!r}: {body}"
    return body


def same_ip(a, b):
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


def ips(fips):
    return [ipaddress.ip_address(f["ip"]) for f in fips]


def ip_list(*texts):
    return [ipaddress.ip_address(t) for t in texts]


# -- pagination --------------------------------------------------------------------------------

def list_pages(client, path, limit, **params):
    """Follows next_page to the end the way Oxide's SDK does: the first request carries the
    scan parameters (project, sort_by, ...), the following ones only `limit` and `page_token`.
    Returns the list of pages (each a list of items)."""
    pages = []
    tokens = set()
    query = dict(params, limit=limit)
    while True:
        page = expect(client.get(path, params=query), 200)
        assert len(page["items"]) <= limit, f"page larger than limit {limit}: {page}"
        pages.append(page["items"])
        token = page.get("next_page")
        if token is None:
            return pages
        assert token not in tokens, f"{path}: next_page {token!r} repeats; pagination loops"
        tokens.add(token)
        query = {"limit": limit, "page_token": token}


def list_all(client, path, limit=100, **params):
    return [item for page in list_pages(client, path, limit, **params) for item in page]


def names(items):
    return [item["name"] for item in items]


# -- silos, tokens, projects -------------------------------------------------------------------

def silo_body(name, description="test silo", discoverable=True):
    return {
        "name": name,
        "description": description,
        "discoverable": discoverable,
        "identity_mode": "local_only",
        "quotas": {"cpus": 16, "memory": 64 << 30, "storage": 1 << 40},
        "tls_certificates": [],
    }


def make_silo(admin, name, **kwargs):
    return expect(admin.post("/v1/system/silos", silo_body(name, **kwargs)), 201)


def make_token(admin, silo, role, name=None):
    """Creates a token (extension endpoint); returns its body {id, token}."""
    body = {"silo": silo, "role": role, "name": name or unique(f"token-{role.replace('_', '-')}")}
    return expect(admin.post("/v1/system/tokens", body), 201)


def role_client(admin, silo, role):
    """A client acting with a fresh token of `role` in `silo`."""
    return admin.with_token(make_token(admin, silo, role)["token"])


def make_project(client, name, description=None):
    body = {"name": name, "description": description or f"project {name}"}
    return expect(client.post("/v1/projects", body), 201)


# -- IP pools ----------------------------------------------------------------------------------

def make_pool(admin, name, first=None, last=None, version="v4", description=None):
    """Creates a unicast pool for silos and, if `first` is given, its first range."""
    body = {"name": name, "description": description or f"pool {name}", "ip_version": version}
    pool = expect(admin.post("/v1/system/ip-pools", body), 201)
    if first is not None:
        add_range(admin, name, first, last or first)
    return pool


def add_range(admin, pool, first, last):
    return expect(
        admin.post(f"/v1/system/ip-pools/{pool}/ranges/add", {"first": first, "last": last}),
        201)


def remove_range(admin, pool, first, last):
    return admin.post(f"/v1/system/ip-pools/{pool}/ranges/remove", {"first": first, "last": last})


def link(admin, pool, silo=DEFAULT_SILO, default=False):
    body = {"silo": silo, "is_default": default}
    return expect(admin.post(f"/v1/system/ip-pools/{pool}/silos", body), 201)


def unlink(admin, pool, silo=DEFAULT_SILO):
    return admin.delete(f"/v1/system/ip-pools/{pool}/silos/{silo}")


def pool_links(admin, pool):
    return list_all(admin, f"/v1/system/ip-pools/{pool}/silos")


def utilization(admin, pool):
    body = expect(admin.get(f"/v1/system/ip-pools/{pool}/utilization"), 200)
    return body["capacity"], body["remaining"]


# -- floating IPs ------------------------------------------------------------------------------

def explicit_ip(ip):
    return {"type": "explicit", "ip": ip}


def from_pool(pool):
    return {"type": "auto", "pool_selector": {"type": "explicit", "pool": pool}}


def from_default(ip_version=None):
    return {"type": "auto", "pool_selector": {"type": "auto", "ip_version": ip_version}}


# Leaves `address_allocator` out of the body (the server's default then applies).
NO_ALLOCATOR = None


def create_fip(client, project, name, allocator=NO_ALLOCATOR, description=None):
    """POSTs a floating IP; returns the reply (for tests of refusals)."""
    body = {"name": name, "description": description or f"floating IP {name}"}
    if allocator is not NO_ALLOCATOR:
        body["address_allocator"] = allocator
    return client.post("/v1/floating-ips", body, params={"project": project})


def make_fip(client, project, name, allocator=NO_ALLOCATOR):
    return expect(create_fip(client, project, name, allocator), 201)


def delete_fip(client, fip_id):
    return expect(client.delete(f"/v1/floating-ips/{fip_id}"), 204)


# -- polling -----------------------------------------------------------------------------------

def wait_until(check, timeout=10.0, what="condition", describe=None, interval=0.02):
    """Calls `check()` until it returns a truthy value, which is returned. After `timeout`
    seconds fails with `what`, the last value and `describe()` (if given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{describe()}" if describe else ""
            raise AssertionError(f"{what}: not reached within {timeout} s "
                                 f"(last: {value!r}){detail}")
        time.sleep(interval)


# -- instances ---------------------------------------------------------------------------------

GIB = 1 << 30


def instance_body(name, start=True, nic="default_dual_stack", **extra):
    """An InstanceCreate body; `nic` is the network_interfaces type (None: left out)."""
    body = {"name": name, "description": f"instance {name}", "hostname": name, "ncpus": 1,
            "memory": GIB, "start": start}
    if nic is not None:
        body["network_interfaces"] = {"type": nic}
    body.update(extra)
    return body


def create_instance(client, project, name, **kwargs):
    """POSTs an instance (see instance_body); returns the reply."""
    return client.post("/v1/instances", instance_body(name, **kwargs), params={"project": project})


def make_instance(client, project, name, **kwargs):
    return expect(create_instance(client, project, name, **kwargs), 201)


def view_instance(client, instance_id):
    return expect(client.get(f"/v1/instances/{instance_id}"), 200)


def instance_action(client, instance_id, verb):
    """POST /v1/instances/{id}/{start|stop|reboot}; returns the reply."""
    return client.post(f"/v1/instances/{instance_id}/{verb}")


def migrate(admin, instance_id, dst_sled_id):
    return admin.post(f"/v1/system/instances/{instance_id}/migrate",
                      {"dst_sled_id": dst_sled_id})


def wait_run_state(client, instance_id, state, timeout=10.0):
    """Polls the instance view until its run_state is `state`; returns the view."""
    last = {}

    def check():
        last["view"] = view_instance(client, instance_id)
        return last["view"] if last["view"]["run_state"] == state else None

    return wait_until(check, timeout, f"instance {instance_id} run_state {state!r}",
                      describe=lambda: f"last view: {last.get('view')}")


def running_vm_with_fip(rack, pool, first, last, project):
    """The silo's default pool `pool` (first..last), project `project` with a running instance
    `vm` and a floating IP `f` not attached; returns (vm, fip, the vm's sled agent)."""
    admin = rack.admin
    make_pool(admin, pool, first, last)
    link(admin, pool, default=True)
    make_project(admin, project)
    vm = make_instance(admin, project, "vm")
    wait_run_state(admin, vm["id"], "running")
    fip = expect(admin.post("/v1/floating-ips", {"name": "f", "description": ""},
                            params={"project": project}), 201)
    [(sled_id, _)] = rack.vms(vm["id"])
    return vm, fip, rack.agent_by_id[sled_id]


# -- agent faults -------------------------------------------------------------------------------

# Server flags for a test that injects faults into a switch agent's NAT pushes: no heartbeat
# within the test, so that the operation's own pushes (and its undo's) are the only ones and
# meet the faults. At the default 100 ms a heartbeat that found the switch behind (an
# operation's NAT rows committed, its switch node not yet run) pushed first and took the
# faults, or installed the change, and the operation succeeded (seen on PostgreSQL under load).
# The first heartbeat still runs at the server's start: such a test calls wait_switches_checked
# (below) before it adds a fault.
QUIET_SWITCH = ("--nat-heartbeat-ms", "3600000")


def wait_switches_checked(server, timeout=10.0):
    """Waits until the server's first heartbeat has checked every switch agent (its table found
    or made equal to the datastore's: floatplane_nat_last_full_reconcile_timestamp_seconds above
    0). A test with QUIET_SWITCH calls it before it adds a switch fault: that heartbeat runs when
    the server starts, and one that came late, after the operation under test had committed its
    NAT rows, loaded the switch whole (PUT /nat), so the operation's own push had nothing to send
    and met no fault (seen on PostgreSQL under load)."""
    name = "floatplane_nat_last_full_reconcile_timestamp_seconds"

    def checked():
        values = [float(line.split()[-1]) for line in metrics_text(server).splitlines()
                  if line.startswith(name + "{")]
        return bool(values) and all(v > 0 for v in values)

    wait_until(checked, timeout, "every switch agent checked by the server's first heartbeat")


# -- sagas (extension endpoint) ----------------------------------------------------------------

SETTLED_SAGA_STATES = ("done", "unwound")


def list_sagas(admin, limit=1000):
    return expect(admin.get("/v1/system/sagas", params={"limit": limit}), 200)["items"]


def wait_sagas_settled(admin, timeout=10.0):
    """Polls until no saga is running or unwinding; asserts none is stuck; returns them all."""
    def check():
        items = list_sagas(admin)
        # Wrapped: an empty list is a valid (settled) answer.
        return [items] if all(s["state"] not in ("running", "unwinding") for s in items) else None

    [sagas] = wait_until(check, timeout, "every saga done, unwound or stuck",
                         describe=lambda: f"sagas: {list_sagas(admin)}")
    stuck = [s for s in sagas if s["state"] not in SETTLED_SAGA_STATES]
    assert not stuck, f"sagas not done or unwound: {stuck}"
    return sagas


# -- the dataplane (a Rack from conftest.py: server + external simulated agents) -------------

SNAT_BLOCK_PORTS = 16384


def snat_block(ip, index):
    """The NAT key (address, first_port, last_port) of SNAT block `index` (0..3) of `ip`."""
    first = index * SNAT_BLOCK_PORTS
    return (ipaddress.ip_address(ip), first, first + SNAT_BLOCK_PORTS - 1)


def nat_key(entry):
    return (ipaddress.ip_address(entry["external_ip"]), entry["first_port"], entry["last_port"])


def nat_keys(entries):
    return sorted(nat_key(e) for e in entries)


def sled_instance_ids(admin, sled_id):
    """The ids the operator view lists on a sled."""
    items = expect(admin.get(f"/v1/system/hardware/sleds/{sled_id}/instances"), 200)["items"]
    return [item["id"] for item in items]


def disagreement(rack, instance_id, snat):
    """Compares the three places for one instance: the API (database) view, the sled agents
    and the switch agent. `snat` is the instance's SNAT key (see snat_block) or None if it has
    none. Returns None if they agree on a settled state, else what differs:

    - running: exactly one sled agent has the VM, running, and the operator view lists the
      instance on that sled; the switch has the SNAT entry;
    - stopped: no sled agent runs the VM and no sled lists it; the switch has no SNAT entry.
    """
    view = view_instance(rack.admin, instance_id)
    state = view["run_state"]
    if state not in ("running", "stopped"):
        return f"run_state is {state!r}, not settled"
    vms = rack.vms(instance_id)
    running = [(sled, vm) for sled, vm in vms if vm["state"] == "running"]
    entries = rack.nat_entries()
    has_snat = snat is not None and any(nat_key(e) == snat for e in entries)
    listed_on = [sled for sled in rack.agent_by_id
                 if instance_id in sled_instance_ids(rack.admin, sled)]
    if state == "running":
        if len(vms) != 1 or len(running) != 1:
            return f"DB says running; sled agents have {vms}"
        if listed_on != [running[0][0]]:
            return (f"DB says running on {listed_on} (operator view); sled agent "
                    f"{running[0][0]} runs it")
        if snat is not None and not has_snat:
            return f"DB says running; switch has no SNAT entry {snat}: {entries}"
    else:
        if running:
            return f"DB says stopped; sled agents run it: {running}"
        if listed_on:
            return f"DB says stopped; the operator view lists it on {listed_on}"
        if has_snat:
            return f"DB says stopped; switch still has SNAT entry {snat}: {entries}"
    return None


def wait_agreement(rack, instance_id, snat, timeout=10.0):
    """Polls until disagreement() is None; returns the instance view."""
    last = {}

    def check():
        last["problem"] = disagreement(rack, instance_id, snat)
        return last["problem"] is None

    wait_until(check, timeout, f"database, sled agents and switch agree on {instance_id}",
               describe=lambda: f"last: {last.get('problem')}\n{rack.describe()}")
    return view_instance(rack.admin, instance_id)


# -- external IPs: attach, detach, list (omicron-behaviour.md §2.1-§2.2) -----------------------

# Messages of §2-§3 (product.md differences 1 and 2 may append holder details after the text).
ATTACHED_ELSEWHERE = ("floating IP cannot be attached to one instance while still attached to "
                      "another")
OTHER_PROJECT = "floating IP must be in the same project as the instance"
TOO_MANY_IPS = "an instance may not have more than 32 external IP addresses"
NO_EPHEMERAL = "instance does not have an ephemeral IP attached"
TWO_EPHEMERAL = "instance has two ephemeral IPs; specify ip_version to select which to detach"
DELETE_ATTACHED = "Floating IP cannot be deleted while attached to an instance"
NO_ADDRESSES = "Insufficient capacity: No external IP addresses available"
MULTIPLE_DEFAULTS = ("Multiple default unicast IP pools exist with different IP versions. "
                     "Please specify ip_version (v4 or v6) or provide an explicit pool.")
MAX_EXTERNAL_IPS = 32


def missing_stack_message(kind, version, instance_id):
    """§3.2: the attach of a `kind` ("floating"/"ephemeral") IP of `version` (4 or 6) to an
    instance whose primary NIC lacks that stack."""
    v = f"IPv{version}"
    return (f"The {kind} external IP is an {v} address, but the instance with ID {instance_id} "
            f"does not have a primary network interface with a VPC-private {v} address. Add a "
            f"VPC-private {v} address to the interface, or attach a different IP address")


def explicit_pool(pool):
    """A PoolSelector naming a pool."""
    return {"type": "explicit", "pool": pool}


def auto_pool(ip_version=None):
    """A PoolSelector for the silo's default pool (of `ip_version` if given)."""
    return {"type": "auto", "ip_version": ip_version}


def attach_fip(client, fip, parent, project=None):
    """POST /v1/floating-ips/{fip}/attach to instance `parent` (name or id); returns the reply.
    `project` selects a floating IP given by name."""
    return client.post(f"/v1/floating-ips/{fip}/attach", {"kind": "instance", "parent": parent},
                       params={"project": project})


def detach_fip(client, fip, project=None):
    return client.post(f"/v1/floating-ips/{fip}/detach", params={"project": project})


def attach_ephemeral(client, instance, pool_selector=None, project=None):
    """POST /v1/instances/{instance}/external-ips/ephemeral; body {} without a selector."""
    body = {} if pool_selector is None else {"pool_selector": pool_selector}
    return client.post(f"/v1/instances/{instance}/external-ips/ephemeral", body,
                       params={"project": project})


def detach_ephemeral(client, instance, ip_version=None, project=None):
    return client.delete(f"/v1/instances/{instance}/external-ips/ephemeral",
                         params={"project": project, "ip_version": ip_version})


def instance_external_ips(client, instance, project=None):
    """The instance's attached external IPs; asserts they come in one page (§2.2)."""
    page = expect(client.get(f"/v1/instances/{instance}/external-ips",
                             params={"project": project}), 200)
    assert page.get("next_page") is None, f"external IPs must come in one page: {page}"
    return page["items"]


def version_first(key):
    """A sort key for addresses or NAT keys of both IP versions (which do not compare)."""
    address = key[0] if isinstance(key, tuple) else key
    return (address.version, key)


def external_ip_key(item):
    """The NAT key (address, first_port, last_port) an ExternalIp item should have on the
    switch: its port block for SNAT, every port for floating and ephemeral IPs."""
    if item["kind"] == "snat":
        return (ipaddress.ip_address(item["ip"]), item["first_port"], item["last_port"])
    return (ipaddress.ip_address(item["ip"]), 0, 65535)


def assert_retry_later(reply, *mentions):
    """A 503 with a Retry-After header whose message names each of `mentions` (product.md
    difference 1: actionable, not a bare "Service Unavailable")."""
    body = assert_error(reply, 503, "ServiceNotAvailable")
    retry_after = reply.headers.get("Retry-After")
    assert retry_after, f"503 without Retry-After: {dict(reply.headers)} {body}"
    if retry_after.isdigit():
        assert int(retry_after) >= 1, f"Retry-After {retry_after!r}"
    for mention in mentions:
        assert mention in body["message"], f"503 message does not name {mention!r}: {body}"
    return body


def external_ip_disagreement(rack, projects):
    """Compares the database (the API's views of the instances and floating IPs of `projects`),
    the switch agent's NAT table and the sled agents, for a whole rack. Returns None if they
    agree on a settled state, else a description of every difference:

    - every instance is running or stopped;
    - a running instance runs on exactly one sled, which the operator view also names, and that
      VM's external addresses are exactly the instance's attached IPs (SNAT included);
    - a stopped instance has no VM on any sled;
    - the NAT table holds exactly one entry per attached IP of each running instance (its SNAT
      block, or every port for floating and ephemeral IPs) and nothing else: no entry for
      stopped instances, detached or deleted IPs; all entries of an instance carry the same
      sled address, VNI and MAC, and the sled address is the one of the sled running it
      (one address per sled, different sleds different addresses);
    - a floating IP whose instance_id is set is listed by that (existing) instance, and one
      whose instance_id is null by none.
    """
    admin = rack.admin
    problems = []
    instances = [i for p in projects for i in list_all(admin, "/v1/instances", project=p)]
    fips = [f for p in projects for f in list_all(admin, "/v1/floating-ips", project=p)]
    unsettled = [(i["name"], i["run_state"]) for i in instances
                 if i["run_state"] not in ("running", "stopped")]
    if unsettled:
        return f"instances not settled: {unsettled}"

    vms = {}  # instance id -> [(sled id, VM)]
    for agent in rack.sleds:
        for vm in agent.instances():
            vms.setdefault(vm["id"], []).append((rack.sled_id(agent), vm))
    listed_on = {sled: set(sled_instance_ids(admin, sled)) for sled in rack.agent_by_id}
    entries = rack.nat_entries()
    by_key = {}
    for entry in entries:
        by_key.setdefault(nat_key(entry), []).append(entry)

    expected = Counter()
    sled_address = {}  # sled id -> underlay address its instances' entries carry
    attached = {}      # instance id -> attached items
    for instance in instances:
        iid, name = instance["id"], instance["name"]
        items = instance_external_ips(admin, iid)
        attached[iid] = items
        keys = [external_ip_key(item) for item in items]
        if len(set(keys)) != len(keys):
            problems.append(f"{name}: the same address listed twice: {items}")
        here = vms.get(iid, [])
        if instance["run_state"] == "stopped":
            if here:
                problems.append(f"{name}: DB says stopped; sled agents have {here}")
            if any(iid in ids for ids in listed_on.values()):
                problems.append(f"{name}: DB says stopped; the operator view lists it on a sled")
            continue
        running = [(sled, vm) for sled, vm in here if vm["state"] == "running"]
        if len(here) != 1 or len(running) != 1:
            problems.append(f"{name}: DB says running; sled agents have {here}")
            continue
        sled, vm = running[0]
        on = sorted(s for s, ids in listed_on.items() if iid in ids)
        if on != [sled]:
            problems.append(f"{name}: operator view lists it on {on}; sled {sled} runs it")
        want = sorted({ipaddress.ip_address(item["ip"]) for item in items}, key=version_first)
        have = sorted({ipaddress.ip_address(ip) for ip in vm["external_ips"]},
                      key=version_first)
        if want != have:
            problems.append(f"{name}: attached IPs {[str(a) for a in want]}, but its VM on "
                            f"sled {sled} has {[str(a) for a in have]}")
        expected.update(keys)
        targets = set()
        for key in keys:
            for entry in by_key.get(key, []):
                targets.add((entry["sled_address"], entry["vni"], entry["mac"]))
        if len(targets) > 1:
            problems.append(f"{name}: its NAT entries point at different targets {targets}")
        for address, _, _ in targets:
            known = sled_address.setdefault(sled, address)
            if known != address:
                problems.append(f"{name}: NAT points at {address}, but other instances on "
                                f"sled {sled} are reached at {known}")

    actual = Counter(nat_key(e) for e in entries)
    missing = sorted((expected - actual).elements(), key=version_first)
    extra = sorted((actual - expected).elements(), key=version_first)
    if missing:
        problems.append(f"NAT entries missing on the switch: {[str(k) for k in missing]}")
    if extra:
        problems.append(f"NAT entries the database does not account for: "
                        f"{[str(k) for k in extra]}")
    if len(set(sled_address.values())) != len(sled_address):
        problems.append(f"different sleds share one NAT sled address: {sled_address}")

    known_ids = {i["id"] for i in instances}
    strays = [(sled, vm) for iid, here in vms.items() if iid not in known_ids
              for sled, vm in here]
    if strays:
        problems.append(f"sled agents have VMs of no instance: {strays}")
    listing = {}  # floating IP id -> instance ids listing it
    for iid, items in attached.items():
        for item in items:
            if item["kind"] == "floating":
                listing.setdefault(item["id"], []).append(iid)
                if item.get("instance_id") != iid:
                    problems.append(f"instance {iid} lists floating IP {item['name']} with "
                                    f"instance_id {item.get('instance_id')}")
    for fip in fips:
        holders = listing.get(fip["id"], [])
        holder = fip.get("instance_id")
        if holder is None and holders:
            problems.append(f"floating IP {fip['name']} is detached but listed by {holders}")
        if holder is not None and holders != [holder]:
            problems.append(f"floating IP {fip['name']} has instance_id {holder} (existing: "
                            f"{holder in known_ids}) but is listed by {holders}")
    return "\n".join(problems) or None


def wait_external_ip_agreement(rack, projects, timeout=10.0):
    """Polls until external_ip_disagreement() is None and no saga runs or unwinds; asserts
    that none is stuck. Returns the sagas."""
    last = {}

    def check():
        last["problem"] = external_ip_disagreement(rack, projects)
        return last["problem"] is None

    def describe():
        return f"last: {last.get('problem')}\n{rack.describe()}"

    wait_until(check, timeout, "database, switch agent and sled agents agree on external IPs",
               describe=describe)
    sagas = wait_sagas_settled(rack.admin, timeout)
    # Settling sagas may have changed something: the places must still agree.
    wait_until(check, timeout, "agreement after the sagas settled", describe=describe)
    return sagas


# -- concurrency -------------------------------------------------------------------------------

class Background:
    """Runs `call()` in a daemon thread at once (requests made there use connections of their
    own); result() waits for it with a deadline and returns its value or re-raises."""

    def __init__(self, call):
        self._value = None
        self._error = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call):
        try:
            self._value = call()
        except BaseException as error:  # reported by result()
            self._error = error

    def running(self):
        return self._thread.is_alive()

    def result(self, timeout=30.0):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the background call did not end within {timeout} s"
        if self._error is not None:
            raise self._error
        return self._value


def run_together(calls, timeout=60.0):
    """Starts every call of `calls` in its own thread, releases them at once with a barrier,
    and returns their results in order. Fails if one raised or they did not all end within
    `timeout` seconds."""
    barrier = threading.Barrier(len(calls))

    def released(call):
        def run():
            barrier.wait(timeout)
            return call()
        return run

    workers = [Background(released(call)) for call in calls]
    deadline = time.monotonic() + timeout
    return [w.result(max(0.0, deadline - time.monotonic())) for w in workers]
