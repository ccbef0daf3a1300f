"""A floating IP moved between projects of one silo (issue 25, item 5): detached only, keeping
its address, id and name; a name clash, an attached IP, another silo's project and a viewer are
refused; the move is audited."""

import json
import subprocess
import threading

import pytest

from e2e_helpers import (assert_error, expect, from_pool, link, list_all, list_sagas, make_fip,
                         make_instance, make_pool, make_project, make_silo, role_client,
                         running_vm_with_fip, wait_run_state, wait_until)

POOL = "xfer-pool"


@pytest.fixture(scope="module")
def env(module_server):
    admin = module_server.admin
    make_pool(admin, POOL, "10.21.0.0", "10.21.0.15")
    link(admin, POOL, default=True)
    for project in ("xfer-a", "xfer-b"):
        make_project(admin, project)
    return module_server


def transfer(client, fip, to, project=None):
    return client.post(f"/v1/system/floating-ips/{fip}/transfer", {"project": to},
                       params={"project": project})


def test_a_detached_floating_ip_moves_keeping_its_address_id_and_name(env):
    admin = env.admin
    fip = make_fip(admin, "xfer-a", "www", from_pool(POOL))
    moved = expect(transfer(admin, "www", "xfer-b", project="xfer-a"), 200)
    assert (moved["id"], moved["ip"], moved["name"]) == (fip["id"], fip["ip"], "www")
    b = expect(admin.get("/v1/projects/xfer-b"), 200)
    assert moved["project_id"] == b["id"]
    assert [f["id"] for f in list_all(admin, "/v1/floating-ips", project="xfer-b")] == [fip["id"]]
    assert list_all(admin, "/v1/floating-ips", project="xfer-a") == []
    # To where it is: nothing changes.
    again = expect(transfer(admin, fip["id"], "xfer-b"), 200)
    assert again["project_id"] == b["id"]
    # The move is in the audit log under its own operation.
    entries = list_all(admin, "/v1/system/audit-log", start_time="2020-01-01T00:00:00Z")
    moves = [e for e in entries if e["operation_id"] == "floating_ip_transfer"]
    assert [e["result"] for e in moves] == [{"kind": "success", "http_status_code": 200}] * 2
    assert moves[0]["request_uri"] == "/v1/system/floating-ips/www/transfer?project=xfer-a"


def test_a_name_taken_in_the_target_is_refused_naming_it(env):
    admin = env.admin
    make_fip(admin, "xfer-a", "api", from_pool(POOL))
    make_fip(admin, "xfer-b", "api", from_pool(POOL))
    assert_error(transfer(admin, "api", "xfer-b", project="xfer-a"), 400, "ObjectAlreadyExists",
                 'already exists: floating-ip "api" in project "xfer-b"; rename one of them first')


def test_an_attached_floating_ip_stays_naming_its_holder(env):
    admin = env.admin
    vm = make_instance(admin, "xfer-a", "xfer-vm", nic=None)
    wait_run_state(admin, vm["id"], "running")
    fip = make_fip(admin, "xfer-a", "busy", from_pool(POOL))
    expect(admin.post(f"/v1/floating-ips/{fip['id']}/attach",
                      {"kind": "instance", "parent": vm["id"]}), 202)
    assert_error(transfer(admin, fip["id"], "xfer-b"), 400, "InvalidRequest",
                 'floating IP "busy" cannot change project while it is attached to instance '
                 '"xfer-vm"; detach it first')
    view = expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)
    assert view["project_id"] == fip["project_id"]


def test_another_silos_project_is_not_found_and_a_viewer_may_not(env):
    admin = env.admin
    make_silo(admin, "xfer-other")
    other = role_client(admin, "xfer-other", "silo_admin")
    c = make_project(other, "xfer-c")
    fip = make_fip(admin, "xfer-a", "stay", from_pool(POOL))
    # By name or by id, another silo's project does not exist for this silo's users; nor does
    # this silo's floating IP for the other's.
    assert_error(transfer(admin, fip["id"], "xfer-c"), 404, "ObjectNotFound",
                 'not found: project with name "xfer-c"')
    assert_error(transfer(admin, fip["id"], c["id"]), 404, "ObjectNotFound",
                 f'not found: project with id "{c["id"]}"')
    assert_error(transfer(other, fip["id"], c["id"]), 404, "ObjectNotFound",
                 f'not found: floating-ip with id "{fip["id"]}"')
    viewer = role_client(admin, "default", "silo_viewer")
    assert transfer(viewer, fip["id"], "xfer-b").status == 403
    assert expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)["project_id"] == \
        fip["project_id"]


def test_the_cli_moves_one(env, floatplane_bin):
    admin = env.admin
    make_fip(admin, "xfer-a", "cli", from_pool(POOL))
    run = {"OXIDE_HOST": f"http://127.0.0.1:{env.port}", "OXIDE_TOKEN": admin.token,
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(floatplane_bin), "floating-ip", "transfer", "--project", "xfer-a",
                           "--floating-ip", "cli", "--to-project", "xfer-b"],
                          capture_output=True, text=True, env=run, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "cli"
    assert 'moved to project "xfer-b"' in done.stderr


def test_a_floating_ip_mid_attach_stays(start_rack):
    rack = start_rack()
    admin = rack.admin
    vm, fip, sled = running_vm_with_fip(rack, "xfer-flux-pool", "198.51.100.110",
                                        "198.51.100.119", "xfer-flux")
    make_project(admin, "xfer-flux-to")
    # The sled takes 0.8 s to program the port (within the 2 s agent timeout): the attach is
    # in flux meanwhile.
    sled.add_fault("PUT /instances/*/external-ips/*", delay_ms=800)
    answers = []
    attach = threading.Thread(target=lambda: answers.append(admin.post(
        f"/v1/floating-ips/{fip['id']}/attach", {"kind": "instance", "parent": vm["id"]})))
    attach.start()
    try:
        wait_until(lambda: any(s["name"] == "ip_attach" and s["state"] == "running"
                               for s in list_sagas(admin)), 5, "the attach saga running")
        assert_error(transfer(admin, fip["id"], "xfer-flux-to"), 503, "ServiceNotAvailable",
                     'floating IP "f" is being attached to instance "vm"; retry the transfer '
                     'when that operation completes')
    finally:
        attach.join()
    assert answers[0].status == 202, answers[0]
    assert expect(admin.get(f"/v1/floating-ips/{fip['id']}"), 200)["instance_id"] == vm["id"]
