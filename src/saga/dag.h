#pragma once

// What a saga is made of: actions registered by name, and a DAG (a chain of nodes naming
// actions, with the saga's parameters) that a SagaExecutor runs (saga/saga.h).
//
// Rules for action writers (Steno's, which this engine follows):
//  - An action may run more than once (after a crash, or under fault injection): it must be
//    idempotent, and anything non-deterministic a later node needs (a new id, an allocated
//    address) must be created in a node whose *output* records it.
//  - An action that fails must leave no side effect: a failed node is never undone.
//  - An undo may also run more than once. An undo that fails leaves the saga `stuck`.
//  - Nodes share values only through recorded outputs (ActionContext::Lookup).

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "common/error.h"
#include "common/uuid.h"
#include "saga/store.h"

namespace fp::saga {

using Json = nlohmann::json;

// What an action sees: the saga's parameters and the outputs of the nodes before it.
class ActionContext {
 public:
  ActionContext(const Uuid& saga_id, const Json& params, const std::map<std::string, Json>& outputs,
                std::string node, std::string_view origin = {}, std::string_view request_id = {})
      : saga_id_(saga_id),
        params_(params),
        outputs_(outputs),
        node_(std::move(node)),
        origin_(origin),
        request_id_(request_id) {}

  const Uuid& saga_id() const { return saga_id_; }
  // Who started the saga, as its starter described it (SagaOrigin::Describe; opaque to the
  // engine), or empty.
  std::string_view origin() const { return origin_; }
  // The id of the request that started the saga, when this run is that request's own
  // (SagaOrigin::request_id); empty otherwise, e.g. for a saga resumed after a restart, whose
  // origin() says it.
  std::string_view request_id() const { return request_id_; }
  const Json& params() const { return params_; }
  const std::string& node() const { return node_; }
  // The recorded output of an earlier node, valid while the action runs; Internal if that node
  // has not succeeded.
  Result<const Json*> Output(const std::string& node) const;

 private:
  const Uuid& saga_id_;
  const Json& params_;
  const std::map<std::string, Json>& outputs_;
  std::string node_;
  std::string_view origin_;
  std::string_view request_id_;
};

// An action function that runs inside the store's write transaction, returning `R`. Built from
// any callable `(Tx&, const ActionContext&) -> R` whose `Tx` is the store's transaction type, a
// class derived from StoreTx (db::Tx for the datastore): the engine passes the StoreTx the store
// opened, and the function gets it back as its own type. An action registered with the
// executor of another store's type is a programming error: the cast is checked and aborts.
template <typename R>
class TxFunction {
 public:
  TxFunction() = default;
  template <typename F>
  requires(!std::is_same_v<std::decay_t<F>, TxFunction>)
      TxFunction(F f)  // NOLINT(google-explicit-constructor): written as `.run_in_tx = lambda`
      : fn_(Wrap<typename TxOf<decltype(&F::operator())>::type>(std::move(f))) {}

  explicit operator bool() const { return static_cast<bool>(fn_); }
  R operator()(StoreTx& tx, const ActionContext& ctx) const { return fn_(tx, ctx); }

 private:
  // The transaction type of a lambda's (or function object's) call operator.
  template <typename M>
  struct TxOf;
  template <typename C, typename T>
  struct TxOf<R (C::*)(T&, const ActionContext&) const> {
    using type = T;
  };
  template <typename C, typename T>
  struct TxOf<R (C::*)(T&, const ActionContext&)> {
    using type = T;
  };

  template <typename T, typename F>
  static std::function<R(StoreTx&, const ActionContext&)> Wrap(F f) {
    static_assert(std::is_base_of_v<StoreTx, T>, "the transaction must be a StoreTx");
    if constexpr (std::is_same_v<T, StoreTx>) {
      return f;
    } else {
      return [f = std::move(f)](StoreTx& tx, const ActionContext& ctx) -> R {
        auto* concrete = dynamic_cast<T*>(&tx);
        if (concrete == nullptr) {
          std::fprintf(stderr, "saga action \"%s\" runs in a transaction of another store\n",
                       ctx.node().c_str());
          std::abort();
        }
        return f(*concrete, ctx);
      };
    }
  }

  std::function<R(StoreTx&, const ActionContext&)> fn_;
};

// An action, registered under a unique name. Exactly one of `run` and `run_in_tx` is set:
//  - run: talks to something outside the database (an agent). Logged as started, run, then
//    logged as succeeded: two durable commits.
//  - run_in_tx: a pure database change. Its effect and its "succeeded" event commit in one
//    transaction: one durable commit, and the effect happens exactly once.
// Likewise at most one of `undo` and `undo_in_tx`.
struct Action {
  std::string name;
  std::function<Result<Json>(const ActionContext&)> run;
  TxFunction<Result<Json>> run_in_tx;
  std::function<Status(const ActionContext&)> undo;
  TxFunction<Status> undo_in_tx;
  // For `run` actions that are idempotent and leave no effect when they fail: no "started" is
  // logged, and "succeeded" is written in the same transaction as the next node's commit.
  // After a crash such a node simply runs again. Saves two durable commits.
  bool unlogged = false;
  // For `run_in_tx` actions whose transactions all change one row: the node's transaction joins
  // the store's write queue (StoreTx::JoinWriteQueue) before anything else. (No action of the
  // control plane's sets it now: the attach's and detach's steps left the queue on 2026-12-06.)
  bool joins_write_queue = false;
};

// Actions by name. Build it once at start-up; it is read-only afterwards (thread-safe reads).
class ActionRegistry {
 public:
  // Aborts on a duplicate name or an action with neither run function: a programming error.
  void Add(Action action);
  const Action* Find(const std::string& name) const;

 private:
  std::map<std::string, Action> actions_;
};

struct Node {
  std::string name;    // unique within the saga; the key for ActionContext::Output
  std::string action;  // a registered action's name
};

// A saga definition: its kind, parameters, and nodes in execution order (a chain: each node
// depends on every node before it, and undo runs in reverse).
struct SagaDag {
  std::string name;
  Json params;
  std::vector<Node> nodes;

  // {"name", "nodes": [{"action", "name"}...], "params"} as JSON text in the form nlohmann
  // writes (keys sorted, no spaces), the parameters dumped in place: what a saga's row keeps.
  std::string ToText() const;
  static Result<SagaDag> FromJson(const Json& j);
};

// Maps an Error to the JSON stored in the log, and back.
Json ErrorToJson(const Error& e);
Error ErrorFromJson(const Json& j);

}  // namespace fp::saga
