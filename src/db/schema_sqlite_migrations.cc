// SQLite's schema as its migrations, one SQL text per schema version, oldest first (the
// runner that applies them: schema.cc; PostgreSQL's list: schema_postgres.cc).

#include <array>
#include <string_view>

#include "db/schema.h"

namespace fp::db {

namespace {

// Conventions: ids are canonical UUID text; timestamps are microseconds since the epoch;
// addresses are IpAddr::Key() blobs (version byte + network-order bytes), so that byte order
// is address order; soft-deleted rows have time_deleted set and are invisible to the API.
const std::array<std::string_view, 19> kMigrations = {
    // 1: the first schema (schema_sqlite_first.cc).
    SqliteFirstSchema(),
    // 2: the saga log. A saga row holds the DAG (with its parameters) and its resting state;
    // node events are the write-ahead log. Ownership (current_sec, adopt_generation) fences
    // every write, so a process that lost a saga can no longer write to it.
    R"sql(
CREATE TABLE saga (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  dag TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'unwinding', 'done', 'unwound', 'stuck')),
  current_sec TEXT NOT NULL,
  adopt_generation INTEGER NOT NULL,
  engine_version INTEGER NOT NULL,
  result TEXT,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL
) STRICT;
CREATE INDEX saga_unfinished ON saga (current_sec, id)
  WHERE state IN ('running', 'unwinding');

CREATE TABLE saga_node_event (
  saga_id TEXT NOT NULL REFERENCES saga (id),
  node_index INTEGER NOT NULL,
  event_type TEXT NOT NULL CHECK (event_type IN
    ('started', 'succeeded', 'failed', 'undo_started', 'undo_finished', 'undo_failed')),
  data TEXT,
  time_created INTEGER NOT NULL,
  PRIMARY KEY (saga_id, node_index, event_type)
) STRICT, WITHOUT ROWID;
)sql",
    // 3: sleds, VPCs, instances and their network interfaces, and the versioned NAT table.
    R"sql(
CREATE TABLE sled (
  id TEXT PRIMARY KEY,
  serial TEXT NOT NULL UNIQUE,
  agent_url TEXT NOT NULL,
  underlay_address BLOB NOT NULL,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL
) STRICT;

-- Monotonic counters (VNIs, MACs, NAT versions), each bumped inside the writing transaction
-- so values are assigned in commit order.
CREATE TABLE counter (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) STRICT;

CREATE TABLE vpc (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL UNIQUE REFERENCES project (id),
  vni INTEGER NOT NULL UNIQUE,
  ipv6_prefix BLOB NOT NULL,
  time_created INTEGER NOT NULL
) STRICT;

CREATE TABLE instance (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES project (id),
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  hostname TEXT NOT NULL,
  ncpus INTEGER NOT NULL,
  memory INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('creating', 'no_vmm', 'vmm', 'failed', 'destroyed')),
  run_state TEXT NOT NULL,
  sled_id TEXT REFERENCES sled (id),
  start_saga_id TEXT,  -- the saga that placed the current VMM
  migration_id TEXT,
  time_run_state_updated INTEGER NOT NULL,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX instance_by_name ON instance (project_id, name) WHERE time_deleted IS NULL;
CREATE INDEX instance_by_sled ON instance (sled_id) WHERE time_deleted IS NULL;

CREATE TABLE network_interface (
  id TEXT PRIMARY KEY,
  instance_id TEXT NOT NULL REFERENCES instance (id),
  vpc_id TEXT NOT NULL REFERENCES vpc (id),
  name TEXT NOT NULL,
  mac TEXT NOT NULL,
  ipv4 BLOB,
  ipv6 BLOB,
  is_primary INTEGER NOT NULL,
  time_created INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX nic_by_mac ON network_interface (mac) WHERE time_deleted IS NULL;
CREATE UNIQUE INDEX nic_by_ipv4 ON network_interface (vpc_id, ipv4)
  WHERE time_deleted IS NULL AND ipv4 IS NOT NULL;
CREATE UNIQUE INDEX nic_by_ipv6 ON network_interface (vpc_id, ipv6)
  WHERE time_deleted IS NULL AND ipv6 IS NOT NULL;
CREATE INDEX nic_by_instance ON network_interface (instance_id) WHERE time_deleted IS NULL;

-- The desired NAT state of the switches as a versioned log: rows are soft-deleted once, never
-- updated otherwise; version_added and version_removed come from the 'nat_version' counter.
CREATE TABLE nat_entry (
  id TEXT PRIMARY KEY,
  external_ip BLOB NOT NULL,
  first_port INTEGER NOT NULL,
  last_port INTEGER NOT NULL,
  sled_address BLOB NOT NULL,
  vni INTEGER NOT NULL,
  mac TEXT NOT NULL,
  instance_id TEXT NOT NULL,
  version_added INTEGER NOT NULL UNIQUE,
  version_removed INTEGER UNIQUE,
  time_created INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX nat_entry_live ON nat_entry (external_ip, first_port, last_port)
  WHERE version_removed IS NULL;
CREATE INDEX nat_entry_by_instance ON nat_entry (instance_id) WHERE version_removed IS NULL;
CREATE INDEX nat_entry_removed ON nat_entry (version_removed) WHERE version_removed IS NOT NULL;

-- The saga holding an external IP in a transitional state (attaching, detaching), so that a
-- second request does not run the same steps in parallel (product.md difference 6).
ALTER TABLE external_ip ADD COLUMN op_saga_id TEXT;

-- Idempotency-Key: the first response to a (token, key) is replayed to retries with the same
-- request, and a different request under the same key is refused.
CREATE TABLE idempotency_key (
  token_id TEXT NOT NULL,
  key TEXT NOT NULL,
  request_sha256 TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
  status INTEGER,
  body TEXT,
  time_created INTEGER NOT NULL,
  PRIMARY KEY (token_id, key)
) STRICT;
)sql",
    // 4: fewer b-trees written per attach and detach (each is a page in the WAL and in the
    // commit's sync). nat_entry is keyed by version_added (its rowid: the log's order) instead
    // of a rowid plus a unique index, and its version_removed uniqueness covers removed rows
    // only (a unique column also indexed every live row's NULL). saga is keyed by id without a
    // separate rowid b-tree. Tables are rebuilt with foreign keys off (see MigrateSchema).
    R"sql(
CREATE TABLE nat_entry_v4 (
  version_added INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  external_ip BLOB NOT NULL,
  first_port INTEGER NOT NULL,
  last_port INTEGER NOT NULL,
  sled_address BLOB NOT NULL,
  vni INTEGER NOT NULL,
  mac TEXT NOT NULL,
  instance_id TEXT NOT NULL,
  version_removed INTEGER,
  time_created INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
INSERT INTO nat_entry_v4 (version_added, id, external_ip, first_port, last_port, sled_address,
                          vni, mac, instance_id, version_removed, time_created, time_deleted)
  SELECT version_added, id, external_ip, first_port, last_port, sled_address, vni, mac,
         instance_id, version_removed, time_created, time_deleted FROM nat_entry;
DROP TABLE nat_entry;
ALTER TABLE nat_entry_v4 RENAME TO nat_entry;
CREATE UNIQUE INDEX nat_entry_live ON nat_entry (external_ip, first_port, last_port)
  WHERE version_removed IS NULL;
CREATE INDEX nat_entry_by_instance ON nat_entry (instance_id) WHERE version_removed IS NULL;
CREATE UNIQUE INDEX nat_entry_removed ON nat_entry (version_removed)
  WHERE version_removed IS NOT NULL;

CREATE TABLE saga_v4 (
  id TEXT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL,
  dag TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'unwinding', 'done', 'unwound', 'stuck')),
  current_sec TEXT NOT NULL,
  adopt_generation INTEGER NOT NULL,
  engine_version INTEGER NOT NULL,
  result TEXT,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO saga_v4 (id, name, dag, state, current_sec, adopt_generation, engine_version,
                     result, time_created, time_modified)
  SELECT id, name, dag, state, current_sec, adopt_generation, engine_version, result,
         time_created, time_modified FROM saga;
DROP TABLE saga;
ALTER TABLE saga_v4 RENAME TO saga;
CREATE INDEX saga_unfinished ON saga (current_sec, id)
  WHERE state IN ('running', 'unwinding');
)sql",
    // 5: an Idempotency-Key's record commits with the request's effect (db/idempotency.h):
    // 'done' holds the answer; 'saga' names the saga that carries the effect, whose outcome
    // gives the answer. 'pending' claims are gone: one left by a dead server did not say
    // whether its effect committed, so it is dropped and a retry runs the request (what the
    // old code did after 120 s). time_created orders records for pruning by age.
    R"sql(
CREATE TABLE idempotency_key_v5 (
  token_id TEXT NOT NULL,
  key TEXT NOT NULL,
  request_sha256 TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('done', 'saga')),
  status INTEGER,
  body TEXT,
  saga_id TEXT,
  time_created INTEGER NOT NULL,
  PRIMARY KEY (token_id, key),
  CHECK ((state = 'done') = (status IS NOT NULL)),
  CHECK ((state = 'saga') = (saga_id IS NOT NULL))
) STRICT, WITHOUT ROWID;
INSERT INTO idempotency_key_v5 (token_id, key, request_sha256, state, status, body,
                                time_created)
  SELECT token_id, key, request_sha256, state, status, body, time_created
  FROM idempotency_key WHERE state = 'done';
DROP TABLE idempotency_key;
ALTER TABLE idempotency_key_v5 RENAME TO idempotency_key;
CREATE INDEX idempotency_key_by_age ON idempotency_key (time_created);
)sql",
    // 6: bounded history (sagas.cc, idempotency.cc). Finished sagas and idempotency records
    // are deleted once older than the retention, oldest first, through an index rather than a
    // scan of the table (for the records, idempotency_key_by_age of migration 5). saga_finished
    // gets one entry per saga, when it comes to rest, at the index's end (rest times grow), so
    // a group-commit batch's entries share a page. counter 'saga_rows' follows the saga table's
    // row count (for GET /metrics: counting a table of millions of rows would read all of it);
    // its page is one most attach and detach batches write anyway (nat_version).
    R"sql(
CREATE INDEX saga_finished ON saga (time_modified) WHERE state IN ('done', 'unwound');
INSERT INTO counter (name, value) SELECT 'saga_rows', count(*) FROM saga;
CREATE TRIGGER saga_rows_on_insert AFTER INSERT ON saga BEGIN
  UPDATE counter SET value = value + 1 WHERE name = 'saga_rows';
END;
CREATE TRIGGER saga_rows_on_delete AFTER DELETE ON saga BEGIN
  UPDATE counter SET value = value - 1 WHERE name = 'saga_rows';
END;
)sql",
    // 7: several servers on one database (saga/coordinator.h, db/leases.h). sec_lease: each
    // saga execution coordinator's lease, renewed by its server; `incarnation` names the
    // process that holds it, so a second process under the same id is detected. Sagas of a
    // coordinator without a live lease are adopted by a live one. task_lease: one holder at a
    // time of a background task. vm_removal: a VM being removed from a sled as an orphan, so
    // that a placement of the same instance by any server waits for the removal.
    R"sql(
CREATE TABLE sec_lease (
  sec_id TEXT NOT NULL PRIMARY KEY,
  incarnation TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  time_renewed INTEGER NOT NULL
) STRICT;
CREATE TABLE task_lease (
  task TEXT NOT NULL PRIMARY KEY,
  holder TEXT NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;
CREATE TABLE vm_removal (
  instance_id TEXT NOT NULL PRIMARY KEY,
  holder TEXT NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;
)sql",
    // 8: PostgreSQL's one-statement operations (schema_postgres.cc); nothing changes here.
    "-- nothing on SQLite",
    // 9: the audit log (db/audit_log.h): one entry per mutating request, written with its
    // effect. Listed by completion time; an entry in progress (time_completed NULL) waits for
    // the saga named by saga_id, whose end completes it.
    R"sql(
CREATE TABLE audit_log (
  id TEXT NOT NULL PRIMARY KEY,
  time_started INTEGER NOT NULL,
  time_completed INTEGER,
  request_id TEXT NOT NULL,
  request_uri TEXT NOT NULL,
  operation_id TEXT NOT NULL,
  source_ip TEXT NOT NULL,
  user_agent TEXT,
  actor_silo_id TEXT,
  actor_user_id TEXT,
  auth_method TEXT,
  credential_id TEXT,
  result_kind TEXT CHECK (result_kind IN ('success', 'error', 'unknown')),
  http_status INTEGER,
  error_code TEXT,
  error_message TEXT,
  saga_id TEXT,
  saga_completes INTEGER NOT NULL DEFAULT 0,
  server_id TEXT,
  success_status INTEGER NOT NULL
) STRICT;
CREATE INDEX audit_log_by_completion ON audit_log (time_completed, id)
  WHERE time_completed IS NOT NULL;
CREATE INDEX audit_log_in_progress ON audit_log (saga_id) WHERE time_completed IS NULL;
-- Who started each saga (the request's id and actor, as JSON), and the sagas in the rare
-- states by state (the common ones, done and unwound, are found by a scan of the newest, and
-- saga_finished stays the index their pruning reads).
ALTER TABLE saga ADD COLUMN origin TEXT;
CREATE INDEX saga_by_state ON saga (state, id) WHERE state IN ('running', 'unwinding', 'stuck');
)sql",
    // 10: sleds an operator can trust and retire (db/sleds.h): the operator's policy
    // (expunged: out of service for good) and whether the sled's agent answers, since when
    // (written when that changes, by the server that watches the sleds; NULL: not yet known).
    R"sql(
ALTER TABLE sled ADD COLUMN policy TEXT NOT NULL DEFAULT 'in_service'
  CHECK (policy IN ('in_service', 'expunged'));
ALTER TABLE sled ADD COLUMN agent_answers INTEGER;
ALTER TABLE sled ADD COLUMN agent_since INTEGER;
)sql",
    // 11: local users and their console sessions (db/users.h). A user's name (Oxide's
    // external_id) is unique among the silo's live users; a password is kept only as its
    // Argon2id hash (NULL: login disallowed), a session only as the SHA-256 of its token. A
    // session is a user's, or an API token's traded for a cookie (token_id).
    R"sql(
CREATE TABLE silo_user (
  id TEXT NOT NULL PRIMARY KEY,
  silo_id TEXT NOT NULL,
  external_id TEXT NOT NULL,
  role TEXT NOT NULL,
  password_hash TEXT,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX silo_user_by_name ON silo_user (silo_id, external_id)
  WHERE time_deleted IS NULL;
CREATE TABLE console_session (
  token_sha256 TEXT NOT NULL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  silo_user_id TEXT,
  token_id TEXT,
  time_created INTEGER NOT NULL,
  time_last_used INTEGER NOT NULL
) STRICT;
CREATE INDEX console_session_by_user ON console_session (silo_user_id);
)sql",
    // 12: quotas (db/quotas.h). A silo's CPU, memory and storage quotas as Oxide records them
    // (0 for silos created before: floatplane kept them nowhere), a silo's and a project's
    // limit of IPv4 and IPv6 addresses (NULL: none), and on each external IP the project and
    // silo its address counts against, set when it is allocated (an ephemeral IP's before it
    // has a parent) and moved with a transfer. Use is counted from these, by the indexes.
    R"sql(
ALTER TABLE silo ADD COLUMN cpus_quota INTEGER NOT NULL DEFAULT 0;
ALTER TABLE silo ADD COLUMN memory_quota INTEGER NOT NULL DEFAULT 0;
ALTER TABLE silo ADD COLUMN storage_quota INTEGER NOT NULL DEFAULT 0;
ALTER TABLE silo ADD COLUMN ipv4_quota INTEGER;
ALTER TABLE silo ADD COLUMN ipv6_quota INTEGER;
ALTER TABLE project ADD COLUMN ipv4_quota INTEGER;
ALTER TABLE project ADD COLUMN ipv6_quota INTEGER;
ALTER TABLE external_ip ADD COLUMN quota_project_id TEXT;
ALTER TABLE external_ip ADD COLUMN quota_silo_id TEXT;
UPDATE external_ip SET quota_project_id = CASE WHEN kind = 'floating' THEN project_id ELSE
  (SELECT project_id FROM instance WHERE instance.id = external_ip.parent_id) END
  WHERE time_deleted IS NULL;
UPDATE external_ip SET quota_silo_id =
  (SELECT silo_id FROM project WHERE project.id = external_ip.quota_project_id)
  WHERE time_deleted IS NULL AND quota_project_id IS NOT NULL;
CREATE INDEX external_ip_by_quota_project ON external_ip (quota_project_id, length(ip))
  WHERE time_deleted IS NULL;
CREATE INDEX external_ip_by_quota_silo ON external_ip (quota_silo_id, length(ip))
  WHERE time_deleted IS NULL;
)sql",
    // 13: moving a floating IP between instances in one saga (db/attach.h). While the attach
    // saga holding the IP moves it, the instance it comes from, so that the saga's undo can put
    // it back and a re-run of its first step knows where it came from. NULL otherwise.
    R"sql(
ALTER TABLE external_ip ADD COLUMN op_from_parent_id TEXT;
)sql",
    // 14: nothing on SQLite (PostgreSQL's fp_expect_rows, schema_postgres.cc: SQLite runs a
    // held-back write at once and counts its rows itself).
    "",
    // 15: saga in a rowid table again (it went without one in 4, when its rows were smaller).
    // An attach's or a detach's row (its DAG, origin and result) is about 1.2 KB, above what a
    // table without rowid keeps in its b-tree page (about 1 KB of 4 KiB), so each row spilled
    // into an overflow page of its own, mostly empty, and every saga's insert and its state's
    // change wrote one and freed one (and the database header, which holds the free list):
    // 2.2 of a commit's 15 log pages, and 16 of the table's 21 MiB unused (measured with
    // dbstat, 2026-12-04). A rowid table keeps rows of up to about 4 KB in its page; the id's
    // index costs one small entry per saga, appended (ids are time-ordered). Rows are copied
    // in creation order, which becomes their rowid order.
    R"sql(
CREATE TABLE saga_v15 (
  id TEXT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL,
  dag TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'unwinding', 'done', 'unwound', 'stuck')),
  current_sec TEXT NOT NULL,
  adopt_generation INTEGER NOT NULL,
  engine_version INTEGER NOT NULL,
  result TEXT,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  origin TEXT
) STRICT;
INSERT INTO saga_v15 (id, name, dag, state, current_sec, adopt_generation, engine_version,
                      result, time_created, time_modified, origin)
  SELECT id, name, dag, state, current_sec, adopt_generation, engine_version, result,
         time_created, time_modified, origin FROM saga ORDER BY time_created, id;
DROP TABLE saga;
ALTER TABLE saga_v15 RENAME TO saga;
CREATE INDEX saga_unfinished ON saga (current_sec, id)
  WHERE state IN ('running', 'unwinding');
CREATE INDEX saga_finished ON saga (time_modified) WHERE state IN ('done', 'unwound');
CREATE INDEX saga_by_state ON saga (state, id) WHERE state IN ('running', 'unwinding', 'stuck');
CREATE TRIGGER saga_rows_on_insert AFTER INSERT ON saga BEGIN
  UPDATE counter SET value = value + 1 WHERE name = 'saga_rows';
END;
CREATE TRIGGER saga_rows_on_delete AFTER DELETE ON saga BEGIN
  UPDATE counter SET value = value - 1 WHERE name = 'saga_rows';
END;
)sql",
    // 16: every CHECK and partial-index condition that listed three or more values with IN
    // says the same with ORs. SQLite evaluates `x IN (a, b, c)` by building a temporary b-tree
    // of the list at each run of a statement (two values or fewer it compares in turn), and it
    // evaluates a table's CHECKs and its partial indexes' conditions at every row it writes: an
    // attach's and a detach's writes built some fifteen such b-trees. The conditions accept the
    // same rows, so the tables' and the index's pages stay as they are and only their
    // definitions change, in place (writable_schema; RESET reloads this connection's schema;
    // no other connection is open while the migrations run).
    R"sql(
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(replace(sql,
    'kind IN (''snat'', ''ephemeral'', ''floating'')',
    'kind = ''snat'' OR kind = ''ephemeral'' OR kind = ''floating'''),
    'state IN (''detached'', ''attaching'', ''attached'', ''detaching'')',
    'state = ''detached'' OR state = ''attaching'' OR state = ''attached'' OR ' ||
    'state = ''detaching''')
  WHERE type = 'table' AND name = 'external_ip';
UPDATE sqlite_schema SET sql = replace(sql,
    'event_type IN
    (''started'', ''succeeded'', ''failed'', ''undo_started'', ''undo_finished'', ''undo_failed'')',
    'event_type = ''started'' OR event_type = ''succeeded'' OR event_type = ''failed'' OR
    event_type = ''undo_started'' OR event_type = ''undo_finished'' OR event_type = ''undo_failed''')
  WHERE type = 'table' AND name = 'saga_node_event';
UPDATE sqlite_schema SET sql = replace(sql,
    'state IN (''creating'', ''no_vmm'', ''vmm'', ''failed'', ''destroyed'')',
    'state = ''creating'' OR state = ''no_vmm'' OR state = ''vmm'' OR state = ''failed'' OR ' ||
    'state = ''destroyed''')
  WHERE type = 'table' AND name = 'instance';
UPDATE sqlite_schema SET sql = replace(sql,
    'result_kind IN (''success'', ''error'', ''unknown'')',
    'result_kind = ''success'' OR result_kind = ''error'' OR result_kind = ''unknown''')
  WHERE type = 'table' AND name = 'audit_log';
UPDATE sqlite_schema SET sql = replace(sql,
    'state IN (''running'', ''unwinding'', ''done'', ''unwound'', ''stuck'')',
    'state = ''running'' OR state = ''unwinding'' OR state = ''done'' OR state = ''unwound'' OR ' ||
    'state = ''stuck''')
  WHERE type = 'table' AND name = 'saga';
UPDATE sqlite_schema SET sql = replace(sql,
    'WHERE state IN (''running'', ''unwinding'', ''stuck'')',
    'WHERE state = ''running'' OR state = ''unwinding'' OR state = ''stuck''')
  WHERE type = 'index' AND name = 'saga_by_state';
PRAGMA writable_schema = RESET;
)sql",
    // 17: instance_by_sled keys each live instance by its sled and then its state, so that an
    // instance start's placement (db::PickSledIn) counts each sled's running instances in the
    // index alone; keyed by sled only, the count read every live instance's row for its state,
    // in the write lane on SQLite (2.7 ms a start at 10,000 instances; bench_allocation's
    // BM_PlaceInstance). Reads by sled use the key's first column as before.
    R"sql(
DROP INDEX instance_by_sled;
CREATE INDEX instance_by_sled ON instance (sled_id, state) WHERE time_deleted IS NULL;
)sql",
    // 18: nothing here (PostgreSQL's NAT versions from a sequence, schema_postgres.cc: SQLite
    // has one writer, which takes the counter's next value in order).
    "-- 18: nothing on SQLite",
    // 19: nothing to change: from this version a done saga's row may keep NULL as its result
    // where the result is its last node's output, which that node's event holds
    // (db/sagas.h, SagaResultOf). The version keeps an older binary, which would read the
    // NULL as the saga's output, from starting on a database that has such rows.
    "-- 19: a done saga's result may be NULL (its last node's event)",
};

static_assert(kMigrations.size() == kSchemaVersion,
              "a migration adds one entry to each engine's list");

}  // namespace

std::string_view SqliteMigration(size_t version) { return kMigrations.at(version - 1); }

}  // namespace fp::db
