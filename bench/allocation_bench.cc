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

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>

#include "db/external_ips.h"
#include "db/ip_allocation.h"
#include "db/ip_pools.h"
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

}  // namespace
}  // namespace fp::db

BENCHMARK_MAIN();
