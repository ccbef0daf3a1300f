"""Idempotency-Key on POST (product.md difference 13): a retry with the same key and body gets
the first response and does no work; the same key with another body gets 422."""

import json
import urllib.request

from e2e_helpers import expect, link, list_all, make_pool, metric, wait_until


def raw_post(server, path, body, key, token=None):
    """POST without the validating client, to control headers exactly."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token or server.admin_token}",
                 "Content-Type": "application/json", "Idempotency-Key": key})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"null"), dict(reply.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), dict(error.headers)


def test_retry_with_the_same_key_returns_the_first_response_once(server):
    body = {"name": "once", "description": "created once"}
    first = raw_post(server, "/v1/projects", body, "key-1")
    again = raw_post(server, "/v1/projects", body, "key-1")
    assert first[0] == 201 and again[0] == 201
    assert again[1] == first[1], "the retry must get the first response"
    assert again[2].get("idempotent-replayed") == "true"
    assert [p["name"] for p in list_all(server.admin, "/v1/projects")].count("once") == 1


def test_same_key_with_another_body_is_422(server):
    assert raw_post(server, "/v1/projects", {"name": "a", "description": ""}, "key-2")[0] == 201
    status, body, _ = raw_post(server, "/v1/projects", {"name": "b", "description": ""}, "key-2")
    assert status == 422, body
    assert body["error_code"] == "UnprocessableEntity"
    assert "key-2" in body["message"]
    assert "b" not in [p["name"] for p in list_all(server.admin, "/v1/projects")]


def test_refusals_are_replayed_too_and_keys_are_per_token(server):
    body = {"name": "dup", "description": ""}
    assert raw_post(server, "/v1/projects", body, "k")[0] == 201
    # A new key for the same body is a new request: it fails as a duplicate name, and that
    # answer is what a retry with that key gets.
    status, refusal, _ = raw_post(server, "/v1/projects", body, "k2")
    assert status == 400 and refusal["error_code"] == "ObjectAlreadyExists"
    assert raw_post(server, "/v1/projects", body, "k2")[1] == refusal
    # Another token's key space is separate.
    token = expect(server.admin.post("/v1/system/tokens", {"silo": "default",
                                                           "role": "silo_admin",
                                                           "name": "other"}), 201)["token"]
    status, _, _ = raw_post(server, "/v1/projects", {"name": "other", "description": ""}, "k",
                            token=token)
    assert status == 201


def test_floating_ip_create_with_a_key_allocates_one_address(server):
    make_pool(server.admin, "idem-pool", "192.0.2.1", "192.0.2.9")
    link(server.admin, "idem-pool", default=True)
    expect(server.admin.post("/v1/projects", {"name": "idem", "description": ""}), 201)
    body = {"name": "fip", "description": ""}
    first = raw_post(server, "/v1/floating-ips?project=idem", body, "fip-key")
    again = raw_post(server, "/v1/floating-ips?project=idem", body, "fip-key")
    assert first[0] == 201 and again[1] == first[1]
    util = expect(server.admin.get("/v1/system/ip-pools/idem-pool/utilization"), 200)
    assert util["remaining"] == 8.0


def test_token_create_refuses_a_key_whose_answer_would_store_the_secret(server):
    body = {"silo": "default", "role": "silo_viewer", "name": "keyed"}
    status, refusal, _ = raw_post(server, "/v1/system/tokens", body, "token-key")
    assert status == 400, refusal
    assert "Idempotency-Key" in refusal["message"] and "secret" in refusal["message"]
    # Nothing was created; without the key the same request works.
    assert expect(server.admin.post("/v1/system/tokens", body), 201)["token"]


def test_a_keyed_create_is_one_commit_and_its_replay_only_its_audit_entry(start_server):
    # The key's record and the audit entry are written by the create's own transaction, not by
    # ones of their own; the replay, a request of its own, writes its audit entry and nothing
    # else. The leases' renewals (README, "Several servers") would add commits of their own:
    # they come every half lease, so a long lease keeps them out of the count.
    # The sled watcher records each sled's agent as answering once, soon after the start: past
    # that, it writes only when a sled falls silent or answers again.
    server = start_server(extra_args=["--lease-ttl-ms", "600000"])
    wait_until(lambda: all(s["agent"]["answers"] for s in expect(
        server.admin.get("/v1/system/hardware/sleds"), 200)["items"]), 10.0,
        "every sled recorded as answering")
    commits = "floatplane_durable_commits_total"
    before = metric(server, commits)
    body = {"name": "one-commit", "description": ""}
    first = raw_post(server, "/v1/projects", body, "one-commit-key")
    assert first[0] == 201
    assert metric(server, commits) == before + 1
    assert raw_post(server, "/v1/projects", body, "one-commit-key")[1] == first[1]
    assert metric(server, commits) == before + 2


def test_keyed_update_and_delete_are_replayed(server):
    # Every mutating request takes a key, not only POST: a retried delete gets its 204 again.
    expect(server.admin.post("/v1/projects", {"name": "keyed-del", "description": ""}), 201)
    key = {"Idempotency-Key": "rename-key"}
    renamed = server.admin.put("/v1/projects/keyed-del", {"name": "keyed-del2"}, headers=key)
    assert renamed.status == 200, renamed
    again = server.admin.put("/v1/projects/keyed-del", {"name": "keyed-del2"}, headers=key)
    assert (again.status, again.body) == (200, renamed.body)
    assert again.headers.get("idempotent-replayed") == "true"
    key = {"Idempotency-Key": "delete-key"}
    assert server.admin.delete("/v1/projects/keyed-del2", headers=key).status == 204
    retry = server.admin.delete("/v1/projects/keyed-del2", headers=key)
    assert retry.status == 204, retry
    assert retry.headers.get("idempotent-replayed") == "true"
    assert server.admin.delete("/v1/projects/keyed-del2").status == 404
