"""The `floatplane server --dev` process contract: startup, token file, persistence across
restarts, request log on stderr, a request id on every response, clean exit on SIGTERM and
SIGINT."""

import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from e2e_helpers import (expect, explicit_ip, from_pool, is_uuid, link, list_all, make_fip,
                         make_instance, make_pool, make_project, same_ip, wait_run_state,
                         wait_until)


def test_ping_answers_without_authentication(server):
    reply = server.anonymous.get("/v1/ping")
    assert reply.status == 200
    assert reply.body == {"status": "ok"}


def test_first_start_creates_data_dir_and_admin_token(start_server, tmp_path):
    # As a user's first start: nothing at the data dir nor above it, and no database (not the
    # harness's migrated copy): the server makes the directories, migrates and bootstraps.
    data_dir = tmp_path / "new" / "data"
    server = start_server(data_dir=data_dir, migrated=False)
    assert server.data_dir.is_dir()
    text = (server.data_dir / "admin-token").read_text()
    assert re.fullmatch(r"\S+\n", text), f"admin-token must be the token then a newline: {text!r}"
    assert server.admin.get("/v1/system/ip-pools").status == 200


def test_default_silo_exists_on_first_start(server):
    silo = expect(server.admin.get("/v1/system/silos/default"), 200)
    assert silo["name"] == "default"


def test_restart_keeps_data_and_token(server):
    token_file = server.data_dir / "admin-token"
    token_text = token_file.read_text()
    project = make_project(server.admin, "survivor")
    make_pool(server.admin, "kept-pool", "192.0.2.1", "192.0.2.10")
    link(server.admin, "kept-pool", default=True)
    fip = make_fip(server.admin, "survivor", "kept-fip", explicit_ip("192.0.2.1"))

    server.restart()

    assert token_file.read_text() == token_text
    assert expect(server.admin.get("/v1/projects/survivor"), 200)["id"] == project["id"]
    assert expect(server.admin.get(f"/v1/projects/{project['id']}"), 200)["name"] == "survivor"
    kept = expect(server.admin.get(f"/v1/floating-ips/{fip['id']}"), 200)
    assert kept == fip
    # Allocation state survived too: the next address is not the one already held.
    after = make_fip(server.admin, "survivor", "after-restart", from_pool("kept-pool"))
    assert same_ip(after["ip"], "192.0.2.2")


@pytest.mark.sqlite_only("the SQLite database lives in the data dir, so a missing token file "
                        "there was lost; on PostgreSQL see test_configuration.py")
def test_lost_admin_token_file_is_replaced_on_the_next_start(server):
    """README: "if that file is lost, the next start mints a replacement token"."""
    token_file = server.data_dir / "admin-token"
    lost = token_file.read_text()
    project = make_project(server.admin, "before-the-loss")
    assert server.stop() == 0
    token_file.unlink()

    server.start()  # fails if no admin-token file appears

    replacement = token_file.read_text()
    assert re.fullmatch(r"\S+\n", replacement), replacement
    assert replacement != lost, "a replacement is a new token"
    assert server.admin_token == replacement.strip()
    # A fleet admin's token on the same data.
    assert expect(server.admin.get("/v1/projects/before-the-loss"), 200)["id"] == project["id"]
    assert server.admin.get("/v1/system/ip-pools").status == 200
    server.wait_for_log(lambda r: r.get("level") == "warn" and "admin-token" in r.get("msg", ""))
    # Minted once: the start after that keeps it.
    server.restart()
    assert token_file.read_text() == replacement


def test_the_coordinator_id_is_kept_across_restarts_unless_given(server):
    """README: the server keeps its saga coordinator id in DIR/coordinator-id, made on first
    start, so that a restart is the same coordinator; --coordinator-id overrides it."""
    id_file = server.data_dir / "coordinator-id"
    first = id_file.read_text()
    assert re.fullmatch(r"\S+\n", first), first
    serving = server.wait_for_log(lambda r: r.get("msg") == "serving")[-1]
    assert serving["coordinator_id"] == first.strip()
    server.restart()
    assert id_file.read_text() == first
    assert server.stop() == 0
    plain = list(server.extra_args)
    server.extra_args = [*plain, "--coordinator-id", "server-b"]
    server.start()
    assert server.wait_for_log(
        lambda r: r.get("msg") == "serving" and r.get("coordinator_id") == "server-b")
    assert id_file.read_text() == first
    # An id the file holds that a task lease's holder name could not carry (an operator's
    # edit: '@' and '#' begin a server's process and tenure parts there) stops the start before
    # anything is opened, naming the file; before, the server ran under it. Asked to mint an
    # admin token, it mints none (the token file stays), which it did before the id was read.
    assert server.stop() == 0
    server.extra_args = [*plain, "--mint-admin-token"]
    token = (server.data_dir / "admin-token").read_text()
    id_file.write_text("rack2@nexus\n")
    with pytest.raises(AssertionError, match="server exited with 1 before listening"):
        server.start()
    assert server.wait_for_exit() == 1
    assert server.stderr_path.read_text().strip().splitlines()[-1] == (
        f'floatplane server: cannot keep the coordinator id: {id_file} holds "rack2@nexus", but '
        "a coordinator id may not contain '@', which begins the process part of its task "
        "leases' holder names: write another there, or give one with --coordinator-id")
    assert (server.data_dir / "admin-token").read_text() == token
    # A file saved with a CRLF line end still names the same coordinator.
    server.extra_args = plain
    id_file.write_text(first.strip() + "\r\n")
    server.start()
    assert server.wait_for_log(
        lambda r: r.get("msg") == "serving" and r.get("coordinator_id") == first.strip())


@pytest.mark.engine_independent("the check of --database's SQLite path, before any database")
def test_a_sqlite_database_in_a_missing_directory_is_named_so_not_in_use(floatplane_bin,
                                                                         tmp_path):
    """A SQLite file whose directory does not exist: the server says so and names the
    directory. Before, it said the database was "in use by another floatplane server" (its
    lock file could not be created) and told the operator to stop that server."""
    missing = tmp_path / "no-such-dir"
    result = subprocess.run(
        [str(floatplane_bin), "server", "--migrate-only", "--data-dir", str(tmp_path / "data"),
         "--database", f"sqlite:{missing}/floatplane.db"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines()[-1] == (
        f"floatplane server: the SQLite database (--database) {missing}/floatplane.db: its "
        f"directory {missing} does not exist; create it, or give another path"), result.stderr
    assert not missing.exists()
    assert not (tmp_path / "data").exists(), "a refused start made the data directory"


def test_a_second_server_on_the_same_data_dir_refuses_and_the_first_goes_on(
        server, floatplane_bin, server_database_args):
    """Issue 23 item 6: one server per data directory. The second names the process that holds
    the directory and exits; the first's sagas still run (before, its coordinator id was taken
    over and every saga it started was answered 503)."""
    make_pool(server.admin, "held-pool", "198.51.100.90", "198.51.100.91")
    link(server.admin, "held-pool", default=True)
    instance = make_instance(server.admin, make_project(server.admin, "held")["name"], "vm-1")
    wait_run_state(server.admin, instance["id"], "running")
    second = subprocess.run(
        [str(floatplane_bin), "server", "--dev", "--data-dir", str(server.data_dir),
         "--listen", "127.0.0.1:0", *server_database_args(server.data_dir)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert second.returncode == 1, second
    assert "listening" not in second.stdout
    message = second.stderr.strip().splitlines()[-1]
    assert message.startswith(f"floatplane server: the data directory (--data-dir) "
                              f"{server.data_dir} is in use by another floatplane server: "), message
    assert f"(pid {server.process.pid}: " in message, message
    assert message.endswith("; stop that server first, or give this one another --data-dir"), \
        message
    expect(server.admin.post(f"/v1/instances/{instance['id']}/stop"), 202)
    wait_run_state(server.admin, instance["id"], "stopped")
    assert wait_run_state(server.admin, instance["id"], "stopped")["run_state"] == "stopped"


def test_a_data_dir_held_by_a_killed_server_is_free_at_once(server, engine):
    """The lock is the kernel's: a SIGKILLed server leaves nothing that blocks the next start."""
    make_project(server.admin, "before-kill")
    server.stop(signal.SIGKILL)
    assert (server.data_dir / "floatplane.lock").exists()
    # Task leases give a background task one server at a time on a shared PostgreSQL database
    # (the sled watcher, the NAT repair: held until a clean stop gives them up). On SQLite the
    # server holds its file alone and takes none: renewing them cost an idle server commits.
    [[leases]] = server.sql("SELECT count(*) FROM task_lease")
    assert int(leases) == (0 if engine == "sqlite" else 2)
    server.start()
    listed = {p["name"] for p in expect(server.admin.get("/v1/projects"), 200)["items"]}
    assert "before-kill" in listed


@pytest.mark.postgres_only("task leases are taken on a shared database only")
def test_a_restarted_server_takes_its_task_leases_back_at_once_under_a_new_name(start_server):
    """Each start of a server holds the task leases under a name of its own (coordinator id @
    this process's part), so that a paused former process is fenced, and takes back its former
    process's leases at once instead of waiting for them to run out (here 60 s)."""
    server = start_server(extra_args=["--lease-ttl-ms", "60000"])
    coordinator = (server.data_dir / "coordinator-id").read_text().strip()

    def holders():
        return dict(server.sql("SELECT task, holder FROM task_lease"))

    wait_until(lambda: len(holders()) == 2, what="both task leases held", interval=0.2)
    before = holders()
    assert set(before) == {"sled-watcher", "nat-repair"}, before
    for holder in before.values():
        assert re.fullmatch(re.escape(coordinator) + r"@[0-9a-f]{8}", holder), before
    server.stop(signal.SIGKILL)
    server.start()
    wait_until(lambda: holders().get("sled-watcher") not in (None, before["sled-watcher"]),
               timeout=20, what="the sled-watcher lease taken back",
               describe=lambda: str(holders()), interval=0.2)
    after = holders()["sled-watcher"]
    assert re.fullmatch(re.escape(coordinator) + r"@[0-9a-f]{8}", after), after


def test_restart_twice_on_same_dir(server):
    make_project(server.admin, "first-life")
    server.restart()
    make_project(server.admin, "second-life")
    server.restart()
    listed = {p["name"] for p in expect(server.admin.get("/v1/projects"), 200)["items"]}
    assert {"first-life", "second-life"} <= listed


def _records_for(server, request_id):
    return server.wait_for_log(lambda r: r.get("request_id") == request_id)


def _assert_request_record(record, method, path, status):
    assert record["method"] == method, record
    assert record["path"] == path, record
    assert record["status"] == status, record
    latency = record["latency_ms"]
    assert isinstance(latency, (int, float)) and not isinstance(latency, bool), record
    assert latency >= 0, record
    assert isinstance(record["request_id"], str) and record["request_id"], record


def test_error_response_request_id_matches_its_log_line(server):
    reply = server.admin.get("/v1/projects/no-such-project")
    assert reply.status == 404
    request_id = reply.body["request_id"]
    records = _records_for(server, request_id)
    assert len(records) == 1, f"one log line per request, got {records}"
    _assert_request_record(records[0], "GET", "/v1/projects/no-such-project", 404)


def test_unauthenticated_request_is_logged(server):
    reply = server.anonymous.get("/v1/projects")
    assert reply.status == 401
    records = _records_for(server, reply.body["request_id"])
    assert len(records) == 1, records
    _assert_request_record(records[0], "GET", "/v1/projects", 401)


def test_successful_request_is_logged(server):
    make_project(server.admin, "logged-project")
    records = server.wait_for_log(
        lambda r: r.get("method") == "POST" and r.get("path") == "/v1/projects")
    assert len(records) == 1, records
    _assert_request_record(records[0], "POST", "/v1/projects", 201)


def test_request_ids_are_unique(server):
    ids = {server.admin.get(f"/v1/projects/missing-{i}").body["request_id"] for i in range(5)}
    assert len(ids) == 5


def test_stderr_is_json_lines(server):
    reply = server.admin.get("/v1/projects/absent")
    _records_for(server, reply.body["request_id"])
    for line in server.stderr_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        assert isinstance(record, dict), f"stderr line is not a JSON object: {line!r}"


def test_an_idle_server_with_running_instances_logs_nothing(server):
    """Routine exchanges with the in-process agents are not logged at the default level: once
    its instances run and nothing is asked of it, the server writes no line."""
    admin = server.admin
    make_pool(admin, "quiet-pool", "192.0.2.1", "192.0.2.10")
    link(admin, "quiet-pool", default=True)
    make_project(admin, "quiet")
    instances = [make_instance(admin, "quiet", f"quiet-{i}") for i in range(3)]
    for instance in instances:
        wait_run_state(admin, instance["id"], "running")
    time.sleep(0.5)  # the last state changes are recorded and logged
    before = server.stderr_text()
    time.sleep(2.0)  # 20 watcher passes and the NAT reconciler's tick
    after = server.stderr_text()
    assert after == before, f"an idle server logged:\n{after[len(before):][:2000]}"


def test_sigterm_stops_cleanly(server):
    assert server.stop(signal.SIGTERM) == 0


def test_sigint_stops_cleanly(server):
    assert server.stop(signal.SIGINT) == 0


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_the_moment_it_listens_stops_cleanly(floatplane_bin, tmp_path, stop_signal,
                                                         server_database_args):
    """The signal arrives while the server is still between printing its address and waiting
    for signals: it must stop cleanly, not die of the signal. (A thread started before the
    signals were blocked once took it, killing the process in about half of these starts.)"""
    for attempt in range(8):
        data_dir = tmp_path / f"data-{attempt}"
        process = subprocess.Popen(
            [str(floatplane_bin), "server", "--dev", "--data-dir", str(data_dir),
             "--listen", "127.0.0.1:0", *server_database_args(data_dir)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first_line = process.stdout.readline()
            assert first_line.startswith("listening on "), first_line
            process.send_signal(stop_signal)
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, (
            f"start {attempt}: exit {process.returncode} after {stop_signal.name}\n{stderr[-2000:]}")


def test_sigterm_answers_every_request_it_committed(server):
    """Clients on keep-alive connections create projects while the server is told to stop:
    every project that exists afterwards was acknowledged to its client (a commit whose answer
    is lost would look like a failure to the client, which might then retry it elsewhere)."""
    acked = set()
    started = threading.Event()
    lock = threading.Lock()

    def client(worker):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        headers = {"Authorization": f"Bearer {server.admin_token}",
                   "Content-Type": "application/json"}
        for i in range(100000):
            name = f"k{worker}-{i}"
            try:
                conn.request("POST", "/v1/projects",
                             json.dumps({"name": name, "description": ""}), headers)
                reply = conn.getresponse()
                reply.read()
            except (OSError, http.client.HTTPException):
                return
            if reply.status == 201:
                with lock:
                    acked.add(name)
                    if len(acked) >= 40:
                        started.set()
            if reply.getheader("Connection", "").lower() == "close":
                return

    threads = [threading.Thread(target=client, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    assert started.wait(30), "clients did not get going"
    assert server.stop(signal.SIGTERM) == 0
    for t in threads:
        t.join(30)
    server.start()
    listed = {p["name"] for p in list_all(server.admin, "/v1/projects", limit=1000)}
    committed = {n for n in listed if n.startswith("k")}
    assert committed - acked == set(), "committed but never acknowledged"
    assert acked - committed == set(), "acknowledged but lost"


# -- x-request-id on every response ----------------------------------------------------------

def _raw_exchange(port, data):
    """Sends `data` as is on a fresh connection and reads until the server closes it; returns
    (status, headers with lower-case names, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), f"no HTTP answer to {data[:80]!r}: {head[:200]!r}"
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def _request(method, path, token=None, body=b"", extra=b""):
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    length = f"Content-Length: {len(body)}\r\n".encode() if body else b""
    return (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n".encode() + auth + length + extra +
            b"Connection: close\r\n\r\n" + body)


# (case, raw request given the admin token, expected status). The over-limit bodies and
# headers are refused while the request is read, before any handler runs.
REQUEST_ID_CASES = [
    ("ping", lambda t: _request("GET", "/v1/ping"), 200),
    ("list", lambda t: _request("GET", "/v1/projects", t), 200),
    ("created", lambda t: _request("POST", "/v1/projects", t,
                                   b'{"name":"with-request-id","description":""}'), 201),
    ("deleted", lambda t: _request("DELETE", "/v1/projects/with-request-id", t), 204),
    ("unknown-route", lambda t: _request("GET", "/v1/no-such-thing", t), 404),
    ("missing-resource", lambda t: _request("GET", "/v1/projects/absent", t), 404),
    ("method-not-allowed", lambda t: _request("PATCH", "/v1/projects", t), 405),
    ("no-token", lambda t: _request("GET", "/v1/projects"), 401),
    ("bad-token", lambda t: _request("GET", "/v1/projects", "not-a-token"), 401),
    ("bad-json", lambda t: _request("POST", "/v1/projects", t, b'{"name": '), 400),
    ("malformed-http", lambda t: b"NOT HTTP AT ALL\r\n\r\n", 400),
    ("bad-version", lambda t: b"GET /v1/ping HTTP/9.9\r\n\r\n", 400),
    ("bad-content-length", lambda t: _request("GET", "/v1/ping",
                                              extra=b"Content-Length: 99999999999999999999\r\n"),
     400),
    ("body-over-limit", lambda t: _request("POST", "/v1/projects", t,
                                           extra=b"Content-Length: 2097152\r\n"), 400),
    ("headers-over-limit", lambda t: _request("GET", "/v1/ping",
                                              extra=b"X-Padding: " + b"x" * 20000 + b"\r\n"),
     400),
]


def test_every_response_carries_its_request_id(module_server):
    """README: every response carries the request's id in `x-request-id` (and in error bodies),
    whatever answered it: a handler, the router, authentication or the HTTP reader."""
    seen = set()
    for case, make_request, status in REQUEST_ID_CASES:
        got, headers, body = _raw_exchange(module_server.port,
                                           make_request(module_server.admin_token))
        assert got == status, f"{case}: expected {status}, got {got}: {body[:300]!r}"
        request_id = headers.get("x-request-id")
        assert is_uuid(request_id), f"{case}: x-request-id {request_id!r}, headers {headers}"
        if status >= 400:
            assert json.loads(body)["request_id"] == request_id, f"{case}: {body!r}"
        assert request_id not in seen, f"{case}: request id {request_id} reused"
        seen.add(request_id)
