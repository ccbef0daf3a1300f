// Allocation cost against the number of addresses already allocated (product.md difference
// 12): the same operations on pools with 1,000 and 1,000,000 addresses allocated.
//
//   build/release/bench_allocation
//
// BM_AllocateLowestAddress  the allocator alone (find and take the lowest free address)
// BM_FloatingIpCreate       the whole floating IP create: project and name checks, pool
//                           resolution, allocation, row insert
// Both run inside a transaction that is refused (rolled back), so every iteration sees the same
// N and the figure is the database work: a refused write costs no log write and no sync of the
// log (db/sqlite/engine.cc). BM_FloatingIpCreateDurable commits (and waits for the WAL sync, as
// every write does) and shows what a client waits for.
//
// BM_PlaceInstance          an instance start's choice of sled (db::PickSledIn): every sled in
//                           service with its running instances counted, in a rack of 32 sleds
//                           running 1,000 and 10,000 instances (and a tenth as many stopped). On
//                           SQLite it runs in the write lane, so every write waits for it.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>

#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/ip_pools.h"
#include "db/sleds.h"
#include "db/testing/temp_datastore.h"

namespace fp::db {
namespace {

using testing::Fixture;
using testing::MakeFixture;
using testing::TempDatastore;

struct Populated {
  TempDatastore ds;
  Fixture f;
};

model::FloatingIpCreate Params(const Fixture& f, const std::string& name) {
  model::FloatingIpCreate c;
  c.id = Uuid::Random();
  c.silo_id = f.silo.id;
  c.project_id = f.project.id;
  c.name = name;
  c.description = "";
  return c;
}

// One pool of 2^21 addresses with `n` of them allocated as floating IPs, built once per n.
Populated& PoolWith(int64_t n) {
  static std::map<int64_t, std::unique_ptr<Populated>> cache;
  auto& slot = cache[n];
  if (slot) return *slot;
  slot = std::make_unique<Populated>();
  slot->f = MakeFixture(*slot->ds, "10.0.0.0", "10.31.255.255");
  if (!Link(*slot->ds, slot->f.pool.id, NameOrId(slot->f.silo.id), true)) std::abort();
  constexpr int64_t kBatch = 50000;
  for (int64_t done = 0; done < n; done += kBatch) {
    auto ok = slot->ds->Write<bool>([&](Tx& tx) -> Result<bool> {
      for (int64_t i = done; i < std::min(n, done + kBatch); ++i) {
        FP_TRY(FloatingIpCreateIn(tx, Params(slot->f, "fip-" + std::to_string(i)), nullptr));
      }
      return true;
    });
    if (!ok) {
      std::fprintf(stderr, "populate: %s\n", ok.error().message().c_str());
      std::abort();
    }
  }
  return *slot;
}

const Error kRollback = Error::Internal("benchmark rollback");

void BM_AllocateLowestAddress(benchmark::State& state) {
  Populated& p = PoolWith(state.range(0));
  for (auto _ : state) {
    auto r = p.ds->Write<bool>([&](Tx& tx) -> Result<bool> {
      auto a = FP_TRY(AllocateLowestAddress(tx, p.f.pool.id));
      benchmark::DoNotOptimize(a);
      return Fail(kRollback);
    });
    if (r || r.error().message() != kRollback.message()) state.SkipWithError("allocation failed");
  }
}
BENCHMARK(BM_AllocateLowestAddress)->Arg(1000)->Arg(1000000)->Unit(benchmark::kMicrosecond);

void BM_FloatingIpCreate(benchmark::State& state) {
  Populated& p = PoolWith(state.range(0));
  for (auto _ : state) {
    auto r = p.ds->Write<bool>([&](Tx& tx) -> Result<bool> {
      auto e = FP_TRY(FloatingIpCreateIn(tx, Params(p.f, "bench-fip"), nullptr));
      benchmark::DoNotOptimize(e);
      return Fail(kRollback);
    });
    if (r || r.error().message() != kRollback.message()) state.SkipWithError("create failed");
  }
}
BENCHMARK(BM_FloatingIpCreate)->Arg(1000)->Arg(1000000)->Unit(benchmark::kMicrosecond);

void BM_FloatingIpCreateDurable(benchmark::State& state) {
  Populated& p = PoolWith(state.range(0));
  static int64_t i = 0;  // names stay unique across the repeated runs of this function
  for (auto _ : state) {
    auto e = FloatingIpCreate(*p.ds, Params(p.f, "durable-" + std::to_string(i++)));
    if (!e) state.SkipWithError(e.error().message().c_str());
  }
}
BENCHMARK(BM_FloatingIpCreateDurable)->Arg(1000)->Arg(1000000)->Unit(benchmark::kMicrosecond);

// A rack of 32 sleds running `n` instances spread evenly over them, and n / 10 stopped ones
// (no sled), built once per n: rows written directly, as a rack's would be after its starts.
Populated& RackWith(int64_t n) {
  static std::map<int64_t, std::unique_ptr<Populated>> cache;
  auto& slot = cache[n];
  if (slot) return *slot;
  slot = std::make_unique<Populated>();
  slot->f = MakeFixture(*slot->ds, "10.0.0.0", "10.0.0.255");
  std::vector<Uuid> sleds;
  for (int i = 0; i < 32; ++i) {
    auto sled = SledUpsert(*slot->ds, "sled-" + std::to_string(i),
                           "http://127.0.0.1:" + std::to_string(20000 + i),
                           IpAddr::Parse("fd00::" + std::to_string(i + 1)).value());
    if (!sled) std::abort();
    sleds.push_back(sled->id);
  }
  auto ok = slot->ds->Write<bool>([&](Tx& tx) -> Result<bool> {
    for (int64_t i = 0; i < n + n / 10; ++i) {
      const bool running = i < n;
      std::optional<std::string> sled;
      if (running) sled = sleds[i % sleds.size()].ToString();
      FP_TRY(tx.Exec(
          "INSERT INTO instance (id, project_id, name, description, hostname, ncpus, memory, "
          "state, run_state, sled_id, time_run_state_updated, time_created, time_modified) "
          "VALUES (?, ?, ?, '', 'host', 2, 1073741824, ?, ?, ?, 0, 0, 0)",
          Uuid::Random(), slot->f.project.id, "vm-" + std::to_string(i),
          std::string(running ? "vmm" : "no_vmm"), std::string(running ? "running" : "stopped"),
          sled));
    }
    return true;
  });
  if (!ok) {
    std::fprintf(stderr, "populate: %s\n", ok.error().message().c_str());
    std::abort();
  }
  return *slot;
}

void BM_PlaceInstance(benchmark::State& state) {
  Populated& p = RackWith(state.range(0));
  const std::vector<Sled> sleds = SledList(*p.ds).value();
  std::vector<Uuid> candidates;
  for (const Sled& s : sleds) candidates.push_back(s.id);
  for (auto _ : state) {
    auto r = p.ds->Write<bool>([&](Tx& tx) -> Result<bool> {
      auto sled = FP_TRY(PickSledIn(tx, candidates));
      benchmark::DoNotOptimize(sled);
      return Fail(kRollback);
    });
    if (r || r.error().message() != kRollback.message()) state.SkipWithError("placement failed");
  }
}
BENCHMARK(BM_PlaceInstance)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fp::db

BENCHMARK_MAIN();
