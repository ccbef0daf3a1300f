"""Local users and console sessions in Oxide's shape (issue 24, item 2): a silo admin creates
users with a password and a role; they log in (POST /v1/login/{silo}/local) and the API takes
their session cookie, for writes only from the console's own origin; logout ends the session
on the server; wrong names and passwords get one 401, repeated failures a 429 without locking
the user out elsewhere; sessions expire when idle and when old."""

import http.client
import json
import statistics
import time

from e2e_helpers import expect, wait_until

USERS = "/v1/system/identity-providers/local/users"
PASSWORD = "correct horse battery staple"


def create_user(admin, name, role="silo_collaborator", password=PASSWORD, silo="default"):
    body = {"external_id": name, "role": role,
            "password": {"mode": "password", "value": password} if password
            else {"mode": "login_disallowed"}}
    return expect(admin.post(USERS, body, params={"silo": silo}), 201)


def raw(server, method, path, body=None, headers=None, source="127.0.0.1"):
    """One request on a fresh connection from `source`: (status, headers, body bytes)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30,
                                            source_address=(source, 0))
    try:
        payload = None
        all_headers = dict(headers or {})
        if body is not None:
            payload = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        connection.request(method, path, body=payload, headers=all_headers)
        answer = connection.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        connection.close()


def login(server, name, password=PASSWORD, silo="default", source="127.0.0.1"):
    return raw(server, "POST", f"/v1/login/{silo}/local",
               {"username": name, "password": password}, source=source)


def session_cookie(headers):
    cookie = headers["Set-Cookie"]
    token = cookie.split(";")[0]
    assert token.startswith("session=") and len(token) > len("session=") + 32, cookie
    return token, cookie


def test_a_user_logs_in_works_through_the_cookie_from_the_console_only_and_logs_out(server):
    admin = server.admin
    user = create_user(admin, "alice")
    assert user["display_name"] == "alice"
    status, headers, body = login(server, "alice")
    assert (status, body) == (204, b"")
    cookie, set_cookie = session_cookie(headers)
    attributes = [a.strip() for a in set_cookie.split(";")[1:]]
    assert {"Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=86400"} <= set(attributes)
    assert "Secure" not in attributes  # plain HTTP here; test_tls.py: Secure over HTTPS

    as_alice = server.client(None)
    me = expect(as_alice.get("/v1/me", headers={"Cookie": cookie}), 200)
    assert (me["display_name"], me["id"], me["silo_name"], me["silo_admin"],
            me["fleet_viewer"]) == ("alice", user["id"], "default", False, False)
    assert expect(as_alice.get("/v1/me/groups", headers={"Cookie": cookie}), 200)["items"] == []
    assert expect(as_alice.get("/v1/groups", headers={"Cookie": cookie}), 200)["items"] == []
    listed = expect(as_alice.get("/v1/users", headers={"Cookie": cookie}), 200)
    assert [u["display_name"] for u in listed["items"]] == ["alice"]

    # A write with the cookie must come from the console's origin: a cross-site form's (or
    # one that says nothing) is refused and changes nothing.
    origin = f"http://127.0.0.1:{server.port}"
    project = {"name": "from-the-console", "description": ""}
    for headers in ({"Cookie": cookie}, {"Cookie": cookie, "Origin": "https://evil.example"},
                    {"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}):
        refused = as_alice.post("/v1/projects", project, headers=headers)
        assert refused.status == 403 and "cross-site request refused" in \
            refused.body["message"], refused
    assert expect(admin.get("/v1/projects"), 200)["items"] == []
    created = expect(as_alice.post("/v1/projects", project,
                                   headers={"Cookie": cookie, "Origin": origin}), 201)
    assert created["name"] == "from-the-console"
    expect(as_alice.post("/v1/projects", {"name": "fetch-metadata", "description": ""},
                         headers={"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}), 201)

    # Logout ends the session on the server: the old cookie is refused from then on.
    status, headers, _ = raw(server, "POST", "/v1/logout",
                             headers={"Cookie": cookie, "Origin": origin})
    assert status == 204 and "Max-Age=0" in headers["Set-Cookie"]
    gone = as_alice.get("/v1/me", headers={"Cookie": cookie})
    assert (gone.status, gone.body["error_code"]) == (401, "Unauthenticated")

    # Every login, failed login and logout is in the audit log.
    assert login(server, "alice", "wrong password")[0] == 401
    entries = expect(admin.get("/v1/system/audit-log",
                               params={"start_time": "2020-01-01T00:00:00Z"}), 200)["items"]
    seen = [(e["operation_id"], e["result"].get("http_status_code")) for e in entries
            if e["operation_id"] in ("login_local", "logout")]
    assert seen == [("login_local", 204), ("logout", 204), ("login_local", 401)], seen
    # The password never reaches the log.
    assert PASSWORD not in server.stderr_text()


def test_roles_passwords_and_deletion_decide_what_a_user_may_do(server):
    admin = server.admin
    viewer = create_user(admin, "vera", role="silo_viewer")
    nobody = create_user(admin, "nola", password=None)
    origin = {"Origin": f"http://127.0.0.1:{server.port}"}
    cookie, _ = session_cookie(login(server, "vera")[1])
    as_vera = server.client(None)
    denied = as_vera.post("/v1/projects", {"name": "nope", "description": ""},
                          headers={"Cookie": cookie, **origin})
    assert denied.status == 403
    # A silo admin manages the silo's users, but not a fleet admin's password or account
    # (else a silo admin could sign in as a fleet admin).
    fleet_user = create_user(admin, "fred", role="fleet_admin")
    create_user(admin, "sally", role="silo_admin")
    sally, _ = session_cookie(login(server, "sally")[1])
    as_sally = server.client(None)
    for method, path, body in [
            ("POST", f"{USERS}/{fleet_user['id']}/set-password", {"mode": "password",
                                                                 "value": "taken over!"}),
            ("DELETE", f"{USERS}/{fleet_user['id']}", None)]:
        kwargs = {"params": {"silo": "default"}, "headers": {"Cookie": sally, **origin}}
        answer = (as_sally.post(path, body, **kwargs) if method == "POST"
                  else as_sally.delete(path, **kwargs))
        assert answer.status == 403, (method, answer)
    assert login(server, "fred")[0] == 204
    granted = as_sally.post(USERS, {"external_id": "fran", "role": "fleet_admin",
                                    "password": {"mode": "login_disallowed"}},
                            params={"silo": "default"}, headers={"Cookie": sally, **origin})
    assert granted.status == 403
    # A viewer cannot create users; a user without a password cannot log in.
    denied = as_vera.post(USERS, {"external_id": "x", "password": {"mode": "login_disallowed"}},
                          params={"silo": "default"}, headers={"Cookie": cookie, **origin})
    assert denied.status == 403
    assert login(server, "nola")[0] == 401
    # Giving nola a password lets her in; changing vera's ends vera's sessions.
    expect(admin.post(f"{USERS}/{nobody['id']}/set-password",
                      {"mode": "password", "value": "a new password"},
                      params={"silo": "default"}), 204)
    assert login(server, "nola", "a new password")[0] == 204
    expect(admin.post(f"{USERS}/{viewer['id']}/set-password",
                      {"mode": "password", "value": "another password"},
                      params={"silo": "default"}), 204)
    assert as_vera.get("/v1/me", headers={"Cookie": cookie}).status == 401
    assert login(server, "vera")[0] == 401
    # A deleted user's sessions end with it.
    cookie, _ = session_cookie(login(server, "vera", "another password")[1])
    expect(admin.delete(f"{USERS}/{viewer['id']}", params={"silo": "default"}), 204)
    assert as_vera.get("/v1/me", headers={"Cookie": cookie}).status == 401
    # The same name again is a new user; a taken name is refused; a short password too.
    expect(admin.post(USERS, {"external_id": "nola", "password": {"mode": "login_disallowed"}},
                      params={"silo": "default"}), 400)
    short = admin.post(USERS, {"external_id": "sam", "password": {"mode": "password",
                                                                   "value": "short"}},
                       params={"silo": "default"})
    assert short.status == 400 and "at least 8 characters" in short.body["message"]


def test_wrong_names_and_passwords_get_one_401_and_repeated_failures_a_429_for_that_source(
        server):
    create_user(server.admin, "bob")

    def timed(*args, **kwargs):
        began = time.monotonic()
        status, headers, body = login(server, *args, **kwargs)
        return status, body, time.monotonic() - began

    wrong_password = [timed("bob", "not his password") for _ in range(3)]
    no_such_user = [timed("robert", "not his password") for _ in range(1)]
    no_such_silo = [timed("bob", "not his password", silo="elsewhere") for _ in range(1)]
    # One answer, whatever was wrong (but its request id).
    answers = {(status, json.dumps({k: v for k, v in json.loads(body).items()
                                    if k != "request_id"}, sort_keys=True))
               for status, body, _ in wrong_password + no_such_user + no_such_silo}
    assert answers == {(401, json.dumps({"error_code": "Unauthenticated", "message":
                                         "credentials invalid: wrong user name or password"},
                                        sort_keys=True))}, answers
    # About the same time: a missing user costs a password check too.
    assert statistics.median(t for _, _, t in no_such_user) > \
        0.3 * statistics.median(t for _, _, t in wrong_password)

    # bob of silo default has failed 3 times from 127.0.0.1 (failures count per silo and name,
    # and per source); two more and he must wait, twice as long after each further failure (a
    # machine slow enough to let the first wait pass meets the next).
    for _ in range(2):
        assert login(server, "bob", "still wrong")[0] == 401
    for attempt in range(4):
        status, headers, body = login(server, "bob", "still wrong")
        if status == 429:
            break
        assert status == 401, body
    assert status == 429 and int(headers["Retry-After"]) >= 1, body
    assert b"too many failed logins from 127.0.0.1" in body
    # Refused even with the right password while it waits.
    status, _, body = login(server, "bob", PASSWORD)
    assert status == 429, body
    # Nobody else is locked out: bob from another address, and others from this one.
    assert login(server, "bob", PASSWORD, source="127.0.0.2")[0] == 204
    create_user(server.admin, "carol")
    assert login(server, "carol", PASSWORD)[0] == 204


def test_a_session_ends_when_idle_and_when_old(start_server):
    server = start_server(extra_args=["--session-idle-timeout", "2s",
                                      "--session-absolute-timeout", "5s"])
    create_user(server.admin, "dave")
    client = server.client(None)
    began = time.monotonic()
    idle, _ = session_cookie(login(server, "dave")[1])
    busy, _ = session_cookie(login(server, "dave")[1])
    # The busy one is used every 0.3 s (its use is recorded every half second, a quarter of
    # the idle timeout) and outlives the idle one; then its age ends it too.
    while time.monotonic() - began < 3.0:
        expect(client.get("/v1/me", headers={"Cookie": busy}), 200)
        time.sleep(0.3)
    expired = client.get("/v1/me", headers={"Cookie": idle})
    assert expired.status == 401 and "session expired" in expired.body["message"]
    wait_until(lambda: client.get("/v1/me", headers={"Cookie": busy}).status == 401, 8.0,
               "the busy session's end at its absolute timeout")
    assert time.monotonic() - began >= 4.5


def test_the_bootstrap_token_is_traded_for_a_session_cookie(server):
    # The console's login with a token (CON-3): the browser then holds only the cookie.
    status, headers, _ = raw(server, "POST", "/v1/login/token",
                             headers={"Authorization": f"Bearer {server.admin_token}"})
    assert status == 204
    cookie, set_cookie = session_cookie(headers)
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    assert server.admin_token not in set_cookie
    as_cookie = server.client(None)
    me = expect(as_cookie.get("/v1/me", headers={"Cookie": cookie}), 200)
    assert me["fleet_viewer"] is True and me["silo_admin"] is True
    origin = {"Origin": f"http://127.0.0.1:{server.port}"}
    expect(as_cookie.post("/v1/system/ip-pools", {"name": "by-cookie", "description": ""},
                          headers={"Cookie": cookie, **origin}), 201)
    entries = expect(server.admin.get("/v1/system/audit-log",
                                      params={"start_time": "2020-01-01T00:00:00Z"}), 200)["items"]
    [pool_create] = [e for e in entries if e["operation_id"] == "system_ip_pool_create"]
    assert pool_create["auth_method"] == "session_cookie"
    # Logout ends it; the token itself still works.
    assert raw(server, "POST", "/v1/logout", headers={"Cookie": cookie, **origin})[0] == 204
    assert as_cookie.get("/v1/me", headers={"Cookie": cookie}).status == 401
    expect(server.admin.get("/v1/me"), 200)
