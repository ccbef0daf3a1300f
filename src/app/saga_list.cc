#include "app/saga_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "db/datastore.h"
#include "db/external_ips.h"
#include "db/instances.h"
#include "db/saga_history.h"
#include "db/sagas.h"

namespace fp::app {

namespace {

bool AtRest(saga::SagaState s) {
  return s == saga::SagaState::kDone || s == saga::SagaState::kUnwound ||
         s == saga::SagaState::kStuck;
}

SagaSummary SummaryOf(const db::SagaListed& s) {
  SagaSummary out{s.id,           s.name,       std::string(saga::ToString(s.state)),
                  s.time_created, std::nullopt, std::nullopt};
  if (AtRest(s.state)) out.time_ended = s.time_modified;
  if (s.origin) {
    auto origin = saga::Json::parse(*s.origin, nullptr, false);
    if (origin.is_object() && origin.contains("request_id") && origin["request_id"].is_string()) {
      out.request_id = origin["request_id"].get<std::string>();
    }
  }
  return out;
}

Error ErrorOfData(const std::optional<std::string>& data) {
  return saga::ErrorFromJson(saga::Json::parse(data.value_or("null"), nullptr, false));
}

// What an error says to an operator: an internal error's detail is in the server's log.
std::string Said(const Error& e) {
  return e.kind() == ErrorKind::kInternal ? "an internal error (the server's log has its detail)"
                                          : e.message();
}

// Each node's outcome from its events, in the order the engine writes them.
std::vector<SagaNodeStory> NodesOf(const saga::Json& dag,
                                   const std::vector<db::SagaEventAt>& events) {
  std::vector<SagaNodeStory> nodes;
  if (dag.is_object() && dag.contains("nodes") && dag["nodes"].is_array()) {
    for (const auto& n : dag["nodes"]) {
      SagaNodeStory node;
      node.index = static_cast<int>(nodes.size());
      node.name = n.is_object() ? n.value("name", "") : "";
      node.action = n.is_object() ? n.value("action", "") : "";
      node.outcome = "pending";
      nodes.push_back(std::move(node));
    }
  }
  // In the order the engine writes a node's events: two of them written by one transaction (a
  // database node's start and success) share its time, and the store's order is its key's.
  auto rank = [](saga::SagaEventType t) {
    switch (t) {
      case saga::SagaEventType::kStarted:
        return 0;
      case saga::SagaEventType::kSucceeded:
      case saga::SagaEventType::kFailed:
        return 1;
      case saga::SagaEventType::kUndoStarted:
        return 2;
      case saga::SagaEventType::kUndoFinished:
      case saga::SagaEventType::kUndoFailed:
        return 3;
    }
    return 4;
  };
  std::vector<db::SagaEventAt> ordered = events;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const db::SagaEventAt& a, const db::SagaEventAt& b) {
                     return std::pair(a.event.node_index, rank(a.event.type)) <
                            std::pair(b.event.node_index, rank(b.event.type));
                   });
  for (const db::SagaEventAt& at : ordered) {
    const auto& e = at.event;
    if (e.node_index < 0) continue;
    while (static_cast<size_t>(e.node_index) >= nodes.size()) {
      SagaNodeStory unknown;
      unknown.index = static_cast<int>(nodes.size());
      unknown.outcome = "pending";
      nodes.push_back(std::move(unknown));
    }
    SagaNodeStory& node = nodes[static_cast<size_t>(e.node_index)];
    switch (e.type) {
      case saga::SagaEventType::kStarted:
        node.outcome = "running";
        node.time_started = at.time;
        break;
      case saga::SagaEventType::kSucceeded:
        node.outcome = "succeeded";
        if (!node.time_started) node.time_started = at.time;
        node.time_ended = at.time;
        break;
      case saga::SagaEventType::kFailed:
        node.outcome = "failed";
        if (!node.time_started) node.time_started = at.time;
        node.time_ended = at.time;
        node.error = ErrorOfData(e.data);
        break;
      case saga::SagaEventType::kUndoStarted:
        node.outcome = "undoing";
        break;
      case saga::SagaEventType::kUndoFinished:
        node.outcome = "undone";
        node.time_ended = at.time;
        break;
      case saga::SagaEventType::kUndoFailed:
        node.outcome = "undo_failed";
        node.time_ended = at.time;
        node.error = ErrorOfData(e.data);
        break;
    }
  }
  return nodes;
}

std::string Explain(const SagaStory& s) {
  auto find = [&](const char* outcome) -> const SagaNodeStory* {
    for (const auto& n : s.nodes) {
      if (n.outcome == outcome) return &n;
    }
    return nullptr;
  };
  const std::string& state = s.summary.state;
  if (state == "done") return "completed: every node succeeded";
  if (state == "stuck") {
    const SagaNodeStory* undo = find("undo_failed");
    std::string why = s.error ? Said(*s.error) : "an undo failed";
    return undo ? fmt::format(
                      "stuck: undoing node \"{}\" failed: {}; what the saga did is only "
                      "partly undone, and an operator must repair it",
                      undo->name, why)
                : fmt::format("stuck: {}; an operator must repair it", why);
  }
  const SagaNodeStory* failed = find("failed");
  std::string why = failed && failed->error ? Said(*failed->error)
                    : s.error               ? Said(*s.error)
                                            : "an error";
  if (state == "unwound") {
    return failed ? fmt::format(
                        "unwound: node \"{}\" failed: {}; what the nodes before it did "
                        "was undone",
                        failed->name, why)
                  : fmt::format("unwound: {}", why);
  }
  if (state == "unwinding") {
    return fmt::format("unwinding after node \"{}\" failed: {}", failed ? failed->name : "?", why);
  }
  const SagaNodeStory* running = find("running");
  return running ? fmt::format("running: node \"{}\" is in progress", running->name)
                 : "running: between nodes (or waiting for recovery after a restart)";
}

}  // namespace

Status SagaList::MayList(const Actor& actor) const { return RequireFleetAdmin(actor); }

Result<std::vector<SagaSummary>> SagaList::List(const Actor& actor,
                                                const std::optional<std::string>& state,
                                                const std::optional<std::string>& request_id,
                                                const std::optional<Uuid>& after, int64_t limit) {
  FP_CHECK_OK(MayList(actor));
  db::SagaFilter filter{std::nullopt, request_id};
  if (state) {
    filter.state = saga::ParseSagaState(*state);
    if (!filter.state) {
      return Fail(Error::InvalidRequest(fmt::format(
          "unknown saga state \"{}\": expected running, unwinding, done, unwound or stuck",
          *state)));
    }
  }
  std::vector<SagaSummary> out;
  for (const db::SagaListed& s : FP_TRY(db::SagaListPage(ds_, filter, after, limit))) {
    out.push_back(SummaryOf(s));
  }
  return out;
}

Result<SagaStory> SagaList::View(const Actor& actor, const Uuid& id) {
  FP_CHECK_OK(MayList(actor));
  db::SagaExplained e = FP_TRY(db::SagaExplain(ds_, id));
  SagaStory story;
  story.summary = SummaryOf(e.saga);
  saga::Json dag = saga::Json::parse(e.dag, nullptr, false);
  story.params = dag.is_object() ? dag.value("params", saga::Json::object()) : saga::Json::object();
  story.origin = e.saga.origin ? saga::Json::parse(*e.saga.origin, nullptr, false) : nullptr;
  if (story.origin.is_discarded()) story.origin = nullptr;
  story.nodes = NodesOf(dag, e.events);
  if (e.saga.state == saga::SagaState::kUnwound || e.saga.state == saga::SagaState::kStuck ||
      e.saga.state == saga::SagaState::kUnwinding) {
    if (e.result) story.error = ErrorOfData(e.result);
  }
  // What it acts on, by the ids its parameters name.
  story.targets = saga::Json::object();
  auto id_param = [&](const char* key) -> std::optional<Uuid> {
    if (!story.params.is_object() || !story.params.contains(key) ||
        !story.params[key].is_string()) {
      return std::nullopt;
    }
    return Uuid::Parse(story.params[key].get<std::string>());
  };
  if (auto instance = id_param("instance_id")) {
    saga::Json t{{"id", instance->ToString()}};
    if (auto i = db::InstanceAnyState(ds_, *instance)) t["name"] = i->name;
    story.targets["instance"] = t;
  }
  if (auto ip = id_param("ip_id")) {
    saga::Json t{{"id", ip->ToString()}};
    auto found =
        ds_.Read<model::ExternalIp>([&](db::Tx& tx) { return db::ExternalIpGetIn(tx, *ip); });
    if (found) {
      t["kind"] = std::string(model::ToString(found->kind));
      t["ip"] = found->ip.ToString();
      if (found->name) t["name"] = *found->name;
    }
    story.targets["external_ip"] = t;
  }
  for (const char* key : {"src_sled_id", "dst_sled_id"}) {
    if (auto sled = id_param(key))
      story.targets[std::string(key).substr(0, 3) + "_sled"] = sled->ToString();
  }
  story.explanation = Explain(story);
  return story;
}

}  // namespace fp::app
