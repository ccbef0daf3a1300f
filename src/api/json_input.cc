#include "api/json_input.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

namespace fp::api {

Error BodyError(std::string_view field, std::string_view message) {
  return Error::InvalidRequest(
      fmt::format("unable to parse JSON body: field \"{}\": {}", field, message));
}

namespace {

// Objects and arrays nest at most this deep in a body, as with serde_json's recursion limit.
constexpr size_t kMaxDepth = 128;

// Builds the document of a request body while nlohmann parses it, refusing what its own DOM
// builder lets through: a key given twice in one object (which it silently overwrites), a
// number beyond the range of a double (which it reports by throwing out_of_range, with no
// field to name) and nesting deeper than kMaxDepth. Each refusal names the field's path in the
// notation of Fields ("a.b", "list[2].c"). Not thread-safe; one per parse.
class BodyBuilder final : public nlohmann::json_sax<Json> {
 public:
  Result<Json> Take() {
    if (error_) return Fail(*error_);
    return std::move(root_);
  }

  bool null() override { return Put(Json(nullptr)); }
  bool boolean(bool v) override { return Put(Json(v)); }
  bool number_integer(number_integer_t v) override { return Put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Put(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Put(Json(v)); }
  bool string(string_t& v) override { return Put(Json(std::move(v))); }
  bool binary(binary_t&) override { return Refuse(Syntax(0)); }  // not in JSON text
  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    Frame& top = stack_.back();
    auto [it, inserted] = top.value->get_ref<Json::object_t&>().try_emplace(k, nullptr);
    if (!inserted) {
      // serde's wording, as Oxide answers a repeated field.
      return Refuse(BodyError(PendingPath(k), fmt::format("duplicate field `{}`", Shown(k))));
    }
    top.key = std::move(k);
    top.slot = &it->second;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    if (error_) return false;  // already refused by this builder
    if (ex.id == 406) {        // out_of_range: a number that is not a finite double
      std::string path = stack_.empty() ? std::string() : PendingPath(stack_.back().key);
      std::string what = fmt::format("number out of range (at byte {})", position);
      return Refuse(path.empty() ? Error::InvalidRequest("unable to parse JSON body: " + what)
                                 : BodyError(path, what));
    }
    return Refuse(Syntax(position));
  }

 private:
  struct Frame {
    Json* value;           // the object or array being filled
    std::string key;       // objects: the key whose value comes next
    Json* slot = nullptr;  // objects: where that value goes
  };

  static Error Syntax(std::size_t position) {
    return Error::InvalidRequest(fmt::format(
        "unable to parse JSON body: the request body is not valid JSON (at byte {})", position));
  }

  // A key as shown in messages: long keys are cut (the body may be a megabyte of key).
  static std::string Shown(std::string_view key) {
    constexpr size_t kMax = 64;
    return key.size() <= kMax ? std::string(key) : fmt::format("{}...", key.substr(0, kMax));
  }

  bool Refuse(Error e) {
    if (!error_) error_ = std::move(e);
    return false;
  }

  // Places a value where the innermost container expects its next one.
  Json* Put(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.value->is_array()) {
      top.value->push_back(std::move(v));
      return &top.value->back();
    }
    *top.slot = std::move(v);
    return top.slot;
  }

  bool Open(Json container) {
    if (stack_.size() >= kMaxDepth) {
      return Refuse(Error::InvalidRequest(fmt::format(
          "unable to parse JSON body: objects and arrays nest deeper than {} levels", kMaxDepth)));
    }
    // An array's element stays put while it is open: nothing is added to the array until
    // the element closes. An object's values live in map nodes, which never move.
    stack_.push_back(Frame{Put(std::move(container)), {}, nullptr});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  // The path of the value that comes next in the innermost container: the container's own
  // path, then `key` (objects) or the next index (arrays). Built only for messages.
  std::string PendingPath(std::string_view key) const {
    std::string path;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      bool innermost = i + 1 == stack_.size();
      if (f.value->is_array()) {
        // An open child is the array's last element; the pending value comes after it.
        size_t index = innermost ? f.value->size() : f.value->size() - 1;
        path += fmt::format("[{}]", index);
      } else {
        std::string_view k = innermost ? key : std::string_view(f.key);
        if (!path.empty()) path += '.';
        path += Shown(k);
      }
    }
    return path;
  }

  Json root_;
  std::vector<Frame> stack_;
  std::optional<Error> error_;
};

}  // namespace

Result<Json> ParseBodyObject(const std::string& body, bool allow_empty) {
  if (body.empty() && allow_empty) return Json::object();
  BodyBuilder builder;
  try {
    Json::sax_parse(body, &builder, Json::input_format_t::json, /*strict=*/true);
  } catch (const Json::exception& e) {
    // The builder answers every parse error itself; this is only a safety net.
    return Fail(Error::InvalidRequest(fmt::format(
        "unable to parse JSON body: the request body is not valid JSON ({})", e.what())));
  }
  Json j = FP_TRY(builder.Take());
  if (!j.is_object()) {
    return Fail(Error::InvalidRequest("unable to parse JSON body: expected a JSON object"));
  }
  return j;
}

namespace {
std::string_view TypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}
}  // namespace

std::string Fields::FieldPath(std::string_view field) const {
  return path_.empty() ? std::string(field) : fmt::format("{}.{}", path_, field);
}

bool Fields::Has(std::string_view field) const { return obj_.contains(field); }

bool Fields::IsNullOrAbsent(std::string_view field) const {
  auto it = obj_.find(field);
  return it == obj_.end() || it->is_null();
}

Result<const Json*> Fields::Get(std::string_view field) const {
  auto it = obj_.find(field);
  if (it == obj_.end()) {
    return Fail(Error::InvalidRequest(
        fmt::format("unable to parse JSON body: missing field \"{}\"", FieldPath(field))));
  }
  return &*it;
}

Error Fields::TypeError(std::string_view field, std::string_view expected) const {
  auto it = obj_.find(field);
  return BodyError(FieldPath(field),
                   fmt::format("expected {}, got {}", expected,
                               it == obj_.end() ? std::string_view("nothing") : TypeName(*it)));
}

Result<std::string> Fields::String(std::string_view field) const {
  const Json* v = FP_TRY(Get(field));
  if (!v->is_string()) return Fail(TypeError(field, "a string"));
  return v->get<std::string>();
}

Result<std::optional<std::string>> Fields::OptString(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<std::string>();
  return std::optional<std::string>(FP_TRY(String(field)));
}

Result<std::string> Fields::Description(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  if (s.size() > 512) {
    return Fail(BodyError(FieldPath(field),
                          fmt::format("may contain at most 512 characters (got {})", s.size())));
  }
  return s;
}

Result<std::optional<std::string>> Fields::OptDescription(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<std::string>();
  return std::optional<std::string>(FP_TRY(Description(field)));
}

Result<bool> Fields::Bool(std::string_view field) const {
  const Json* v = FP_TRY(Get(field));
  if (!v->is_boolean()) return Fail(TypeError(field, "a boolean"));
  return v->get<bool>();
}

Result<std::optional<bool>> Fields::OptBool(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<bool>();
  return std::optional<bool>(FP_TRY(Bool(field)));
}

Result<Name> Fields::NameField(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  auto name = Name::Parse(s);
  if (!name) return Fail(BodyError(FieldPath(field), name.error().message()));
  return *name;
}

Result<std::optional<Name>> Fields::OptName(std::string_view field) const {
  if (IsNullOrAbsent(field)) return std::optional<Name>();
  return std::optional<Name>(FP_TRY(NameField(field)));
}

Result<NameOrId> Fields::NameOrIdField(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  auto v = NameOrId::Parse(s);
  if (!v) return Fail(BodyError(FieldPath(field), v.error().message()));
  return *v;
}

Result<IpAddr> Fields::Ip(std::string_view field) const {
  std::string s = FP_TRY(String(field));
  auto ip = IpAddr::Parse(s);
  if (!ip) return Fail(BodyError(FieldPath(field), ip.error().message()));
  return *ip;
}

Result<uint64_t> Fields::Unsigned(std::string_view field, uint64_t max) const {
  const Json* v = FP_TRY(Get(field));
  // A negative integer is number_integer; a positive one is number_unsigned (nlohmann's
  // parser stores non-negative integers unsigned).
  if (!v->is_number_unsigned() || v->get<uint64_t>() > max) {
    return Fail(BodyError(FieldPath(field), fmt::format("expected an integer from 0 to {}", max)));
  }
  return v->get<uint64_t>();
}

Result<Fields> Fields::Object(std::string_view field) const {
  const Json* v = FP_TRY(Get(field));
  if (!v->is_object()) return Fail(TypeError(field, "an object"));
  return Fields(*v, FieldPath(field));
}

Result<Query> Query::Parse(const std::string& raw) {
  Query q;
  q.values_ = FP_TRY(http::ParseQuery(raw));
  return q;
}

std::optional<std::string> Query::Get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Result<std::optional<NameOrId>> Query::OptNameOrId(const std::string& key) const {
  auto v = Get(key);
  if (!v) return std::optional<NameOrId>();
  auto parsed = NameOrId::Parse(*v);
  if (!parsed) {
    return Fail(Error::InvalidRequest(fmt::format(
        "unable to parse query string: parameter \"{}\": {}", key, parsed.error().message())));
  }
  return std::optional<NameOrId>(*parsed);
}

Result<NameOrId> Query::RequiredNameOrId(const std::string& key) const {
  auto v = FP_TRY(OptNameOrId(key));
  if (!v) {
    return Fail(Error::InvalidRequest(
        fmt::format("unable to parse query string: missing parameter \"{}\"", key)));
  }
  return *v;
}

Result<std::optional<IpVersion>> Query::OptIpVersion(const std::string& key) const {
  auto v = Get(key);
  if (!v) return std::optional<IpVersion>();
  auto parsed = ParseIpVersion(*v);
  if (!parsed) {
    return Fail(Error::InvalidRequest(fmt::format(
        "unable to parse query string: parameter \"{}\": expected \"v4\" or \"v6\"", key)));
  }
  return std::optional<IpVersion>(*parsed);
}

}  // namespace fp::api
