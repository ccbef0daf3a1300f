#pragma once

// Test helpers: a datastore on a fresh database. SQLite (a file in a temporary directory)
// unless FLOATPLANE_TEST_POSTGRES is set to the libpq URL of a running throwaway PostgreSQL
// cluster (e.g. postgres://postgres@127.0.0.1:PORT/postgres): then each TempDatastore creates
// a database of its own there, with a random name, and drops it when destroyed.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/mutex.h"
#include "common/uuid.h"
#include "db/datastore.h"
#include "db/external_ips.h"
#include "db/ip_pools.h"
#include "db/postgres/connection.h"
#include "db/projects.h"
#include "db/silos.h"

namespace fp::db::testing {

// The PostgreSQL cluster the tests run on (FLOATPLANE_TEST_POSTGRES), or "" for SQLite.
inline std::string TestPostgresUrl() {
  const char* url = std::getenv("FLOATPLANE_TEST_POSTGRES");
  return url ? std::string(url) : std::string();
}
inline bool OnPostgres() { return !TestPostgresUrl().empty(); }

// One connection per test process to the test cluster's maintenance database, for creating and
// dropping the tests' databases: a connection costs PostgreSQL a process (about 20 ms of a
// test's time on a 2-core virtual machine, 2026-12-04), and each TempDatastore needed two.
// A connection that does not answer a probe (a test restarted the cluster) is replaced before
// the statement goes; the statement itself is sent once (a CREATE DATABASE sent again after a
// reply lost on its way would find its database made).
class TestClusterAdmin {
 public:
  static Status Run(const std::string& sql) {
    static TestClusterAdmin admin;
    MutexLock lock(admin.mu_);
    if (!admin.conn_ || admin.conn_->broken() || !admin.conn_->Run("SELECT 1")) {
      auto opened = postgres::PgConnection::Open(TestPostgresUrl());
      if (!opened) return Fail(opened.error());
      admin.conn_ = std::move(*opened);
    }
    return admin.conn_->Run(sql);
  }

 private:
  Mutex mu_;
  std::unique_ptr<postgres::PgConnection> conn_ FP_GUARDED_BY(mu_);
};

// A fresh database of the test cluster, dropped when destroyed (connections to it included):
// empty, or a copy of `template_name` (CREATE DATABASE ... TEMPLATE).
class TempPostgresDatabase {
 public:
  explicit TempPostgresDatabase(const std::string& template_name = "") {
    admin_url_ = TestPostgresUrl();
    name_ =
        "fp_test_" + Uuid::Random().ToString().substr(0, 8) + Uuid::Random().ToString().substr(24);
    std::string create = "CREATE DATABASE " + name_;
    if (!template_name.empty()) create += " TEMPLATE " + template_name;
    if (Status s = TestClusterAdmin::Run(create); !s) throw std::runtime_error(s.error().message());
    url_ = postgres::WithDatabase(admin_url_, name_);
    if (url_.empty()) throw std::runtime_error("FLOATPLANE_TEST_POSTGRES does not parse");
  }
  ~TempPostgresDatabase() {
    (void)TestClusterAdmin::Run("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }
  TempPostgresDatabase(const TempPostgresDatabase&) = delete;
  TempPostgresDatabase& operator=(const TempPostgresDatabase&) = delete;
  // The libpq connection string of the database.
  const std::string& url() const { return url_; }
  const std::string& name() const { return name_; }
  // The cluster's maintenance database (FLOATPLANE_TEST_POSTGRES), for statements about this one.
  const std::string& admin_url() const { return admin_url_; }

 private:
  std::string admin_url_;
  std::string name_;
  std::string url_;
};

// A database of the test cluster holding the current schema, migrated once per test process:
// each TempDatastore on PostgreSQL is a copy of it. Migrating a fresh database took about
// 100 ms of each TempDatastore's time on a 2-core virtual machine, a copy of a migrated one
// costs about what creating an empty one does (2026-12-04). Dropped when the process exits; a
// process that dies leaves it in the throwaway cluster.
class MigratedTemplate {
 public:
  static const std::string& Name() {
    static MigratedTemplate migrated;  // the first caller migrates it; C++ makes the others wait
    return migrated.db_.name();
  }

 private:
  MigratedTemplate() {
    auto ds = Datastore::OpenPostgres(db_.url(), std::make_shared<SystemClock>(),
                                      std::make_shared<SystemRandom>());
    if (!ds) throw std::runtime_error(ds.error().message());
    // Closed here: PostgreSQL copies a database only while nobody is connected to it.
  }
  TempPostgresDatabase db_;
};

enum class TestEngine { kFromEnvironment, kSqlite };

class TempDatastore {
 public:
  explicit TempDatastore(std::shared_ptr<const Clock> clock = std::make_shared<SystemClock>(),
                         PostgresOptions options = {},
                         TestEngine engine = TestEngine::kFromEnvironment,
                         std::shared_ptr<Random> random = std::make_shared<SystemRandom>()) {
    char tmpl[] = "/tmp/floatplane-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    Result<std::unique_ptr<Datastore>> ds = Fail(Error::Internal("not opened"));
    if (engine == TestEngine::kFromEnvironment && OnPostgres()) {
      pg_ = std::make_unique<TempPostgresDatabase>(MigratedTemplate::Name());
      ds = Datastore::OpenPostgres(pg_->url(), std::move(clock), std::move(random), options);
    } else {
      ds = Datastore::OpenSqlite(dir_ + "/floatplane.db", std::move(clock), std::move(random));
    }
    if (!ds) throw std::runtime_error(ds.error().message());
    ds_ = std::move(*ds);
  }
  ~TempDatastore() {
    ds_.reset();
    pg_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Datastore& operator*() { return *ds_; }
  Datastore* operator->() { return ds_.get(); }
  // The SQLite database's directory (created, and empty, on PostgreSQL too).
  const std::string& dir() const { return dir_; }
  bool postgres() const { return pg_ != nullptr; }
  // The PostgreSQL database's connection string ("" on SQLite).
  std::string postgres_url() const { return pg_ ? pg_->url() : std::string(); }

 private:
  std::string dir_;
  std::unique_ptr<TempPostgresDatabase> pg_;  // destroyed after ds_ closed its connections
  std::unique_ptr<Datastore> ds_;
};

// Always SQLite: for the tests of the SQLite engine itself (db/sqlite/).
class TempSqliteDatastore : public TempDatastore {
 public:
  TempSqliteDatastore() : TempDatastore(std::make_shared<SystemClock>(), {}, TestEngine::kSqlite) {}
};

inline Name N(const std::string& s) { return *Name::Parse(s); }
inline NameOrId ByName(const std::string& s) { return NameOrId(N(s)); }
inline IpAddr Ip(const std::string& s) { return *IpAddr::Parse(s); }
inline IpRange Range(const std::string& a, const std::string& b) {
  return *IpRange::Make(Ip(a), Ip(b));
}

// A silo `s1` with project `p1` and a v4 pool `pool` holding `first`..`last`, linked to the
// silo as its default.
struct Fixture {
  Silo silo;
  Project project;
  IpPool pool;
  IpPoolRange range;
};

inline Fixture MakeFixture(Datastore& ds, const std::string& first, const std::string& last,
                           const std::string& pool_name = "pool",
                           IpVersion version = IpVersion::kV4) {
  Fixture f;
  auto silo = SiloLookup(ds, ByName("s1"));
  if (!silo) {
    model::SiloCreate sc;
    sc.id = Uuid::Random();
    sc.name = "s1";
    sc.description = "";
    silo = SiloCreate(ds, sc);
  }
  f.silo = silo.value();
  auto project = ProjectLookup(ds, f.silo.id, ByName("p1"));
  if (!project) project = ProjectCreate(ds, Uuid::Random(), f.silo.id, "p1", "");
  f.project = project.value();
  model::PoolCreate pc;
  pc.id = Uuid::Random();
  pc.name = pool_name;
  pc.description = "";
  pc.ip_version = version;
  f.pool = PoolCreate(ds, pc).value();
  f.range = RangeAdd(ds, f.pool.id, Uuid::Random(), Range(first, last)).value();
  return f;
}

inline Result<ExternalIp> CreateFip(Datastore& ds, const Fixture& f, const std::string& name,
                                    AddressRequest address = {}) {
  model::FloatingIpCreate c;
  c.id = Uuid::Random();
  c.silo_id = f.silo.id;
  c.project_id = f.project.id;
  c.name = name;
  c.description = "";
  c.address = std::move(address);
  return FloatingIpCreate(ds, c);
}

inline AddressRequest FromPool(const std::string& pool) {
  AddressRequest a;
  a.selector.mode = PoolSelector::Mode::kExplicitPool;
  a.selector.pool = ByName(pool);
  return a;
}

inline AddressRequest Explicit(const std::string& ip) {
  AddressRequest a;
  a.explicit_ip = Ip(ip);
  return a;
}

}  // namespace fp::db::testing
