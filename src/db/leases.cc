#include "db/leases.h"

#include <fmt/format.h>

namespace fp::db {

namespace {

// The unfinished sagas of coordinators without a lease live at `cutoff` (expiry at or after
// it), `sec`'s own excepted, oldest first. Reads only unfinished sagas (index saga_unfinished).
Result<std::vector<Row>> AdoptableIn(Tx& tx, const std::string& sec, Timestamp cutoff,
                                     int64_t limit) {
  return tx.Query(
      "SELECT id, current_sec, adopt_generation FROM saga "
      "WHERE state IN ('running', 'unwinding') AND current_sec <> ? "
      "AND current_sec NOT IN (SELECT sec_id FROM sec_lease WHERE expires_at >= ?) "
      "ORDER BY time_created, id LIMIT ?",
      sec, cutoff, limit);
}

}  // namespace

Result<SecLeaseTaken> SecLeaseTake(Datastore& ds, const std::string& sec,
                                   const std::string& incarnation, int64_t ttl_us) {
  return ds.Write<SecLeaseTaken>([&](Tx& tx) -> Result<SecLeaseTaken> {
    SecLeaseTaken taken;
    taken.expires_at = tx.now() + ttl_us;
    FP_TRY(
        tx.Exec("INSERT INTO sec_lease (sec_id, incarnation, expires_at, time_renewed) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (sec_id) DO UPDATE SET "
                "incarnation = excluded.incarnation, expires_at = excluded.expires_at, "
                "time_renewed = excluded.time_renewed",
                sec, incarnation, taken.expires_at, tx.now()));
    for (const Row& r :
         FP_TRY(tx.Query("SELECT id, adopt_generation FROM saga WHERE current_sec = ? AND "
                         "state IN ('running', 'unwinding') ORDER BY time_created, id",
                         sec))) {
      taken.own_sagas.push_back(saga::OwnedSaga{FP_TRY(UuidColumn(r, 0)), r.Int(1) + 1});
    }
    FP_TRY(
        tx.Exec("UPDATE saga SET adopt_generation = adopt_generation + 1 WHERE current_sec = ? AND "
                "state IN ('running', 'unwinding')",
                sec));
    return taken;
  });
}

Result<std::optional<Timestamp>> SecLeaseRenew(Datastore& ds, const std::string& sec,
                                               const std::string& incarnation, int64_t ttl_us) {
  using Out = std::optional<Timestamp>;
  return ds.Write<Out>([&](Tx& tx) -> Result<Out> {
    Timestamp expires_at = tx.now() + ttl_us;
    // Inserts if the row is gone; updates only the row this incarnation holds.
    int64_t n =
        FP_TRY(tx.Exec("INSERT INTO sec_lease (sec_id, incarnation, expires_at, time_renewed) "
                       "VALUES (?, ?, ?, ?) ON CONFLICT (sec_id) DO UPDATE SET "
                       "expires_at = excluded.expires_at, time_renewed = excluded.time_renewed "
                       "WHERE sec_lease.incarnation = excluded.incarnation",
                       sec, incarnation, expires_at, tx.now()));
    if (n != 1) return Out();
    return Out(expires_at);
  });
}

Status SecLeaseRelease(Datastore& ds, const std::string& sec, const std::string& incarnation) {
  return ds.Write([&](Tx& tx) -> Status {
    FP_TRY(tx.Exec("UPDATE sec_lease SET expires_at = ? WHERE sec_id = ? AND incarnation = ?",
                   tx.now(), sec, incarnation));
    return Ok();
  });
}

Result<std::vector<saga::OwnedSaga>> SagaAdoptExpired(Datastore& ds, const std::string& sec,
                                                      int64_t grace_us, int64_t limit) {
  using Out = std::vector<saga::OwnedSaga>;
  // A probe first: most of the time there is nothing to adopt, and a write would cost a
  // durable commit every time.
  bool any = FP_TRY(ds.ReadLatest<bool>([&](Tx& tx) -> Result<bool> {
    return !FP_TRY(AdoptableIn(tx, sec, tx.now() - grace_us, 1)).empty();
  }));
  if (!any) return Out();
  // Another server may adopt the same sagas between the probe and the write: the write selects
  // them again, and each update is conditional on the owner it read.
  ds.SyncPoint("saga_adopt:probed");
  return ds.Write<Out>([&](Tx& tx) -> Result<Out> {
    Out adopted;
    for (const Row& r : FP_TRY(AdoptableIn(tx, sec, tx.now() - grace_us, limit))) {
      Uuid id = FP_TRY(UuidColumn(r, 0));
      int64_t n =
          FP_TRY(tx.Exec("UPDATE saga SET current_sec = ?, adopt_generation = adopt_generation + 1 "
                         "WHERE id = ? AND current_sec = ? AND adopt_generation = ?",
                         sec, id, r.Text(1), r.Int(2)));
      if (n == 1) adopted.push_back(saga::OwnedSaga{id, r.Int(2) + 1});
    }
    return adopted;
  });
}

Result<std::vector<SecLease>> SecLeaseList(Datastore& ds) {
  using Out = std::vector<SecLease>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    Out out;
    for (const Row& r : FP_TRY(tx.Query("SELECT sec_id, incarnation, expires_at, time_renewed FROM "
                                        "sec_lease ORDER BY sec_id"))) {
      out.push_back(SecLease{r.Text(0), r.Text(1), r.Int(2), r.Int(3)});
    }
    return out;
  });
}

Result<bool> TaskLeaseAcquire(Datastore& ds, const std::string& task, const std::string& holder,
                              int64_t ttl_us, const std::string& previous) {
  return ds.Write<bool>([&](Tx& tx) -> Result<bool> {
    int64_t n = FP_TRY(
        tx.Exec("INSERT INTO task_lease (task, holder, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (task) DO UPDATE SET holder = excluded.holder, "
                "expires_at = excluded.expires_at "
                "WHERE task_lease.holder IN (excluded.holder, ?) OR task_lease.expires_at < ?",
                task, holder, tx.now() + ttl_us, previous.empty() ? holder : previous, tx.now()));
    return n == 1;
  });
}

Result<bool> TaskLeaseHeldByAnother(Datastore& ds, const std::string& task,
                                    const std::string& holder, const std::string& previous) {
  return ds.Read<bool>([&](Tx& tx) -> Result<bool> {
    auto row = FP_TRY(tx.QueryRow(
        "SELECT 1 FROM task_lease WHERE task = ? AND holder NOT IN (?, ?) AND expires_at >= ?",
        task, holder, previous.empty() ? holder : previous, tx.now()));
    return row.has_value();
  });
}

Status LeaseFenceCheckIn(Tx& tx, const LeaseFence& fence) {
  auto row = FP_TRY(tx.QueryRow("SELECT 1 FROM task_lease WHERE task = ? AND holder = ?",
                                fence.task, fence.holder));
  if (row) return Ok();
  return Fail(Error::Unavailable(fmt::format(
      "this server no longer holds the {} lease (another server took it over, or it was given "
      "up): the lease's holder does that work",
      fence.task)));
}

Result<bool> TaskLeaseRenew(Datastore& ds, const std::string& task, const std::string& holder,
                            int64_t ttl_us) {
  return ds.Write<bool>([&](Tx& tx) -> Result<bool> {
    int64_t n = FP_TRY(tx.Exec("UPDATE task_lease SET expires_at = ? WHERE task = ? AND holder = ?",
                               tx.now() + ttl_us, task, holder));
    return n == 1;
  });
}

Status TaskLeaseRelease(Datastore& ds, const std::string& task, const std::string& holder) {
  return ds.Write([&](Tx& tx) -> Status {
    FP_TRY(tx.Exec("DELETE FROM task_lease WHERE task = ? AND holder = ?", task, holder));
    return Ok();
  });
}

Result<std::optional<std::string>> TaskLeaseHolder(Datastore& ds, const std::string& task) {
  using Out = std::optional<std::string>;
  return ds.Read<Out>([&](Tx& tx) -> Result<Out> {
    auto row = FP_TRY(tx.QueryRow("SELECT holder FROM task_lease WHERE task = ?", task));
    if (!row) return Out();
    return Out(row->Text(0));
  });
}

namespace {

// Whether `holder` names a tenure of an earlier process of server `server`: the server's id
// alone (a server before processes had names), or "server@process" with "#n" or not, where the
// process part holds no '@' (so that server "a" does not take the lease of a server "a@b").
bool IsEarlierProcessOf(const std::string& holder, const std::string& server) {
  if (holder == server) return true;
  if (holder.size() <= server.size() + 1 || holder.compare(0, server.size(), server) != 0 ||
      holder[server.size()] != '@') {
    return false;
  }
  return holder.find('@', server.size() + 1) == std::string::npos;
}

}  // namespace

bool TaskLeaseKeeper::Held() {
  MutexLock lock(mu_);
  Timestamp now = ds_.clock().Now();
  if (held_until_ - now > ttl_us_ / 2) return true;
  if (held_until_ > now) {
    // Holding it, half or less left: renewed within this tenure if the row still names it.
    auto renewed = TaskLeaseRenew(ds_, task_, holder_, ttl_us_);
    if (!renewed) return true;  // cannot tell: held until it runs out by this clock
    if (*renewed) {
      held_until_ = now + ttl_us_;
      return true;
    }
    held_until_ = 0;  // taken over or given up meanwhile: this tenure is over
  }
  // Not holding it (never, lost, or run out by this clock): a new tenure, under a new name, once
  // the last one's name held it.
  if (tenure_held_) {
    ++tenure_;
    holder_ = fmt::format("{}#{}", base_, tenure_);
    tenure_held_ = false;
  }
  if (!looked_for_earlier_) {
    auto row = TaskLeaseHolder(ds_, task_);
    if (!row) return false;
    looked_for_earlier_ = true;
    if (*row && IsEarlierProcessOf(**row, name_)) earlier_ = **row;
  }
  // Most looks find another server holding it, which a read tells without the durable commit
  // of a write. (This server's last tenure's row, or before this process held it an earlier
  // process's, is taken over: its fence then passes nothing.)
  const std::string& previous = held_holder_.empty() ? earlier_ : held_holder_;
  auto other = TaskLeaseHeldByAnother(ds_, task_, holder_, previous);
  if (!other || *other) {
    held_until_ = 0;
    return false;
  }
  auto acquired = TaskLeaseAcquire(ds_, task_, holder_, ttl_us_, previous);
  held_until_ = acquired && *acquired ? now + ttl_us_ : 0;
  if (held_until_ > now) {
    tenure_held_ = true;
    held_holder_ = holder_;
  }
  return held_until_ > now;
}

LeaseFence TaskLeaseKeeper::fence() const {
  MutexLock lock(mu_);
  return {task_, held_holder_};
}

void TaskLeaseKeeper::Release() {
  MutexLock lock(mu_);
  if (held_until_ == 0) return;
  held_until_ = 0;
  (void)TaskLeaseRelease(ds_, task_, holder_);
}

}  // namespace fp::db
