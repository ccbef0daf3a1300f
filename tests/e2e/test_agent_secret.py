"""Only the control plane programs the dataplane (issue 24, item 6): agents obey only callers
that present the secret of their --secret-file, which the server presents from its
--agent-secret-file; the secret shows nowhere. (That every endpoint of both agents refuses a
stranger and changes nothing: agents/agent_secret_test.cc.)"""

import subprocess
import urllib.request
from pathlib import Path

import pytest

from e2e_helpers import attach_fip, detach_fip, expect, running_vm_with_fip, wait_until

pytestmark = pytest.mark.engine_independent(
    "the secret between server and agents is presented and checked over HTTP, above the datastore")

PROJECT = "secrets"


def test_a_stranger_cannot_program_the_switch_or_a_sled_and_the_secret_shows_nowhere(
        start_rack, agent_secret_path):
    rack = start_rack()
    vm, fip, sled = running_vm_with_fip(rack, "secret-pool", "198.51.100.20", "198.51.100.29",
                                     PROJECT)
    expect(attach_fip(rack.admin, fip["id"], vm["id"]), 202)
    entries = wait_until(lambda: len(rack.nat_entries()) == 2 and rack.nat_entries(), 5.0,
                         "the SNAT and floating NAT entries", describe=rack.describe)
    before = (rack.switch.nat(), sled.instances())

    # Someone on the agents' network, without the secret or with a guess: 401, nothing changes.
    removal = {"changes": [{"entry": entries[0], "gen": 10**6, "op": "remove"}]}
    for authorization in ("", "Bearer guess-guess-guess-guess"):
        for agent, method, path, body in [
                (rack.switch, "GET", "/nat", None),
                (rack.switch, "PUT", "/nat", {"entries": [], "generation": 10**6}),
                (rack.switch, "POST", "/nat/changes", removal),
                (sled, "DELETE", f"/instances/{vm['id']}", None),
                (sled, "DELETE", f"/instances/{vm['id']}/external-ips/{fip['ip']}", None),
                (sled, "POST", "/reset", None)]:
            status, answer = agent.call(method, path, body, authorization=authorization)
            assert (status, answer["error_code"]) == (401, "Unauthenticated"), (path, answer)
            assert "present the agent secret" in answer["message"]
    assert (rack.switch.nat(), sled.instances()) == before
    # The control plane still drives them: a detach reaches the switch.
    expect(detach_fip(rack.admin, fip["id"]), 202)
    wait_until(lambda: len(rack.nat_entries()) == 1, 5.0, "the floating entry removed",
               describe=rack.describe)

    secret = Path(agent_secret_path).read_text().strip()
    # Not in any log line of the server or the agents, not in /metrics, not in a process
    # listing (the server's and the agents' command lines name the file only).
    logs = [rack.server.stderr_text()] + [a.stderr_path.read_text() for a in
                                          [*rack.switches, *rack.sleds]]
    assert not [log for log in logs if secret in log]
    with urllib.request.urlopen(f"http://127.0.0.1:{rack.server.port}/metrics",
                                timeout=10) as answer:
        metrics = answer.read().decode()
    assert "floatplane_" in metrics and secret not in metrics
    listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True,
                             check=True).stdout
    assert str(agent_secret_path) in listing and secret not in listing


def test_an_agent_without_a_secret_and_a_production_server_without_one_do_not_start(
        floatplane_bin, start_server, start_agent, tmp_path):
    for kind in ("switch", "sled"):
        refused = subprocess.run([str(floatplane_bin), f"{kind}-agent", "--sim", "--listen",
                                  "127.0.0.1:0"], capture_output=True, text=True, timeout=30,
                                 check=False)
        assert refused.returncode == 2
        assert (f"floatplane {kind}-agent: --secret-file FILE is required: the agent obeys only "
                "the control plane") in refused.stderr
    short = tmp_path / "short"
    short.write_text("tiny\n")
    refused = subprocess.run([str(floatplane_bin), "switch-agent", "--sim", "--secret-file",
                              str(short)], capture_output=True, text=True, timeout=30,
                             check=False)
    assert refused.returncode == 2
    assert "must hold a secret of at least 16 characters" in refused.stderr

    switch, sled = start_agent("switch"), start_agent("sled")
    server = start_server(dev=False, start=False, database_url=f"sqlite:{tmp_path / 'fp.db'}",
                          extra_args=["--switch-agent", switch.url, "--sled-agent", sled.url,
                                      "--agent-secret-file", ""])
    with pytest.raises(AssertionError, match="before listening"):
        server.start()
    assert server.wait_for_exit() == 2
    assert "--agent-secret-file (or `agent-secret-file` in the config file's [server] section) " \
           "is required without --dev" in server.stderr_text()
