#pragma once

// The one source of randomness: ids, retry jitter, placement and secrets are drawn through an
// injected Random, so that a simulation seeded once replays the same run (FoundationDB's
// deterministic random). Only common/ and the composition root draw from the machine directly
// (scripts/check-seams proves it); tests may make fixture ids with Uuid::Random().

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/mutex.h"
#include "common/time.h"
#include "common/uuid.h"

namespace fp {

class Random {
 public:
  virtual ~Random() = default;

  // 64 uniformly distributed bits. Thread-safe.
  virtual uint64_t Next() = 0;
  // Fills `out` with `n` bytes; SystemRandom's are the kernel's, fit for secrets (session
  // tokens, salts). Thread-safe.
  virtual void Fill(uint8_t* out, size_t n) = 0;

  // A value spread evenly over [0, bound) (0 when bound is 0): jitter, choices.
  uint64_t Below(uint64_t bound);
  // A fresh random (version 4) id, from Fill.
  Uuid NewUuid();
  // A fresh time-ordered (RFC 9562 version 7) id for wall time `now` (see Uuid::TimeOrdered).
  Uuid NewTimeOrderedUuid(Timestamp now);
  // An independent source for a part whose draws must not move this one's sequence (the
  // datastore engine's commit markers and backoff jitter, which one engine draws and another
  // does not): the machine's for SystemRandom, a sequence seeded from one draw of this one for
  // SeededRandom.
  virtual std::shared_ptr<Random> Fork() = 0;
};

// The machine's randomness: Fill from the kernel (getrandom), Next from a process-wide sequence
// seeded from it once (no system call per draw).
class SystemRandom final : public Random {
 public:
  uint64_t Next() override;
  void Fill(uint8_t* out, size_t n) override;
  std::shared_ptr<Random> Fork() override { return std::make_shared<SystemRandom>(); }
};

// One SystemRandom for the process: what an option that takes a Random means when left unset.
Random& MachineRandom();

// A deterministic sequence from a seed (splitmix64): the same seed and the same order of draws
// give the same values. For the simulation and tests; never for secrets in production.
class SeededRandom final : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : state_(seed) {}
  uint64_t Next() override;
  void Fill(uint8_t* out, size_t n) override;
  std::shared_ptr<Random> Fork() override { return std::make_shared<SeededRandom>(Next()); }

 private:
  Mutex mu_;
  uint64_t state_ FP_GUARDED_BY(mu_);
};

}  // namespace fp
