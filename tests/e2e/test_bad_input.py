"""Bad input walk: malformed JSON, wrong types, missing fields, invalid names, addresses,
ranges and query or path parameters, oversized bodies, numbers beyond double range, keys given
twice, instance sizes beyond Oxide's limits. Every one must get a 400 with a message naming the
offending field (product.md, "Reliability contract") — never a 500, a 413 or a crash: the
server must still answer ping after each — and must change nothing."""

import json
import uuid
from typing import NamedTuple

import pytest

from e2e_helpers import (GIB, assert_error, expect, explicit_ip, from_default, from_pool,
                         instance_body, link, list_all, make_fip, make_instance, make_pool,
                         make_project)

PROJECT = "bad-project"
POOL = "bad-v4"
FIP = "bad-fip"
INSTANCE = "bad-vm"
ONE_MIB = 1 << 20


@pytest.fixture(scope="module")
def env(module_server):
    make_pool(module_server.admin, POOL, "10.99.0.0", "10.99.0.255")
    link(module_server.admin, POOL, default=True)
    make_project(module_server.admin, PROJECT)
    make_fip(module_server.admin, PROJECT, FIP)
    make_instance(module_server.admin, PROJECT, INSTANCE, start=False)
    return module_server


@pytest.fixture(autouse=True)
def still_alive(env):
    yield
    assert env.process.poll() is None, f"server died\n{env.describe_output()}"
    reply = env.anonymous.get("/v1/ping")
    assert (reply.status, reply.body) == (200, {"status": "ok"})


class Case(NamedTuple):
    id: str
    method: str
    path: str
    body: object = None          # JSON-encoded when not None
    raw: bytes = None            # sent as is when not None
    params: dict = None
    fields: tuple = ()           # the message must contain one of these words


def project_body(**fields):
    return dict({"name": "fine-name", "description": "fine"}, **fields)


def fip_body(allocator):
    return {"name": "fine-fip", "description": "", "address_allocator": allocator}


FIPS = "/v1/floating-ips"
INSTANCES = "/v1/instances"
IN_PROJECT = {"project": PROJECT}
RANGES_ADD = f"/v1/system/ip-pools/{POOL}/ranges/add"
RANGES_REMOVE = f"/v1/system/ip-pools/{POOL}/ranges/remove"
LINKS = f"/v1/system/ip-pools/{POOL}/silos"

BAD_NAMES = {
    "uppercase-start": "Bad",
    "leading-dash": "-lead",
    "trailing-dash": "trail-",
    "too-long": "a" * 64,
    "uuid": str(uuid.UUID(int=7)),
    "empty": "",
    "space": "with space",
    "underscore": "under_score",
    "digit-start": "1abc",
    "non-ascii": "caf\u00e9",
}

CASES = [
    # Malformed bodies: no field to name, but still a 400.
    Case("truncated-json", "POST", "/v1/projects", raw=b'{"name": '),
    Case("not-json", "POST", "/v1/projects", raw=b"name=x&description=y"),
    Case("empty-body", "POST", "/v1/projects", raw=b""),
    Case("array-body", "POST", "/v1/projects", raw=b"[]"),
    Case("string-body", "POST", "/v1/projects", raw=b'"project"'),
    Case("null-body", "POST", "/v1/projects", raw=b"null"),
    Case("trailing-garbage", "POST", "/v1/projects",
         raw=b'{"name": "x", "description": "y"} extra'),
    Case("invalid-utf8", "POST", "/v1/projects",
         raw=b'{"name": "\xff\xfe", "description": ""}'),
    Case("deep-nesting", "POST", "/v1/projects", raw=b"[" * 100000 + b"]" * 100000),
    # Projects: missing fields, wrong types, invalid names.
    Case("project-missing-name", "POST", "/v1/projects", {"description": "x"},
         fields=("name",)),
    Case("project-missing-description", "POST", "/v1/projects", {"name": "fine-name"},
         fields=("description",)),
    Case("project-name-number", "POST", "/v1/projects", project_body(name=5), fields=("name",)),
    Case("project-name-null", "POST", "/v1/projects", project_body(name=None),
         fields=("name",)),
    Case("project-name-object", "POST", "/v1/projects", project_body(name={"a": 1}),
         fields=("name",)),
    Case("project-description-number", "POST", "/v1/projects", project_body(description=7),
         fields=("description",)),
    *[Case(f"project-name-{label}", "POST", "/v1/projects", project_body(name=name),
           fields=("name",)) for label, name in BAD_NAMES.items()],
    Case("project-rename-invalid", "PUT", f"/v1/projects/{PROJECT}", {"name": "Bad"},
         fields=("name",)),
    Case("project-rename-number", "PUT", f"/v1/projects/{PROJECT}", {"name": 12},
         fields=("name",)),
    Case("project-description-array", "PUT", f"/v1/projects/{PROJECT}", {"description": []},
         fields=("description",)),
    Case("project-path-invalid", "GET", "/v1/projects/Not_A_Name", fields=("project",)),
    # Query parameters.
    Case("limit-zero", "GET", "/v1/projects", params={"limit": "0"}, fields=("limit",)),
    Case("limit-negative", "GET", "/v1/projects", params={"limit": "-1"}, fields=("limit",)),
    Case("limit-text", "GET", "/v1/projects", params={"limit": "abc"}, fields=("limit",)),
    Case("sort-by-unknown", "GET", "/v1/projects", params={"sort_by": "sideways"},
         fields=("sort_by",)),
    Case("page-token-garbage", "GET", "/v1/projects", params={"page_token": "garbage!"},
         fields=("page_token",)),
    Case("ip-version-unknown", "GET", "/v1/system/ip-pools", params={"ip_version": "v5"},
         fields=("ip_version",)),
    Case("fip-list-without-project", "GET", FIPS, fields=("project",)),
    Case("fip-list-invalid-project", "GET", FIPS, params={"project": "Not_Valid!"},
         fields=("project",)),
    Case("fip-create-invalid-project", "POST", FIPS, fip_body(from_default("v4")),
         params={"project": "Not_Valid!"}, fields=("project",)),
    Case("fip-create-without-project", "POST", FIPS, fip_body(from_default("v4")),
         fields=("project",)),
    # Floating IP bodies.
    Case("fip-missing-name", "POST", FIPS, {"description": ""}, params=IN_PROJECT,
         fields=("name",)),
    Case("fip-invalid-name", "POST", FIPS, {"name": "Bad Name", "description": ""},
         params=IN_PROJECT, fields=("name",)),
    Case("fip-allocator-string", "POST", FIPS, fip_body("auto"), params=IN_PROJECT,
         fields=("address_allocator",)),
    Case("fip-allocator-unknown-type", "POST", FIPS, fip_body({"type": "magic"}),
         params=IN_PROJECT, fields=("address_allocator", "type")),
    Case("fip-explicit-missing-ip", "POST", FIPS, fip_body({"type": "explicit"}),
         params=IN_PROJECT, fields=("ip",)),
    Case("fip-explicit-bad-ip", "POST", FIPS, fip_body(explicit_ip("10.99.0.300")),
         params=IN_PROJECT, fields=("ip",)),
    Case("fip-explicit-ip-number", "POST", FIPS, fip_body(explicit_ip(167772161)),
         params=IN_PROJECT, fields=("ip",)),
    Case("fip-ip-version-unknown", "POST", FIPS, fip_body(from_default("v5")),
         params=IN_PROJECT, fields=("ip_version",)),
    Case("fip-pool-invalid", "POST", FIPS, fip_body(from_pool("Bad Pool!")),
         params=IN_PROJECT, fields=("pool",)),
    Case("fip-update-invalid-name", "PUT", f"{FIPS}/{FIP}", {"name": "-x"},
         params=IN_PROJECT, fields=("name",)),
    # IP pools.
    Case("pool-ip-version-unknown", "POST", "/v1/system/ip-pools",
         {"name": "bad-version", "description": "", "ip_version": "v5"},
         fields=("ip_version",)),
    Case("pool-type-unknown", "POST", "/v1/system/ip-pools",
         {"name": "bad-type", "description": "", "pool_type": "anycast"},
         fields=("pool_type",)),
    Case("pool-assignment-unknown", "POST", "/v1/system/ip-pools",
         {"name": "bad-assignment", "description": "", "assignment": "everyone"},
         fields=("assignment",)),
    Case("pool-invalid-name", "POST", "/v1/system/ip-pools",
         {"name": "a" * 64, "description": ""}, fields=("name",)),
    Case("pool-path-invalid", "GET", "/v1/system/ip-pools/Bad_Pool", fields=("pool",)),
    Case("range-bad-first", "POST", RANGES_ADD, {"first": "10.99.1.300", "last": "10.99.1.9"},
         fields=("first",)),
    Case("range-missing-last", "POST", RANGES_ADD, {"first": "10.99.1.1"}, fields=("last",)),
    Case("range-mixed-versions", "POST", RANGES_ADD, {"first": "10.99.1.1", "last": "fd99::1"},
         fields=("first", "last", "range", "version", "IPv4", "IPv6")),
    Case("range-remove-mixed-versions", "POST", RANGES_REMOVE,
         {"first": "fd99::1", "last": "10.99.1.1"},
         fields=("first", "last", "range", "version", "IPv4", "IPv6")),
    Case("link-is-default-string", "POST", LINKS, {"silo": "default", "is_default": "yes"},
         fields=("is_default",)),
    Case("link-missing-is-default", "POST", LINKS, {"silo": "default"},
         fields=("is_default",)),
    Case("link-invalid-silo", "POST", LINKS, {"silo": "Not A Name", "is_default": False},
         fields=("silo",)),
    Case("link-update-null", "PUT", f"{LINKS}/default", {"is_default": None},
         fields=("is_default",)),
    # Silos and tokens.
    Case("silo-missing-quotas", "POST", "/v1/system/silos",
         {"name": "no-quotas", "description": "", "discoverable": True,
          "identity_mode": "local_only", "tls_certificates": []}, fields=("quotas",)),
    Case("silo-identity-mode-unknown", "POST", "/v1/system/silos",
         {"name": "bad-mode", "description": "", "discoverable": True,
          "identity_mode": "magic", "quotas": {"cpus": 1, "memory": 1, "storage": 1},
          "tls_certificates": []}, fields=("identity_mode",)),
    Case("silo-discoverable-string", "POST", "/v1/system/silos",
         {"name": "bad-discoverable", "description": "", "discoverable": "yes",
          "identity_mode": "local_only", "quotas": {"cpus": 1, "memory": 1, "storage": 1},
          "tls_certificates": []}, fields=("discoverable",)),
    Case("silo-path-invalid", "GET", "/v1/system/silos/Bad_Silo", fields=("silo",)),
    Case("token-role-unknown", "POST", "/v1/system/tokens",
         {"silo": "default", "role": "emperor", "name": "bad-role"}, fields=("role",)),
    Case("token-missing-silo", "POST", "/v1/system/tokens",
         {"role": "silo_viewer", "name": "no-silo"}, fields=("silo",)),
    # Numbers beyond the range of a double (JSON allows them; nlohmann refuses them by
    # throwing), in unknown and known fields, at any depth. Sent raw: Python's json would
    # write them as Infinity.
    Case("number-huge-unknown-field", "POST", "/v1/projects",
         raw=b'{"name":"a1","description":"","x":1e400}', fields=('"x"',)),
    Case("number-huge-negative", "POST", "/v1/projects",
         raw=b'{"name":"a1","description":"","x":-1e400}', fields=('"x"',)),
    Case("number-huge-top-level", "POST", "/v1/projects", raw=b"1e400"),
    Case("number-huge-known-field", "POST", "/v1/system/silos",
         raw=b'{"name":"huge-quota","description":"","discoverable":true,'
             b'"identity_mode":"local_only","quotas":{"cpus":1,"memory":1e400,"storage":1},'
             b'"tls_certificates":[]}', fields=('"quotas.memory"',)),
    Case("number-huge-nested-unknown", "POST", FIPS,
         raw=b'{"name":"huge-nested","description":"",'
             b'"address_allocator":{"type":"auto","extra":[1,2e308]}}',
         params=IN_PROJECT, fields=('"address_allocator.extra[1]"',)),
    Case("number-huge-instance-ncpus", "POST", INSTANCES,
         raw=b'{"name":"huge-cpus","description":"","hostname":"h","ncpus":1e400,'
             b'"memory":1073741824}', params=IN_PROJECT, fields=('"ncpus"',)),
    Case("number-huge-instance-update", "PUT", f"{INSTANCES}/{INSTANCE}",
         raw=b'{"ncpus":1,"memory":1e999}', params=IN_PROJECT, fields=('"memory"',)),
    # Keys given twice, at the top and nested, in known and unknown fields.
    Case("duplicate-key-top-level", "POST", "/v1/projects",
         raw=b'{"name":"dup-a","description":"","name":"dup-b"}',
         fields=('field "name": duplicate field `name`',)),
    Case("duplicate-key-same-value", "POST", "/v1/projects",
         raw=b'{"name":"dup-a","description":"","description":""}',
         fields=('field "description": duplicate field `description`',)),
    Case("duplicate-key-nested", "POST", FIPS,
         raw=b'{"name":"dup-fip","description":"",'
             b'"address_allocator":{"type":"auto","type":"explicit"}}',
         params=IN_PROJECT, fields=('field "address_allocator.type": duplicate field `type`',)),
    Case("duplicate-key-nested-unknown", "POST", "/v1/projects",
         raw=b'{"name":"dup-c","description":"","extra":{"deep":{"k":1,"k":2}}}',
         fields=('field "extra.deep.k": duplicate field `k`',)),
    Case("duplicate-key-in-array", "POST", INSTANCES,
         raw=b'{"name":"dup-vm","description":"","hostname":"h","ncpus":1,'
             b'"memory":1073741824,"start":false,'
             b'"external_ips":[{"type":"ephemeral","type":"ephemeral"}]}',
         params=IN_PROJECT, fields=('field "external_ips[0].type": duplicate field `type`',)),
    # Instance sizes outside the API's types (uint16 vCPUs, uint64 bytes).
    Case("instance-ncpus-beyond-uint16", "POST", INSTANCES,
         instance_body("big-cpus", start=False, ncpus=65536), params=IN_PROJECT,
         fields=('"ncpus"',)),
    Case("instance-ncpus-negative", "POST", INSTANCES,
         instance_body("neg-cpus", start=False, ncpus=-1), params=IN_PROJECT,
         fields=('"ncpus"',)),
    Case("instance-memory-negative", "POST", INSTANCES,
         instance_body("neg-mem", start=False, memory=-GIB), params=IN_PROJECT,
         fields=('"memory"',)),
    Case("instance-memory-beyond-uint64", "POST", INSTANCES,
         instance_body("huge-mem", start=False, memory=1 << 64), params=IN_PROJECT,
         fields=('"memory"',)),
    Case("instance-memory-fraction", "PUT", f"{INSTANCES}/{INSTANCE}",
         {"ncpus": 1, "memory": 1.5}, params=IN_PROJECT, fields=('"memory"',)),
    Case("instance-update-ncpus-string", "PUT", f"{INSTANCES}/{INSTANCE}",
         {"ncpus": "2", "memory": GIB}, params=IN_PROJECT, fields=('"ncpus"',)),
    # Huge numbers in query parameters.
    Case("limit-huge-exponent", "GET", "/v1/projects", params={"limit": "1e400"},
         fields=("limit",)),
    Case("limit-beyond-64-bits", "GET", "/v1/projects",
         params={"limit": "99999999999999999999"}, fields=("limit",)),
    Case("page-token-huge-number", "GET", "/v1/projects",
         params={"page_token": b'{"v":1,"o":"name_ascending","k":1e400,"s":""}'.hex()},
         fields=("page_token",)),
    Case("ranges-limit-huge", "GET", f"/v1/system/ip-pools/{POOL}/ranges",
         params={"limit": "1e400"}, fields=("limit",)),
    Case("sagas-limit-beyond-64-bits", "GET", "/v1/system/sagas",
         params={"limit": "-99999999999999999999"}, fields=("limit",)),
    # Huge numbers in path segments.
    Case("sled-path-huge-number", "GET", "/v1/system/hardware/sleds/99999999999999999999",
         fields=("sled_id",)),
    Case("token-path-huge-exponent", "DELETE", "/v1/system/tokens/1e400", fields=("id",)),
    Case("project-path-huge-number", "GET", "/v1/projects/1e400", fields=("project",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_400_naming_the_field(env, case):
    body = assert_error(send_case(env.admin, case), 400, "InvalidRequest")
    if case.fields:
        assert any(field in body["message"] for field in case.fields), (
            f"message should name one of {case.fields}: {body['message']!r}")


GIB_1536 = 1536 * GIB

# (ncpus, memory, error_code, message): Oxide's instance limits and messages
# (nexus/src/app/instance.rs, check_instance_cpu_memory_sizes), on create and update alike.
SIZE_LIMITS = [
    (65, GIB, "InvalidRequest", "cannot have more than 64 vCPUs per instance"),
    (65535, GIB, "InvalidRequest", "cannot have more than 64 vCPUs per instance"),
    (0, GIB, "InvalidRequest", "cannot have fewer than 1 vCPU per instance"),
    (1, 1, "InvalidValue", 'unsupported value for "size": memory must be at least 1 GiB'),
    (1, GIB - 1, "InvalidValue", 'unsupported value for "size": memory must be at least 1 GiB'),
    (1, GIB + 1, "InvalidValue",
     'unsupported value for "size": memory must be divisible by 1 GiB'),
    (1, GIB_1536 + GIB, "InvalidValue",
     'unsupported value for "size": memory must be less than or equal to 1536 GiB'),
    (1, (1 << 64) - (1 << 30), "InvalidValue",
     'unsupported value for "size": memory must be less than or equal to 1536 GiB'),
]


def send_size(admin, action, ncpus, memory, project=PROJECT):
    if action == "create":
        body = instance_body("sized-vm", start=False, ncpus=ncpus, memory=memory)
        return admin.post(INSTANCES, body, params={"project": project})
    return admin.put(f"{INSTANCES}/{INSTANCE}", {"ncpus": ncpus, "memory": memory},
                     params={"project": project})


@pytest.mark.parametrize("ncpus,memory,error_code,message", SIZE_LIMITS,
                         ids=[f"{c}cpu-{m}B" for c, m, _, _ in SIZE_LIMITS])
@pytest.mark.parametrize("action", ["create", "update"])
def test_instance_size_beyond_oxide_limits_is_400(env, action, ncpus, memory, error_code,
                                                  message):
    assert_error(send_size(env.admin, action, ncpus, memory), 400, error_code, message)
    assert env.admin.get(f"{INSTANCES}/sized-vm", params=IN_PROJECT).status == 404
    vm = expect(env.admin.get(f"{INSTANCES}/{INSTANCE}", params=IN_PROJECT), 200)
    assert (vm["ncpus"], vm["memory"]) == (1, GIB)


@pytest.mark.parametrize("action", ["create", "update"])
def test_instance_size_at_oxide_limits_is_accepted(env, action):
    admin = env.admin
    for ncpus, memory in [(64, GIB_1536), (1, GIB)]:
        reply = send_size(admin, action, ncpus, memory)
        body = expect(reply, 201 if action == "create" else 200)
        assert (body["ncpus"], body["memory"]) == (ncpus, memory)
        if action == "create":
            expect(admin.delete(f"{INSTANCES}/sized-vm", params=IN_PROJECT), 204)


@pytest.mark.parametrize("action", ["create", "update"])
def test_instance_size_is_checked_after_the_lookup(env, action):
    # As Oxide: the project (create) or instance (update) is looked up first.
    reply = send_size(env.admin, action, 1, 1, project="no-such-project")
    assert_error(reply, 404, "ObjectNotFound", 'not found: project with name "no-such-project"')


def send_case(admin, case):
    kwargs = {"params": case.params}
    if case.raw is not None:
        kwargs["raw_body"] = case.raw
    elif case.body is not None:
        kwargs["body"] = case.body
    return admin.request(case.method, case.path, **kwargs)


def snapshot(admin):
    """Everything the bad inputs could touch, as the API shows it."""
    return {
        "silos": list_all(admin, "/v1/system/silos"),
        "projects": list_all(admin, "/v1/projects"),
        "pools": list_all(admin, "/v1/system/ip-pools"),
        "ranges": list_all(admin, f"/v1/system/ip-pools/{POOL}/ranges"),
        "links": list_all(admin, LINKS),
        "utilization": expect(admin.get(f"/v1/system/ip-pools/{POOL}/utilization"), 200),
        "fips": list_all(admin, FIPS, project=PROJECT),
        "instances": list_all(admin, INSTANCES, project=PROJECT),
    }


def test_bad_input_changed_nothing(env):
    """Sends every bad input itself (so that it proves something when run alone) and compares
    what the API shows before and after."""
    admin = env.admin
    before = snapshot(admin)
    # The evidence is there to be changed: the module's project, pool, link, FIP, instance.
    assert [p["name"] for p in before["projects"]] == [PROJECT]
    assert [r["range"] for r in before["ranges"]] == [{"first": "10.99.0.0",
                                                      "last": "10.99.0.255"}]
    assert [link_["is_default"] for link_ in before["links"]] == [True]
    assert [f["name"] for f in before["fips"]] == [FIP]
    assert [i["name"] for i in before["instances"]] == [INSTANCE]
    for case in CASES:
        assert send_case(admin, case).status == 400, case.id
    for ncpus, memory, _, _ in SIZE_LIMITS:
        for action in ("create", "update"):
            assert send_size(admin, action, ncpus, memory).status == 400
    assert snapshot(admin) == before


@pytest.mark.parametrize("first,last", [("10.99.1.9", "10.99.1.1"), ("fd99::9", "fd99::1")],
                         ids=["v4", "v6"])
@pytest.mark.parametrize("action", ["add", "remove"])
def test_reversed_range_is_400(env, action, first, last):
    reply = env.admin.post(f"/v1/system/ip-pools/{POOL}/ranges/{action}",
                           {"first": first, "last": last})
    assert_error(reply, 400, "InvalidRequest",
                 contains="IP address ranges must be non-decreasing")


@pytest.mark.parametrize("path", ["/v1/projects", RANGES_ADD, "/v1/system/silos"])
def test_body_over_one_mib_is_400(env, path):
    padding = "x" * (ONE_MIB + 1)
    raw = json.dumps({"name": "big-body", "description": padding}).encode()
    assert len(raw) > ONE_MIB
    reply = env.admin.request("POST", path, raw_body=raw)
    assert_error(reply, 400, "InvalidRequest", contains="body")
    assert env.admin.get("/v1/projects/big-body").status == 404
