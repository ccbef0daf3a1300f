"""The command-line client (issue 14): the real binary against a real `floatplane server --dev`
on a temporary directory and port. Each case's command, exit code, stdout and stderr are
compared with a golden file in cli_golden/ (UUIDs, times, ports, tokens and paths replaced by
placeholders); FLOATPLANE_UPDATE_GOLDEN=1 rewrites them. Deliberately short: one file per
behaviour a user relies on."""

import json
import os
import re
import shlex
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from e2e_helpers import QUIET_SWITCH, agent_request, wait_switches_checked

pytestmark = pytest.mark.engine_independent(
    "the CLI's output and exit codes; the API answers it reads are checked on both engines by "
    "the API's own modules")

GOLDEN = Path(__file__).resolve().parent / "cli_golden"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
TOKEN = re.compile(r"fpt_[0-9a-f]{64}")


class Cli:
    """Runs `floatplane` as a user would, with a config directory of its own."""

    def __init__(self, binary, tmp_path, server):
        self.binary = str(binary)
        self.server = server
        self.config_dir = tmp_path / "oxide-config"
        self.tmp_path = tmp_path
        self.host = f"http://127.0.0.1:{server.port}" if server else None
        self.transcript = []

    def run(self, *args, env=None, stdin=None, record=True):
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("OXIDE_")}
        full_env["HOME"] = str(self.tmp_path / "home")
        full_env.pop("FLOATPLANE_FORMAT", None)
        full_env.update(env or {})
        argv = [self.binary, "--config-dir", str(self.config_dir), *args]
        done = subprocess.run(argv, capture_output=True, text=True, input=stdin, env=full_env,
                              timeout=60)
        if record:
            shown = " ".join(shlex.quote(a) for a in args)
            self.transcript.append(f"$ floatplane {shown}\n--- exit {done.returncode}\n"
                                   f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")
        return done

    def login(self):
        done = self.run("auth", "login", "--host", self.host, "--token-file",
                        str(self.server.data_dir / "admin-token"))
        assert done.returncode == 0, done.stderr
        return done

    def normalized(self):
        text = "\n".join(self.transcript)
        ids = {}

        def uuid(match):
            return ids.setdefault(match.group(0), f"<UUID-{len(ids) + 1}>")

        text = UUID.sub(uuid, text)
        text = TIME.sub("<TIME>", text)
        text = TOKEN.sub("<TOKEN>", text)
        if self.server:
            text = text.replace(str(self.server.port), "<PORT>")
        text = text.replace(str(self.tmp_path), "<TMP>")
        text = re.sub(r"request id <UUID-\d+>", "request id <REQUEST-ID>", text)
        return text

    def check_golden(self, name):
        path = GOLDEN / f"{name}.txt"
        text = self.normalized()
        if os.environ.get("FLOATPLANE_UPDATE_GOLDEN") == "1":
            path.write_text(text)
        assert path.exists(), f"no golden file {path}; run with FLOATPLANE_UPDATE_GOLDEN=1"
        assert text == path.read_text(), f"differs from {path}:\n{text}"


def prepare(cli):
    """Logged in, with a default pool for the silo (instances need one for SNAT) and a project
    `web`, none of it in the transcript."""
    cli.login()
    cli.transcript.clear()
    for args in (["system", "networking", "ip-pool", "create", "--name", "p", "--description", ""],
                 ["system", "networking", "ip-pool", "range", "add", "--pool", "p", "--first",
                  "10.0.0.1", "--last", "10.0.0.9"],
                 ["system", "networking", "ip-pool", "silo", "link", "--pool", "p", "--silo",
                  "default", "--is-default", "true"],
                 ["project", "create", "--name", "web", "--description", ""]):
        done = cli.run(*args, record=False)
        assert done.returncode == 0, (args, done.stderr)


@pytest.fixture
def cli(floatplane_bin, start_server, tmp_path):
    return Cli(floatplane_bin, tmp_path, start_server())


def test_a_tour_from_login_to_an_attached_floating_ip(cli):
    cli.login()
    cli.run("system", "networking", "ip-pool", "create", "--name", "public", "--description",
            "rack uplink")
    cli.run("system", "networking", "ip-pool", "range", "add", "--pool", "public", "--first",
            "203.0.113.10", "--last", "203.0.113.20")
    cli.run("system", "networking", "ip-pool", "silo", "link", "--pool", "public", "--silo",
            "default", "--is-default", "true")
    cli.run("project", "create", "--name", "web", "--description", "web tier")
    cli.run("instance", "create", "--project", "web", "--name", "www-1", "--description", "",
            "--hostname", "www-1", "--memory", "1g", "--ncpus", "1", "--wait", "--quiet",
            "--format", "table:name,run_state")
    cli.run("floating-ip", "create", "--project", "web", "--name", "www", "--description",
            "public entry", "--pool", "public")
    cli.run("floating-ip", "attach", "--project", "web", "--floating-ip", "www", "--instance",
            "www-1")
    # An action prints with its list's columns (the instance by name; issue 23 item 8).
    for action in ("detach", "attach"):
        cli.run("floating-ip", action, "--project", "web", "--floating-ip", "www", "--quiet",
                "--format", "table:name,instance",
                *(["--instance", "www-1"] if action == "attach" else []))
    cli.run("instance", "update", "--project", "web", "--instance", "www-1", "--ncpus", "2",
            "--format", "table:name,ncpus,memory")
    cli.run("instance", "stop", "--project", "web", "--instance", "www-1", "--wait", "--quiet",
            "--format", "table:name,run_state")
    cli.run("instance", "update", "--project", "web", "--instance", "www-1", "--ncpus", "2",
            "--format", "table:name,ncpus,memory")
    cli.run("instance", "start", "--project", "web", "--instance", "www-1", "--wait", "--quiet",
            "--format", "table:name,run_state")
    cli.run("floating-ip", "list", "--project", "web", "--format", "table")
    cli.run("instance", "external-ip", "list", "--project", "web", "--instance", "www-1",
            "--format", "table")
    cli.check_golden("tour")


def test_lists_stream_as_the_oxide_cli_prints_them_and_limit_caps_them(cli):
    cli.login()
    for name in ("alpha", "beta", "gamma"):
        assert cli.run("project", "create", "--name", name, "--description", name,
                       record=False).returncode == 0
    cli.run("project", "list", "--sort-by", "name_ascending", "--limit", "2")
    cli.run("project", "list", "--format", "table:name,description", "--no-header")
    cli.run("project", "list", "--format", "table:name,nope")
    cli.check_golden("lists")


def test_a_refused_attach_names_the_holder_on_one_line(cli):
    prepare(cli)
    for args in (["instance", "create", "--project", "web", "--name", "a", "--description", "",
                  "--hostname", "a", "--memory", "1g", "--ncpus", "1", "--wait"],
                 ["instance", "create", "--project", "web", "--name", "b", "--description", "",
                  "--hostname", "b", "--memory", "1g", "--ncpus", "1", "--wait"],
                 ["floating-ip", "create", "--project", "web", "--name", "www", "--description",
                  ""],
                 ["floating-ip", "attach", "--project", "web", "--floating-ip", "www",
                  "--instance", "a"]):
        done = cli.run(*args, record=False)
        assert done.returncode == 0, (args, done.stderr)
    done = cli.run("floating-ip", "attach", "--project", "web", "--floating-ip", "www",
                   "--instance", "b")
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    # What the error suggests: the move in one step.
    done = cli.run("floating-ip", "attach", "--project", "web", "--floating-ip", "www",
                   "--instance", "b", "--allow-reassociation")
    assert done.returncode == 0, done.stderr
    b = json.loads(cli.run("instance", "view", "--project", "web", "--instance", "b",
                           record=False).stdout)
    assert json.loads(done.stdout)["instance_id"] == b["id"]
    cli.check_golden("refused_attach")


def test_the_audit_log_says_who_did_what_in_a_table(cli):
    cli.login()
    cli.transcript.clear()
    assert cli.run("project", "create", "--name", "web", "--description", "",
                   record=False).returncode == 0
    assert cli.run("project", "create", "--name", "web", "--description", "",
                   record=False).returncode == 1
    cli.run("audit-log", "list", "--format", "table:operation_id,result,source_ip,error_message")
    cli.run("audit-log", "list", "--start-time", "yesterday")
    cli.check_golden("audit_log")


def test_a_failed_attach_is_explained_from_the_cli_alone(floatplane_bin, start_server, tmp_path,
                                                        agent_secret_path):
    # Issue 23 item 3: the error names a request id; the saga list finds the saga by it, and
    # the saga's view says which node failed and why.
    server = start_server(extra_args=["--enable-test-faults", *QUIET_SWITCH])
    wait_switches_checked(server)
    cli = Cli(floatplane_bin, tmp_path, server)
    prepare(cli)
    for args in (["instance", "create", "--project", "web", "--name", "vm", "--description", "",
                  "--hostname", "vm", "--memory", "1g", "--ncpus", "1", "--wait"],
                 ["floating-ip", "create", "--project", "web", "--name", "www", "--description",
                  ""]):
        assert cli.run(*args, record=False).returncode == 0, args
    [dataplane] = server.wait_for_log(lambda r: r.get("msg") == "agents")
    for url in dataplane["switch_agents"]:  # the dev server's in-process switches
        # The attach's push and its undo's.
        agent_request(url, "/faults", agent_secret_path, method="POST",
                      body={"endpoint": "POST /nat/changes", "fail_next": 2})
    failed = cli.run("floating-ip", "attach", "--project", "web", "--floating-ip", "www",
                     "--instance", "vm")
    assert failed.returncode == 1, failed
    request_id = re.search(r"request id (\S+)\)$", failed.stderr.strip()).group(1)

    found = cli.run("system", "saga", "list", "--request-id", request_id)
    assert found.returncode == 0, found.stderr
    [saga] = json.loads(found.stdout)
    assert (saga["name"], saga["state"], saga["request_id"]) == ("ip_attach", "unwound",
                                                                 request_id)
    unwound = json.loads(cli.run("system", "saga", "list", "--state", "unwound").stdout)
    assert [s["id"] for s in unwound] == [saga["id"]]

    shown = cli.run("system", "saga", "view", "--saga-id", saga["id"], "--format", "table")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f'saga {saga["id"]} (ip_attach): unwound: node "dataplane" '
                               f'failed: switch agent at '), lines[0]
    assert 'injected fault: fail_next on "POST /nat/changes"' in lines[0]
    assert lines[1].startswith("started ") and f"by request {request_id}" in lines[1]
    assert re.fullmatch(r"acts on floating IP www \(10\.0\.0\.\d\), instance vm", lines[2]), lines
    outcomes = [line.split()[:3] for line in lines[4:]]
    assert outcomes == [["0", "begin", "undone"], ["1", "dataplane", "failed"],
                        ["2", "complete", "pending"]], lines
    story = json.loads(cli.run("system", "saga", "view", "--saga-id", saga["id"]).stdout)
    assert story["origin"]["request_id"] == request_id
    assert story["origin"]["operation_id"] == "floating_ip_attach"
    assert story["error"]["http_status_code"] == 503


def test_floatplane_alone_help_and_version_answer_without_an_error(cli):
    for words in ([], ["help"], ["--help"]):
        shown = cli.run(*words, record=False)
        assert shown.returncode == 0, (words, shown)
        assert "Subcommands:" in shown.stdout and "floating-ip" in shown.stdout, shown.stdout
        # The program's name, not the path it was run by nor nothing (before: "Usage: [OPTIONS]"
        # alone, "Usage: /usr/.../floatplane instance create" after a parse).
        assert "\nUsage: floatplane [OPTIONS] SUBCOMMAND\n" in shown.stdout, shown.stdout
        assert shown.stderr == ""
    helped = cli.run("help", "instance", "create", record=False)
    assert helped.returncode == 0 and "--ncpus" in helped.stdout, helped
    assert "\nUsage: floatplane instance create [OPTIONS]" in helped.stdout, helped.stdout
    version = cli.run("--version", record=False)
    assert version.returncode == 0, version
    assert version.stdout == cli.run("version", record=False).stdout
    assert version.stdout.startswith("floatplane "), version.stdout


def test_usage_errors_are_found_before_any_request(cli):
    # OXIDE_HOST points at a closed port: a request would exit 4, not 2.
    closed = {"OXIDE_HOST": "http://127.0.0.1:1", "OXIDE_TOKEN": "x"}
    cli.run("project", "create", "--name", "Web", "--description", "", env=closed)
    cli.run("floating-ip", "view", "--floating-ip", "www", env=closed)
    cli.run("floating-ip", "create", "--project", "web", "--name", "www", "--description", "",
            "--ip", "10.0.0.1", "--ip-version", "v4", env=closed)
    cli.run("system", "networking", "ip-pool", "range", "add", "--pool", "p", "--first",
            "10.0.0.1", "--last", "::1", env=closed)
    cli.run("instance", "start", "--project", "web", "--instance", "a", "--wait",
            "--wait-timeout", "soon", env=closed)
    cli.run("project", "lst", env=closed)
    # A misspelt flag is named, with the closest one (not reported as another one missing).
    cli.run("floating-ip", "list", "--projet", "web", env=closed)
    # A table column the answer will not have: refused before the create, not after it.
    cli.run("project", "create", "--name", "web", "--description", "", "--format", "table:nmae",
            env=closed)
    cli.run("floating-ip", "attach", "--project", "web", "--floating-ip", "www", "--instance",
            "a", "--format", "table:name,pool_id", env=closed)
    # Issue 23 item 8: numbers and ranges in the user's terms (not CLI11's float limits, not
    # the server's "unable to parse JSON body").
    cli.run("instance", "create", "--project", "web", "--name", "a", "--description", "",
            "--hostname", "a", "--memory", "1g", "--ncpus", "0", env=closed)
    cli.run("project", "list", "--limit", "0", env=closed)
    cli.run("project", "list", "--timeout", "0", env=closed)
    cli.run("system", "networking", "ip-pool", "range", "add", "--pool", "p", "--first",
            "10.0.0.9", "--last", "10.0.0.1", env=closed)
    for entry in cli.transcript:
        assert "--- exit 2\n" in entry, entry
    cli.check_golden("usage_errors")


def test_credentials_missing_or_conflicting_exit_3_and_an_unreachable_server_exits_4(cli):
    cli.run("project", "list")
    cli.run("project", "list", env={"OXIDE_TOKEN": "x"})
    cli.run("project", "list", env={"OXIDE_HOST": "http://127.0.0.1:1", "OXIDE_PROFILE": "p"})
    cli.run("ping", env={"OXIDE_HOST": "http://127.0.0.1:1", "OXIDE_TOKEN": "x"})
    # A list whose first request found no server prints nothing on stdout: "[]" would read as
    # "there are none".
    down = cli.run("project", "list", env={"OXIDE_HOST": "http://127.0.0.1:1", "OXIDE_TOKEN": "x"})
    assert down.stdout == "" and down.returncode == 4, down
    codes = [int(re.search(r"--- exit (\d+)", e).group(1)) for e in cli.transcript]
    assert codes == [3, 3, 3, 4, 4]
    cli.check_golden("credentials_and_unreachable")


def test_a_wait_that_times_out_exits_5_naming_the_last_state(cli):
    cli.login()
    prepare(cli)
    cli.run("instance", "create", "--project", "web", "--name", "idle", "--description", "",
            "--hostname", "idle", "--memory", "1g", "--ncpus", "1", "--start", "false", "--wait",
            "--quiet", "--format", "table:name,run_state")
    # Issue 23 item 8: its flag is --wait-timeout, as on every --wait, and as the error says;
    # --timeout is one request's deadline (seconds) everywhere.
    cli.run("instance", "wait", "--project", "web", "--instance", "idle", "--state", "running",
            "--wait-timeout", "1s")
    assert "--- exit 5\n" in cli.transcript[-1]
    cli.check_golden("wait_timeout")


def test_credentials_are_written_as_the_oxide_cli_writes_them(cli):
    done = cli.login()
    assert done.stdout.endswith("Profile 'default' set as the default\n")
    credentials = cli.config_dir / "credentials.toml"
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    token = (cli.server.data_dir / "admin-token").read_text().strip()
    me = json.loads(cli.run("api", "/v1/me", record=False).stdout)
    assert credentials.read_text() == (f'[profile.default]\nhost = "{cli.host}"\n'
                                       f'token = "{token}"\nuser = "{me["id"]}"\n')
    assert (cli.config_dir / "config.toml").read_text() == 'default-profile = "default"\n'
    # A second login of the same silo gets the next name and leaves the default alone.
    again = cli.login()
    assert again.stdout.endswith("Use --profile 'default2'\n")
    assert credentials.read_text().count("[profile.") == 2
    # A file others may read is warned about, as the oxide CLI does.
    credentials.chmod(0o644)
    warned = cli.run("auth", "status", record=False)
    assert warned.stderr == (f'WARNING: 644 permissions on "{credentials}" may allow other users '
                             "to access your login credentials.\n")
    assert warned.stdout == (f'Profile "default" ({cli.host}) status: Authenticated\n'
                             f'Profile "default2" ({cli.host}) status: Authenticated\n')
    # The token is never read from the command line.
    assert cli.run("auth", "login", "--host", cli.host, "--token", token,
                   record=False).returncode == 2


def test_every_mutation_sends_an_idempotency_key_that_a_retry_reuses(cli):
    cli.login()
    cli.run("project", "create", "--name", "web", "--description", "", record=False)
    first = cli.run("project", "create", "--name", "app", "--description", "",
                    "--idempotency-key", "k-1", record=False)
    again = cli.run("project", "create", "--name", "app", "--description", "",
                    "--idempotency-key", "k-1", record=False)
    assert first.returncode == 0 and again.returncode == 0, again.stderr
    assert json.loads(first.stdout)["id"] == json.loads(again.stdout)["id"]
    fresh = cli.run("project", "create", "--name", "app", "--description", "", record=False)
    assert fresh.returncode == 1
    assert "already exists" in fresh.stderr


def test_progress_on_a_terminal_is_one_line_updated_in_place(cli):
    prepare(cli)
    cli.run("instance", "create", "--project", "web", "--name", "tty", "--description", "",
            "--hostname", "tty", "--memory", "1g", "--ncpus", "1", "--start", "false",
            record=False)
    command = " ".join(shlex.quote(a) for a in [
        cli.binary, "--config-dir", str(cli.config_dir), "instance", "start", "--project", "web",
        "--instance", "tty", "--wait", "--format", "table:name,run_state"])
    done = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                          timeout=60, env={**os.environ, "HOME": str(cli.tmp_path / "home")})
    out = done.stdout.decode()  # bytes: text mode would turn each carriage return into a newline
    assert done.returncode == 0, out
    # Under a terminal: each update rewrites the line (carriage return, erase to its end), and
    # the last one ends it.
    assert "\r\x1b[KWaiting for instance tty to be running ... " in out
    assert "\r\x1b[KWaiting for instance tty to be running ... done" in out
    assert out.count("\n") == 3, out  # the progress line, the table's two
    # Without one (the other tests): a line per state change.
    plain = cli.run("instance", "stop", "--project", "web", "--instance", "tty", "--wait",
                    record=False)
    assert "\x1b" not in plain.stderr
    lines = plain.stderr.splitlines()
    assert re.fullmatch(r"Waiting for instance tty to be stopped \.\.\. done \(\d+s\)", lines[-1]), lines
    assert len(lines) == len(set(lines)), "one line per state change"


def test_the_dev_server_says_how_to_use_it_and_never_prints_the_token(start_server, tmp_path):
    server = start_server()
    for _ in range(100):
        if any("floatplane project list" in line for line in server.stdout_lines):
            break
        time.sleep(0.05)
    text = "\n".join(server.stdout_lines)
    token = (server.data_dir / "admin-token").read_text().strip()
    assert token not in text
    exports = [line.strip() for line in server.stdout_lines if line.strip().startswith("export ")]
    assert [e.split("=")[0] for e in exports] == ["export PATH", "export OXIDE_HOST",
                                                  "export OXIDE_TOKEN"], text
    # The lines as a user pastes them, in a shell without floatplane's environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OXIDE_")}
    env["HOME"] = str(tmp_path / "home")
    done = subprocess.run(["bash", "-c", "\n".join(exports) + "\nfloatplane project list"],
                          capture_output=True, text=True, env=env, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")


def test_wait_retries_a_503_with_the_same_idempotency_key_until_it_succeeds(floatplane_bin,
                                                                            start_rack, tmp_path):
    # Starting for 10 s: under ASan the commands before the --wait took over 4 s, and the
    # attach then found the instance running at its first try.
    rack = start_rack(sleds=1, sled_flags=("--start-delay-ms", "10000", "--stop-delay-ms", "50"))
    cli = Cli(floatplane_bin, tmp_path, rack.server)
    prepare(cli)
    for args in (["instance", "create", "--project", "web", "--name", "slow", "--description", "",
                  "--hostname", "slow", "--memory", "1g", "--ncpus", "1"],
                 ["floating-ip", "create", "--project", "web", "--name", "www", "--description",
                  ""]):
        assert cli.run(*args, record=False).returncode == 0
    attach = ["floating-ip", "attach", "--project", "web", "--floating-ip", "www", "--instance",
              "slow"]
    # Without --wait the server's answer (503: starting) is the command's error.
    refused = cli.run(*attach, record=False)
    assert refused.returncode == 1
    assert "is starting" in refused.stderr and "503 ServiceNotAvailable" in refused.stderr
    # With --wait and a deadline before the instance runs: exit 5, naming the last refusal.
    late = cli.run(*attach, "--wait", "--wait-timeout", "1s", record=False)
    assert late.returncode == 5, late.stderr
    assert "still refused at the --wait-timeout" in late.stderr and "is starting" in late.stderr
    # With --wait it is retried, with the same key, until the instance runs.
    done = cli.run("--debug", *attach, "--wait", "--wait-timeout", "30s", record=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "www"
    keys = re.findall(r"^> Idempotency-Key: (\S+)$", done.stderr, re.M)
    assert len(keys) >= 2 and len(set(keys)) == 1, done.stderr
    assert "retrying: instance \"slow\" is starting" in done.stderr
    # Every request says which API version the client speaks.
    versions = re.findall(r"^> api-version: (\S+)$", done.stderr, re.M)
    assert versions and set(versions) == {"2026081901.0.0"}
    assert "Bearer <hidden>" in done.stderr and "fpt_" not in done.stderr


REPO = Path(__file__).resolve().parents[2]

# The oxide CLI's command paths and long flags for the API subset (oxide.rs docs/cli.json at
# e17553138b): each must exist with the same name (CLI-1); ours may add more.
OXIDE_TREE = {
    "floating-ip create": {"project", "name", "description", "json-body", "json-body-template"},
    "floating-ip list": {"project", "limit", "sort-by"},
    "floating-ip view": {"floating-ip", "project"},
    "floating-ip update": {"floating-ip", "project", "name", "description", "json-body"},
    "floating-ip delete": {"floating-ip", "project"},
    "floating-ip attach": {"floating-ip", "project", "kind", "parent", "json-body"},
    "floating-ip detach": {"floating-ip", "project"},
    "instance create": {"project", "name", "description", "hostname", "memory", "ncpus", "start",
                        "json-body"},
    "instance list": {"project", "limit", "sort-by"},
    "instance view": {"instance", "project"},
    "instance update": {"instance", "project", "memory", "ncpus", "boot-disk",
                        "auto-restart-policy", "cpu-platform", "json-body"},
    "instance delete": {"instance", "project"},
    "instance start": {"instance", "project"},
    "instance stop": {"instance", "project"},
    "instance reboot": {"instance", "project"},
    "instance external-ip list": {"instance", "project"},
    "instance external-ip attach-ephemeral": {"instance", "project", "json-body"},
    "instance external-ip detach-ephemeral": {"instance", "project", "ip-version"},
    "project create": {"name", "description", "json-body"},
    "project list": {"limit", "sort-by"},
    "project view": {"project"},
    "project update": {"project", "name", "description", "json-body"},
    "project delete": {"project"},
    "ip-pool list": {"ip-version", "limit", "pool-type", "sort-by"},
    "ip-pool view": {"pool"},
    "silo ip-pool list": {"silo", "limit", "sort-by"},
    "system networking ip-pool create": {"name", "description", "ip-version", "pool-type",
                                         "assignment", "json-body"},
    "system networking ip-pool list": {"assignment", "ip-version", "limit", "pool-type",
                                       "sort-by"},
    "system networking ip-pool view": {"pool"},
    "system networking ip-pool update": {"pool", "name", "description", "json-body"},
    "system networking ip-pool delete": {"pool"},
    "system networking ip-pool utilization": {"pool"},
    "system networking ip-pool range add": {"pool", "first", "last"},
    "system networking ip-pool range list": {"pool", "limit"},
    "system networking ip-pool range remove": {"pool", "first", "last"},
    "system networking ip-pool silo link": {"pool", "silo", "is-default", "json-body"},
    "system networking ip-pool silo list": {"pool", "limit", "sort-by"},
    "system networking ip-pool silo unlink": {"pool", "silo"},
    "system networking ip-pool silo update": {"pool", "silo", "is-default"},
    "system hardware sled list": {"limit", "sort-by"},
    "system hardware sled view": {"sled-id"},
    "system hardware sled instance-list": {"sled-id", "limit", "sort-by"},
    "api": {"method", "field", "raw-field", "header", "input", "paginate", "include"},
    "auth login": {"host"},
    "auth logout": {"all", "force"},
    "auth status": set(),
    "completion": {"shell"},
    "docs": {"format"},
    "ping": set(),
    "version": set(),
}


def docs_json(cli):
    done = cli.run("docs", "--format", "json", record=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_tree_has_every_oxide_path_and_flag_and_matches_docs_cli_json(cli):
    text = docs_json(cli)
    assert text == (REPO / "docs" / "cli.json").read_text(), (
        "docs/cli.json is out of date: build/debug/floatplane docs --format json > docs/cli.json")
    nodes = {}

    def walk(node, path):
        nodes[path] = {arg["long"] for arg in node.get("args", []) if "long" in arg}
        for sub in node.get("subcommands", []):
            walk(sub, f"{path} {sub['name']}".strip())

    walk(json.loads(text), "")
    missing = {path: flags - nodes.get(path, set()) for path, flags in OXIDE_TREE.items()
               if path not in nodes or flags - nodes[path]}
    assert missing == {}


def test_completion_offers_the_commands_and_flags_of_the_words_so_far(cli):
    complete = cli.run("__complete", "floating-ip", record=False)
    assert {"attach", "detach", "create", "list"} <= set(complete.stdout.split())
    flags = cli.run("__complete", "floating-ip", "attach", "--project", "web", record=False)
    assert {"--floating-ip", "--instance", "--wait"} <= set(flags.stdout.split())
    # The bash script, loaded as the help says, completes through the binary.
    script = cli.run("completion", "-s", "bash", record=False).stdout
    bin_dir = str(Path(cli.binary).parent)
    probe = (f'export PATH="{bin_dir}:$PATH"\neval "$(floatplane completion -s bash)"\n'
             "COMP_WORDS=(floatplane floating-ip att); COMP_CWORD=2; _floatplane\n"
             'echo "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["attach"], (script, done.stderr)


def test_completion_offers_a_flags_values_and_the_names_of_resources(cli):
    def complete(*words):
        return cli.run("__complete", *words, record=False).stdout.split()

    # Allowed values, from the flag's own check; a flag that takes no value changes nothing.
    assert complete("floating-ip", "create", "--ip-version") == ["v4", "v6"]
    assert complete("system", "saga", "list", "--state") == ["running", "unwinding", "done",
                                                              "unwound", "stuck"]
    assert "--wait-timeout" in complete("instance", "start", "--wait")
    # Names, asked of the API with the profile's credentials (none before login).
    assert complete("instance", "view", "--project") == []
    cli.login()
    for name in ("web", "db"):
        cli.run("project", "create", "--name", name, "--description", "")
    cli.run("system", "networking", "ip-pool", "create", "--name", "public", "--description", "")
    assert complete("instance", "view", "--project") == ["db", "web"]
    assert complete("system", "networking", "ip-pool", "view", "--pool") == ["public"]
    assert complete("system", "networking", "ip-pool", "silo", "link", "--silo") == ["default"]
    cli.run("system", "networking", "ip-pool", "range", "add", "--pool", "public", "--first",
            "203.0.113.10", "--last", "203.0.113.20")
    cli.run("system", "networking", "ip-pool", "silo", "link", "--pool", "public", "--silo",
            "default", "--is-default", "true")
    cli.run("floating-ip", "create", "--project", "web", "--name", "www", "--description", "")
    assert complete("floating-ip", "view", "--project", "web", "--floating-ip") == ["www"]
    assert complete("floating-ip", "view", "--floating-ip") == []  # which project's?
    assert complete("floating-ip", "create", "--project", "web", "--pool") == ["public"]
    # Through the bash script: the partial word narrows the names.
    bin_dir = str(Path(cli.binary).parent)
    probe = (f'export PATH="{bin_dir}:$PATH"\neval "$(floatplane completion -s bash)"\n'
             "COMP_WORDS=(floatplane instance list --project w); COMP_CWORD=4; _floatplane\n"
             'echo "${COMPREPLY[@]}"')
    token = (cli.server.data_dir / "admin-token").read_text().strip()
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, OXIDE_HOST=cli.host, OXIDE_TOKEN=token))
    assert done.stdout.split() == ["web"], done.stderr


def test_env_runs_a_command_with_the_profiles_host_and_token_and_returns_its_status(cli):
    cli.login()
    token = (cli.server.data_dir / "admin-token").read_text().strip()
    done = cli.run("env", "--", "sh", "-c", 'echo "$OXIDE_HOST $OXIDE_TOKEN"; exit 7',
                   record=False)
    assert (done.returncode, done.stdout) == (7, f"{cli.host} {token}\n")


def test_auth_status_tells_a_bad_token_from_a_server_that_is_down(cli):
    cli.login()
    credentials = cli.config_dir / "credentials.toml"
    credentials.write_text(credentials.read_text() +
                           '\n[profile.down]\nhost = "http://127.0.0.1:1"\ntoken = "x"\n'
                           f'\n[profile.stale]\nhost = "{cli.host}"\ntoken = "fpt_nope"\n')
    done = cli.run("auth", "status", record=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f'Profile "default" ({cli.host}) status: Authenticated',
        'Profile "down" (http://127.0.0.1:1) status: Failed to connect to server: '
        "Couldn't connect to server",
        f'Profile "stale" ({cli.host}) status: Server responded with an error message: '
        "credentials missing or invalid"]
    # The profile in use for a command: --profile picks it.
    refused = cli.run("--profile", "stale", "project", "list", record=False)
    assert refused.returncode == 1 and "401 Unauthenticated" in refused.stderr


def test_a_list_whose_later_page_fails_still_closes_its_array_and_exits_1(floatplane_bin,
                                                                           tmp_path):
    """CLI-22, against a stand-in API (a real server does not fail between pages on demand):
    page 1 answers two projects and a next page, page 2 an error. Page 1 fails once with a
    500 first, which a GET retries (CLI-31)."""
    import http.server
    import threading

    project = {"description": "", "id": "00000000-0000-4000-8000-00000000000{}", "name": "p{}",
               "time_created": "2026-12-01T00:00:00Z", "time_modified": "2026-12-01T00:00:00Z"}

    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            if len(requests) == 1:
                status, body = 500, {"error_code": "Internal", "message": "Internal Server Error",
                                     "request_id": "r-0"}
            elif "page_token=p2" in self.path:
                status, body = 400, {"error_code": "InvalidRequest", "message": "page 2 failed",
                                     "request_id": "r-2"}
            else:
                items = [{k: (v.format(n) if isinstance(v, str) else v)
                          for k, v in project.items()} for n in (1, 2)]
                status, body = 200, {"items": items, "next_page": "p2"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cli = Cli(floatplane_bin, tmp_path, None)
        done = cli.run("project", "list", env={"OXIDE_HOST": f"http://127.0.0.1:{server.server_port}",
                                               "OXIDE_TOKEN": "x"}, record=False)
    finally:
        server.shutdown()
    assert done.returncode == 1
    assert json.loads(done.stdout)[1]["name"] == "p2", done.stdout  # a whole, closed array
    assert done.stdout.endswith("  }\n]\n")
    assert done.stderr == "error: page 2 failed (400 InvalidRequest, request id r-2)\n"
    assert [p.split("?")[0] for p in requests] == ["/v1/projects"] * 3, requests


def test_the_server_accepts_the_api_version_header_the_oxide_sdk_sends_and_refuses_newer(cli):
    import urllib.error
    import urllib.request
    token = (cli.server.data_dir / "admin-token").read_text().strip()

    def me(version):
        headers = {"Authorization": f"Bearer {token}"}
        if version is not None:
            headers["api-version"] = version
        request = urllib.request.Request(f"{cli.host}/v1/me", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    for version in (None, "2026072800.0.0", "2026081901.0.0"):
        status, body = me(version)
        assert status == 200, body
        assert body["silo_name"] == "default" and body["fleet_viewer"] is True
    status, body = me("2026090100.0.0")
    assert (status, body["message"]) == (400, (
        "header api-version: 2026090100.0.0 is newer than the API version this server speaks, "
        "2026081901.0.0; use a client for 2026081901.0.0 or older"))
    status, body = me("latest")
    assert status == 400 and "is not a version" in body["message"], body


def test_tokens_are_created_without_a_key_listed_and_revoked(cli):
    cli.login()
    done = cli.run("system", "token", "create", "--silo", "default", "--role", "silo_viewer",
                   "--name", "ci", record=False)
    assert done.returncode == 0, done.stderr
    issued = json.loads(done.stdout)
    assert issued["token"].startswith("fpt_")
    refused = cli.run("--idempotency-key", "k", "system", "token", "create", "--silo",
                      "default", "--role", "silo_viewer", "--name", "ci2", record=False)
    assert refused.returncode == 2 and "--idempotency-key" in refused.stderr
    listed = json.loads(cli.run("system", "token", "list", record=False).stdout)
    assert issued["id"] in [t["id"] for t in listed]
    assert all("token" not in t for t in listed), "secrets are never listed"
    as_viewer = {"OXIDE_HOST": cli.host, "OXIDE_TOKEN": issued["token"]}
    assert cli.run("project", "list", env=as_viewer, record=False).returncode == 0
    assert cli.run("system", "token", "delete", "--token-id", issued["id"],
                   record=False).returncode == 0
    revoked = cli.run("project", "list", env=as_viewer, record=False)
    assert revoked.returncode == 1 and "401 Unauthenticated" in revoked.stderr
    # --debug never shows a secret: not the caller's, not a new token's.
    debug = cli.run("--debug", "system", "token", "create", "--silo", "default", "--role",
                    "silo_viewer", "--name", "ci3", record=False)
    assert debug.returncode == 0
    assert "fpt_<hidden>" in debug.stderr and not re.search(r"fpt_[0-9a-f]{8}", debug.stderr)


def login_status(host, username, password):
    """The status of a password login to the silo `default`."""
    request = urllib.request.Request(
        f"{host}/v1/login/default/local", method="POST",
        data=json.dumps({"username": username, "password": password}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_local_users_get_passwords_from_files_or_stdin_never_argv_and_debug_hides_them(
        cli, tmp_path):
    cli.login()
    password_file = tmp_path / "alice.pw"
    password_file.write_text("correct horse battery staple\n")
    created = cli.run("--debug", "silo", "idp", "local", "user", "create", "--silo", "default",
                      "--external-id", "alice", "--role", "silo_collaborator",
                      "--password-file", str(password_file), record=False)
    assert created.returncode == 0, created.stderr
    alice = json.loads(created.stdout)
    assert alice["display_name"] == "alice"
    # --debug shows the request body, but not the password in it.
    assert '"value":"<hidden>"' in created.stderr, created.stderr
    assert "correct horse" not in created.stderr
    assert login_status(cli.host, "alice", "correct horse battery staple") == 204

    # A new password from stdin; the old one stops working.
    changed = cli.run("silo", "idp", "local", "user", "set-password", "--silo", "default",
                      "--user-id", alice["id"], "--password-stdin",
                      stdin="a different long secret\n", record=False)
    assert changed.returncode == 0, changed.stderr
    assert f"Password of user {alice['id']} set" in changed.stderr
    assert login_status(cli.host, "alice", "correct horse battery staple") == 401
    assert login_status(cli.host, "alice", "a different long secret") == 204

    # No password given (stdin empty): refused before any request.
    empty = cli.run("silo", "idp", "local", "user", "create", "--silo", "default",
                    "--external-id", "bob", stdin="", record=False)
    assert empty.returncode == 2 and "the password is empty" in empty.stderr, empty.stderr
    listed = json.loads(cli.run("user", "list", record=False).stdout)
    assert [u["display_name"] for u in listed if u["display_name"] in ("alice", "bob")] == \
        ["alice"]

    deleted = cli.run("silo", "idp", "local", "user", "delete", "--silo", "default",
                      "--user-id", alice["id"], record=False)
    assert deleted.returncode == 0, deleted.stderr
    assert login_status(cli.host, "alice", "a different long secret") == 401
