"""Several floatplane servers on one PostgreSQL database (issue 12, items 4 and 6;
sagas-and-reliability.md A4 and B8), with real processes: every server shares the same external
simulated agents (one switch agent, two sled agents) and the same database.

1. Three servers race attach, detach, floating IP delete, instance stop, start and delete on
   the same resources (test_attach_races.py's rounds, each job through another server): only
   documented outcomes, and afterwards database, switch agent and sled agents agree, no saga is
   left running or stuck, no address leaked.
2. A server SIGKILLed right after a node of an attach or detach saga: another server, whose
   coordinator lease is live, adopts the saga once the dead one's lease expired, and finishes
   it; the three places agree on the operation's target state.
3. A server paused (SIGSTOP) inside an attach saga's agent call loses the saga to another
   server, which finishes it; resumed (SIGCONT), it writes nothing more to that saga, and the
   request it was serving answers 503 saying the saga went to another server, with
   Retry-After. It then serves new requests as a healthy replica.

Servers run with a short coordinator lease (--lease-ttl-ms) so that adoption takes about a
second. The PostgreSQL restart and failover tests are in test_postgres_failures.py.
"""

import json
import signal
import time
from collections import Counter

import pytest

from e2e_helpers import Background, list_sagas, wait_sagas_settled, wait_until
from test_attach_crashes import NODES, SAGA_OF, SLED_ENDPOINT, TARGET, Case, converge
from test_attach_crashes import prepare as prepare_crash
from test_attach_races import prepare as prepare_race
from test_attach_races import race_round

pytestmark = pytest.mark.postgres_only("servers share one database only on PostgreSQL")

LEASE_ARGS = ["--lease-ttl-ms", "1000", "--lease-grace-ms", "200"]
ADOPTION_S = 15.0  # lease expiry, grace and the adopter's next look, with room for a busy CI
ADOPTED = "adopted the unfinished sagas of expired saga coordinators"


def start_replicas(start_rack, start_server, count, first_args=(), first_env=None):
    """A rack (switch agent, two sled agents, a first server with `first_args`/`first_env`)
    and count - 1 more servers on the first one's database and agents. Returns (rack, servers),
    the first server first."""
    rack = start_rack(server_args=[*LEASE_ARGS, *first_args], env=first_env)
    others = [start_server(extra_args=[*rack.dataplane_args, *LEASE_ARGS],
                           database_of=rack.server)
              for _ in range(count - 1)]
    return rack, [rack.server, *others]


def use_server(rack, server):
    """Points the rack (and so every check made through rack.admin) at `server`."""
    rack.server = server
    rack.load_sleds()


def coordinator_id(server):
    [serving] = [r for r in server.log_records() if r.get("msg") == "serving"]
    return serving["coordinator_id"]


def adopted_by(server):
    return any(r.get("msg") == ADOPTED for r in server.log_records())


# ---------------------------------------------------------------------------------------------
# 1. Races through three servers

def test_three_servers_race_attach_detach_stop_start_and_delete(start_rack, start_server):
    rack, servers = start_replicas(start_rack, start_server, 3)
    prepare_race(rack)
    outcomes = Counter()
    problems = []
    for round_number in range(4):
        race_round(rack, round_number, servers, outcomes, problems)
    assert all(s["state"] in ("done", "unwound") for s in list_sagas(rack.admin))
    assert not problems, "\n".join(problems) + f"\nall outcomes: {dict(sorted(outcomes.items()))}"
    # Every server served requests that changed something: the race really ran through three.
    for server in servers:
        served = [r for r in server.log_records()
                  if r.get("method") == "POST" and str(r.get("status", "")).startswith("2")]
        assert served, f"server on port {server.port} served no successful POST"


# ---------------------------------------------------------------------------------------------
# 2. SIGKILL mid-saga: adoption

@pytest.mark.parametrize("node", range(len(NODES)), ids=NODES)
@pytest.mark.parametrize("op", ["attach", "detach"])
def test_a_killed_servers_saga_is_adopted_and_finished_by_another(start_rack, start_server, op,
                                                                  node):
    saga = SAGA_OF[op]
    faults = {"saga": saga, "exit_after_node": node}
    rack, (doomed, survivor) = start_replicas(
        start_rack, start_server, 2, first_args=["--enable-test-faults"],
        first_env={"FLOATPLANE_TEST_SAGA_FAULTS": json.dumps(faults)})
    prepare_crash(rack)
    case = Case(rack, "floating", None)
    if op == "detach":
        case.succeed("attach")  # acknowledged: must still hold if the detach unwinds
    before = Counter(s["name"] for s in list_sagas(rack.admin))

    # The call never answers: the first server kills itself right after the node.
    with pytest.raises(AssertionError, match="no HTTP response"):
        case.call(op)
    assert doomed.wait_for_exit() == -signal.SIGKILL, doomed.describe_output()

    # The survivor alone carries on; nobody restarts the dead server. A saga the dead server
    # had not brought to rest must pass to the survivor (adopted under a new generation); one
    # whose last node's event committed with its rest state has nothing left to adopt.
    [(state, owner, generation)] = survivor.sql(
        "SELECT state, current_sec, adopt_generation FROM saga WHERE name = ? AND "
        "time_created = (SELECT max(time_created) FROM saga WHERE name = ?)", (saga, saga))
    use_server(rack, survivor)
    adopted_already = owner == coordinator_id(survivor)
    if adopted_already:
        # Getting here took longer than the dead server's lease (1.2 s; a loaded CI machine):
        # the survivor has adopted the saga already, under a new generation (a saga begins at
        # 1), and its log says so (or is about to).
        assert int(generation) > 1, generation
        wait_until(lambda: adopted_by(survivor), ADOPTION_S,
                   "the survivor logs its adoption", describe=survivor.describe_output)
    elif state in ("running", "unwinding"):
        assert owner == coordinator_id(doomed), (owner, coordinator_id(doomed))
        wait_until(lambda: adopted_by(survivor), ADOPTION_S,
                   "the survivor adopts the dead server's sagas", describe=survivor.describe_output)
    else:
        assert owner == coordinator_id(doomed), (owner, coordinator_id(doomed))
        assert node == len(NODES) - 1 and state == "done", (node, state)
    sagas = wait_sagas_settled(rack.admin, ADOPTION_S)
    mine = [s for s in sagas if s["name"] == saga]
    assert len(mine) == before[saga] + 1, (before, sagas)
    # No node failed, so the adopter finishes the saga forward.
    assert all(s["state"] == "done" for s in mine), mine
    if state in ("running", "unwinding") and not adopted_already:
        [(owner_now, generation_now)] = survivor.sql(
            "SELECT current_sec, adopt_generation FROM saga WHERE current_sec = ? AND name = ?",
            (coordinator_id(survivor), saga))
        assert int(generation_now) > int(generation), (generation, generation_now)
    seen = converge(case, stable_for=1.0)
    assert seen.state == TARGET[op], seen


# ---------------------------------------------------------------------------------------------
# 3. SIGSTOP / SIGCONT: fencing

def test_a_paused_server_loses_its_saga_and_cannot_write_to_it_when_it_resumes(start_rack,
                                                                               start_server):
    rack, (paused, adopter) = start_replicas(start_rack, start_server, 2)
    prepare_crash(rack)
    case = Case(rack, "floating", None)
    sled = case.sled
    # The sled agent holds the attach's port call until the fault is cleared.
    sled.add_fault(SLED_ENDPOINT["attach"], hang=True)
    call = Background(lambda: case.call("attach"))
    wait_until(lambda: sled.faults()["held_calls"] == 1, 10.0, "the attach reaches the sled")

    paused.process.send_signal(signal.SIGSTOP)
    try:
        use_server(rack, adopter)
        wait_until(lambda: adopted_by(adopter), ADOPTION_S, "the other server adopts the "
                   "paused server's saga", describe=adopter.describe_output)
        # Let the adopter's own port call through (and the paused server's held one, which
        # the agent answers into the paused process's socket).
        sled.clear_faults()
        sagas = wait_sagas_settled(rack.admin, ADOPTION_S)
        assert [s["state"] for s in sagas if s["name"] == "ip_attach"] == ["done"], sagas
        settled = converge(case, stable_for=0.5)
        assert settled.state == "attached", settled
    finally:
        paused.process.send_signal(signal.SIGCONT)

    # The resumed server learns from the database that it lost the saga: it answers its
    # client 503 (retry), and its late writes change nothing.
    reply = call.result(timeout=30.0)
    assert reply.status == 503, f"{reply.status} {reply.body}"
    assert "another server adopted it" in reply.body["message"], reply.body
    assert reply.headers.get("Retry-After"), reply.headers
    assert [s["state"] for s in list_sagas(rack.admin) if s["name"] == "ip_attach"] == ["done"]
    after = converge(case, stable_for=1.0)
    assert after.state == "attached", after

    # And it serves again as a healthy replica: a detach through it succeeds.
    use_server(rack, paused)
    deadline = time.monotonic() + 10.0
    while True:
        reply = case.call("detach")
        if reply.status != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # its lease is being renewed
    assert reply.status == 202, f"{reply.status} {reply.body}"
    assert converge(case, stable_for=0.5).state == "detached"
