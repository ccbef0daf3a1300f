#include "saga/dag.h"

#include <fmt/format.h>

namespace fp::saga {

namespace {

std::string_view KindName(ErrorKind k) {
  switch (k) {
    case ErrorKind::kInvalidRequest:
      return "invalid_request";
    case ErrorKind::kInvalidValue:
      return "invalid_value";
    case ErrorKind::kObjectAlreadyExists:
      return "already_exists";
    case ErrorKind::kQuotaExceeded:
      return "quota_exceeded";
    case ErrorKind::kUnauthenticated:
      return "unauthenticated";
    case ErrorKind::kForbidden:
      return "forbidden";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kUnprocessableEntity:
      return "unprocessable";
    case ErrorKind::kTooManyRequests:
      return "too_many_requests";
    case ErrorKind::kServiceUnavailable:
      return "unavailable";
    case ErrorKind::kInsufficientCapacity:
      return "insufficient_capacity";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

}  // namespace

Json ErrorToJson(const Error& e) {
  return Json{{"kind", KindName(e.kind())},
              {"message", e.message()},
              {"retry_after", e.retry_after_seconds()}};
}

Error ErrorFromJson(const Json& j) {
  // A result that is not an error object (a corrupt log, a store's test double) is no error
  // anyone described: internal, rather than an exception out of a transaction.
  if (!j.is_object()) return Error::Internal("unknown error");
  std::string kind = j.value("kind", "internal");
  std::string message = j.value("message", "unknown error");
  for (ErrorKind k :
       {ErrorKind::kInvalidRequest, ErrorKind::kInvalidValue, ErrorKind::kObjectAlreadyExists,
        ErrorKind::kQuotaExceeded, ErrorKind::kUnauthenticated, ErrorKind::kForbidden,
        ErrorKind::kNotFound, ErrorKind::kUnprocessableEntity, ErrorKind::kTooManyRequests,
        ErrorKind::kServiceUnavailable, ErrorKind::kInsufficientCapacity, ErrorKind::kInternal}) {
    if (KindName(k) == kind) {
      if (k == ErrorKind::kServiceUnavailable) {
        return Error::Unavailable(message, j.value("retry_after", 1));
      }
      if (k == ErrorKind::kTooManyRequests) {
        return Error::TooManyRequests(message, j.value("retry_after", 1));
      }
      return Error(k, message);
    }
  }
  return Error::Internal(message);
}

Result<const Json*> ActionContext::Output(const std::string& node) const {
  auto it = outputs_.find(node);
  if (it == outputs_.end()) {
    return Fail(Error::Internal(fmt::format(
        "saga node \"{}\" looked up the output of \"{}\", which has not succeeded", node_, node)));
  }
  return &it->second;
}

void ActionRegistry::Add(Action action) {
  if (!action.run == !action.run_in_tx || actions_.count(action.name) != 0 ||
      (action.undo && action.undo_in_tx)) {
    std::fprintf(stderr, "saga action \"%s\" is registered twice or malformed\n",
                 action.name.c_str());
    std::abort();
  }
  std::string name = action.name;
  actions_.emplace(std::move(name), std::move(action));
}

const Action* ActionRegistry::Find(const std::string& name) const {
  auto it = actions_.find(name);
  return it == actions_.end() ? nullptr : &it->second;
}

std::string SagaDag::ToText() const {
  // The keys in the order nlohmann writes its sorted objects: "name", "nodes", "params"; in a
  // node "action", "name".
  auto append_string = [](std::string& out, const std::string& s) { out += Json(s).dump(); };
  std::string out = R"({"name":)";
  append_string(out, name);
  out += R"(,"nodes":[)";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"action":)";
    append_string(out, nodes[i].action);
    out += R"(,"name":)";
    append_string(out, nodes[i].name);
    out += '}';
  }
  out += R"(],"params":)";
  out += params.dump();
  out += '}';
  return out;
}

Result<SagaDag> SagaDag::FromJson(const Json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("nodes") ||
      !j["nodes"].is_array()) {
    return Fail(Error::Internal("corrupt saga DAG"));
  }
  SagaDag dag;
  dag.name = j["name"].get<std::string>();
  dag.params = j.value("params", Json::object());
  for (const Json& n : j["nodes"]) {
    if (!n.is_object() || !n.contains("name") || !n.contains("action") || !n["name"].is_string() ||
        !n["action"].is_string()) {
      return Fail(Error::Internal("corrupt saga DAG node"));
    }
    dag.nodes.push_back(Node{n["name"].get<std::string>(), n["action"].get<std::string>()});
  }
  return dag;
}

}  // namespace fp::saga
