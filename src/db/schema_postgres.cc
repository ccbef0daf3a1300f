// PostgreSQL's schema and its migrations: the same versions as SQLite's (schema.cc), in
// PostgreSQL's dialect. Every pending migration runs in one transaction under a lock.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "db/postgres/connection.h"
#include "db/schema.h"
#include "db/schema_postgres_functions.h"

namespace fp::db {

namespace {

// PostgreSQL's schema (db/postgres/): the same tables, one entry per SQLite version above, so
// that a version number means the same schema on both engines and a new migration adds one
// entry to each list.
constexpr std::array<std::string_view, 13> kPostgresMigrations = {
    // 1: as SQLite's, in PostgreSQL's types (BIGINT for INTEGER, BYTEA for BLOB; TEXT compared
    // byte-wise, as SQLite does, whatever the database's collation), plus the engine's
    // commit_marker.
    R"sql(
CREATE TABLE silo (
  id TEXT COLLATE "C" PRIMARY KEY,
  name TEXT COLLATE "C" NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  discoverable BIGINT NOT NULL,
  identity_mode TEXT COLLATE "C" NOT NULL,
  admin_group_name TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX silo_by_name ON silo (name) WHERE time_deleted IS NULL;

CREATE TABLE project (
  id TEXT COLLATE "C" PRIMARY KEY,
  silo_id TEXT COLLATE "C" NOT NULL REFERENCES silo (id),
  name TEXT COLLATE "C" NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX project_by_name ON project (silo_id, name) WHERE time_deleted IS NULL;

CREATE TABLE ip_pool (
  id TEXT COLLATE "C" PRIMARY KEY,
  name TEXT COLLATE "C" NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  ip_version TEXT COLLATE "C" NOT NULL CHECK (ip_version IN ('v4', 'v6')),
  pool_type TEXT COLLATE "C" NOT NULL CHECK (pool_type IN ('unicast', 'multicast')),
  assignment TEXT COLLATE "C" NOT NULL CHECK (assignment IN ('silos', 'system_services')),
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX ip_pool_by_name ON ip_pool (name) WHERE time_deleted IS NULL;

CREATE TABLE ip_pool_range (
  id TEXT COLLATE "C" PRIMARY KEY,
  ip_pool_id TEXT COLLATE "C" NOT NULL REFERENCES ip_pool (id),
  first_address BYTEA NOT NULL,
  last_address BYTEA NOT NULL,
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT,
  CHECK (first_address <= last_address)
);
CREATE UNIQUE INDEX ip_pool_range_by_first ON ip_pool_range (first_address)
  WHERE time_deleted IS NULL;
CREATE UNIQUE INDEX ip_pool_range_by_last ON ip_pool_range (last_address)
  WHERE time_deleted IS NULL;
CREATE INDEX ip_pool_range_by_pool ON ip_pool_range (ip_pool_id, first_address)
  WHERE time_deleted IS NULL;

-- Silo links are hard-deleted. At most one default per silo, pool type and IP version.
CREATE TABLE ip_pool_silo_link (
  ip_pool_id TEXT COLLATE "C" NOT NULL REFERENCES ip_pool (id),
  silo_id TEXT COLLATE "C" NOT NULL REFERENCES silo (id),
  is_default BIGINT NOT NULL,
  pool_type TEXT COLLATE "C" NOT NULL,
  ip_version TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (ip_pool_id, silo_id)
);
CREATE UNIQUE INDEX one_default_pool_per_silo ON ip_pool_silo_link (silo_id, pool_type, ip_version)
  WHERE is_default = 1;
CREATE INDEX ip_pool_silo_link_by_silo ON ip_pool_silo_link (silo_id, ip_pool_id);

CREATE TABLE external_ip (
  id TEXT COLLATE "C" PRIMARY KEY,
  name TEXT COLLATE "C",
  description TEXT COLLATE "C",
  ip_pool_id TEXT COLLATE "C" NOT NULL REFERENCES ip_pool (id),
  ip_pool_range_id TEXT COLLATE "C" NOT NULL REFERENCES ip_pool_range (id),
  parent_id TEXT COLLATE "C",
  kind TEXT COLLATE "C" NOT NULL CHECK (kind IN ('snat', 'ephemeral', 'floating')),
  ip BYTEA NOT NULL,
  first_port BIGINT NOT NULL,
  last_port BIGINT NOT NULL,
  project_id TEXT COLLATE "C" REFERENCES project (id),
  state TEXT COLLATE "C" NOT NULL CHECK (state IN ('detached', 'attaching', 'attached', 'detaching')),
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT,
  CHECK ((kind = 'floating') = (name IS NOT NULL)),
  CHECK ((kind = 'floating') = (description IS NOT NULL)),
  CHECK ((kind = 'floating') = (project_id IS NOT NULL)),
  CHECK (kind != 'snat' OR parent_id IS NOT NULL),
  CHECK (state = 'detached' OR parent_id IS NOT NULL),
  CHECK (first_port BETWEEN 0 AND 65535 AND last_port BETWEEN first_port AND 65535)
);
CREATE UNIQUE INDEX external_ip_unique ON external_ip (ip, first_port) WHERE time_deleted IS NULL;
CREATE INDEX external_ip_by_pool ON external_ip (ip_pool_id, ip_pool_range_id, ip)
  WHERE time_deleted IS NULL;
CREATE INDEX external_ip_by_range ON external_ip (ip_pool_range_id) WHERE time_deleted IS NULL;
CREATE UNIQUE INDEX external_ip_by_parent ON external_ip (parent_id, id)
  WHERE time_deleted IS NULL AND parent_id IS NOT NULL;
CREATE UNIQUE INDEX one_ephemeral_ip_per_instance_per_version
  ON external_ip (parent_id, length(ip))
  WHERE time_deleted IS NULL AND kind = 'ephemeral' AND parent_id IS NOT NULL;
CREATE UNIQUE INDEX floating_ip_by_name ON external_ip (project_id, name)
  WHERE time_deleted IS NULL AND kind = 'floating';

-- Free space of each range as maximal spans of wholly free addresses, so that the lowest
-- free address of a pool is one index probe whatever the number of allocated addresses.
CREATE TABLE ip_free_span (
  range_id TEXT COLLATE "C" NOT NULL REFERENCES ip_pool_range (id),
  pool_id TEXT COLLATE "C" NOT NULL,
  first_address BYTEA NOT NULL,
  last_address BYTEA NOT NULL,
  PRIMARY KEY (range_id, first_address)
);
CREATE INDEX ip_free_span_by_pool ON ip_free_span (pool_id, first_address);
CREATE UNIQUE INDEX ip_free_span_by_last ON ip_free_span (range_id, last_address);

-- Addresses given to SNAT, with a bitmask of their four 16384-port blocks in use.
CREATE TABLE snat_address (
  ip BYTEA PRIMARY KEY,
  pool_id TEXT COLLATE "C" NOT NULL,
  range_id TEXT COLLATE "C" NOT NULL,
  used_blocks BIGINT NOT NULL CHECK (used_blocks BETWEEN 1 AND 15)
);
CREATE INDEX snat_address_with_room ON snat_address (pool_id, ip) WHERE used_blocks != 15;

CREATE TABLE token (
  id TEXT COLLATE "C" PRIMARY KEY,
  silo_id TEXT COLLATE "C" NOT NULL REFERENCES silo (id),
  role TEXT COLLATE "C" NOT NULL,
  name TEXT COLLATE "C" NOT NULL,
  secret_sha256 TEXT COLLATE "C" NOT NULL UNIQUE,
  time_created BIGINT NOT NULL,
  time_revoked BIGINT
);

-- The PostgreSQL engine's own table (db/postgres/engine.h): each write transaction inserts a
-- row with a UUID of its own, so that a COMMIT whose answer was lost can be resolved by
-- looking for it. Rows older than an hour are deleted by the engine.
CREATE TABLE commit_marker (
  id TEXT COLLATE "C" PRIMARY KEY,
  time_created TIMESTAMPTZ NOT NULL
);
CREATE INDEX commit_marker_by_age ON commit_marker (time_created);
)sql",
    // 2: the saga log.
    R"sql(
CREATE TABLE saga (
  id TEXT COLLATE "C" PRIMARY KEY,
  name TEXT COLLATE "C" NOT NULL,
  dag TEXT COLLATE "C" NOT NULL,
  state TEXT COLLATE "C" NOT NULL CHECK (state IN ('running', 'unwinding', 'done', 'unwound', 'stuck')),
  current_sec TEXT COLLATE "C" NOT NULL,
  adopt_generation BIGINT NOT NULL,
  engine_version BIGINT NOT NULL,
  result TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL
);
CREATE INDEX saga_unfinished ON saga (current_sec, id)
  WHERE state IN ('running', 'unwinding');

CREATE TABLE saga_node_event (
  saga_id TEXT COLLATE "C" NOT NULL REFERENCES saga (id),
  node_index BIGINT NOT NULL,
  event_type TEXT COLLATE "C" NOT NULL CHECK (event_type IN
    ('started', 'succeeded', 'failed', 'undo_started', 'undo_finished', 'undo_failed')),
  data TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  PRIMARY KEY (saga_id, node_index, event_type)
);
)sql",
    // 3: sleds, VPCs, instances and network interfaces, the NAT table, idempotency keys.
    R"sql(
CREATE TABLE sled (
  id TEXT COLLATE "C" PRIMARY KEY,
  serial TEXT COLLATE "C" NOT NULL UNIQUE,
  agent_url TEXT COLLATE "C" NOT NULL,
  underlay_address BYTEA NOT NULL,
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL
);

-- Monotonic counters (VNIs, MACs, NAT versions), each bumped inside the writing transaction
-- so values are assigned in commit order.
CREATE TABLE counter (
  name TEXT COLLATE "C" PRIMARY KEY,
  value BIGINT NOT NULL
);

CREATE TABLE vpc (
  id TEXT COLLATE "C" PRIMARY KEY,
  project_id TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES project (id),
  vni BIGINT NOT NULL UNIQUE,
  ipv6_prefix BYTEA NOT NULL,
  time_created BIGINT NOT NULL
);

CREATE TABLE instance (
  id TEXT COLLATE "C" PRIMARY KEY,
  project_id TEXT COLLATE "C" NOT NULL REFERENCES project (id),
  name TEXT COLLATE "C" NOT NULL,
  description TEXT COLLATE "C" NOT NULL,
  hostname TEXT COLLATE "C" NOT NULL,
  ncpus BIGINT NOT NULL,
  memory BIGINT NOT NULL,
  state TEXT COLLATE "C" NOT NULL CHECK (state IN ('creating', 'no_vmm', 'vmm', 'failed', 'destroyed')),
  run_state TEXT COLLATE "C" NOT NULL,
  sled_id TEXT COLLATE "C" REFERENCES sled (id),
  start_saga_id TEXT COLLATE "C",  -- the saga that placed the current VMM
  migration_id TEXT COLLATE "C",
  time_run_state_updated BIGINT NOT NULL,
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX instance_by_name ON instance (project_id, name) WHERE time_deleted IS NULL;
CREATE INDEX instance_by_sled ON instance (sled_id) WHERE time_deleted IS NULL;

CREATE TABLE network_interface (
  id TEXT COLLATE "C" PRIMARY KEY,
  instance_id TEXT COLLATE "C" NOT NULL REFERENCES instance (id),
  vpc_id TEXT COLLATE "C" NOT NULL REFERENCES vpc (id),
  name TEXT COLLATE "C" NOT NULL,
  mac TEXT COLLATE "C" NOT NULL,
  ipv4 BYTEA,
  ipv6 BYTEA,
  is_primary BIGINT NOT NULL,
  time_created BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX nic_by_mac ON network_interface (mac) WHERE time_deleted IS NULL;
CREATE UNIQUE INDEX nic_by_ipv4 ON network_interface (vpc_id, ipv4)
  WHERE time_deleted IS NULL AND ipv4 IS NOT NULL;
CREATE UNIQUE INDEX nic_by_ipv6 ON network_interface (vpc_id, ipv6)
  WHERE time_deleted IS NULL AND ipv6 IS NOT NULL;
CREATE INDEX nic_by_instance ON network_interface (instance_id) WHERE time_deleted IS NULL;

-- The desired NAT state of the switches as a versioned log: rows are soft-deleted once, never
-- updated otherwise; version_added and version_removed come from the 'nat_version' counter.
CREATE TABLE nat_entry (
  id TEXT COLLATE "C" PRIMARY KEY,
  external_ip BYTEA NOT NULL,
  first_port BIGINT NOT NULL,
  last_port BIGINT NOT NULL,
  sled_address BYTEA NOT NULL,
  vni BIGINT NOT NULL,
  mac TEXT COLLATE "C" NOT NULL,
  instance_id TEXT COLLATE "C" NOT NULL,
  version_added BIGINT NOT NULL UNIQUE,
  version_removed BIGINT UNIQUE,
  time_created BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX nat_entry_live ON nat_entry (external_ip, first_port, last_port)
  WHERE version_removed IS NULL;
CREATE INDEX nat_entry_by_instance ON nat_entry (instance_id) WHERE version_removed IS NULL;
CREATE INDEX nat_entry_removed ON nat_entry (version_removed) WHERE version_removed IS NOT NULL;

-- The saga holding an external IP in a transitional state (attaching, detaching), so that a
-- second request does not run the same steps in parallel (product.md difference 6).
ALTER TABLE external_ip ADD COLUMN op_saga_id TEXT COLLATE "C";

-- Idempotency-Key: the first response to a (token, key) is replayed to retries with the same
-- request, and a different request under the same key is refused.
CREATE TABLE idempotency_key (
  token_id TEXT COLLATE "C" NOT NULL,
  key TEXT COLLATE "C" NOT NULL,
  request_sha256 TEXT COLLATE "C" NOT NULL,
  state TEXT COLLATE "C" NOT NULL CHECK (state IN ('pending', 'done')),
  status BIGINT,
  body TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  PRIMARY KEY (token_id, key)
);
)sql",
    // 4: nat_entry keyed by version_added. (SQLite's rebuild of saga without a rowid has no
    // counterpart here.)
    R"sql(
CREATE TABLE nat_entry_v4 (
  version_added BIGINT PRIMARY KEY,
  id TEXT COLLATE "C" NOT NULL UNIQUE,
  external_ip BYTEA NOT NULL,
  first_port BIGINT NOT NULL,
  last_port BIGINT NOT NULL,
  sled_address BYTEA NOT NULL,
  vni BIGINT NOT NULL,
  mac TEXT COLLATE "C" NOT NULL,
  instance_id TEXT COLLATE "C" NOT NULL,
  version_removed BIGINT,
  time_created BIGINT NOT NULL,
  time_deleted BIGINT
);
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
)sql",
    // 5: idempotency records 'done' or 'saga'.
    R"sql(
CREATE TABLE idempotency_key_v5 (
  token_id TEXT COLLATE "C" NOT NULL,
  key TEXT COLLATE "C" NOT NULL,
  request_sha256 TEXT COLLATE "C" NOT NULL,
  state TEXT COLLATE "C" NOT NULL CHECK (state IN ('done', 'saga')),
  status BIGINT,
  body TEXT COLLATE "C",
  saga_id TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  PRIMARY KEY (token_id, key),
  CHECK ((state = 'done') = (status IS NOT NULL)),
  CHECK ((state = 'saga') = (saga_id IS NOT NULL))
);
INSERT INTO idempotency_key_v5 (token_id, key, request_sha256, state, status, body,
                                time_created)
  SELECT token_id, key, request_sha256, state, status, body, time_created
  FROM idempotency_key WHERE state = 'done';
DROP TABLE idempotency_key;
ALTER TABLE idempotency_key_v5 RENAME TO idempotency_key;
CREATE INDEX idempotency_key_by_age ON idempotency_key (time_created);
)sql",
    // 6: bounded history; saga_rows follows the saga table's row count (a PL/pgSQL trigger).
    R"sql(
CREATE INDEX saga_finished ON saga (time_modified) WHERE state IN ('done', 'unwound');
INSERT INTO counter (name, value) SELECT 'saga_rows', count(*) FROM saga;
CREATE FUNCTION saga_rows_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE counter SET value = value + 1 WHERE name = 'saga_rows';
  ELSE
    UPDATE counter SET value = value - 1 WHERE name = 'saga_rows';
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER saga_rows_on_insert AFTER INSERT ON saga
  FOR EACH ROW EXECUTE FUNCTION saga_rows_count();
CREATE TRIGGER saga_rows_on_delete AFTER DELETE ON saga
  FOR EACH ROW EXECUTE FUNCTION saga_rows_count();
)sql",
    // 7: several servers on one database: coordinator leases, task leases, orphan VM removals
    // (SQLite's migration 7 says what each is).
    R"sql(
CREATE TABLE sec_lease (
  sec_id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  incarnation TEXT COLLATE "C" NOT NULL,
  expires_at BIGINT NOT NULL,
  time_renewed BIGINT NOT NULL
);
CREATE TABLE task_lease (
  task TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  holder TEXT COLLATE "C" NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE TABLE vm_removal (
  instance_id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  holder TEXT COLLATE "C" NOT NULL,
  expires_at BIGINT NOT NULL
);
)sql",
    // 8: the functions behind the operations that run as one statement on PostgreSQL (one round
    // trip instead of an interactive transaction's several; SQLite, in the process, runs them as
    // several statements and has no migration 8). And saga_rows is no longer kept by trigger:
    // every saga insert updating one counter row made concurrent saga creations fail each
    // other under SERIALIZABLE (the benchmark's most frequent retry); SagaHistory counts the
    // rows instead, when metrics are read. retry_queue queues the retries of writes that
    // collided.
    //
    // fp_addr_step: the address key (db/datastore.h: version byte, then the address big-endian)
    // one above (step 1) or one below (step -1) `k`.
    kPostgresMigration8,
    // 9: the audit log, as on SQLite (schema.cc).
    R"sql(
CREATE TABLE audit_log (
  id TEXT NOT NULL PRIMARY KEY,
  time_started BIGINT NOT NULL,
  time_completed BIGINT,
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
  http_status BIGINT,
  error_code TEXT,
  error_message TEXT,
  saga_id TEXT,
  saga_completes BIGINT NOT NULL DEFAULT 0,
  server_id TEXT,
  success_status BIGINT NOT NULL
);
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
ALTER TABLE sled ADD COLUMN policy TEXT COLLATE "C" NOT NULL DEFAULT 'in_service'
  CHECK (policy IN ('in_service', 'expunged'));
ALTER TABLE sled ADD COLUMN agent_answers BIGINT;
ALTER TABLE sled ADD COLUMN agent_since BIGINT;
)sql",
    // 11: local users and their console sessions, as on SQLite (schema.cc).
    R"sql(
CREATE TABLE silo_user (
  id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  silo_id TEXT COLLATE "C" NOT NULL,
  external_id TEXT COLLATE "C" NOT NULL,
  role TEXT COLLATE "C" NOT NULL,
  password_hash TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  time_modified BIGINT NOT NULL,
  time_deleted BIGINT
);
CREATE UNIQUE INDEX silo_user_by_name ON silo_user (silo_id, external_id)
  WHERE time_deleted IS NULL;
CREATE TABLE console_session (
  token_sha256 TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  id TEXT COLLATE "C" NOT NULL UNIQUE,
  silo_user_id TEXT COLLATE "C",
  token_id TEXT COLLATE "C",
  time_created BIGINT NOT NULL,
  time_last_used BIGINT NOT NULL
);
CREATE INDEX console_session_by_user ON console_session (silo_user_id);
)sql",
    // 12: quotas, as on SQLite (schema.cc).
    R"sql(
ALTER TABLE silo ADD COLUMN cpus_quota BIGINT NOT NULL DEFAULT 0;
ALTER TABLE silo ADD COLUMN memory_quota BIGINT NOT NULL DEFAULT 0;
ALTER TABLE silo ADD COLUMN storage_quota BIGINT NOT NULL DEFAULT 0;
ALTER TABLE silo ADD COLUMN ipv4_quota BIGINT;
ALTER TABLE silo ADD COLUMN ipv6_quota BIGINT;
ALTER TABLE project ADD COLUMN ipv4_quota BIGINT;
ALTER TABLE project ADD COLUMN ipv6_quota BIGINT;
ALTER TABLE external_ip ADD COLUMN quota_project_id TEXT COLLATE "C";
ALTER TABLE external_ip ADD COLUMN quota_silo_id TEXT COLLATE "C";
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
    // 13: the instance a moving floating IP comes from, as on SQLite (schema.cc).
    R"sql(
ALTER TABLE external_ip ADD COLUMN op_from_parent_id TEXT COLLATE "C";
)sql",
};
static_assert(kPostgresMigrations.size() == kSchemaVersion,
              "a migration adds one entry to each engine's list");

}  // namespace

Status MigratePostgresSchema(postgres::PgConnection& conn) {
  return MigratePostgresSchemaTo(conn, kPostgresMigrations.size());
}

Status MigratePostgresSchemaTo(postgres::PgConnection& conn, size_t target) {
  // DDL is transactional in PostgreSQL: every pending migration and its schema_version row
  // commit together, under a lock held to the end of the transaction, so that servers starting
  // together apply each migration once and the later ones find the schema up to date.
  FP_CHECK_OK(conn.Run("BEGIN"));
  Status migrated = [&]() -> Status {
    // The key is arbitrary but fixed: "floatplane schema".
    FP_CHECK_OK(conn.Run("SELECT pg_advisory_xact_lock(7236828283516204641)"));
    FP_CHECK_OK(conn.Run("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"));
    auto rows = FP_TRY(conn.Query("SELECT max(version) FROM schema_version", {}));
    size_t current =
        rows.empty() || rows.front().IsNull(0) ? 0 : static_cast<size_t>(rows.front().Int(0));
    if (current > kPostgresMigrations.size()) {
      return Fail(Error::Internal(
          fmt::format("database schema version {} is newer than this binary knows ({}): run a "
                      "floatplane at least as new as the one that migrated the database",
                      current, kPostgresMigrations.size())));
    }
    for (size_t v = current; v < std::min(target, kPostgresMigrations.size()); ++v) {
      FP_CHECK_OK(conn.Run(kPostgresMigrations[v]));
      FP_CHECK_OK(conn.Run(fmt::format("INSERT INTO schema_version (version) VALUES ({})", v + 1)));
    }
    return conn.Run("COMMIT");
  }();
  if (!migrated) (void)conn.Run("ROLLBACK");
  return migrated;
}

}  // namespace fp::db
