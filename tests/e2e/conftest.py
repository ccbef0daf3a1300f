"""Harness of the floatplane end-to-end suite.

It starts the real server binary (`$FLOATPLANE_BIN server --dev`) on a fresh data directory
and a kernel-chosen loopback port, talks to it over HTTP with a small client, and checks
EVERY response body against the OpenAPI document the server promises to serve: 2xx bodies
against the operation's documented response schema (204 must be empty), 4xx/5xx bodies
against `Error`. The check lives inside the client, so no test can forget it.

The engine: SQLite (the file in the data directory; a server of the harness's own on a data
directory that does not exist yet starts from a copy of a file the worker migrated once, see
SqliteTemplate) unless FLOATPLANE_TEST_POSTGRES holds the
libpq URL of a running PostgreSQL cluster (scripts/pg-cluster); then every data directory gets
a fresh database of its own on that cluster (CREATE DATABASE through psycopg2, a copy of one
the worker migrated once with `floatplane server --migrate-only`), passed to the server as
`--database`, kept across restarts of the server and dropped when the fixture that
started it tears down. Tests marked `sqlite_only(reason)` are skipped on PostgreSQL and tests
marked `postgres_only(reason)` on SQLite; modules marked `engine_independent(reason)` (what they
check lives above the datastore) run on SQLite only and are skipped on PostgreSQL. A
parametrized crash test marked `sampled_on_postgres(param)` runs every case on SQLite and a
third of them on PostgreSQL, chosen so that each value of `param` still runs there where the
other parameters allow (see pytest_collection_modifyitems).

Fixtures:
  engine         "sqlite" or "postgres"
  server         a server of its own for one test (function scope)
  module_server  one server shared by the tests of a module (they use distinct names)
  start_server   factory for tests that need several servers, a chosen data dir, extra
                 command-line flags or environment, or servers sharing one database
  start_agent    factory for external simulated agents (`floatplane switch-agent --sim`,
                 `floatplane sled-agent --sim`), stopped at teardown
"""

import atexit
import http.client
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import NamedTuple

import jsonschema
import pytest

from e2e_helpers import is_uuid, timestamp_ns

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OPENAPI = REPO_ROOT.parent / "shared" / "api" / "nexus-external-ip-subset.json"

STARTUP_DEADLINE_S = 15.0
STOP_DEADLINE_S = 10.0
REQUEST_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.02
_AGENT_SECRET = {}


def agent_secret_file():
    """The file of the secret every agent of this test session obeys (--secret-file) and every
    server presents (--agent-secret-file): made once, outside any test's directory, and removed
    when the session's process ends (each pytest worker made one and left it behind before)."""
    if "path" not in _AGENT_SECRET:
        directory = Path(tempfile.mkdtemp(prefix="floatplane-agent-secret-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / "agent-secret"
        path.write_text(secrets.token_urlsafe(32) + "\n")
        path.chmod(0o600)
        _AGENT_SECRET["path"] = path
        _AGENT_SECRET["value"] = path.read_text().strip()
    return _AGENT_SECRET["path"]


def agent_secret():
    agent_secret_file()
    return _AGENT_SECRET["value"]


LISTENING_LINE = re.compile(r"listening on https?://127\.0\.0\.1:([0-9]+)")


# ---------------------------------------------------------------------------------------------
# OpenAPI 3.0 -> JSON Schema (draft 2020-12)

# Keywords OpenAPI 3.0 adds to its schema objects that JSON Schema does not know.
_OPENAPI_ONLY_KEYWORDS = frozenset(
    {"nullable", "discriminator", "example", "xml", "externalDocs", "readOnly", "writeOnly",
     "deprecated"})
# Keywords whose value is data (or a list of names), not a schema: copied unchanged.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "required", "examples", "title",
                            "description", "format", "pattern", "type"})
# Keywords whose value maps arbitrary names to schemas: the names must not be filtered.
_SCHEMA_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions"})

_COMPONENT_PREFIX = "#/components/schemas/"


def openapi_to_json_schema(node):
    """Converts an OpenAPI 3.0 schema object to JSON Schema.

    `nullable: true` becomes `anyOf: [<schema>, {"type": "null"}]`, which also covers the
    `{"nullable": true, "allOf": [{"$ref": ...}]}` wrappers the Oxide document uses; component
    references are rewritten to point into `$defs`.
    """
    if isinstance(node, list):
        return [openapi_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {}
    for key, value in node.items():
        if key in _OPENAPI_ONLY_KEYWORDS or key.startswith("x-"):
            continue
        if key == "$ref":
            if not value.startswith(_COMPONENT_PREFIX):
                raise ValueError(f"unsupported $ref {value!r}")
            converted[key] = "#/$defs/" + value[len(_COMPONENT_PREFIX):]
        elif key in _SCHEMA_MAP_KEYWORDS:
            converted[key] = {name: openapi_to_json_schema(s) for name, s in value.items()}
        elif key in _DATA_KEYWORDS:
            converted[key] = value
        else:
            converted[key] = openapi_to_json_schema(value)
    if node.get("nullable") is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


def _format_checker():
    checker = jsonschema.FormatChecker(formats=())

    def string_format(name):
        def register(predicate):
            def check(instance):
                return not isinstance(instance, str) or predicate(instance)
            checker.checks(name)(check)
            return predicate
        return register

    def parses_as(parser):
        def predicate(text):
            if "%" in text:  # no IPv6 zone ids on the wire
                return False
            try:
                parser(text)
            except ValueError:
                return False
            return True
        return predicate

    string_format("uuid")(is_uuid)
    string_format("ip")(parses_as(ipaddress.ip_address))
    string_format("ipv4")(parses_as(ipaddress.IPv4Address))
    string_format("ipv6")(parses_as(ipaddress.IPv6Address))
    string_format("date-time")(parses_as(timestamp_ns))
    return checker


# Schemas and operations of floatplane's extensions, which the Oxide document lacks.
EXTENSION_SCHEMAS = {
    "FloatplaneToken": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "token": {"type": "string", "minLength": 1},
        },
        "required": ["id", "token"],
    },
    "FloatplaneSaga": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "name": {"type": "string", "minLength": 1},
            "state": {"enum": ["running", "unwinding", "done", "unwound", "stuck"]},
        },
        "required": ["id", "name", "state"],
    },
    "FloatplaneSagaResultsPage": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/FloatplaneSaga"}},
            "next_page": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["items"],
    },
    # Who holds an address of a pool (issue 25).
    "FloatplanePoolAddress": {
        "type": "object",
        "properties": {
            "external_ip_id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ip"},
            "kind": {"enum": ["snat", "ephemeral", "floating"]},
            "first_port": {"type": "integer", "minimum": 0, "maximum": 65535},
            "last_port": {"type": "integer", "minimum": 0, "maximum": 65535},
            "range_id": {"type": "string", "format": "uuid"},
            "name": {"type": ["string", "null"]},
            "instance_id": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]},
            "instance_name": {"type": ["string", "null"]},
            "project_id": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]},
            "project_name": {"type": ["string", "null"]},
            "silo_id": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]},
            "silo_name": {"type": ["string", "null"]},
            "time_created": {"type": "string", "format": "date-time"},
        },
        "required": ["external_ip_id", "ip", "kind", "first_port", "last_port", "range_id",
                     "name", "instance_id", "instance_name", "project_id", "project_name",
                     "silo_id", "silo_name", "time_created"],
        "additionalProperties": False,
    },
    "FloatplanePoolAddressResultsPage": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/FloatplanePoolAddress"}},
            "next_page": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["items", "next_page"],
    },
    # A project's IP quotas (issue 25).
    "FloatplaneProjectQuotas": {
        "type": "object",
        "properties": {
            "project_id": {"type": "string", "format": "uuid"},
            "silo_id": {"type": "string", "format": "uuid"},
            "ipv4_addresses": {"type": ["integer", "null"], "minimum": 0},
            "ipv6_addresses": {"type": ["integer", "null"], "minimum": 0},
            "ipv4_addresses_used": {"type": "number", "minimum": 0},
            "ipv6_addresses_used": {"type": "number", "minimum": 0},
        },
        "required": ["project_id", "silo_id", "ipv4_addresses", "ipv6_addresses",
                     "ipv4_addresses_used", "ipv6_addresses_used"],
        "additionalProperties": False,
    },
}
EXTENSION_OPERATIONS = {
    ("GET", "/v1/system/projects/{project}/quotas"): {
        "200": {"$ref": "#/$defs/FloatplaneProjectQuotas"}},
    ("PUT", "/v1/system/projects/{project}/quotas"): {
        "200": {"$ref": "#/$defs/FloatplaneProjectQuotas"}},
    ("POST", "/v1/system/floating-ips/{floating_ip}/transfer"): {
        "200": {"$ref": "#/$defs/FloatingIp"}},
    ("GET", "/v1/system/ip-pools/{pool}/addresses"): {
        "200": {"$ref": "#/$defs/FloatplanePoolAddressResultsPage"}},
    ("POST", "/v1/system/tokens"): {"201": {"$ref": "#/$defs/FloatplaneToken"}},
    ("DELETE", "/v1/system/tokens/{id}"): {"204": None},
    ("GET", "/v1/system/sagas"): {"200": {"$ref": "#/$defs/FloatplaneSagaResultsPage"}},
    # Operator extension: the Oxide Instance view of the instance being migrated.
    ("POST", "/v1/system/instances/{instance}/migrate"): {"202": {"$ref": "#/$defs/Instance"}},
    # Operator extension: Oxide's Sled view of the sled, now expunged.
    ("POST", "/v1/system/hardware/sleds/{sled_id}/expunge"): {"200": {"$ref": "#/$defs/Sled"}},
}

_HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


class ApiSchema:
    """The response contract: the OpenAPI document plus floatplane's extension endpoints."""

    def __init__(self, document):
        defs = {name: openapi_to_json_schema(schema)
                for name, schema in document["components"]["schemas"].items()}
        defs.update(EXTENSION_SCHEMAS)
        self._defs = defs
        self._format_checker = _format_checker()
        # (METHOD, template) -> {"201": converted schema or None for "no body"}
        self._operations = {}
        for template, item in document["paths"].items():
            for method, operation in item.items():
                if method not in _HTTP_METHODS:
                    continue
                self._operations[(method.upper(), template)] = {
                    status: self._body_schema(response)
                    for status, response in operation["responses"].items()
                    if status.isdigit() and status.startswith("2")}
        self._operations.update(EXTENSION_OPERATIONS)
        self._templates = {}
        for method, template in self._operations:
            pattern = "/".join(
                "[^/]+" if segment.startswith("{") else re.escape(segment)
                for segment in template.split("/"))
            literal_segments = sum(not s.startswith("{") for s in template.split("/"))
            self._templates[(method, template)] = (re.compile(pattern), literal_segments)
        self._validators = {}

    @staticmethod
    def _body_schema(response):
        content = response.get("content")
        if not content:
            return None
        return openapi_to_json_schema(content["application/json"]["schema"])

    def operation(self, method, path):
        """Returns (template, success responses) of the operation serving `path`, or None."""
        best = None
        for (m, template), (pattern, literals) in self._templates.items():
            if m == method and pattern.fullmatch(path):
                if best is None or literals > best[1]:
                    best = (template, literals)
        if best is None:
            return None
        return best[0], self._operations[(method, best[0])]

    def validate(self, schema, instance, what):
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            validator = jsonschema.Draft202012Validator(
                dict(schema, **{"$defs": self._defs}), format_checker=self._format_checker)
            self._validators[key] = validator
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            location = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise AssertionError(
                f"{what}: body does not match its schema at {location}: {error.message}\n"
                f"body: {json.dumps(instance, indent=1)[:4000]}")

    def check_response(self, method, path, status, headers, raw):
        """Asserts the response obeys the contract; returns the decoded body (None if empty)."""
        what = f"{method} {path} -> {status}"
        operation = self.operation(method, path)
        if 200 <= status < 300:
            assert operation is not None, (
                f"{what}: success from an operation the OpenAPI document does not have")
            template, responses = operation
            assert str(status) in responses, (
                f"{what}: status not documented for {method} {template} "
                f"(documented: {sorted(responses)})")
            schema = responses[str(status)]
            if schema is None:
                # http.client never reads a body after 204, so also check the framing header.
                assert raw == b"" and headers.get("Content-Length") in (None, "0"), (
                    f"{what}: expected an empty body, got Content-Length "
                    f"{headers.get('Content-Length')} and {raw[:500]!r}")
                return None
            body = _decode_json(what, headers, raw)
            self.validate(schema, body, what)
            return body
        assert status >= 400, f"{what}: unexpected status class (no redirects or 1xx expected)"
        body = _decode_json(what, headers, raw)
        self.validate({"$ref": "#/$defs/Error"}, body, what)
        return body


def _decode_json(what, headers, raw):
    content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    assert content_type == "application/json", (
        f"{what}: Content-Type is {headers.get('Content-Type')!r}, body {raw[:300]!r}")
    try:
        return json.loads(raw)
    except ValueError as error:
        raise AssertionError(f"{what}: body is not JSON ({error}): {raw[:500]!r}") from None


def load_api_schema():
    path = Path(os.environ.get("FLOATPLANE_OPENAPI") or DEFAULT_OPENAPI)
    if not path.is_file():
        pytest.exit(f"OpenAPI document not found at {path} (set FLOATPLANE_OPENAPI)", returncode=4)
    with open(path, encoding="utf-8") as f:
        return ApiSchema(json.load(f))


# ---------------------------------------------------------------------------------------------
# HTTP client

class Reply(NamedTuple):
    status: int
    body: object  # decoded JSON, or None for an empty body
    headers: http.client.HTTPMessage


_NO_BODY = object()


class Client:
    """A loopback HTTP client with a bearer token; validates every response it receives. With
    `tls` (an ssl.SSLContext), HTTPS."""

    def __init__(self, port, token, schema, tls=None):
        self.port = port
        self.token = token
        self._schema = schema
        self.tls = tls

    def with_token(self, token):
        return Client(self.port, token, self._schema, self.tls)

    def get(self, path, params=None, **kwargs):
        return self.request("GET", path, params=params, **kwargs)

    def post(self, path, body=_NO_BODY, params=None, **kwargs):
        return self.request("POST", path, body=body, params=params, **kwargs)

    def put(self, path, body=_NO_BODY, params=None, **kwargs):
        return self.request("PUT", path, body=body, params=params, **kwargs)

    def delete(self, path, params=None, **kwargs):
        return self.request("DELETE", path, params=params, **kwargs)

    def request(self, method, path, *, body=_NO_BODY, params=None, raw_body=None, headers=None):
        """Sends one request on a fresh connection.

        `body` is encoded as JSON; `raw_body` (bytes) is sent as is, for malformed input.
        `params` values of None are left out of the query string.
        """
        all_headers = {"Accept": "application/json"}
        if self.token is not None:
            all_headers["Authorization"] = f"Bearer {self.token}"
        payload = None
        if raw_body is not None:
            payload = raw_body
            all_headers["Content-Type"] = "application/json"
        elif body is not _NO_BODY:
            payload = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        url = path
        if params:
            query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
            if query:
                url = f"{path}?{query}"
        status, response_headers, raw = self._exchange(method, url, payload, all_headers)
        decoded = self._schema.check_response(method, path, status, response_headers, raw)
        return Reply(status, decoded, response_headers)

    def _exchange(self, method, url, payload, headers):
        if self.tls is not None:
            connection = http.client.HTTPSConnection("127.0.0.1", self.port,
                                                     timeout=REQUEST_TIMEOUT_S, context=self.tls)
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.port,
                                                    timeout=REQUEST_TIMEOUT_S)
        try:
            try:
                connection.request(method, url, body=payload, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer and close before reading a large body; its answer can
                # still be waiting in our receive buffer.
                pass
            try:
                response = connection.getresponse()
                return response.status, response.headers, response.read()
            except (ConnectionError, http.client.HTTPException) as error:
                raise AssertionError(
                    f"{method} {url}: no HTTP response from the server ({error!r})") from None
        finally:
            connection.close()


# ---------------------------------------------------------------------------------------------
# The database engine

POSTGRES_ENV = "FLOATPLANE_TEST_POSTGRES"


def _import_psycopg2():
    try:
        import psycopg2  # pylint: disable=import-outside-toplevel
        import psycopg2.extensions  # pylint: disable=import-outside-toplevel
    except ImportError:
        pytest.exit(f"{POSTGRES_ENV} is set but Python's psycopg2 is missing "
                    "(Debian: python3-psycopg2)", returncode=4)
    return psycopg2


class PostgresDatabases:
    """Fresh databases on the test cluster, one per data directory, created on first use.

    Statements go through psycopg2: the cluster's maintenance database on one connection kept
    for the whole session (it creates and drops the databases, two or three statements per
    test), a server's own database on a connection per call. psql, started for each, cost a
    process and a new backend a call, some 70 ms of CPU on a 2-core virtual machine. A database
    is made with STRATEGY FILE_COPY: copying the template's files, not writing its every page
    to the WAL (PostgreSQL 15's default), cost its backend 31 ms of CPU instead of 88 (two
    checkpoints each, cheap on a cluster without fsync). The suite on PostgreSQL, four workers
    (2026-12-04): 195 s and 383 CPU-seconds with psql, 182 and 351 on the kept connection,
    165 and 320 with FILE_COPY too.

    Each is a copy of a database this process migrated once (`floatplane server
    --migrate-only`), as the C++ tests' are (db/testing/temp_datastore.h), so that a server's
    first start does not migrate a schema of its own. PostgreSQL's CPU over the suite, four
    workers (2026-12-05): 198 s migrating a database per test, 179 s copying; the suite in CI's
    rehearsals 163-187 s before, 134-145 s after."""

    def __init__(self, cluster_url):
        self._psycopg2 = _import_psycopg2()
        self.cluster_url = cluster_url
        self._names = {}  # data dir -> database name
        self._count = 0
        self._template = None  # the migrated database copied, once made
        self._lock = threading.Lock()
        self._maintenance = None  # the kept connection; replaced when it stops answering
        self._maintenance_lock = threading.Lock()

    def url_of(self, name):
        parts = urllib.parse.urlsplit(self.cluster_url)
        return urllib.parse.urlunsplit(parts._replace(path="/" + name))

    def _connect(self, url):
        """A connection in autocommit (CREATE and DROP DATABASE run outside a transaction) whose
        results come back as PostgreSQL writes them in text, as psql printed them: every type's
        values as strings (booleans 't' and 'f'), NULL as None."""
        connection = self._psycopg2.connect(url, connect_timeout=10,
                                            options="-c statement_timeout=60000")
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT oid FROM pg_type")
                oids = tuple(row[0] for row in cursor.fetchall())
            extensions = self._psycopg2.extensions
            as_text = extensions.new_type(oids, "FLOATPLANE_TEST_TEXT",
                                          lambda value, _cursor: value)
            extensions.register_type(as_text, connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _answers(self, connection):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except self._psycopg2.Error:
            return False

    def run(self, sql, database=None, params=None):
        """Runs `sql` (one statement) on the cluster's maintenance database or `database`, with
        `params` bound to its %s placeholders if given; returns the rows as lists of strings
        (NULL as None)."""
        def execute(connection):
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                if cursor.description is None:
                    return []
                return [list(row) for row in cursor.fetchall()]

        try:
            if database is not None:
                connection = self._connect(self.url_of(database))
                try:
                    return execute(connection)
                finally:
                    connection.close()
            with self._maintenance_lock:
                # A kept connection that does not answer a probe (the cluster restarted) is
                # replaced before the statement goes; the statement itself is sent once (a
                # CREATE DATABASE sent again after its reply was lost would find it made).
                kept = self._maintenance
                if kept is not None and (kept.closed or not self._answers(kept)):
                    kept.close()
                    self._maintenance = None
                if self._maintenance is None:
                    self._maintenance = self._connect(self.cluster_url)
                return execute(self._maintenance)
        except self._psycopg2.Error as error:
            raise AssertionError(f"PostgreSQL refused {sql!r}: {str(error).strip()}") from None

    def close(self):
        with self._maintenance_lock:
            if self._maintenance is not None:
                self._maintenance.close()
                self._maintenance = None

    def _migrated_template(self):
        """The name of this process's migrated database, made on the first call (with
        self._lock held); without FLOATPLANE_BIN, PostgreSQL's own empty template."""
        if self._template is None:
            binary = os.environ.get("FLOATPLANE_BIN")
            if not binary:
                return "template1"
            name = f"fp_e2e_{os.getpid()}_migrated"
            self.run(f'CREATE DATABASE "{name}" STRATEGY FILE_COPY')
            try:
                with tempfile.TemporaryDirectory(prefix="fp-migrate-") as data_dir:
                    done = subprocess.run(
                        [binary, "server", "--migrate-only", "--database", self.url_of(name),
                         "--data-dir", data_dir],
                        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    raise AssertionError(f"floatplane server --migrate-only exited with "
                                         f"{done.returncode}: {done.stderr.strip()}")
            except BaseException:
                self.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                raise
            self._template = name
        return self._template

    def database_for(self, data_dir, migrated=True):
        """The name of the database of `data_dir`, created on the first call: a copy of the
        migrated one, or with `migrated=False` an empty one."""
        key = str(Path(data_dir).resolve())
        with self._lock:
            name = self._names.get(key)
            if name is None:
                template = self._migrated_template() if migrated else "template1"
                self._count += 1
                name = f"fp_e2e_{os.getpid()}_{self._count}"
                self.run(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
                self._names[key] = name
            return name

    def url_for(self, data_dir, migrated=True):
        return self.url_of(self.database_for(data_dir, migrated))

    def share(self, data_dir, with_data_dir):
        """Makes `data_dir` use the database of `with_data_dir` (servers on one database)."""
        name = self.database_for(with_data_dir)
        with self._lock:
            self._names[str(Path(data_dir).resolve())] = name

    def drop(self, data_dirs):
        """Drops the databases of `data_dirs` (their servers stopped), even with connections
        left by a server that was killed or paused."""
        with self._lock:
            names = {self._names.pop(str(Path(d).resolve()), None) for d in data_dirs}
            still_used = set(self._names.values())
        for name in sorted(n for n in names if n and n not in still_used):
            self.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_all(self):
        with self._lock:
            keys = list(self._names)
        try:
            self.drop(keys)
        finally:
            with self._lock:
                template, self._template = self._template, None
            if template is not None:
                self.run(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _postgres_from_environment():
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        return None
    databases = PostgresDatabases(url)
    try:
        databases.run("SELECT 1")
    except AssertionError as error:
        pytest.exit(f"{POSTGRES_ENV}={url!r}: the cluster does not answer: {error}",
                    returncode=4)
    return databases


class SqliteTemplate:
    """A SQLite database this worker migrated once (`floatplane server --migrate-only`), copied
    into a new data directory before its server's first start, so that the start does not
    migrate a schema of its own, as the PostgreSQL runs' databases are copies of a migrated one.
    A start on a fresh data directory cost the server about 90 ms of CPU, 30 of them the
    migration (2026-12-06, 2 cores; some 600 such starts in the SQLite run). Tests of the
    migration itself give their own paths (test_configuration.py) and so start empty."""

    def __init__(self):
        self._path = None
        self._dir = None
        self._lock = threading.Lock()

    def place(self, binary, data_dir):
        """Creates `data_dir` holding a copy of the migrated database. Only for a data directory
        that does not exist: a server's later starts find what its earlier ones left."""
        with self._lock:
            if self._path is None:
                self._dir = tempfile.TemporaryDirectory(prefix="fp-migrated-")
                path = Path(self._dir.name) / "floatplane.db"
                done = subprocess.run(
                    [str(binary), "server", "--migrate-only", "--data-dir", self._dir.name,
                     "--database", f"sqlite:{path}"],
                    stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    raise AssertionError(f"floatplane server --migrate-only exited with "
                                         f"{done.returncode}: {done.stderr.strip()}")
                self._path = path
        data_dir.mkdir(parents=True)
        shutil.copyfile(self._path, data_dir / "floatplane.db")


SQLITE_TEMPLATE = SqliteTemplate()

# Set by pytest_configure: None for SQLite.
POSTGRES = None


def engine_name():
    return "postgres" if POSTGRES is not None else "sqlite"


def database_args(data_dir, migrated=True):
    """The `--database` flag for a server on `data_dir` ([] on SQLite: the default file); on
    PostgreSQL a database already migrated, or with `migrated=False` an empty one."""
    if POSTGRES is None:
        return []
    return ["--database", POSTGRES.url_for(data_dir, migrated)]


def pytest_configure(config):
    global POSTGRES
    config.addinivalue_line(
        "markers", "sqlite_only(reason): the test needs the SQLite engine (skipped on PostgreSQL)")
    config.addinivalue_line(
        "markers", "postgres_only(reason): the test needs PostgreSQL (skipped on SQLite)")
    config.addinivalue_line(
        "markers", "engine_independent(reason): what the test checks lives above the datastore "
        "(HTTP admission, TLS, the CLI's output, the agents' packets); it runs on SQLite, and the "
        "PostgreSQL run skips it (one line of -rs names the reason and the count)")
    config.addinivalue_line(
        "markers", "sampled_on_postgres(param): a matrix of crash points run whole on SQLite; on "
        "PostgreSQL a third of its cases, every value of `param` among them where the other "
        "parameters' combinations allow")
    POSTGRES = _postgres_from_environment()


# On PostgreSQL, one case in this many of a sampled_on_postgres matrix runs.
POSTGRES_SAMPLE_STRIDE = 3


def postgres_sample(items, param):
    """The items of one parametrized test function to run on PostgreSQL: with v the index of an
    item's `param` value and c that of its other parameters' combination (each in order of
    first appearance), those with (v + c) % POSTGRES_SAMPLE_STRIDE == 0. Each combination then
    runs at every third value, shifted by one from the combination before, so that with at
    least as many combinations as the stride every value runs on PostgreSQL too."""
    values, combinations, kept = {}, {}, []
    for item in items:
        params = item.callspec.params
        value = repr(params[param])
        rest = repr(sorted((k, repr(v)) for k, v in params.items() if k != param))
        v = values.setdefault(value, len(values))
        c = combinations.setdefault(rest, len(combinations))
        if (v + c) % POSTGRES_SAMPLE_STRIDE == 0:
            kept.append(item)
    return kept


# On PostgreSQL the modules whose tests take seconds each (a cluster failed over or restarted,
# servers killed and their sagas adopted, races run to their end, deadlines waited out) run
# first: on four workers a test of 13 s begun last leaves three of them idle at the end (the run
# 122.9 and 122.3 s in that order, 111.8 and 117.8 s in this, alternating, 2026-12-06; on SQLite,
# whose tests take under 12 s, this order took 92.8 and 95.0 s, alphabetical 85.1 and 91.1).
RUN_FIRST_ON_POSTGRES = {"test_postgres_failures", "test_replicas", "test_attach_races",
                         "test_users", "test_sleds", "test_recovery",
                         "test_idempotency_crashes"}


def pytest_collection_modifyitems(config, items):
    """On PostgreSQL, skips the tests marked engine_independent: the SQLite run covers them, and
    a second run on another engine would check the same code above the datastore. And samples
    the crash matrices marked sampled_on_postgres: a crash after node N and its recovery run the
    saga engine's replay, the same code on both engines, on a log the datastore kept; every case
    runs on SQLite, and on PostgreSQL a third of them check that its log and its own statements
    (attach, detach and allocation are PostgreSQL statements of their own) recover the same way,
    beside pg.sim_test, which crashes servers in ten seeds on both engines and compares every
    answer. The PostgreSQL run on four workers: 148 s (282 CPU-s) with every case, 119 s (225)
    with the sample (2026-12-06). Skip
    marks (not deselection) so that the counts reach the report under xdist, whose workers
    collect; a skipped test starts no fixture. And puts RUN_FIRST_ON_POSTGRES's modules first
    (a stable sort: each module's tests stay in their order)."""
    if POSTGRES is None:
        return
    items.sort(key=lambda item: item.module.__name__ not in RUN_FIRST_ON_POSTGRES)
    skip = pytest.mark.skip(reason="engine-independent (runs on SQLite only): what it checks "
                            "lives above the datastore")
    by_function = {}
    for item in items:
        if item.get_closest_marker("engine_independent"):
            item.add_marker(skip)
        elif item.get_closest_marker("sampled_on_postgres"):
            by_function.setdefault((item.module.__name__, item.originalname), []).append(item)
    not_sampled = pytest.mark.skip(reason="a crash case outside PostgreSQL's sample (every case "
                                   "runs on SQLite)")
    for function_items in by_function.values():
        param = function_items[0].get_closest_marker("sampled_on_postgres").args[0]
        kept = {id(item) for item in postgres_sample(function_items, param)}
        for item in function_items:
            if id(item) not in kept:
                item.add_marker(not_sampled)


def pytest_report_header(config):
    if POSTGRES is None:
        return "floatplane engine: sqlite"
    return f"floatplane engine: postgres ({POSTGRES.cluster_url})"


def pytest_unconfigure(config):
    if POSTGRES is not None:
        try:
            POSTGRES.drop_all()
        finally:
            POSTGRES.close()


def pytest_runtest_setup(item):
    for marker in item.iter_markers("sqlite_only"):
        if POSTGRES is not None:
            pytest.skip("SQLite only: " + (marker.args[0] if marker.args else ""))
    for marker in item.iter_markers("postgres_only"):
        if POSTGRES is None:
            pytest.skip(f"PostgreSQL only (set {POSTGRES_ENV}): "
                        + (marker.args[0] if marker.args else ""))


# ---------------------------------------------------------------------------------------------
# The server process

def json_records(text):
    """The lines of a process's log that are JSON objects, decoded."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class FloatplaneServer:
    """One `floatplane server --dev` process on a data directory; can be stopped and restarted."""

    def __init__(self, binary, data_dir, log_dir, schema, extra_args=(), env=None,
                 token_source=None, dev=True, database_url=None, tls=None, migrated=True):
        self.binary = binary
        # The first start on a migrated copy (SqliteTemplate, PostgresDatabases), or with False
        # on nothing (SQLite: no file; PostgreSQL: an empty database) as a user's first start.
        self.migrated = migrated
        # An ssl.SSLContext that trusts the server's certificate, when extra_args give it one.
        self.tls = tls
        # A database of the test's own (e.g. on a cluster it fails on purpose) instead of the
        # engine's default for the data dir.
        self.database_url = database_url
        # Without --dev the database and the agents must come from extra_args (or --config).
        self.dev = dev
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self._schema = schema
        # Added to `server --dev --data-dir D --listen 127.0.0.1:0` at each start; `env`
        # (variables added to this process's environment) too. Both may be changed between
        # starts, e.g. to restart without test faults.
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        # A server sharing another's database bootstraps nothing: it uses that one's token.
        self.token_source = token_source
        self.process = None
        self.port = None
        self.admin_token = None
        self.admin = None
        self.stderr_path = None
        self.stdout_lines = []
        self._starts = 0
        self._stop_requested = False
        self._exit_expected = False

    # -- lifecycle --

    def start(self, require_token=True):
        """Starts the server and waits until it listens. With `require_token`, its admin token
        (from DATA_DIR/admin-token, else the token source's) must exist; without, a missing
        one leaves `admin` None."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self._starts += 1
        self._stop_requested = False
        self._exit_expected = False
        self.port = None
        self.stdout_lines = []
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = self.log_dir / f"stderr.{self._starts}.log"
        listening = threading.Event()
        environment = None
        if self.env:
            environment = dict(os.environ)
            environment.update(self.env)
        if (POSTGRES is None and self.migrated and self.dev and self.database_url is None
                and not self.data_dir.exists()
                and not {"--database", "--config"} & {a.split("=", 1)[0] for a in self.extra_args}):
            SQLITE_TEMPLATE.place(self.binary, self.data_dir)
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [str(self.binary), "server", *(["--dev"] if self.dev else []),
                 "--data-dir", str(self.data_dir), "--listen", "127.0.0.1:0",
                 *(["--database", self.database_url] if self.database_url
                   else database_args(self.data_dir, self.migrated)),
                 *([] if "--agent-secret-file" in self.extra_args
                   else ["--agent-secret-file", str(agent_secret_file())]),
                 *self.extra_args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                start_new_session=True, env=environment)
        threading.Thread(target=self._pump_stdout, args=(self.process, listening),
                         daemon=True).start()

        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while not listening.wait(POLL_INTERVAL_S):
            if self.process.poll() is not None:
                self._stop_requested = True  # reported here, not again at teardown
                raise AssertionError(
                    f"server exited with {self.process.returncode} before listening\n"
                    f"{self.describe_output()}")
            if time.monotonic() > deadline:
                self._stop_requested = True
                self.process.kill()
                self.process.wait()
                raise AssertionError(
                    f"server did not print 'listening on http://127.0.0.1:PORT' within "
                    f"{STARTUP_DEADLINE_S} s\n{self.describe_output()}")

        token_path = self.data_dir / "admin-token"
        if self.token_source is not None and not token_path.exists():
            token_path = self.token_source.data_dir / "admin-token"
        if not require_token and not token_path.exists():
            self.admin_token = None
            self.admin = None
            return self
        try:
            assert token_path.is_file(), f"{token_path} missing after the server listens"
            self.admin_token = token_path.read_text().strip()
            assert self.admin_token, f"{token_path} is empty"
        except AssertionError:
            self.stop()
            raise
        self.admin = self.client(self.admin_token)
        return self

    def _pump_stdout(self, process, listening):
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.stdout_lines.append(line)
            match = LISTENING_LINE.fullmatch(line)
            if match and not listening.is_set():
                self.port = int(match.group(1))
                listening.set()
        process.stdout.close()

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` and waits for the exit; returns the exit code. Idempotent."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self._stop_requested = True
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(
                    f"server did not exit within {STOP_DEADLINE_S} s of signal {sig!r}\n"
                    f"{self.describe_output()}") from None
        return self.process.returncode

    def restart(self):
        code = self.stop()
        assert code == 0, f"SIGTERM exit code {code}\n{self.describe_output()}"
        return self.start()

    def wait_for_exit(self, timeout=STOP_DEADLINE_S):
        """Waits for a process expected to end by itself (e.g. a test fault killing it); the
        exit is then not reported at teardown. Returns the exit code (negative: signal)."""
        assert self.process is not None, "server not started"
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"server did not exit within {timeout} s\n{self.describe_output()}") from None
        self._stop_requested = True
        self._exit_expected = True
        return self.process.returncode

    def exit_was_expected(self):
        """True if the process ended and a test said it would (wait_for_exit)."""
        return self._exit_expected and self.process.poll() is not None

    def exited_on_its_own(self):
        return (self.process is not None and not self._stop_requested
                and self.process.poll() is not None)

    # -- its database --

    def sql(self, query, params=()):
        """Runs one SQL statement on the server's database, whichever the engine (`?`
        placeholders); returns the rows as tuples (values as the engine's client gives them:
        PostgreSQL's as strings). For tests that look at or damage what is stored. On SQLite
        only while the server is stopped: a running server holds its database file for itself
        (SQLite's unix-excl locking), and this would wait, then fail "database is locked"."""
        if POSTGRES is None:
            connection = sqlite3.connect(self.data_dir / "floatplane.db")
            try:
                with connection:
                    return [tuple(r) for r in connection.execute(query, tuple(params)).fetchall()]
            finally:
                connection.close()
        assert query.count("?") == len(params), f"{len(params)} parameters for {query!r}"
        # psycopg2's placeholders are %s, and a literal % is written %%.
        text = query.replace("%", "%%").replace("?", "%s")
        rows = POSTGRES.run(text, POSTGRES.database_for(self.data_dir), tuple(params))
        return [tuple(r) for r in rows]

    # -- talking to it --

    def client(self, token=None):
        assert self.port is not None, "server not started"
        return Client(self.port, token, self._schema, self.tls)

    @property
    def anonymous(self):
        return self.client(None)

    # -- its output --

    def stderr_text(self):
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def log_records(self):
        """The stderr lines that are JSON objects, decoded."""
        return json_records(self.stderr_text())

    def wait_for_log(self, predicate, timeout=5.0):
        """Polls stderr until a JSON record satisfies `predicate`; returns all such records."""
        deadline = time.monotonic() + timeout
        while True:
            matching = [r for r in self.log_records() if predicate(r)]
            if matching:
                return matching
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no matching log record on stderr within {timeout} s\n"
                    f"{self.describe_output()}")
            time.sleep(POLL_INTERVAL_S)

    def describe_output(self):
        stderr = self.stderr_text() if self.stderr_path and self.stderr_path.exists() else ""
        return ("--- stdout ---\n" + "\n".join(self.stdout_lines[-20:]) +
                "\n--- stderr (tail) ---\n" + "\n".join(stderr.splitlines()[-30:]))


class SimAgent:
    """An external simulated agent process (`floatplane switch-agent --sim` or
    `floatplane sled-agent --sim`) and a small JSON client for its own API, which is not part of
    the OpenAPI document (so its answers are not schema-checked)."""

    def __init__(self, binary, kind, flags, stderr_path):
        assert kind in ("switch", "sled"), kind
        self.binary = binary
        self.kind = kind
        self.flags = list(flags)
        self.stderr_path = Path(stderr_path)
        self.process = None
        self.url = None
        self.port = None
        self._stdout = []

    def start(self):
        # Simulated unless the flags name a dataplane (`--dataplane nftables ...`).
        sim = [] if "--dataplane" in self.flags else ["--sim"]
        # Test faults (POST /faults, /reset) answer only with --enable-test-faults.
        secret = [] if "--secret-file" in self.flags else ["--secret-file",
                                                           str(agent_secret_file())]
        command = [str(self.binary), f"{self.kind}-agent", *sim, "--listen", "127.0.0.1:0",
                   "--enable-test-faults", *secret, *self.flags]
        listening = threading.Event()
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=stderr,
                                            start_new_session=True)

        def pump(process):
            for raw in process.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                self._stdout.append(line)
                match = LISTENING_LINE.fullmatch(line)
                if match and not listening.is_set():
                    self.port = int(match.group(1))
                    listening.set()
            process.stdout.close()

        threading.Thread(target=pump, args=(self.process,), daemon=True).start()
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while not listening.wait(POLL_INTERVAL_S):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"{' '.join(command)} did not start listening\n"
                                     f"{self.describe_output()}")
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def stop(self):
        """SIGTERM and wait; returns a problem description, or None if all went well."""
        if self.process is None:
            return None
        if self.process.poll() is not None:
            return (f"{self.kind} agent {self.url} exited by itself with "
                    f"{self.process.returncode}\n{self.describe_output()}")
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return f"{self.kind} agent {self.url} ignored SIGTERM\n{self.describe_output()}"
        if code != 0:
            return f"{self.kind} agent {self.url} exited with {code}\n{self.describe_output()}"
        return None

    def kill(self):
        """SIGKILL, as a sled whose machine died; nothing is left for stop() to stop."""
        self.process.kill()
        self.process.wait()
        self.process = None

    def describe_output(self):
        stderr = ""
        if self.stderr_path.exists():
            stderr = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        return ("--- stdout ---\n" + "\n".join(self._stdout[-10:]) +
                "\n--- stderr (tail) ---\n" + "\n".join(stderr.splitlines()[-20:]))

    def log_records(self):
        """Its stderr lines that are JSON objects, decoded."""
        if not self.stderr_path.exists():
            return []
        return json_records(self.stderr_path.read_text(encoding="utf-8", errors="replace"))

    # -- its API --

    def call(self, method, path, body=None, authorization=None):
        """One request, as the control plane (with the session's agent secret) unless
        `authorization` gives the header to send instead ("" for none); returns (status,
        decoded JSON or None)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if authorization is None:
                authorization = f"Bearer {agent_secret()}"
            if authorization:
                headers["Authorization"] = authorization
            if payload is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        return response.status, (json.loads(raw) if raw else None)

    def _ok(self, method, path, body=None):
        status, decoded = self.call(method, path, body)
        assert 200 <= status < 300, f"{self.kind} agent: {method} {path} -> {status}: {decoded}"
        return decoded

    def nat(self):
        """Switch agent: {"generation": N, "entries": [...]}."""
        return self._ok("GET", "/nat")

    def instances(self):
        """Sled agent: the list of {"id", "state", "external_ips", ...}."""
        return self._ok("GET", "/instances")["instances"]

    def add_fault(self, endpoint, **rule):
        """POST /faults, e.g. add_fault("PUT /instances/*", fail_next=1)."""
        return self._ok("POST", "/faults", dict(rule, endpoint=endpoint))

    def faults(self):
        return self._ok("GET", "/faults")

    def clear_faults(self):
        self._ok("DELETE", "/faults")

    def reset(self):
        self._ok("POST", "/reset")


class Rack:
    """A server driving external simulated agents (one switch agent, N sled agents), so that
    tests can look at what the dataplane really holds."""

    def __init__(self, server, switches, sleds, dataplane_args):
        self.server = server
        self.switches = list(switches)
        self.switch = self.switches[0]
        self.sleds = sleds
        self.dataplane_args = list(dataplane_args)
        self.sled_ids = {}      # agent URL -> sled id
        self.agent_by_id = {}   # sled id -> SimAgent
        self.load_sleds()

    @property
    def admin(self):
        return self.server.admin

    def load_sleds(self):
        """Maps the API's sleds to the agents (a sled's baseboard serial is its agent's URL)."""
        reply = self.admin.get("/v1/system/hardware/sleds")
        assert reply.status == 200, f"sled list: {reply.status} {reply.body}"
        by_url = {agent.url: agent for agent in self.sleds}
        serials = sorted(item["baseboard"]["serial"] for item in reply.body["items"])
        assert serials == sorted(by_url), (
            f"one sled per sled agent expected: sled serials {serials}, agents {sorted(by_url)}")
        self.sled_ids = {item["baseboard"]["serial"]: item["id"] for item in reply.body["items"]}
        self.agent_by_id = {sled_id: by_url[url] for url, sled_id in self.sled_ids.items()}

    def sled_id(self, agent):
        return self.sled_ids[agent.url]

    def vms(self, instance_id):
        """[(sled id, VM as its sled agent reports it)] for every sled agent that knows it."""
        found = []
        for agent in self.sleds:
            for vm in agent.instances():
                if vm["id"] == instance_id:
                    found.append((self.sled_id(agent), vm))
        return found

    def nat_entries(self):
        return self.switch.nat()["entries"]

    def restart_server(self, extra_args=(), env=None):
        """Starts the server again on its data dir and the same agents, with `extra_args` and
        `env` instead of the ones it had (e.g. without test faults)."""
        self.server.extra_args = [*self.dataplane_args, *extra_args]
        self.server.env = dict(env or {})
        self.server.start()
        self.load_sleds()
        return self.server

    def describe(self):
        """The dataplane's state, for failure messages."""
        lines = [f"switch {switch.url}: {switch.nat()}" for switch in self.switches]
        for agent in self.sleds:
            lines.append(f"sled {self.sled_ids.get(agent.url)} ({agent.url}): "
                         f"{agent.instances()}")
        return "\n".join(lines)


def stop_and_check(servers):
    """Stops every server with SIGTERM; fails if one crashed earlier or did not exit with 0."""
    problems = []
    for server in servers:
        if server.process is None or server.exit_was_expected():
            continue
        if server.exited_on_its_own():
            problems.append(f"server on {server.data_dir} exited by itself with code "
                            f"{server.process.returncode}\n{server.describe_output()}")
            continue
        try:
            code = server.stop(signal.SIGTERM)
        except AssertionError as error:
            problems.append(str(error))
            continue
        if code != 0:
            problems.append(f"server on {server.data_dir} exited with {code} after SIGTERM\n"
                            f"{server.describe_output()}")
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


# ---------------------------------------------------------------------------------------------
# Fixtures

class TestCa:
    """A certificate authority of the test's own, made with the openssl command: a root, an
    intermediate under it, and server certificates for 127.0.0.1 issued by the intermediate
    (their PEM files hold the certificate, then the intermediate: a chain)."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root = self.dir / "root.pem"
        self._openssl("req", "-x509", *self._new_key("root.key"), "-out", str(self.root),
                      "-days", "2", "-subj", "/CN=floatplane test root",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self._sign("intermediate", "/CN=floatplane test intermediate", "root",
                   "basicConstraints=critical,CA:TRUE,pathlen:0\n"
                   "keyUsage=critical,keyCertSign,cRLSign\n")
        self.cert, self.key = self.issue("server-1")

    def _openssl(self, *args):
        subprocess.run(["openssl", *args], cwd=self.dir, check=True, capture_output=True,
                       timeout=60)

    @staticmethod
    def _new_key(path):
        return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path]

    def _sign(self, name, subject, issuer, extensions):
        self._openssl("req", *self._new_key(f"{name}.key"), "-out", f"{name}.csr", "-subj",
                      subject)
        (self.dir / f"{name}.ext").write_text(extensions)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem", "-CAkey",
                      f"{issuer}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                      "-extfile", f"{name}.ext")

    def issue(self, name):
        """A new server certificate for 127.0.0.1 with common name `name`: (chain PEM, key)."""
        self._sign(name, f"/CN={name}", "intermediate",
                   "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        chain = self.dir / f"{name}-chain.pem"
        chain.write_text((self.dir / f"{name}.pem").read_text() +
                         (self.dir / "intermediate.pem").read_text())
        return chain, self.dir / f"{name}.key"

    def server_args(self):
        return ["--tls-cert", str(self.cert), "--tls-key", str(self.key)]

    def client_context(self):
        """Trusts the root only: the server must send the intermediate."""
        context = ssl.create_default_context(cafile=str(self.root))
        return context


@pytest.fixture(scope="session")
def agent_secret_path():
    """The agent secret file every agent and server of the session is given."""
    return agent_secret_file()


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory):
    return TestCa(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="session")
def floatplane_bin():
    value = os.environ.get("FLOATPLANE_BIN")
    if not value:
        pytest.exit("FLOATPLANE_BIN is not set; point it at the floatplane binary, e.g. "
                    "FLOATPLANE_BIN=build/debug/floatplane", returncode=4)
    path = Path(value).resolve()
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.exit(f"FLOATPLANE_BIN={value!r}: no executable file at {path}", returncode=4)
    return path


@pytest.fixture(scope="session")
def api_schema():
    return load_api_schema()


@pytest.fixture(scope="session")
def engine():
    """The datastore engine the servers run on: "sqlite" or "postgres"."""
    return engine_name()


@pytest.fixture(scope="session")
def server_database_args():
    """database_args: the `--database` flag for a server the test runs itself on a data dir
    ([] on SQLite); such databases are dropped at the end of the session."""
    return database_args


@pytest.fixture
def start_server(floatplane_bin, api_schema, tmp_path):
    """Factory: start_server(data_dir=None, extra_args=(), env=None, database_of=None,
    start=True, dev=True, database_url=None, tls=None, migrated=True) -> FloatplaneServer (running
    unless start=False),
    stopped at teardown, when its database is dropped (PostgreSQL). `database_of`: another
    server whose database this one shares (PostgreSQL only) and whose admin token it uses.
    dev=False: no --dev flag (extra_args name the agents). `database_url`: a database of the
    test's own (left to the test), instead of the engine's default. `tls`: the client side of
    the HTTPS that extra_args set up (see the test_ca fixture). `migrated=False`: the first
    start on no database (SQLite) or an empty one (PostgreSQL), not on a migrated copy."""
    servers = []

    def start(data_dir=None, extra_args=(), env=None, database_of=None, start=True, dev=True,
              database_url=None, tls=None, migrated=True):
        index = len(servers)
        data_dir = Path(data_dir) if data_dir else tmp_path / f"data-{index}"
        if database_of is not None and database_url is None:
            assert POSTGRES is not None, "servers share a database only on PostgreSQL"
            POSTGRES.share(data_dir, database_of.data_dir)
        server = FloatplaneServer(floatplane_bin, data_dir, tmp_path / f"logs-{index}",
                                  api_schema, extra_args=extra_args, env=env,
                                  token_source=database_of, dev=dev,
                                  database_url=database_url, tls=tls, migrated=migrated)
        servers.append(server)
        return server.start() if start else server

    yield start
    try:
        stop_and_check(servers)
    finally:
        if POSTGRES is not None:
            POSTGRES.drop([server.data_dir for server in servers])


@pytest.fixture
def start_agent(floatplane_bin, tmp_path):
    """Factory: start_agent("switch" | "sled", *flags) -> running SimAgent, stopped at teardown
    (which fails if an agent crashed or does not exit with 0 on SIGTERM)."""
    agents = []

    def start(kind, *flags):
        agent = SimAgent(floatplane_bin, kind, flags, tmp_path / f"agent-{len(agents)}.log")
        agents.append(agent)
        return agent.start()

    yield start
    problems = [problem for problem in (agent.stop() for agent in agents) if problem]
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def start_rack(start_agent, start_server):
    """Factory: start_rack(sleds=2, sled_flags=..., server_args=(), env=None,
    database_url=None, switches=1, data_dir=None) -> Rack: `switches` switch agents, `sleds`
    sled agents (with `sled_flags`, by default short start and stop delays) and a server on a
    fresh data dir (`data_dir` if given) driving them (on `database_url` if given, see
    start_server). The server stops before the agents at teardown."""
    def start(sleds=2, sled_flags=("--start-delay-ms", "150", "--stop-delay-ms", "50"),
              server_args=(), env=None, database_url=None, switches=1, data_dir=None):
        switch_agents = [start_agent("switch") for _ in range(switches)]
        sled_agents = [start_agent("sled", *sled_flags) for _ in range(sleds)]
        dataplane_args = []
        for agent in switch_agents:
            dataplane_args += ["--switch-agent", agent.url]
        for agent in sled_agents:
            dataplane_args += ["--sled-agent", agent.url]
        server = start_server(data_dir=data_dir, extra_args=[*dataplane_args, *server_args],
                              env=env, database_url=database_url)
        return Rack(server, switch_agents, sled_agents, dataplane_args)

    return start


@pytest.fixture
def server(start_server):
    """A server of the test's own, on a data dir that does not exist before it starts."""
    return start_server()


@pytest.fixture(scope="module")
def module_server(floatplane_bin, api_schema, tmp_path_factory):
    """One server shared by a module's tests; they must use distinct names and addresses."""
    root = tmp_path_factory.mktemp("module-server")
    server = FloatplaneServer(floatplane_bin, root / "data", root / "logs", api_schema)
    server.start()
    yield server
    try:
        stop_and_check([server])
    finally:
        if POSTGRES is not None:
            POSTGRES.drop([server.data_dir])
