// SQLite's first schema, migration 1 (schema_sqlite_migrations.cc lists every migration).

#include "db/schema.h"

namespace fp::db {

// In the conventions of every migration (schema_sqlite_migrations.cc).
std::string_view SqliteFirstSchema() {
  return R"sql(
CREATE TABLE silo (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  discoverable INTEGER NOT NULL,
  identity_mode TEXT NOT NULL,
  admin_group_name TEXT,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX silo_by_name ON silo (name) WHERE time_deleted IS NULL;

CREATE TABLE project (
  id TEXT PRIMARY KEY,
  silo_id TEXT NOT NULL REFERENCES silo (id),
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX project_by_name ON project (silo_id, name) WHERE time_deleted IS NULL;

CREATE TABLE ip_pool (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  ip_version TEXT NOT NULL CHECK (ip_version IN ('v4', 'v6')),
  pool_type TEXT NOT NULL CHECK (pool_type IN ('unicast', 'multicast')),
  assignment TEXT NOT NULL CHECK (assignment IN ('silos', 'system_services')),
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER
) STRICT;
CREATE UNIQUE INDEX ip_pool_by_name ON ip_pool (name) WHERE time_deleted IS NULL;

CREATE TABLE ip_pool_range (
  id TEXT PRIMARY KEY,
  ip_pool_id TEXT NOT NULL REFERENCES ip_pool (id),
  first_address BLOB NOT NULL,
  last_address BLOB NOT NULL,
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER,
  CHECK (first_address <= last_address)
) STRICT;
CREATE UNIQUE INDEX ip_pool_range_by_first ON ip_pool_range (first_address)
  WHERE time_deleted IS NULL;
CREATE UNIQUE INDEX ip_pool_range_by_last ON ip_pool_range (last_address)
  WHERE time_deleted IS NULL;
CREATE INDEX ip_pool_range_by_pool ON ip_pool_range (ip_pool_id, first_address)
  WHERE time_deleted IS NULL;

-- Silo links are hard-deleted. At most one default per silo, pool type and IP version.
CREATE TABLE ip_pool_silo_link (
  ip_pool_id TEXT NOT NULL REFERENCES ip_pool (id),
  silo_id TEXT NOT NULL REFERENCES silo (id),
  is_default INTEGER NOT NULL,
  pool_type TEXT NOT NULL,
  ip_version TEXT NOT NULL,
  PRIMARY KEY (ip_pool_id, silo_id)
) STRICT;
CREATE UNIQUE INDEX one_default_pool_per_silo ON ip_pool_silo_link (silo_id, pool_type, ip_version)
  WHERE is_default = 1;
CREATE INDEX ip_pool_silo_link_by_silo ON ip_pool_silo_link (silo_id, ip_pool_id);

CREATE TABLE external_ip (
  id TEXT PRIMARY KEY,
  name TEXT,
  description TEXT,
  ip_pool_id TEXT NOT NULL REFERENCES ip_pool (id),
  ip_pool_range_id TEXT NOT NULL REFERENCES ip_pool_range (id),
  parent_id TEXT,
  kind TEXT NOT NULL CHECK (kind IN ('snat', 'ephemeral', 'floating')),
  ip BLOB NOT NULL,
  first_port INTEGER NOT NULL,
  last_port INTEGER NOT NULL,
  project_id TEXT REFERENCES project (id),
  state TEXT NOT NULL CHECK (state IN ('detached', 'attaching', 'attached', 'detaching')),
  time_created INTEGER NOT NULL,
  time_modified INTEGER NOT NULL,
  time_deleted INTEGER,
  CHECK ((kind = 'floating') = (name IS NOT NULL)),
  CHECK ((kind = 'floating') = (description IS NOT NULL)),
  CHECK ((kind = 'floating') = (project_id IS NOT NULL)),
  CHECK (kind != 'snat' OR parent_id IS NOT NULL),
  CHECK (state = 'detached' OR parent_id IS NOT NULL),
  CHECK (first_port BETWEEN 0 AND 65535 AND last_port BETWEEN first_port AND 65535)
) STRICT;
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
  range_id TEXT NOT NULL REFERENCES ip_pool_range (id),
  pool_id TEXT NOT NULL,
  first_address BLOB NOT NULL,
  last_address BLOB NOT NULL,
  PRIMARY KEY (range_id, first_address)
) STRICT, WITHOUT ROWID;
CREATE INDEX ip_free_span_by_pool ON ip_free_span (pool_id, first_address);
CREATE UNIQUE INDEX ip_free_span_by_last ON ip_free_span (range_id, last_address);

-- Addresses given to SNAT, with a bitmask of their four 16384-port blocks in use.
CREATE TABLE snat_address (
  ip BLOB PRIMARY KEY,
  pool_id TEXT NOT NULL,
  range_id TEXT NOT NULL,
  used_blocks INTEGER NOT NULL CHECK (used_blocks BETWEEN 1 AND 15)
) STRICT, WITHOUT ROWID;
CREATE INDEX snat_address_with_room ON snat_address (pool_id, ip) WHERE used_blocks != 15;

CREATE TABLE token (
  id TEXT PRIMARY KEY,
  silo_id TEXT NOT NULL REFERENCES silo (id),
  role TEXT NOT NULL,
  name TEXT NOT NULL,
  secret_sha256 TEXT NOT NULL UNIQUE,
  time_created INTEGER NOT NULL,
  time_revoked INTEGER
) STRICT;
)sql";
}

}  // namespace fp::db
