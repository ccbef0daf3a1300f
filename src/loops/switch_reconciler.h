#pragma once

// One switch agent as the NAT reconciler (nat_reconciler.h) drives it: its Sync of the change
// feed, its heartbeat (Check), the whole-table reload of an agent that restarted empty and the
// repair of one that drifted, and what it reports to /metrics. Thread-safe: exchanges with the
// switch are serialized.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agents/agents.h"
#include "common/error.h"
#include "common/mutex.h"
#include "db/datastore.h"
#include "db/nat.h"
#include "loops/nat_reconciler.h"

namespace fp::loops {

// How many of `changes` (a read of the change feed of at most `limit`) go in one batch to a
// switch: all of them, unless the read was cut at `limit` right after a removal. The addition
// that may follow it (a retarget: a floating IP moved, an instance migrated) must reach the
// switch in the same batch, which the switch applies in one step, so that the address is never
// absent in between: that removal waits for the next batch.
size_t BatchLength(const std::vector<db::NatFeedChange>& changes, int64_t limit);

// How many buckets a drift repair splits a table of about `entries` into (agents.h:
// NatEntryBucket): some 24 entries each, so that a lost entry costs its bucket's few.
uint32_t NatBucketCount(int64_t entries);

class SwitchReconciler {
 public:
  // The most changes one exchange with the switch carries.
  static constexpr int64_t kBatch = 500;

  SwitchReconciler(db::Datastore& ds, DesiredNat& desired,
                   std::shared_ptr<agents::SwitchAgentClient> client);

  // The NAT feed after version `after`, read once for every switch of a Sync (NatReconciler):
  // a switch at `after` or beyond takes its changes from it instead of reading its own.
  using SharedFeed = FeedRead;
  // That read, made when the first switch of the Sync needs it, at most once; never if none
  // does. Thread-safe (the switches sync at once).
  class SharedFeedOnce {
   public:
    explicit SharedFeedOnce(std::function<std::optional<SharedFeed>()> read)
        : read_(std::move(read)) {}
    const SharedFeed* Get();

   private:
    std::function<std::optional<SharedFeed>()> read_;
    std::once_flag once_;
    std::optional<SharedFeed> feed_;
  };

  // Sync; `unreachable` tells a switch that did not answer from one that refused. `shared`:
  // a feed read for every switch (used only when it covers this one's position and holds
  // every change to its current version; otherwise this switch reads its own).
  //
  // Group sync: a caller that waited for the exchange in flight returns at once, reading
  // nothing, if a sync whose read of the feed began after the caller came (and so after its
  // commits) has since brought the switch to everything that read held. `came`: what
  // DesiredNat::feed_reads_begun() said when the caller came, after its commits (by default,
  // when this is called).
  Status Sync(bool& unreachable, const agents::CallContext& context = {},
              SharedFeedOnce* shared = nullptr, std::optional<int64_t> came = std::nullopt);
  // The generation the switch acknowledged at its last exchange, if that exchange answered.
  std::optional<int64_t> answered_generation() const;

  Result<bool> Repair();

  // The heartbeat: where the switch is, and what it needs. `lead`: this server reloads and
  // repairs (with several servers, the lease holder). A switch that answers exactly the
  // desired table of DesiredNat::Recent(`reuse_for`) is judged on it without reading the
  // datastore (an idle server's heartbeats read it once per `reuse_for`, not once each);
  // one that answers anything else is judged at the datastore's current version.
  Status Check(bool lead, MonoDuration reuse_for = MonoDuration::zero());

  // The switch's generation now (for garbage collection).
  Result<int64_t> Generation();

  SwitchNatStatus Snapshot() const;

  agents::SwitchAgentClient& client() { return *client_; }

 private:
  // Asks the switch where it is; records whether it answered, and counts a restart when it
  // answers from another run than the last answer did (`restarted`, if given, says so).
  Result<agents::NatStatus> Ask(bool* restarted = nullptr) FP_REQUIRES(sync_mu_);

  // Records an exchange: the generation the switch reported, or the error it failed with.
  void Answered(std::optional<int64_t> generation, const Error* error) FP_EXCLUDES(status_mu_);

  template <typename T, typename Exchange>
  Result<T> UnlessHung(Exchange exchange) FP_REQUIRES(sync_mu_);

  Status SyncLocked(const agents::CallContext& context = {}, SharedFeedOnce* shared = nullptr)
      FP_REQUIRES(sync_mu_);

  // Replaces the table of a switch found at `at` (empty, or restarted) with the desired one.
  Status Reload(const agents::NatStatus& at, bool restarted) FP_REQUIRES(sync_mu_);

  Result<bool> RepairLocked() FP_REQUIRES(sync_mu_);

  struct Hung {
    MonoTime until;
    Error error;
  };

  db::Datastore& ds_;
  DesiredNat& desired_;
  const std::shared_ptr<agents::SwitchAgentClient> client_;
  // Held across each exchange with the switch; status_mu_ is taken inside it, never around it.
  Mutex sync_mu_ FP_ACQUIRED_BEFORE(status_mu_);
  // The last exchange's timeout and the end of its hold-off; reset by any exchange that ends
  // otherwise.
  std::optional<Hung> hung_ FP_GUARDED_BY(sync_mu_);
  // The switch's run and generation as of our last successful exchange; the generation is
  // unknown after any error, so the next Sync asks the switch first.
  std::optional<std::string> known_boot_ FP_GUARDED_BY(sync_mu_);
  std::optional<int64_t> known_generation_ FP_GUARDED_BY(sync_mu_);
  // The run of the switch's last answer to Ask: unlike known_boot_ (cleared after a reload or a
  // repair, so that the next change asks first), never cleared, so that every restart is
  // counted however it is found.
  std::optional<std::string> last_boot_seen_ FP_GUARDED_BY(sync_mu_);
  bool refused_ FP_GUARDED_BY(sync_mu_) = false;  // the last Sync's failure was the switch refusing
  // The number of the last read of the feed (DesiredNat::BeginFeedRead) whose every change the
  // switch acknowledged: the group sync's test.
  int64_t covered_ FP_GUARDED_BY(sync_mu_) = 0;
  std::atomic<int64_t> waiting_syncs_{0};  // Sync callers waiting for sync_mu_
  mutable Mutex status_mu_;
  SwitchNatStatus status_ FP_GUARDED_BY(status_mu_);
  bool ever_answered_ FP_GUARDED_BY(status_mu_) = false;
};

}  // namespace fp::loops
