"""Crash recovery and agent faults of live attach and detach (issue 4, items 1 and 3;
omicron-behaviour.md §4.1-§4.3, sagas-and-reliability.md), with real processes, following
test_instance_crashes.py:

- the server is SIGKILLed right after each node (0 begin, 1 dataplane, 2 complete) of the
  ip_attach and ip_detach sagas, for a floating and an ephemeral IP of a running instance, and
  restarted on the same data dir and the same (external, still running) agents;
- the switch agent or the instance's sled agent refuses, applies then fails, or hangs (with
  `--agent-timeout-ms 500`) during an attach or a detach: the call answers 503 naming the
  agent, with Retry-After, and its saga unwinds.

Afterwards no saga may be left running, unwinding or stuck, and the three places must agree on
one clean state of the IP under test:

- attached: the database says so (the instance lists it; a floating IP's instance_id is the
  instance), the switch agent has one NAT entry for every port of the address pointing at the
  instance's sled (the same sled address, VNI and MAC as the instance's SNAT entry), and the
  instance's VM on that sled lists the address;
- not attached: none of the three; an ephemeral address is back in its pool.

The state a late agent leaves behind (a hung call handled after the faults are cleared) is
asserted with a deadline: the server must repair it within a few seconds.
"""

import ipaddress
import json
import signal
import time
from typing import NamedTuple

import pytest

from e2e_helpers import (QUIET_SWITCH, assert_retry_later, attach_ephemeral, attach_fip, auto_pool,
                         detach_ephemeral, detach_fip, expect, instance_external_ips, link,
                         list_sagas, make_fip, make_instance, make_pool, make_project, nat_key,
                         same_ip, utilization, wait_external_ip_agreement, wait_run_state,
                         wait_sagas_settled, wait_switches_checked, wait_until)

POOL = "attach-crash-pool"
POOL_FIRST, POOL_LAST = "198.51.100.10", "198.51.100.17"
PROJECT = "attach-crash"
INSTANCE = "target"
FIP = "under-test"

KINDS = ["floating", "ephemeral"]
SAGA_OF = {"attach": "ip_attach", "detach": "ip_detach"}
NODES = ["begin", "dataplane", "complete"]
# The state an operation leads to.
TARGET = {"attach": "attached", "detach": "detached"}
ORIGIN = {"attach": "detached", "detach": "attached"}
# The sled agent endpoint each operation calls.
SLED_ENDPOINT = {"attach": "PUT /instances/*/external-ips/*",
                 "detach": "DELETE /instances/*/external-ips/*"}
CONVERGE_S = 8.0  # a few seconds: the instance watcher polls every 100 ms, NAT repair every 2 s


def prepare(rack):
    make_pool(rack.admin, POOL, POOL_FIRST, POOL_LAST)
    link(rack.admin, POOL, default=True)
    make_project(rack.admin, PROJECT)
    return rack


class Case:
    """One running instance and the external IP under test (a floating IP created up front, or
    the instance's ephemeral IP). `baseline` is the pool's remaining count with nothing
    attached (the instance's SNAT address and the floating IP are allocated)."""

    def __init__(self, rack, kind, pool_selector):
        self.rack = rack
        self.kind = kind
        self.pool_selector = pool_selector
        admin = rack.admin
        instance = make_instance(admin, PROJECT, INSTANCE)
        self.instance_id = instance["id"]
        wait_run_state(admin, self.instance_id, "running")
        self.fip = make_fip(admin, PROJECT, FIP) if kind == "floating" else None
        wait_external_ip_agreement(rack, [PROJECT])
        [(self.sled_id, _)] = rack.vms(self.instance_id)
        [snat] = [i for i in instance_external_ips(admin, self.instance_id)
                  if i["kind"] == "snat"]
        self.snat_ip = ipaddress.ip_address(snat["ip"])
        self.snat_key = (self.snat_ip, snat["first_port"], snat["last_port"])
        self.baseline = utilization(admin, POOL)[1]

    @property
    def admin(self):
        # The server's port changes when it restarts.
        return self.rack.admin

    @property
    def sled(self):
        """The sled agent running the instance."""
        return self.rack.agent_by_id[self.sled_id]

    def call(self, op):
        """Runs `op` ("attach" or "detach") on the IP under test; returns the reply."""
        admin = self.admin
        if self.kind == "floating":
            if op == "attach":
                return attach_fip(admin, self.fip["id"], self.instance_id)
            return detach_fip(admin, self.fip["id"])
        if op == "attach":
            return attach_ephemeral(admin, self.instance_id, self.pool_selector)
        return detach_ephemeral(admin, self.instance_id)

    def succeed(self, op):
        """Runs `op`, asserts its documented success, and that the three places show its
        target state right away (the call answers only once the dataplane is programmed)."""
        reply = self.call(op)
        if op == "detach" and self.kind == "ephemeral":
            expect(reply, 204)
        else:
            body = expect(reply, 202)
            if self.kind == "floating":
                assert body["id"] == self.fip["id"], body
                want = self.instance_id if op == "attach" else None
                assert body.get("instance_id") == want, body
            else:
                assert body["kind"] == "ephemeral", body
        seen = observe(self)
        assert seen.problem is None and seen.state == TARGET[op], (
            f"right after a successful {op}: {seen}\n{self.rack.describe()}")
        return seen


class Observation(NamedTuple):
    state: object    # "attached", "detached", or None if the places do not agree
    ip: object       # the attached address, if attached
    problem: object  # None, or what differs


def db_state(case):
    """What the database alone says: "attached" or "detached"."""
    items = [i for i in instance_external_ips(case.admin, case.instance_id)
             if i["kind"] != "snat"]
    return "attached" if items else "detached"


def observe(case):
    """Compares the database, the switch agent and the sled agents for the IP under test (the
    instance has no other external IP than its SNAT address)."""
    admin, rack = case.admin, case.rack
    problems = []
    listed = instance_external_ips(admin, case.instance_id)
    items = [i for i in listed if i["kind"] != "snat"]
    if [i["kind"] for i in listed].count("snat") != 1:
        problems.append(f"the instance should list its SNAT address once: {listed}")
    holder = None
    if case.kind == "floating":
        holder = expect(admin.get(f"/v1/floating-ips/{case.fip['id']}"), 200).get("instance_id")
    remaining = utilization(admin, POOL)[1]

    entries = rack.nat_entries()
    snat_entries = [e for e in entries if nat_key(e) == case.snat_key]
    others = [e for e in entries if nat_key(e) != case.snat_key]
    if len(snat_entries) != 1:
        problems.append(f"the switch should hold the instance's SNAT entry once: {entries}")

    vms = rack.vms(case.instance_id)
    vm_ips = []
    if len(vms) != 1 or vms[0][0] != case.sled_id or vms[0][1]["state"] != "running":
        problems.append(f"the instance should run on sled {case.sled_id} only: {vms}")
    else:
        all_ips = [ipaddress.ip_address(a) for a in vms[0][1]["external_ips"]]
        if case.snat_ip not in all_ips:
            problems.append(f"the VM lost its SNAT address: {vms[0][1]}")
        vm_ips = [a for a in all_ips if a != case.snat_ip]
    elsewhere = [(rack.sled_id(agent), vm) for agent in rack.sleds for vm in agent.instances()
                 if vm["id"] != case.instance_id and vm["external_ips"]]
    if elsewhere:
        problems.append(f"other VMs hold external addresses: {elsewhere}")

    if not items:
        if case.kind == "floating" and holder is not None:
            problems.append(f"DB: the instance does not list the floating IP, whose instance_id "
                            f"is {holder}")
        if others:
            problems.append(f"DB: nothing attached; the switch has NAT entries "
                            f"{[str(nat_key(e)) for e in others]}")
        if vm_ips:
            problems.append(f"DB: nothing attached; the VM lists {[str(a) for a in vm_ips]}")
        if remaining != case.baseline:
            problems.append(f"DB: nothing attached; the pool has {remaining} addresses left, "
                            f"expected {case.baseline} (an ephemeral address not released?)")
        return Observation(None if problems else "detached", None,
                           "; ".join(problems) or None)

    if len(items) != 1:
        problems.append(f"DB: the instance lists {len(items)} external IPs: {items}")
        return Observation(None, None, "; ".join(problems))
    [item] = items
    ip = ipaddress.ip_address(item["ip"])
    if item["kind"] != case.kind:
        problems.append(f"DB: the instance lists a {item['kind']} IP, not {case.kind}: {item}")
    if case.kind == "floating":
        if item["id"] != case.fip["id"] or not same_ip(item["ip"], case.fip["ip"]):
            problems.append(f"DB: the instance lists {item}, not the floating IP {case.fip}")
        if holder != case.instance_id:
            problems.append(f"DB: the instance lists the floating IP, whose instance_id is "
                            f"{holder}")
        if item.get("instance_id") != case.instance_id:
            problems.append(f"DB: the listed floating IP has instance_id "
                            f"{item.get('instance_id')}")
    if [nat_key(e) for e in others] != [(ip, 0, 65535)]:
        problems.append(f"DB: {ip} attached; the switch's other NAT entries are "
                        f"{[str(nat_key(e)) for e in others]}, expected one for every port")
    elif snat_entries:
        for field in ("sled_address", "vni", "mac"):
            if others[0][field] != snat_entries[0][field]:
                problems.append(f"NAT entry for {ip} differs from the instance's SNAT entry in "
                                f"{field}: {others[0]} vs {snat_entries[0]}")
    if vm_ips != [ip]:
        problems.append(f"DB: {ip} attached; the VM lists {[str(a) for a in vm_ips]} besides "
                        f"its SNAT address")
    expected_left = case.baseline - (1 if case.kind == "ephemeral" else 0)
    if remaining != expected_left:
        problems.append(f"the pool has {remaining} addresses left, expected {expected_left}")
    return Observation(None if problems else "attached", ip, "; ".join(problems) or None)


def converge(case, timeout=CONVERGE_S, stable_for=0.0):
    """Polls until observe() finds a clean state that then holds for `stable_for` seconds;
    returns that observation."""
    deadline = time.monotonic() + timeout
    clean_since = None
    last = None
    while True:
        seen = observe(case)
        now = time.monotonic()
        if seen.problem is not None:
            clean_since = None
        elif clean_since is None or last is None or last.state != seen.state:
            clean_since = now
        last = seen
        if clean_since is not None and now - clean_since >= stable_for:
            return seen
        if now > deadline:
            raise AssertionError(
                f"database, switch agent and sled agents do not agree on a clean state of the "
                f"{case.kind} IP within {timeout} s: {seen.problem}\n{case.rack.describe()}\n"
                f"sagas: {list_sagas(case.admin)}")
        time.sleep(0.05)


def saga_states(admin):
    """{saga name: sorted states}."""
    states = {}
    for saga in list_sagas(admin):
        states.setdefault(saga["name"], []).append(saga["state"])
    return {name: sorted(s) for name, s in states.items()}


def assert_usable_afterwards(case, state):
    """From `state`, the IP can be moved to the other state and back."""
    ops = ["detach", "attach"] if state == "attached" else ["attach", "detach"]
    for op in ops:
        case.succeed(op)
    wait_external_ip_agreement(case.rack, [PROJECT])


# ---------------------------------------------------------------------------------------------
# Crash after each node of the attach and detach sagas

@pytest.mark.sampled_on_postgres("node")
@pytest.mark.parametrize("node", range(len(NODES)), ids=[f"after-{n}" for n in NODES])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["attach", "detach"])
def test_crash_after_saga_node_recovers_to_a_clean_state(start_rack, op, kind, node):
    saga = SAGA_OF[op]
    faults = {"saga": saga, "exit_after_node": node}
    # Faults for the saga under test only: the setup (instance start, attach before a detach)
    # runs normally.
    rack = prepare(start_rack(server_args=["--enable-test-faults"],
                              env={"FLOATPLANE_TEST_SAGA_FAULTS": json.dumps(faults)}))
    case = Case(rack, kind, auto_pool("v4"))
    if op == "detach":
        case.succeed("attach")
    before = saga_states(rack.admin)

    # The call never answers: the server kills itself right after the node.
    with pytest.raises(AssertionError, match="no HTTP response"):
        case.call(op)
    code = rack.server.wait_for_exit()
    assert code == -signal.SIGKILL, (
        f"expected the server to die by SIGKILL, exit {code}\n{rack.server.describe_output()}")

    # Same data dir, same agents (they kept their state), no faults.
    rack.restart_server()
    wait_sagas_settled(case.admin)
    states = saga_states(case.admin)
    assert len(states.get(saga, [])) == len(before.get(saga, [])) + 1, (before, states)
    others = {name: s for name, s in states.items() if name != saga}
    assert others == {name: s for name, s in before.items() if name != saga}, (before, states)
    ours = list(states[saga])  # the states of the sagas of this name, less the older ones
    for state in before.get(saga, []):
        ours.remove(state)
    # No node failed and the agents are healthy: recovery finishes the operation forward
    # (sagas-and-reliability.md A3), it never unwinds it.
    assert ours == ["done"], (before, states)

    wait_external_ip_agreement(rack, [PROJECT])
    seen = converge(case)
    assert seen.state == TARGET[op], (
        f"the {saga} saga is done, so the IP should be {TARGET[op]}: {seen}\n{rack.describe()}")
    assert_usable_afterwards(case, seen.state)
    wait_sagas_settled(case.admin)


# ---------------------------------------------------------------------------------------------
# Agent faults during attach and detach

FAULTS = {
    # Two refusals: the call's own push and the best-effort push of its undo (with the
    # heartbeat quiet: QUIET_SWITCH).
    "switch-refuses": ("switch", {"fail_next": 2}),
    "sled-refuses": ("sled", {"fail_next": 1}),
    # The sled changes the VM's addresses, then answers 503: the unwind must change them back.
    "sled-applies-then-fails": ("sled", {"apply_then_fail": 1}),
    # The sled holds the call until the faults are cleared, then handles it: the server must
    # answer within its agent timeout and later repair what the late call changed.
    "sled-hangs": ("sled", {"hang": True}),
}


@pytest.mark.sampled_on_postgres("fault")
@pytest.mark.parametrize("fault", FAULTS, ids=FAULTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["attach", "detach"])
def test_agent_fault_unwinds_the_operation_and_a_retry_succeeds(start_rack, op, kind, fault):
    where, rule = FAULTS[fault]
    hang = rule.get("hang", False)
    args = ["--agent-timeout-ms", "500"] if hang else []
    rack = prepare(start_rack(server_args=args + list(QUIET_SWITCH if where == "switch" else ())))
    if where == "switch":
        wait_switches_checked(rack.server)
    case = Case(rack, kind, None)
    if op == "detach":
        case.succeed("attach")
    saga = SAGA_OF[op]
    before = saga_states(rack.admin)

    agent = rack.switch if where == "switch" else case.sled
    endpoint = "POST /nat/changes" if where == "switch" else SLED_ENDPOINT[op]
    agent.add_fault(endpoint, **rule)
    began = time.monotonic()
    reply = case.call(op)
    elapsed = time.monotonic() - began
    body = assert_retry_later(reply, f"{where} agent", agent.url)
    if where == "switch":
        assert agent.faults()["faults"] == [], f"the {op} and its undo each pushed once"
    if hang:
        assert elapsed < 3.0, (
            f"the {op} took {elapsed:.1f} s with a 500 ms agent timeout: {body}")
        assert agent.faults()["held_calls"] == 1, agent.faults()

    # The saga unwound before the answer: the database is back where it was.
    assert db_state(case) == ORIGIN[op], (
        f"after a 503 the {kind} IP should still be {ORIGIN[op]}\n{rack.describe()}")
    if not hang:
        # And so are the agents, by the answer: a failed node is never undone (saga.h), so an
        # agent call that applied and then failed was taken back by the failing action itself,
        # not left for the instance watcher to find.
        seen = observe(case)
        assert seen.problem is None and seen.state == ORIGIN[op], (
            f"right after the 503: {seen}\n{rack.describe()}")
    wait_sagas_settled(rack.admin)
    states = saga_states(rack.admin)
    assert states.get(saga, []) == sorted(before.get(saga, []) + ["unwound"]), (before, states)

    rack.switch.clear_faults()
    for sled in rack.sleds:
        sled.clear_faults()
    if hang:
        wait_until(lambda: agent.faults()["held_calls"] == 0, 5.0, "the held call is released")
    # Whatever a late agent applied, the places converge on the state before the call.
    seen = converge(case, stable_for=1.0 if hang else 0.0)
    assert seen.state == ORIGIN[op], (
        f"after a failed {op} the {kind} IP should be {ORIGIN[op]}: {seen}\n{rack.describe()}")
    wait_external_ip_agreement(rack, [PROJECT])

    # The same call without faults succeeds.
    case.succeed(op)
    wait_external_ip_agreement(rack, [PROJECT])
    states = saga_states(rack.admin)
    assert states.get(saga, []) == sorted(before.get(saga, []) + ["unwound", "done"]), (
        before, states)
    assert_usable_afterwards(case, TARGET[op])


# ---------------------------------------------------------------------------------------------
# A hung switch agent

HUNG_TIMEOUT_MS = 300


@pytest.mark.parametrize("op", ["attach", "detach"])
def test_hung_switch_answers_503_naming_it_within_one_agent_timeout(start_rack, op):
    """README: an attach or detach whose switch agent does not answer gets 503 naming the agent
    within one --agent-timeout-ms plus the time of its own commits (bound asserted: 1.5x). The
    server calls a hung agent once per operation: not again in the unwind, and not after
    waiting for another call to it (the background NAT sync) that timed out."""
    rack = prepare(start_rack(server_args=["--agent-timeout-ms", str(HUNG_TIMEOUT_MS)]))
    case = Case(rack, "floating", None)
    if op == "detach":
        case.succeed("attach")
    # Every switch endpoint hangs (the background NAT sync too); the sleds are healthy.
    rack.switch.add_fault("*", hang=True)
    # Let the background sync's call hang too, so that the operation may find it in flight.
    wait_until(lambda: rack.switch.faults()["held_calls"] >= 1, 5.0,
               "the background NAT sync reaches the hung switch")
    for attempt in range(3):
        began = time.monotonic()
        reply = case.call(op)
        elapsed = time.monotonic() - began
        assert_retry_later(reply, "switch agent", rack.switch.url)
        assert elapsed < 1.5 * HUNG_TIMEOUT_MS / 1000, (
            f"attempt {attempt}: the {op} answered after {elapsed:.2f} s with a "
            f"{HUNG_TIMEOUT_MS} ms agent timeout: {reply.body}")
        assert db_state(case) == ORIGIN[op]

    rack.switch.clear_faults()
    wait_sagas_settled(case.admin)
    seen = converge(case, stable_for=1.0)
    assert seen.state == ORIGIN[op], f"{seen}\n{rack.describe()}"
    case.succeed(op)
    wait_external_ip_agreement(rack, [PROJECT])
