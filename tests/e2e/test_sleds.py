"""Sleds an operator can trust and retire (issue 23 item 5), with real agent processes: the
sled list says whether each sled's agent answers and since when; the instances of a sled that
has not answered for --sled-unresponsive-after are failed, their NAT removed, and can be
started again elsewhere; an expunged sled fails its instances at once, takes nothing new, and
is left with no VM once it answers; a sled is who its agent says it is (--serial), wherever the
agent answers."""

import os
import subprocess
import time

import pytest

from e2e_helpers import (DEFAULT_SILO, assert_error, attach_fip, expect, instance_action, link,
                         make_instance, make_pool, make_project, migrate, role_client,
                         running_vm_with_fip, sled_instance_ids, view_instance, wait_run_state,
                         wait_until)

PROJECT = "sleds"


def sled_view(admin, sled_id):
    return expect(admin.get(f"/v1/system/hardware/sleds/{sled_id}"), 200)


def with_attached_fip(rack, first, last):
    """A running instance with its floating IP attached, and the NAT entries of both."""
    vm, fip, sled = running_vm_with_fip(rack, "sleds-pool", first, last, PROJECT)
    expect(attach_fip(rack.admin, fip["id"], vm["id"]), 202)
    entries = wait_until(lambda: len(rack.nat_entries()) == 2 and rack.nat_entries(), 5.0,
                         "the SNAT and floating NAT entries", describe=rack.describe)
    return vm, sled, {e["sled_address"] for e in entries}


def sled_running(agents, instance_id):
    """The agents (of `agents`) that run the instance's VM."""
    return [a for a in agents if any(vm["id"] == instance_id for vm in a.instances())]


def test_a_silent_sled_is_shown_so_and_its_instances_fail_after_the_deadline(start_rack):
    # Shown silent after 2 s of failed calls; its instances failed after 4 s.
    rack = start_rack(server_args=["--sled-unresponsive-after", "4s"])
    admin = rack.admin
    vm, sled, [old_address] = with_attached_fip(rack, "198.51.100.100", "198.51.100.109")
    sled_id = rack.sled_id(sled)
    agent = sled_view(admin, sled_id)["agent"]
    assert agent["answers"] is True and agent["since"] and agent["last_report"], agent

    sled.kill()
    killed = time.monotonic()
    silent = wait_until(lambda: sled_view(admin, sled_id)["agent"]["answers"] is False and
                        sled_view(admin, sled_id)["agent"], 5.0, "the sled shown silent")
    assert silent["since"] > agent["since"], silent
    # Shown running until the deadline: a sled restarting quickly costs its instances nothing.
    assert view_instance(admin, vm["id"])["run_state"] == "running"
    wait_run_state(admin, vm["id"], "failed", timeout=10.0)
    assert time.monotonic() - killed >= 3.9, "failed before --sled-unresponsive-after"
    wait_until(lambda: rack.nat_entries() == [], 5.0, "its NAT entries removed",
               describe=rack.describe)

    # Started again, it runs on the sled that answers, its floating IP with it.
    expect(instance_action(admin, vm["id"], "start"), 202)
    wait_run_state(admin, vm["id"], "running")
    others = [a for a in rack.sleds if a is not sled]
    assert len(sled_running(others, vm["id"])) == 1
    entries = wait_until(lambda: len(rack.nat_entries()) == 2 and rack.nat_entries(), 5.0,
                         "both NAT entries back", describe=rack.describe)
    assert {e["sled_address"] for e in entries} != {old_address}, entries


def test_an_expunged_sled_fails_its_instances_and_takes_no_new_ones(start_rack):
    rack = start_rack()
    admin = rack.admin
    vm, sled, _ = with_attached_fip(rack, "198.51.100.110", "198.51.100.119")
    sled_id = rack.sled_id(sled)
    path = f"/v1/system/hardware/sleds/{sled_id}/expunge"
    collaborator = role_client(admin, DEFAULT_SILO, "silo_collaborator")
    assert_error(collaborator.post(path), 403, "Forbidden")
    assert_error(admin.post("/v1/system/hardware/sleds/6e1c2f0a-0000-4000-8000-000000000000/"
                            "expunge"), 404, "ObjectNotFound")

    expunged = admin.post(path)
    body = expect(expunged, 200)
    assert (body["id"], body["policy"], body["state"]) == (sled_id, {"kind": "expunged"},
                                                           "decommissioned"), body
    # By the answer: the instance failed and its NAT is off the switch; then its VM goes.
    assert view_instance(admin, vm["id"])["run_state"] == "failed"
    assert rack.nat_entries() == [], rack.describe()
    wait_until(lambda: sled.instances() == [], 5.0, "the VM taken off the expunged sled",
               describe=rack.describe)
    assert expect(admin.post(path), 200)["policy"] == {"kind": "expunged"}  # idempotent

    # Nothing lands on it again: the failed instance, new ones, a migration.
    others = [a for a in rack.sleds if a is not sled]
    expect(instance_action(admin, vm["id"], "start"), 202)
    wait_run_state(admin, vm["id"], "running")
    for i in range(3):
        wait_run_state(admin, make_instance(admin, PROJECT, f"new-{i}")["id"], "running")
    assert sled.instances() == []
    assert len(sled_running(others, vm["id"])) == 1
    assert_error(migrate(admin, vm["id"], sled_id), 400, "InvalidRequest",
                 f"sled {sled_id} is expunged: nothing runs on it any more; migrate to another "
                 "sled")

    entries = expect(admin.get("/v1/system/audit-log",
                               params={"start_time": "1970-01-01T00:00:00Z", "limit": 1000}),
                     200)["items"]
    [entry] = [e for e in entries if e["request_id"] == expunged.headers["x-request-id"]]
    assert (entry["operation_id"], entry["result"]) == (
        "sled_expunge", {"kind": "success", "http_status_code": 200}), entry


SLED_FLAGS = ("--start-delay-ms", "150", "--stop-delay-ms", "50")


def one_sled_running_a_vm(start_agent, start_server, sled_flags, server_args, first, last):
    """A switch agent, one sled agent (`sled_flags`) and a server (`server_args`) driving them,
    with a running instance using the default pool first..last; returns (switch agent, sled
    agent, server, the sled's view, the instance)."""
    switch = start_agent("switch")
    agent = start_agent("sled", *sled_flags, *SLED_FLAGS)
    server = start_server(extra_args=["--switch-agent", switch.url, "--sled-agent", agent.url,
                                      *server_args])
    admin = server.admin
    [sled] = expect(admin.get("/v1/system/hardware/sleds"), 200)["items"]
    make_pool(admin, "one-sled-pool", first, last)
    link(admin, "one-sled-pool", default=True)
    make_project(admin, PROJECT)
    vm = make_instance(admin, PROJECT, "vm")
    wait_run_state(admin, vm["id"], "running")
    return switch, agent, server, sled, vm


def test_a_sled_agent_back_on_another_address_with_its_serial_is_the_same_sled(start_agent,
                                                                               start_server):
    switch, first, server, sled, vm = one_sled_running_a_vm(
        start_agent, start_server, ("--serial", "BRM-A"), (), "198.51.100.120", "198.51.100.129")
    assert sled["baseboard"]["serial"] == "BRM-A", sled

    # The sled's agent comes back on another port (its VM lost with its process), and the
    # server is pointed at the new address.
    assert server.stop() == 0
    first.kill()
    second = start_agent("sled", "--serial", "BRM-A", *SLED_FLAGS)
    assert second.url != first.url
    server.extra_args = ["--switch-agent", switch.url, "--sled-agent", second.url]
    server.start()
    admin = server.admin
    [again] = expect(admin.get("/v1/system/hardware/sleds"), 200)["items"]
    assert (again["id"], again["baseboard"]["serial"]) == (sled["id"], "BRM-A"), again
    # The CLI's sled table shows who each sled is.
    listed = subprocess.run(
        [str(server.binary), "system", "hardware", "sled", "list", "--format", "table:id,serial",
         "--no-header"], capture_output=True, text=True, timeout=60, check=False,
        env=dict(os.environ, OXIDE_HOST=f"http://127.0.0.1:{server.port}",
                 OXIDE_TOKEN=server.admin_token))
    assert listed.stdout.split() == [sled["id"], "BRM-A"], listed.stderr
    # Its instance is still on it, found lost, and runs there again once started.
    wait_run_state(admin, vm["id"], "failed")
    expect(instance_action(admin, vm["id"], "start"), 202)
    wait_run_state(admin, vm["id"], "running")
    assert [v["id"] for v in second.instances()] == [vm["id"]]
    assert sled_instance_ids(admin, sled["id"]) == [vm["id"]]


def test_two_sled_agents_with_one_serial_are_refused_at_start(start_agent, start_server):
    switch = start_agent("switch")
    sleds = [start_agent("sled", "--serial", "BRM-B") for _ in range(2)]
    server = start_server(extra_args=["--switch-agent", switch.url, "--sled-agent", sleds[0].url,
                                      "--sled-agent", sleds[1].url], start=False)
    with pytest.raises(AssertionError, match="before listening"):
        server.start()
    assert server.wait_for_exit() == 1
    assert (f'sled agents {sleds[0].url} and {sleds[1].url} both say they are the sled with '
            'serial "BRM-B"; give each its own --serial') in server.stderr_text()


def test_the_instances_of_a_sled_no_agent_serves_any_more_fail_after_the_deadline(start_agent,
                                                                                  start_server):
    # An agent moved without a serial is a new sled; the old one is served by no agent.
    switch, first, server, old, vm = one_sled_running_a_vm(
        start_agent, start_server, (), ("--sled-unresponsive-after", "3s"), "198.51.100.130",
        "198.51.100.139")

    assert server.stop() == 0
    second = start_agent("sled", *SLED_FLAGS)
    server.extra_args = ["--switch-agent", switch.url, "--sled-agent", second.url,
                         "--sled-unresponsive-after", "3s"]
    server.start()
    admin = server.admin
    assert server.wait_for_log(lambda r: r.get("sleds") == [first.url])
    # Recorded silent (once this server holds the task lease, on PostgreSQL); the deadline
    # counts from there.
    wait_until(lambda: sled_view(admin, old["id"])["agent"]["answers"] is False, 5.0,
               "the unserved sled recorded silent")
    # Shown running until the deadline, then failed, and started again on the sled served.
    assert view_instance(admin, vm["id"])["run_state"] == "running"
    wait_run_state(admin, vm["id"], "failed", timeout=8.0)
    expect(instance_action(admin, vm["id"], "start"), 202)
    wait_run_state(admin, vm["id"], "running")
    assert [v["id"] for v in second.instances()] == [vm["id"]]
