"""`floatplane server` configuration (issue 12, item 2): --database and the --config file,
flags winning over the file, the engine named in the startup log with no password, what
without --dev is required, and the bootstrap of the first fleet admin token when several
servers share one PostgreSQL database (README "Configuration")."""

import re
import signal
import subprocess
import threading
import time
import urllib.parse

import pytest

from e2e_helpers import expect, wait_until

SECRET = "hunter2-not-for-logs"


def run_server_expecting_failure(floatplane_bin, *args):
    """Runs `floatplane server ARGS` that must refuse to start; returns (code, stderr)."""
    completed = subprocess.run([str(floatplane_bin), "server", *args], capture_output=True,
                               text=True, timeout=30, stdin=subprocess.DEVNULL, check=False)
    return completed.returncode, completed.stderr


def test_startup_log_names_the_engine(server, engine):
    [record] = server.wait_for_log(lambda r: r.get("msg") == "datastore open")
    assert record["engine"] == engine, record
    if engine == "sqlite":
        assert record["database"] == f"sqlite {server.data_dir / 'floatplane.db'}", record
    else:
        assert record["database"].startswith("postgres postgresql://"), record


def test_config_file_names_the_agents_and_flags_win(start_agent, start_server, tmp_path):
    from_file = start_agent("switch")
    from_flag = start_agent("switch")
    sleds = [start_agent("sled"), start_agent("sled")]
    config = tmp_path / "floatplane.toml"
    config.write_text(
        "# a floatplane server's settings\n"
        "[server]\n"
        f'switch-agent = "{from_file.url}"\n'
        f'sled-agent = ["{sleds[0].url}", "{sleds[1].url}"]\n'
        'agent-timeout-ms = 3000\n')
    server = start_server(extra_args=["--config", str(config), "--switch-agent", from_flag.url])

    [record] = server.wait_for_log(lambda r: r.get("msg") == "agents")
    assert record["switch_agents"] == [from_flag.url], record
    assert record["in_process"] is False and record["sled_agents"] == 2, record
    serials = {s["baseboard"]["serial"]
               for s in expect(server.admin.get("/v1/system/hardware/sleds"), 200)["items"]}
    assert serials == {sleds[0].url, sleds[1].url}


def test_a_production_server_runs_from_a_config_file_alone(start_agent, start_server,
                                                           server_database_args, tmp_path):
    """Without --dev: database and agents from the file; it bootstraps the database too."""
    switch = start_agent("switch")
    sled = start_agent("sled")
    data_dir = tmp_path / "prod-data"
    database = server_database_args(data_dir)
    database_url = database[1] if database else f"sqlite:{tmp_path / 'prod.db'}"
    config = tmp_path / "floatplane.toml"
    config.write_text("[server]\n"
                      f'database = "{database_url}"\n'
                      f'switch-agent = "{switch.url}"\n'
                      f'sled-agent = ["{sled.url}"]\n')
    server = start_server(data_dir=data_dir, dev=False, extra_args=["--config", str(config)])
    expect(server.admin.get("/v1/system/silos/default"), 200)
    [record] = server.wait_for_log(lambda r: r.get("msg") == "datastore open")
    if not database:
        assert record["database"] == f"sqlite {tmp_path / 'prod.db'}", record
        assert (tmp_path / "prod.db").is_file()
        assert not (data_dir / "floatplane.db").exists()


@pytest.mark.parametrize("args, named", [
    ([], "--database"),
    (["--database", "sqlite:DIR/x.db"], "--switch-agent"),
    (["--database", "sqlite:DIR/x.db", "--switch-agent", "http://127.0.0.1:1"], "--sled-agent"),
])
def test_without_dev_the_database_and_agents_are_required(floatplane_bin, tmp_path, args, named):
    args = [a.replace("DIR", str(tmp_path)) for a in args]
    code, stderr = run_server_expecting_failure(
        floatplane_bin, "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", *args)
    assert code == 2, stderr
    assert named in stderr and "--dev" in stderr, stderr


@pytest.mark.engine_independent("the check of --listen, before any database")
@pytest.mark.parametrize("listen, problem", [
    ("127.0.0.1:99999", "the port must be a number from 0 to 65535"),
    ("localhost:12220", "the host must be an IPv4 or IPv6 address, e.g. 127.0.0.1:12220 or "
                        "[::1]:12220"),
])
def test_a_bad_listen_address_is_refused_naming_the_flag_once(floatplane_bin, tmp_path, listen,
                                                              problem):
    """Before, the server prefixed the flag to a message that named it already ("--listen:
    --listen ..."), and a host name was refused only when binding, without naming the flag."""
    code, stderr = run_server_expecting_failure(
        floatplane_bin, "--dev", "--data-dir", str(tmp_path / "d"), "--listen", listen)
    assert code == 2, stderr
    assert stderr.strip().splitlines()[-1] == \
        f'floatplane server: --listen "{listen}": {problem}', stderr
    assert not (tmp_path / "d").exists()


def test_migrate_only_brings_the_schema_up_and_nothing_else(floatplane_bin, start_server,
                                                            server_database_args, tmp_path):
    """`server --migrate-only`, a deployment's schema step: it needs the database alone (no
    agents, no secret, no data directory: run from a directory of its own without --data-dir it
    leaves nothing there), prints the schema version and exits, bootstrapping nothing and
    listening on nothing; the first server started on the database afterwards bootstraps it."""
    data_dir = tmp_path / "migrated"
    database = server_database_args(data_dir, migrated=False)
    if not database:  # SQLite: the file of the server started on data_dir below
        data_dir.mkdir()
        database = ["--database", f"sqlite:{data_dir / 'floatplane.db'}"]
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    done = subprocess.run([str(floatplane_bin), "server", "--migrate-only", *database],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          check=False, cwd=deploy)
    assert done.returncode == 0, done.stderr
    match = re.fullmatch(r"schema at version (\d+): (sqlite|postgres) .*\n", done.stdout)
    assert match, done.stdout
    assert list(deploy.iterdir()) == []
    assert not (data_dir / "admin-token").exists()

    server = start_server(data_dir=data_dir, start=False)
    [[version]] = server.sql("SELECT max(version) FROM schema_version")
    assert int(version) == int(match.group(1))
    [[silos]] = server.sql("SELECT count(*) FROM silo")
    assert int(silos) == 0
    server.start()
    expect(server.admin.get("/v1/system/silos/default"), 200)


@pytest.mark.sqlite_only("a SQLite file of its own in the data directory")
def test_migrate_only_makes_the_data_directory_a_sqlite_file_of_it_is_in(floatplane_bin,
                                                                         tmp_path):
    """A SQLite file named in a data directory that does not exist yet: the migration makes the
    directory, as a start does (only a migration of another database leaves none)."""
    data_dir = tmp_path / "fresh"
    done = subprocess.run([str(floatplane_bin), "server", "--migrate-only", "--data-dir",
                           str(data_dir), "--database", f"sqlite:{data_dir / 'other.db'}"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (data_dir / "other.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh"]


@pytest.mark.postgres_only("another server's migration holds PostgreSQL's schema lock")
def test_a_stop_signal_ends_a_migration_that_waits_instead_of_waiting_with_it(
        floatplane_bin, server_database_args, tmp_path):
    """Ctrl-C during the schema migration stops it then, not when the migration ends (which may
    take minutes: a table copied, or here another server's migration to wait out): the wait is
    cancelled, the process says so and ends by the signal (130 in a shell), nothing of the
    migration is applied, and the next run migrates."""
    import psycopg2  # pylint: disable=import-outside-toplevel
    data_dir = tmp_path / "interrupted"
    database = server_database_args(data_dir, migrated=False)
    url = database[1]
    # Another server migrating: it holds the schema lock (db/schema_postgres.cc) in a transaction.
    holder = psycopg2.connect(url)
    watcher = psycopg2.connect(url)
    watcher.autocommit = True
    migrating = None
    try:
        holder.cursor().execute("SELECT pg_advisory_xact_lock(7236828283516204641)")
        migrating = subprocess.Popen(
            [str(floatplane_bin), "server", "--migrate-only", "--data-dir", str(data_dir),
             *database], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

        def waits_for_the_lock():
            with watcher.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                               "NOT granted AND database = (SELECT oid FROM pg_database WHERE "
                               "datname = current_database())")
                return cursor.fetchone()[0] == 1
        wait_until(waits_for_the_lock, timeout=20, what="the migration waiting for the lock")
        migrating.send_signal(signal.SIGINT)
        try:
            _, stderr = migrating.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGINT did not end the migration waiting for the schema lock")
        assert migrating.returncode == -signal.SIGINT, stderr
        assert stderr == (
            f"floatplane server: stopped by SIGINT: cannot open the database postgres {url} "
            "(--database): interrupted while migrating the schema: none of this start's "
            "migrations was applied; the next start migrates again\n")
        with watcher.cursor() as cursor:
            cursor.execute("SELECT to_regclass('schema_version') IS NULL")
            assert cursor.fetchone()[0], "the interrupted migration left its tables"
    finally:
        if migrating is not None and migrating.poll() is None:
            migrating.kill()
            migrating.communicate()
        holder.close()  # the lock goes with it
        watcher.close()
    done = subprocess.run([str(floatplane_bin), "server", "--migrate-only", "--data-dir",
                           str(data_dir), *database], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("schema at version "), done.stdout


@pytest.mark.postgres_only("the PostgreSQL connection pool")
def test_the_postgres_pool_size_bounds_the_transactions_a_server_runs_at_once(
        start_server, server_database_args):
    """--postgres-pool-size N: the server runs at most N transactions at once on the database,
    the others wait for a connection in the server. Here 2: sixteen project creations at once
    while the test holds the project table, so that each one that reaches the database waits
    there for the table; two wait in the database (sixteen with the default), then all finish."""
    import psycopg2  # pylint: disable=import-outside-toplevel
    server = start_server(extra_args=["--postgres-pool-size", "2"])
    url = server_database_args(server.data_dir)[1]  # the server's own database
    holder = psycopg2.connect(url)
    watcher = psycopg2.connect(url)
    watcher.autocommit = True
    burst = []
    try:
        holder.cursor().execute("LOCK TABLE project IN EXCLUSIVE MODE")

        def create(n):
            expect(server.admin.post("/v1/projects", {"name": f"burst-{n}", "description": ""}),
                   201)
        burst = [threading.Thread(target=create, args=(n,)) for n in range(16)]
        for thread in burst:
            thread.start()

        def waiting_for_the_table():
            with watcher.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE relation = 'project'::regclass "
                               "AND NOT granted")
                return cursor.fetchone()[0]
        wait_until(lambda: waiting_for_the_table() >= 2, timeout=10,
                   what="two creations waiting for the table")
        # An absence (no third waiter) can only be watched for a while: half a second, where
        # the other fourteen need milliseconds when the pool lets them through (with the
        # default size all sixteen wait there).
        time.sleep(0.5)
        assert waiting_for_the_table() == 2
    finally:
        holder.close()  # the table goes free: the creations finish
        for thread in burst:
            thread.join()
        watcher.close()
    [[projects]] = server.sql("SELECT count(*) FROM project WHERE name LIKE 'burst-%'")
    assert int(projects) == 16


@pytest.mark.parametrize("config_text, named", [
    ("[server]\ndatabse = \"sqlite:x.db\"\n", "server.databse"),
    ("database = \"sqlite:x.db\"\n", "database"),
    ("[server]\nagent-timeout-ms = 5\n", "--agent-timeout-ms"),
])
def test_a_bad_config_file_is_refused_naming_the_key(floatplane_bin, tmp_path, config_text,
                                                     named):
    config = tmp_path / "bad.toml"
    config.write_text(config_text)
    code, stderr = run_server_expecting_failure(floatplane_bin, "--dev", "--config", str(config),
                                                "--data-dir", str(tmp_path / "d"))
    assert code != 0, stderr
    assert named in stderr, stderr


@pytest.mark.parametrize("url, code, shown", [
    # Not a database URL: a usage error.
    (f"mysql://fp:{SECRET}@127.0.0.1/fp", 2, "mysql://fp:redacted@127.0.0.1/fp"),
    # Nothing listens on port 1 of loopback: the start fails.
    (f"postgresql://fp:{SECRET}@127.0.0.1:1/fp?connect_timeout=2", 1,
     "postgresql://fp:redacted@127.0.0.1:1/fp?connect_timeout=2"),
])
def test_a_database_that_cannot_be_used_is_named_without_its_password(floatplane_bin, tmp_path,
                                                                      url, code, shown):
    got, stderr = run_server_expecting_failure(
        floatplane_bin, "--dev", "--data-dir", str(tmp_path / "d"), "--database", url)
    assert got == code, stderr
    assert "--database" in stderr and shown in stderr, stderr
    assert SECRET not in stderr


def test_mint_admin_token_mints_a_new_working_token(server):
    old = server.admin_token
    server.extra_args = ["--mint-admin-token"]
    server.restart()
    assert server.admin_token != old
    assert server.admin.get("/v1/system/ip-pools").status == 200
    assert server.client(old).get("/v1/system/ip-pools").status == 200, "the old one still works"
    server.wait_for_log(lambda r: r.get("level") == "warn"
                        and "--mint-admin-token" in r.get("msg", ""))


# -- several servers on one PostgreSQL database ----------------------------------------------

def with_password(url, password):
    parts = urllib.parse.urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


@pytest.mark.postgres_only("a URL with a password")
def test_the_database_password_is_never_logged(start_server, server_database_args, tmp_path):
    data_dir = tmp_path / "secret-data"
    plain = server_database_args(data_dir)[1]
    url = with_password(plain, SECRET)  # the test cluster trusts loopback: libpq never sends it
    server = start_server(data_dir=data_dir, extra_args=["--database", url])
    expect(server.admin.get("/v1/system/silos/default"), 200)
    [record] = server.wait_for_log(lambda r: r.get("msg") == "datastore open")
    assert record["engine"] == "postgres", record
    assert record["database"] == "postgres " + with_password(plain, "redacted"), record
    server.stop()
    output = server.stderr_text() + "\n".join(server.stdout_lines)
    assert SECRET not in output


def bootstrap_records(server):
    return [r for r in server.log_records() if r.get("msg", "").startswith("bootstrapped")]


@pytest.mark.postgres_only("servers sharing one database")
def test_servers_starting_together_on_one_database_mint_one_admin_token(start_server):
    first = start_server(start=False)
    servers = [first] + [start_server(database_of=first, start=False) for _ in range(2)]
    errors = []

    def start(server):
        try:
            server.start(require_token=False)
        except AssertionError as error:
            errors.append(str(error))

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, "\n\n".join(errors)

    holders = [s for s in servers if (s.data_dir / "admin-token").is_file()]
    assert len(holders) == 1, [str(s.data_dir) for s in holders]
    assert sum(len(bootstrap_records(s)) for s in servers) == 1
    token = (holders[0].data_dir / "admin-token").read_text().strip()
    for s in servers:
        assert s.client(token).get("/v1/system/ip-pools").status == 200
        if s is not holders[0]:
            s.wait_for_log(lambda r: "bootstrapped by another server" in r.get("msg", ""))


@pytest.mark.postgres_only("servers sharing one database")
def test_a_later_server_on_a_bootstrapped_database_mints_nothing(start_server):
    first = start_server()
    second = start_server(database_of=first)
    assert not (second.data_dir / "admin-token").exists()
    assert bootstrap_records(second) == []
    second.wait_for_log(lambda r: "bootstrapped by another server" in r.get("msg", ""))
    # One database: what one server writes, the other reads.
    expect(first.admin.post("/v1/projects", {"name": "shared", "description": ""}), 201)
    assert expect(second.admin.get("/v1/projects/shared"), 200)["name"] == "shared"


@pytest.mark.postgres_only("on SQLite a lost token file is replaced (test_dev_server.py)")
def test_a_lost_admin_token_file_is_not_replaced_silently_on_postgres(server):
    token_file = server.data_dir / "admin-token"
    old = server.admin_token
    assert server.stop() == 0
    token_file.unlink()

    server.start(require_token=False)
    assert not token_file.exists()
    server.wait_for_log(lambda r: "--mint-admin-token" in r.get("msg", ""))
    assert server.client(old).get("/v1/system/ip-pools").status == 200

    assert server.stop() == 0
    server.extra_args = ["--mint-admin-token"]
    server.start()
    assert server.admin_token != old
    assert server.admin.get("/v1/system/ip-pools").status == 200
