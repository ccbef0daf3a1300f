"""Authentication (bearer tokens, the token extension endpoints) and authorization (roles,
silo isolation)."""

import pytest

from e2e_helpers import (DEFAULT_SILO, assert_error, create_fip, expect, from_pool, link,
                         make_fip, make_pool, make_project, make_silo, make_token, role_client,
                         silo_body)

SILO_ROLES = ["silo_admin", "silo_collaborator", "silo_viewer"]


@pytest.fixture(scope="module")
def env(module_server):
    """A pool linked as the default silo's default, for the tests that create floating IPs."""
    admin = module_server.admin
    make_pool(admin, "auth-v4", "10.50.0.0", "10.50.0.255")
    link(admin, "auth-v4", default=True)
    return module_server


@pytest.mark.parametrize("authorization", [
    None,
    "Bearer not-a-real-token",
    "Bearer ",
    "Basic YWRtaW46YWRtaW4=",
    "not-even-a-scheme",
], ids=["missing", "unknown", "empty", "basic", "garbage"])
@pytest.mark.parametrize("path", ["/v1/projects", "/v1/system/ip-pools", "/v1/system/silos"])
def test_missing_or_unknown_token_is_401(env, authorization, path):
    headers = {"Authorization": authorization} if authorization else {}
    reply = env.anonymous.get(path, headers=headers)
    assert reply.status == 401, reply.body


def test_admin_token_without_bearer_scheme_is_401(env):
    reply = env.anonymous.get("/v1/projects", headers={"Authorization": env.admin_token})
    assert reply.status == 401, reply.body


def test_token_with_extra_characters_is_401(env):
    reply = env.admin.with_token(env.admin_token + "x").get("/v1/projects")
    assert reply.status == 401, reply.body


def test_unauthenticated_write_is_401_and_changes_nothing(env):
    reply = env.anonymous.post("/v1/projects", {"name": "anon-project", "description": "x"})
    assert reply.status == 401
    assert env.admin.get("/v1/projects/anon-project").status == 404


def test_token_create_use_and_revoke(env):
    admin = env.admin
    created = make_token(admin, DEFAULT_SILO, "silo_viewer", "viewer-to-revoke")
    assert created["token"] != env.admin_token
    viewer = admin.with_token(created["token"])
    assert viewer.get("/v1/projects").status == 200

    assert admin.delete(f"/v1/system/tokens/{created['id']}").status == 204
    assert viewer.get("/v1/projects").status == 401
    # Revoking one token leaves the others working.
    assert admin.get("/v1/projects").status == 200


def test_token_for_silo_by_id(env):
    silo = make_silo(env.admin, "auth-by-id")
    client = role_client(env.admin, silo["id"], "silo_collaborator")
    project = make_project(client, "by-id-project")
    # The project lives in that silo, so the default silo's admin does not see it.
    assert env.admin.get(f"/v1/projects/{project['id']}").status == 404


def test_token_for_missing_silo_is_404(env):
    body = {"silo": "no-such-silo", "role": "silo_viewer", "name": "orphan"}
    assert_error(env.admin.post("/v1/system/tokens", body), 404, "ObjectNotFound",
                 'not found: silo with name "no-such-silo"')


def test_tokens_are_distinct(env):
    first = make_token(env.admin, DEFAULT_SILO, "silo_viewer")
    second = make_token(env.admin, DEFAULT_SILO, "silo_viewer")
    assert first["id"] != second["id"]
    assert first["token"] != second["token"]


def test_fleet_admin_token_can_use_system_endpoints(env):
    fleet_admin = role_client(env.admin, DEFAULT_SILO, "fleet_admin")
    assert fleet_admin.get("/v1/system/silos").status == 200
    assert expect(fleet_admin.post("/v1/system/ip-pools",
                                   {"name": "auth-by-fleet-admin", "description": ""}), 201)


def test_viewer_can_read_but_not_write(env):
    admin = env.admin
    make_project(admin, "viewer-visible")
    viewer = role_client(admin, DEFAULT_SILO, "silo_viewer")

    listed = expect(viewer.get("/v1/projects"), 200)
    assert "viewer-visible" in [p["name"] for p in listed["items"]]
    assert viewer.get("/v1/projects/viewer-visible").status == 200

    assert_error(viewer.post("/v1/projects", {"name": "viewer-made", "description": ""}),
                 403, "Forbidden", "Forbidden")
    assert_error(viewer.put("/v1/projects/viewer-visible", {"description": "changed"}),
                 403, "Forbidden", "Forbidden")
    assert_error(viewer.delete("/v1/projects/viewer-visible"), 403, "Forbidden", "Forbidden")
    assert_error(create_fip(viewer, "viewer-visible", "viewer-fip"), 403, "Forbidden",
                 "Forbidden")

    assert admin.get("/v1/projects/viewer-made").status == 404
    project = expect(admin.get("/v1/projects/viewer-visible"), 200)
    assert project["description"] != "changed"


def test_viewer_cannot_delete_floating_ip(env):
    admin = env.admin
    make_project(admin, "viewer-fip-project")
    fip = make_fip(admin, "viewer-fip-project", "kept", from_pool("auth-v4"))
    viewer = role_client(admin, DEFAULT_SILO, "silo_viewer")
    assert_error(viewer.delete(f"/v1/floating-ips/{fip['id']}"), 403, "Forbidden", "Forbidden")
    assert admin.get(f"/v1/floating-ips/{fip['id']}").status == 200


@pytest.mark.parametrize("role", ["silo_collaborator", "silo_admin"])
def test_collaborator_and_admin_create_project_and_floating_ip(env, role):
    client = role_client(env.admin, DEFAULT_SILO, role)
    project_name = f"made-by-{role.replace('_', '-')}"
    make_project(client, project_name)
    fip = make_fip(client, project_name, "own-fip")
    assert fip["ip"].startswith("10.50.0.")
    assert expect(client.get(f"/v1/floating-ips/{fip['id']}"), 200)["name"] == "own-fip"
    assert client.delete(f"/v1/floating-ips/{fip['id']}").status == 204


@pytest.mark.parametrize("role", SILO_ROLES)
@pytest.mark.parametrize("method,path,body", [
    ("GET", "/v1/system/ip-pools", None),
    ("POST", "/v1/system/ip-pools", {"name": "forbidden-pool", "description": ""}),
    ("GET", "/v1/system/ip-pools/auth-v4", None),
    ("GET", "/v1/system/silos", None),
    ("POST", "/v1/system/silos", silo_body("forbidden-silo")),
    ("POST", "/v1/system/tokens", {"silo": "default", "role": "fleet_admin", "name": "escalate"}),
], ids=["list-pools", "create-pool", "view-pool", "list-silos", "create-silo", "create-token"])
def test_system_endpoints_need_fleet_admin(env, role, method, path, body):
    client = role_client(env.admin, DEFAULT_SILO, role)
    kwargs = {} if body is None else {"body": body}
    assert_error(client.request(method, path, **kwargs), 403, "Forbidden", "Forbidden")


def test_silo_user_cannot_revoke_tokens(env):
    victim = make_token(env.admin, DEFAULT_SILO, "silo_viewer")
    silo_admin = role_client(env.admin, DEFAULT_SILO, "silo_admin")
    assert_error(silo_admin.delete(f"/v1/system/tokens/{victim['id']}"), 403, "Forbidden")
    assert env.admin.with_token(victim["token"]).get("/v1/projects").status == 200


def test_resources_of_another_silo_are_invisible(env):
    admin = env.admin
    project = make_project(admin, "private-project")
    fip = make_fip(admin, "private-project", "private-fip", from_pool("auth-v4"))
    make_silo(admin, "auth-other")
    outsider = role_client(admin, "auth-other", "silo_admin")

    assert_error(outsider.get("/v1/projects/private-project"), 404, "ObjectNotFound",
                 'not found: project with name "private-project"')
    assert_error(outsider.get(f"/v1/projects/{project['id']}"), 404, "ObjectNotFound",
                 f'not found: project with id "{project["id"]}"')
    listed = expect(outsider.get("/v1/projects"), 200)
    assert project["id"] not in [p["id"] for p in listed["items"]]

    assert_error(outsider.get(f"/v1/floating-ips/{fip['id']}"), 404, "ObjectNotFound",
                 f'not found: floating-ip with id "{fip["id"]}"')
    assert_error(outsider.get("/v1/floating-ips", params={"project": project["id"]}), 404,
                 "ObjectNotFound")
    assert_error(create_fip(outsider, project["id"], "intruder"), 404, "ObjectNotFound")

    # Writes to invisible resources are 404 too (never 403, which would reveal them).
    assert_error(outsider.delete(f"/v1/floating-ips/{fip['id']}"), 404, "ObjectNotFound")
    assert_error(outsider.delete(f"/v1/projects/{project['id']}"), 404, "ObjectNotFound")
    assert admin.get(f"/v1/projects/{project['id']}").status == 200
    assert admin.get(f"/v1/floating-ips/{fip['id']}").status == 200


def test_same_project_name_in_two_silos(env):
    admin = env.admin
    mine = make_project(admin, "shared-name")
    make_silo(admin, "auth-twin")
    twin = role_client(admin, "auth-twin", "silo_collaborator")
    theirs = make_project(twin, "shared-name")
    assert theirs["id"] != mine["id"]
    assert expect(admin.get("/v1/projects/shared-name"), 200)["id"] == mine["id"]
    assert expect(twin.get("/v1/projects/shared-name"), 200)["id"] == theirs["id"]
