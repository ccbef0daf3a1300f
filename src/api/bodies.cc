#include "api/bodies.h"

namespace fp::api {

Result<model::IdentityUpdate> ParseIdentityUpdate(const Json& body) {
  Fields f(body, "");
  model::IdentityUpdate u;
  if (auto name = FP_TRY(f.OptName("name"))) u.name = name->str();
  u.description = FP_TRY(f.OptDescription("description"));
  return u;
}

Result<model::PoolSelector> ParsePoolSelector(const Fields& f) {
  model::PoolSelector s;
  std::string type = FP_TRY(f.String("type"));
  if (type == "explicit") {
    s.mode = model::PoolSelector::Mode::kExplicitPool;
    s.pool = FP_TRY(f.NameOrIdField("pool"));
  } else if (type == "auto") {
    s.mode = model::PoolSelector::Mode::kDefault;
    if (auto v = FP_TRY(f.OptString("ip_version"))) {
      auto version = ParseIpVersion(*v);
      if (!version) return Fail(BodyError(f.FieldPath("ip_version"), "expected \"v4\" or \"v6\""));
      s.ip_version = *version;
    }
  } else {
    return Fail(BodyError(f.FieldPath("type"), "expected \"explicit\" or \"auto\""));
  }
  return s;
}

}  // namespace fp::api
