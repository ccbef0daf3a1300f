// Fills a dev server's data directory with a pool holding `n` allocated floating IPs, for the
// server memory measurement (bench/server_memory.sh). Run it while the server is stopped.
//
//   build/release/bench_populate DATA_DIR N

#include <cstdio>
#include <cstdlib>
#include <string>

#include "db/external_ips.h"
#include "db/ip_pools.h"
#include "db/projects.h"
#include "db/silos.h"

int main(int argc, char** argv) {
  using namespace fp;
  using namespace fp::db;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DATA_DIR N\n", argv[0]);
    return 2;
  }
  int64_t n = std::atoll(argv[2]);
  auto ds =
      Datastore::OpenSqlite(std::string(argv[1]) + "/floatplane.db",
                            std::make_shared<SystemClock>(), std::make_shared<SystemRandom>());
  auto die = [](const Error& e) {
    std::fprintf(stderr, "populate: %s\n", e.message().c_str());
    return 1;
  };
  if (!ds) return die(ds.error());
  auto silo = db::SiloLookup(**ds, NameOrId(*Name::Parse("default")));
  if (!silo) return die(silo.error());
  model::PoolCreate pc;
  pc.id = Uuid::Random();
  pc.name = "bench-pool";
  pc.description = "benchmark pool";
  auto pool = db::PoolCreate(**ds, pc);
  if (!pool) return die(pool.error());
  auto range =
      db::RangeAdd(**ds, pool->id, Uuid::Random(),
                   *IpRange::Make(*IpAddr::Parse("10.0.0.0"), *IpAddr::Parse("10.31.255.255")));
  if (!range) return die(range.error());
  auto link = db::Link(**ds, pool->id, NameOrId(silo->id), false);
  if (!link) return die(link.error());
  auto project = db::ProjectCreate(**ds, Uuid::Random(), silo->id, "bench", "benchmark project");
  if (!project) return die(project.error());
  constexpr int64_t kBatch = 50000;
  for (int64_t done = 0; done < n; done += kBatch) {
    auto ok = (*ds)->Write<bool>([&](Tx& tx) -> Result<bool> {
      for (int64_t i = done; i < std::min(n, done + kBatch); ++i) {
        model::FloatingIpCreate c;
        c.id = Uuid::Random();
        c.silo_id = silo->id;
        c.project_id = project->id;
        c.name = "fip-" + std::to_string(i);
        c.description = "";
        c.address.selector.mode = PoolSelector::Mode::kExplicitPool;
        c.address.selector.pool = NameOrId(pool->id);
        FP_TRY(FloatingIpCreateIn(tx, c, nullptr));
      }
      return true;
    });
    if (!ok) return die(ok.error());
    std::fprintf(stderr, "populate: %lld/%lld\n",
                 static_cast<long long>(std::min(n, done + kBatch)), static_cast<long long>(n));
  }
  return 0;
}
