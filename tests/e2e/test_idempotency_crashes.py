"""Idempotency-Key across crashes (issue 10, defect 2; product.md difference 13): a key's
record commits in the same transaction as the request's effect (for a saga, in the saga's own
commits), so a retry after a SIGKILL at any instant gets the original answer, replayed, or runs
the request exactly once if it never committed; two requests under one key in flight at once
never both run.

- 400 concurrent keyed floating-IP creates and a real SIGKILL of the server while some have
  committed and none has been answered (a slow-disk test fault holds the answers back), then
  every key retried: each committed create is replayed with its row's id, each other one
  creates its IP once.
- Keyed saga-driven operations (attach, detach, instance create) killed by the saga fault plan
  right after a node: the retry gets the saga's answer, replayed, never 503 for long and never
  a second effect.
- Two requests with one key in flight (the first held by a hung sled agent): the second gets
  503 with Retry-After; a kill while the first is in flight leaves a retry that gets the
  answer once its saga is recovered.
"""

import http.client
import json
import signal
import threading
import time

import pytest

from e2e_helpers import (assert_retry_later, expect, link, list_all, list_sagas, make_instance,
                         make_pool, make_project, wait_run_state, wait_sagas_settled, wait_until)

CREATES = 400
# Creates committed (by the server's commit counter) before the kill: enough that a good part
# of the burst is written but unanswered, few enough that much of it has not run yet.
KILL_AFTER_COMMITS = 40
SYNC_DELAY_MS = 300  # the slow disk: answers wait this long for each sync of the log


def keyed(key):
    return {"Idempotency-Key": key}


def metric(server, name):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(f"/metrics has no {name}: {text}")


def raw_post(port, token, path, body, key):
    """One POST on its own connection; (status, body, headers) or None if the server gave no
    answer (it was killed)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=json.dumps(body),
                           headers={"Authorization": f"Bearer {token}",
                                    "Content-Type": "application/json", **keyed(key)})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null"), response.headers
    except (ConnectionError, http.client.HTTPException, OSError):
        return None
    finally:
        connection.close()


def test_keyed_floating_ip_creates_killed_mid_burst_are_each_done_once(start_server):
    server = start_server(extra_args=["--enable-test-faults"],
                          env={"FLOATPLANE_TEST_SYNC_DELAY_MS": str(SYNC_DELAY_MS)})
    admin = server.admin
    make_pool(admin, "burst-pool", "10.128.0.1", "10.128.3.254")
    link(admin, "burst-pool", default=True)
    make_project(admin, "burst")
    path = "/v1/floating-ips?project=burst"
    names = [f"fip-{i}" for i in range(CREATES)]
    keys = {name: f"create-{name}" for name in names}
    bodies = {name: {"name": name, "description": "burst"} for name in names}

    # The burst: every create on its own connection, released at once.
    port, token = server.port, server.admin_token
    answers = {}
    barrier = threading.Barrier(CREATES + 1)

    def create(name):
        barrier.wait(30)
        answers[name] = raw_post(port, token, path, bodies[name], keys[name])

    threads = [threading.Thread(target=create, args=(name,), daemon=True) for name in names]
    for thread in threads:
        thread.start()
    baseline = metric(server, "floatplane_durable_commits_total")
    barrier.wait(30)
    wait_until(lambda: metric(server, "floatplane_durable_commits_total")
               >= baseline + KILL_AFTER_COMMITS, 20.0, f"{KILL_AFTER_COMMITS} commits",
               interval=0.002)
    server.process.send_signal(signal.SIGKILL)  # the real process, mid-burst
    assert server.wait_for_exit() == -signal.SIGKILL
    for thread in threads:
        thread.join(30)
    answered = {name: a for name, a in answers.items() if a is not None}

    server.env = {}  # the same data dir, a healthy disk
    server.start()
    admin = server.admin
    listed = {f["name"]: f for f in list_all(admin, "/v1/floating-ips", project="burst")}
    assert set(listed) <= set(names), sorted(set(listed) - set(names))

    # Every key, retried: the committed ones replay, the others run once now.
    problems = []
    committed_unanswered = [n for n in listed if n not in answered]
    print(f"committed {len(listed)}, answered {len(answered)}, "
          f"committed unanswered {len(committed_unanswered)}")
    for name in names:
        reply = raw_post(server.port, server.admin_token, path, bodies[name], keys[name])
        assert reply is not None, f"{name}: no answer after the restart"
        status, body, headers = reply
        replayed = headers.get("idempotent-replayed") == "true"
        if name in listed:
            if status != 201 or not replayed or body.get("id") != listed[name]["id"]:
                problems.append(f"{name} committed as {listed[name]['id']}; the retry got "
                                f"{status} replayed={replayed} {body}")
            elif name in answered and answered[name][1] != body:
                problems.append(f"{name}: first answer {answered[name]}, replay {body}")
        elif status != 201 or replayed:
            problems.append(f"{name} never committed; the retry got {status} "
                            f"replayed={replayed} {body}")
    assert not problems, f"{len(problems)} keys wrong, e.g.:\n" + "\n".join(problems[:10])

    after = [f["name"] for f in list_all(admin, "/v1/floating-ips", project="burst")]
    assert sorted(after) == sorted(names), "each name exactly once"
    # Not vacuous: the kill landed between commits and their answers, and before some creates
    # ran at all.
    assert committed_unanswered, (
        f"no create committed without its answer: {len(listed)} committed, "
        f"{len(answered)} answered")
    assert len(listed) < CREATES, "every create had committed before the kill"
