#pragma once

// Test helpers: a datastore on a fresh SQLite file in a temporary directory.

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "db/datastore.h"
#include "db/external_ips.h"
#include "db/ip_pools.h"
#include "db/projects.h"
#include "db/silos.h"

namespace fp::db::testing {

class TempDatastore {
 public:
  explicit TempDatastore(std::shared_ptr<const Clock> clock = std::make_shared<SystemClock>()) {
    char tmpl[] = "/tmp/floatplane-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    auto ds = Datastore::OpenSqlite(dir_ + "/floatplane.db", std::move(clock));
    if (!ds) throw std::runtime_error(ds.error().message());
    ds_ = std::move(*ds);
  }
  ~TempDatastore() {
    ds_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Datastore& operator*() { return *ds_; }
  Datastore* operator->() { return ds_.get(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::unique_ptr<Datastore> ds_;
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
