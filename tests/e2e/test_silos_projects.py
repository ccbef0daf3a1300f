"""Silos (operator) and projects (silo users): create, list, view, update, delete, conflicts."""

import uuid

import pytest

from e2e_helpers import (assert_error, expect, from_pool, link, list_all, list_pages,
                         make_fip, make_pool, make_project, make_silo, names, silo_body,
                         timestamp_ns)


@pytest.fixture(scope="module")
def env(module_server):
    admin = module_server.admin
    make_pool(admin, "sp-v4", "10.60.0.0", "10.60.0.255")
    link(admin, "sp-v4", default=True)
    return module_server


# -- silos -------------------------------------------------------------------------------------

def test_silo_create_view_list_delete(env):
    admin = env.admin
    silo = make_silo(admin, "sp-silo", description="a silo for tests")
    assert silo["name"] == "sp-silo"
    assert silo["description"] == "a silo for tests"
    assert silo["discoverable"] is True
    assert silo["identity_mode"] == "local_only"

    assert expect(admin.get("/v1/system/silos/sp-silo"), 200) == silo
    assert expect(admin.get(f"/v1/system/silos/{silo['id']}"), 200) == silo
    listed = names(list_all(admin, "/v1/system/silos"))
    assert "default" in listed and "sp-silo" in listed

    assert admin.delete("/v1/system/silos/sp-silo").status == 204
    assert_error(admin.get("/v1/system/silos/sp-silo"), 404, "ObjectNotFound",
                 'not found: silo with name "sp-silo"')
    assert_error(admin.get(f"/v1/system/silos/{silo['id']}"), 404, "ObjectNotFound",
                 f'not found: silo with id "{silo["id"]}"')
    assert "sp-silo" not in names(list_all(admin, "/v1/system/silos"))


def test_silo_duplicate_name_is_400(env):
    make_silo(env.admin, "sp-dup-silo")
    reply = env.admin.post("/v1/system/silos", silo_body("sp-dup-silo"))
    assert_error(reply, 400, "ObjectAlreadyExists", 'already exists: silo "sp-dup-silo"')


def test_missing_silo_is_404(env):
    assert_error(env.admin.get("/v1/system/silos/sp-never"), 404, "ObjectNotFound",
                 'not found: silo with name "sp-never"')
    assert_error(env.admin.delete("/v1/system/silos/sp-never"), 404, "ObjectNotFound",
                 'not found: silo with name "sp-never"')
    missing = str(uuid.uuid4())
    assert_error(env.admin.get(f"/v1/system/silos/{missing}"), 404, "ObjectNotFound",
                 f'not found: silo with id "{missing}"')


def test_silo_list_is_sorted_and_paginated(env):
    admin = env.admin
    for name in ("sp-list-c", "sp-list-a", "sp-list-b"):
        make_silo(admin, name)
    pages = list_pages(admin, "/v1/system/silos", 2, sort_by="name_ascending")
    listed = [s["name"] for page in pages for s in page]
    assert listed == sorted(listed)
    assert len(listed) == len(set(listed))
    assert {"default", "sp-list-a", "sp-list-b", "sp-list-c"} <= set(listed)


def test_silo_ip_pools_lists_linked_pools(env):
    admin = env.admin
    silo = make_silo(admin, "sp-pools-silo")
    make_pool(admin, "sp-linked-default", "10.61.0.0", "10.61.0.15")
    make_pool(admin, "sp-linked-v6", "fd61::", "fd61::ff", version="v6")
    make_pool(admin, "sp-not-linked", "10.62.0.0", "10.62.0.15")
    link(admin, "sp-linked-default", "sp-pools-silo", default=True)
    link(admin, "sp-linked-v6", "sp-pools-silo", default=False)

    for selector in ("sp-pools-silo", silo["id"]):
        pools = list_all(admin, f"/v1/system/silos/{selector}/ip-pools")
        by_name = {p["name"]: p for p in pools}
        assert set(by_name) == {"sp-linked-default", "sp-linked-v6"}
        assert by_name["sp-linked-default"]["is_default"] is True
        assert by_name["sp-linked-default"]["ip_version"] == "v4"
        assert by_name["sp-linked-v6"]["is_default"] is False
        assert by_name["sp-linked-v6"]["ip_version"] == "v6"

    assert_error(admin.get("/v1/system/silos/sp-no-silo/ip-pools"), 404, "ObjectNotFound",
                 'not found: silo with name "sp-no-silo"')


def test_new_silo_has_no_pools(env):
    make_silo(env.admin, "sp-empty-silo")
    assert list_all(env.admin, "/v1/system/silos/sp-empty-silo/ip-pools") == []


# -- projects ----------------------------------------------------------------------------------

def test_project_create_view_list(env):
    admin = env.admin
    project = make_project(admin, "sp-project", "the description")
    assert project["name"] == "sp-project"
    assert project["description"] == "the description"
    assert timestamp_ns(project["time_modified"]) >= timestamp_ns(project["time_created"])
    assert expect(admin.get("/v1/projects/sp-project"), 200) == project
    assert expect(admin.get(f"/v1/projects/{project['id']}"), 200) == project
    assert project["id"] in [p["id"] for p in list_all(admin, "/v1/projects")]


def test_project_update(env):
    admin = env.admin
    before = make_project(admin, "sp-before", "old words")
    after = expect(admin.put("/v1/projects/sp-before",
                             {"name": "sp-after", "description": "new words"}), 200)
    assert after["id"] == before["id"]
    assert after["name"] == "sp-after"
    assert after["description"] == "new words"
    assert after["time_created"] == before["time_created"]
    assert timestamp_ns(after["time_modified"]) > timestamp_ns(before["time_modified"])

    assert_error(admin.get("/v1/projects/sp-before"), 404, "ObjectNotFound",
                 'not found: project with name "sp-before"')
    assert expect(admin.get("/v1/projects/sp-after"), 200) == after


def test_project_update_changes_only_given_fields(env):
    admin = env.admin
    project = make_project(admin, "sp-partial", "keep me")
    renamed = expect(admin.put(f"/v1/projects/{project['id']}", {"name": "sp-partial-2"}), 200)
    assert renamed["description"] == "keep me"
    described = expect(admin.put("/v1/projects/sp-partial-2", {"description": "changed"}), 200)
    assert described["name"] == "sp-partial-2"
    unchanged = expect(admin.put("/v1/projects/sp-partial-2",
                                 {"name": None, "description": None}), 200)
    assert (unchanged["name"], unchanged["description"]) == ("sp-partial-2", "changed")


def test_project_delete(env):
    admin = env.admin
    project = make_project(admin, "sp-doomed")
    assert admin.delete("/v1/projects/sp-doomed").status == 204
    assert_error(admin.get(f"/v1/projects/{project['id']}"), 404, "ObjectNotFound",
                 f'not found: project with id "{project["id"]}"')
    assert_error(admin.delete("/v1/projects/sp-doomed"), 404, "ObjectNotFound",
                 'not found: project with name "sp-doomed"')
    assert project["id"] not in [p["id"] for p in list_all(admin, "/v1/projects")]
    # The name is free again, for a new project with a new id.
    again = make_project(admin, "sp-doomed")
    assert again["id"] != project["id"]


def test_project_duplicate_name_is_400(env):
    make_project(env.admin, "sp-dup")
    reply = env.admin.post("/v1/projects", {"name": "sp-dup", "description": ""})
    assert_error(reply, 400, "ObjectAlreadyExists", 'already exists: project "sp-dup"')


def test_project_rename_to_used_name_is_400(env):
    admin = env.admin
    make_project(admin, "sp-taken")
    mover = make_project(admin, "sp-mover")
    reply = admin.put("/v1/projects/sp-mover", {"name": "sp-taken"})
    assert_error(reply, 400, "ObjectAlreadyExists", 'already exists: project "sp-taken"')
    assert expect(admin.get("/v1/projects/sp-mover"), 200)["id"] == mover["id"]


def test_project_list_sort_orders(env):
    admin = env.admin
    created = [make_project(admin, name) for name in ("sp-sort-b", "sp-sort-c", "sp-sort-a")]
    ids = {p["id"] for p in created}

    ascending = list_all(admin, "/v1/projects", limit=2, sort_by="name_ascending")
    assert names(ascending) == sorted(names(ascending))
    descending = list_all(admin, "/v1/projects", limit=2, sort_by="name_descending")
    assert names(descending) == sorted(names(descending), reverse=True)
    by_id = list_all(admin, "/v1/projects", limit=2, sort_by="id_ascending")
    assert [p["id"] for p in by_id] == sorted((p["id"] for p in by_id), key=uuid.UUID)
    for listing in (ascending, descending, by_id):
        assert ids <= {p["id"] for p in listing}
        assert len(listing) == len({p["id"] for p in listing})


def test_project_delete_refused_while_it_holds_a_floating_ip(env):
    admin = env.admin
    make_project(admin, "sp-holder")
    fip = make_fip(admin, "sp-holder", "holder-fip", from_pool("sp-v4"))
    body = assert_error(admin.delete("/v1/projects/sp-holder"), 400, "InvalidRequest")
    assert "holder-fip" in body["message"], body
    assert admin.get("/v1/projects/sp-holder").status == 200

    assert admin.delete(f"/v1/floating-ips/{fip['id']}").status == 204
    assert admin.delete("/v1/projects/sp-holder").status == 204


def test_missing_project_is_404(env):
    missing = str(uuid.uuid4())
    assert_error(env.admin.get(f"/v1/projects/{missing}"), 404, "ObjectNotFound",
                 f'not found: project with id "{missing}"')
    assert_error(env.admin.put("/v1/projects/sp-absent", {"description": "x"}), 404,
                 "ObjectNotFound", 'not found: project with name "sp-absent"')
