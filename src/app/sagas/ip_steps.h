#pragma once

// What ip_attach and ip_detach share: the output of their `begin` node, their `dataplane` node
// (the switch, then the sled's port), and the reply rebuilt from their last node's output.
// (omicron-behaviour.md §4.1-§4.3.)

#include <optional>
#include <string>

#include "app/sagas/json.h"
#include "app/sagas/records.h"
#include "app/sagas/sagas.h"

namespace fp::db {
class Datastore;
struct AttachStep;
}  // namespace fp::db

namespace fp::app {

// The output of node `begin`: the IP the saga moves, whether it moves it at all (`do_saga`:
// false when it already is where the operation asks), and the sled of the instance if it runs
// on one (its port then changes). An attach that moves a floating IP from another instance
// (allow_reassociation) names that instance and its sled, if it ran on one.
struct IpBegun {
  Uuid ip_id;
  bool do_saga = false;
  std::optional<Uuid> sled_id;
  IpAddr ip;
  std::optional<Uuid> from_instance_id;
  std::optional<Uuid> from_sled_id;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(IpBegun, ip_id, do_saga, sled_id, ip,
                                                from_instance_id, from_sled_id)

IpBegun BegunOf(const db::AttachStep& step);

// The output of node `complete` (ip_detach's adds `did_detach`): the IP's row as the node's
// transaction left it, which the reply is built from rather than from a later read that a
// concurrent detach or instance delete could already have changed. Sagas logged before the
// row was recorded carry only `ip_id`.
struct IpCompleted {
  Uuid ip_id;
  std::optional<model::ExternalIp> ip;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(IpCompleted, ip_id, ip)

// The reply of an attach or detach saga from its last node's output: the recorded row, or for
// a saga logged before rows were recorded, the row read again. Errors: Internal for an output
// that does not decode; the datastore's.
Result<model::ExternalIp> IpOfOutcome(db::Datastore& ds, const saga::Json& output);

// The dataplane node of ip_attach (`attach`) or ip_detach: nothing to do unless the begin node
// moved the IP of an instance that runs on a sled; then tells the switch and the sled's port.
// A move (from_instance_id) first gives the address to the new instance's port, then tells the
// switches (which retarget it in one change), then takes it from the old instance's port (best
// effort: that sled may be the one that failed; the sled watcher finishes the job when it
// answers again). Unlogged: on failure it takes back what it did on the sled, so that it
// leaves nothing behind; the begin node's undo puts the NAT row back.
Result<saga::Json> RunDataplane(SagaDeps& d, const saga::ActionContext& ctx,
                                const Uuid& instance_id, bool attach);
// Its undo on the sled's port (best effort: the sled watcher reconciles ports).
Status UndoPortChange(SagaDeps& d, const saga::ActionContext& ctx, const Uuid& instance_id,
                      bool was_attach);

// The `dataplane` action named `name` (RunDataplane, UndoPortChange) of a saga whose parameters
// P name the instance.
template <class P>
saga::Action DataplaneAction(std::string name, SagaDeps& d, bool attach) {
  return saga::Action{.name = std::move(name),
                      .run = [&d, attach](const saga::ActionContext& ctx) -> Result<saga::Json> {
                        auto p = FP_TRY(ParamsOf<P>(ctx));
                        return RunDataplane(d, ctx, p.instance_id, attach);
                      },
                      .undo = [&d, attach](const saga::ActionContext& ctx) -> Status {
                        auto p = FP_TRY(ParamsOf<P>(ctx));
                        return UndoPortChange(d, ctx, p.instance_id, attach);
                      },
                      .unlogged = true};
}

}  // namespace fp::app
