"""No dead ends (issue 23 item 4): a failed instance can be started and stopped, and its
addresses detached, as Oxide allows; a stop does something or says why not; a dev server
stopped cleanly and started again brings back its running instances, their floating IPs on
the switch."""


from e2e_helpers import (agent_request, attach_fip, detach_fip, expect, instance_action, link, make_fip,
                         make_instance, make_pool, make_project, view_instance, wait_run_state,
                         wait_until)

POOL, FIRST, LAST = "dead-ends", "198.51.100.100", "198.51.100.109"


def prepare(admin, project):
    make_pool(admin, POOL, FIRST, LAST)
    link(admin, POOL, default=True)
    make_project(admin, project)


def failed_instance(rack, project):
    """A running instance with a floating IP, whose sled then restarts and loses it."""
    vm = make_instance(rack.admin, project, "vm")
    wait_run_state(rack.admin, vm["id"], "running")
    fip = make_fip(rack.admin, project, "www")
    expect(attach_fip(rack.admin, fip["id"], vm["id"]), 202)
    [(sled_id, _)] = rack.vms(vm["id"])
    rack.agent_by_id[sled_id].reset()  # state lost, as on a sled restart
    wait_run_state(rack.admin, vm["id"], "failed", timeout=20)
    return vm, fip


def test_a_failed_instance_starts_again_with_its_floating_ip(start_rack):
    rack = start_rack()
    prepare(rack.admin, "fail-start")
    vm, fip = failed_instance(rack, "fail-start")
    expect(instance_action(rack.admin, vm["id"], "start"), 202)
    wait_run_state(rack.admin, vm["id"], "running")
    [(_, on_sled)] = rack.vms(vm["id"])
    assert fip["ip"] in on_sled["external_ips"], on_sled
    wait_until(lambda: fip["ip"] in [e["external_ip"] for e in rack.switch.nat()["entries"]],
               10, "the floating IP's NAT entry back on the switch")


def test_a_failed_instance_stops_for_real_and_its_addresses_detach(start_rack):
    rack = start_rack()
    prepare(rack.admin, "fail-stop")
    vm, fip = failed_instance(rack, "fail-stop")
    detached = detach_fip(rack.admin, fip["id"])
    expect(detached, 202)
    assert detached.body.get("instance_id") is None
    stopped = expect(instance_action(rack.admin, vm["id"], "stop"), 202)
    assert stopped["run_state"] == "stopped", stopped
    assert view_instance(rack.admin, vm["id"])["run_state"] == "stopped"
    # A stopped instance is an ordinary one again: it can be changed and deleted.
    expect(rack.admin.put(f"/v1/instances/{vm['id']}", {"ncpus": 2, "memory": 1 << 30}), 200)
    expect(rack.admin.delete(f"/v1/instances/{vm['id']}"), 204)


def _switch_has(url, ip, secret_path):
    return ip in [e["external_ip"] for e in agent_request(url, "/nat", secret_path)["entries"]]


def test_a_reboot_its_sled_refuses_leaves_the_instance_running_not_rebooting(start_rack):
    # A reboot is no saga: when the sled refuses its stop, the instance goes back to running
    # (the watcher then judges it by what the sled holds), never stays rebooting, which
    # nothing would end and which keeps the sled's expunge waiting.
    rack = start_rack()
    prepare(rack.admin, "reboot")
    vm = make_instance(rack.admin, "reboot", "vm")
    wait_run_state(rack.admin, vm["id"], "running")
    [(sled_id, _)] = rack.vms(vm["id"])
    rack.agent_by_id[sled_id].add_fault("POST /instances/*/stop", fail_next=1)
    refused = instance_action(rack.admin, vm["id"], "reboot")
    assert refused.status == 503, refused
    assert view_instance(rack.admin, vm["id"])["run_state"] == "running"
    expect(instance_action(rack.admin, vm["id"], "reboot"), 202)
    wait_run_state(rack.admin, vm["id"], "running")


def test_a_dev_server_restarted_cleanly_brings_back_its_running_instances(server,
                                                                         agent_secret_path):
    admin = server.admin
    prepare(admin, "restart")
    vm = make_instance(admin, "restart", "vm")
    wait_run_state(admin, vm["id"], "running")
    fip = make_fip(admin, "restart", "www")
    expect(attach_fip(admin, fip["id"], vm["id"]), 202)
    server.restart()
    admin = server.admin
    assert server.wait_for_log(lambda r: r.get("msg") == "restarted the instances the "
                               "in-process sleds ran before" and r.get("instances") == 1)
    wait_run_state(admin, vm["id"], "running")
    [dataplane] = [r for r in server.wait_for_log(lambda r: r.get("msg") == "agents")]
    for url in dataplane["switch_agents"]:
        wait_until(lambda: _switch_has(url, fip["ip"], agent_secret_path), 10,
                   f"the floating IP on the restarted server's switch {url}")
    # And it ends running (the restarted VM passes through starting on its sled): the watcher
    # did not take it for a lost one, which it would have failed.
    wait_run_state(admin, vm["id"], "running")
