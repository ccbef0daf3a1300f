"""Bad input walk: malformed JSON, wrong types, missing fields, invalid names, addresses,
ranges and query or path parameters, oversized bodies. Every one must get 400 InvalidRequest
with a message naming the offending field (product.md, "Reliability contract") — never a
500, a 413 or a crash: the server must still answer ping after each."""

import json
import uuid
from typing import NamedTuple

import pytest

from e2e_helpers import (assert_error, expect, explicit_ip, from_default, from_pool, link,
                         make_fip, make_pool, make_project)

PROJECT = "bad-project"
POOL = "bad-v4"
FIP = "bad-fip"
ONE_MIB = 1 << 20


@pytest.fixture(scope="module")
def env(module_server):
    make_pool(module_server.admin, POOL, "10.99.0.0", "10.99.0.255")
    link(module_server.admin, POOL, default=True)
    make_project(module_server.admin, PROJECT)
    make_fip(module_server.admin, PROJECT, FIP)
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
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_400_naming_the_field(env, case):
    kwargs = {"params": case.params}
    if case.raw is not None:
        kwargs["raw_body"] = case.raw
    elif case.body is not None:
        kwargs["body"] = case.body
    reply = env.admin.request(case.method, case.path, **kwargs)
    body = assert_error(reply, 400, "InvalidRequest")
    if case.fields:
        assert any(field in body["message"] for field in case.fields), (
            f"message should name one of {case.fields}: {body['message']!r}")


def test_bad_input_changed_nothing(env):
    admin = env.admin
    projects = expect(admin.get("/v1/projects"), 200)["items"]
    assert [p["name"] for p in projects] == [PROJECT]
    assert expect(admin.get(f"/v1/projects/{PROJECT}"), 200)["description"] == (
        f"project {PROJECT}")
    ranges = expect(admin.get(f"/v1/system/ip-pools/{POOL}/ranges"), 200)["items"]
    assert [r["range"] for r in ranges] == [{"first": "10.99.0.0", "last": "10.99.0.255"}]
    links = expect(admin.get(f"/v1/system/ip-pools/{POOL}/silos"), 200)["items"]
    assert [silo_link["is_default"] for silo_link in links] == [True]
    fip = expect(admin.get(f"{FIPS}/{FIP}", params={"project": PROJECT}), 200)
    assert fip["description"] == f"floating IP {FIP}"


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
