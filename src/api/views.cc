#include "api/views.h"

namespace fp::api {

using Json = nlohmann::json;

namespace {
Json Identity(const Uuid& id, const std::string& name, const std::string& description,
              Timestamp created, Timestamp modified) {
  return Json{{"id", id.ToString()},
              {"name", name},
              {"description", description},
              {"time_created", FormatRfc3339(created)},
              {"time_modified", FormatRfc3339(modified)}};
}
}  // namespace

Json SiloView(const model::Silo& s) {
  Json j = Identity(s.id, s.name, s.description, s.time_created, s.time_modified);
  j["discoverable"] = s.discoverable;
  j["identity_mode"] = s.identity_mode;
  j["mapped_fleet_roles"] = Json::object();
  j["admin_group_name"] = s.admin_group_name ? Json(*s.admin_group_name) : Json(nullptr);
  return j;
}

Json ProjectView(const model::Project& p) {
  return Identity(p.id, p.name, p.description, p.time_created, p.time_modified);
}

Json IpPoolView(const model::IpPool& p) {
  Json j = Identity(p.id, p.name, p.description, p.time_created, p.time_modified);
  j["ip_version"] = ToString(p.ip_version);
  j["pool_type"] = ToString(p.pool_type);
  j["assignment"] = ToString(p.assignment);
  return j;
}

std::pair<std::string, std::string> SiloPoolKeys(const model::SiloIpPool& p) {
  return {p.pool.name, p.pool.id.ToString()};
}

Json SiloIpPoolView(const model::SiloIpPool& p) {
  Json j = Identity(p.pool.id, p.pool.name, p.pool.description, p.pool.time_created,
                    p.pool.time_modified);
  j["ip_version"] = ToString(p.pool.ip_version);
  j["pool_type"] = ToString(p.pool.pool_type);
  j["is_default"] = p.is_default;
  return j;
}

Json IpRangeView(const IpRange& r) {
  return Json{{"first", r.first.ToString()}, {"last", r.last.ToString()}};
}

Json IpPoolRangeView(const model::IpPoolRange& r) {
  return Json{{"id", r.id.ToString()},
              {"ip_pool_id", r.pool_id.ToString()},
              {"range", IpRangeView(r.range)},
              {"time_created", FormatRfc3339(r.time_created)}};
}

Json PoolAddressView(const model::PoolAddress& a) {
  auto id = [](const std::optional<Uuid>& u) { return u ? Json(u->ToString()) : Json(); };
  auto text = [](const std::optional<std::string>& t) { return t ? Json(*t) : Json(); };
  return Json{{"external_ip_id", a.external_ip_id.ToString()},
              {"ip", a.ip.ToString()},
              {"kind", model::ToString(a.kind)},
              {"first_port", a.first_port},
              {"last_port", a.last_port},
              {"range_id", a.range_id.ToString()},
              {"name", text(a.name)},
              {"instance_id", id(a.instance_id)},
              {"instance_name", text(a.instance_name)},
              {"project_id", id(a.project_id)},
              {"project_name", text(a.project_name)},
              {"silo_id", id(a.silo_id)},
              {"silo_name", text(a.silo_name)},
              {"time_created", FormatRfc3339(a.time_created)}};
}

Json SiloLinkView(const model::SiloLink& l) {
  return Json{{"ip_pool_id", l.pool_id.ToString()},
              {"silo_id", l.silo_id.ToString()},
              {"is_default", l.is_default}};
}

Json FloatingIpView(const model::ExternalIp& e) {
  Json j = Identity(e.id, e.name.value_or(""), e.description.value_or(""), e.time_created,
                    e.time_modified);
  j["ip"] = e.ip.ToString();
  j["ip_pool_id"] = e.pool_id.ToString();
  j["project_id"] = e.project_id ? Json(e.project_id->ToString()) : Json(nullptr);
  j["instance_id"] = e.parent_id ? Json(e.parent_id->ToString()) : Json(nullptr);
  return j;
}

Json InstanceView(const model::Instance& i) {
  Json j = Identity(i.id, i.name, i.description, i.time_created, i.time_modified);
  j["project_id"] = i.project_id.ToString();
  j["hostname"] = i.hostname;
  j["ncpus"] = i.ncpus;
  j["memory"] = i.memory;
  j["run_state"] = std::string(ToString(i.run_state));
  j["time_run_state_updated"] = FormatRfc3339(i.time_run_state_updated);
  j["auto_restart_enabled"] = false;
  j["auto_restart_policy"] = nullptr;
  j["auto_restart_cooldown_expiration"] = nullptr;
  j["time_last_auto_restarted"] = nullptr;
  j["boot_disk_id"] = nullptr;
  j["cpu_platform"] = nullptr;
  j["enable_jumbo_frames"] = false;
  return j;
}

Json ExternalIpView(const model::ExternalIp& e) {
  if (e.kind == model::IpKind::kFloating) {
    Json j = FloatingIpView(e);
    j["kind"] = "floating";
    return j;
  }
  Json j{{"kind", ToString(e.kind)}, {"ip", e.ip.ToString()}, {"ip_pool_id", e.pool_id.ToString()}};
  if (e.kind == model::IpKind::kSnat) {
    j["first_port"] = e.first_port;
    j["last_port"] = e.last_port;
  }
  return j;
}

Json SledView(const model::Sled& s) {
  return Json{
      {"id", s.id.ToString()},
      {"baseboard", {{"part", "floatplane-sim-sled"}, {"revision", 0}, {"serial", s.serial}}},
      {"policy", s.expunged ? Json{{"kind", "expunged"}}
                            : Json{{"kind", "in_service"}, {"provision_policy", "provisionable"}}},
      // One rack; its id is fixed so that views are stable across restarts.
      {"rack_id", "c19a698f-c6f9-4a17-ae30-20d711b8f7dc"},
      // Expunging fails its instances in the same commit: nothing is left on it.
      {"state", s.expunged ? "decommissioned" : "active"},
      {"time_created", FormatRfc3339(s.time_created)},
      {"time_modified", FormatRfc3339(s.time_modified)},
      {"usable_hardware_threads", 64},
      {"usable_physical_ram", int64_t{512} << 30},
      // Additive (not in Oxide's Sled): whether its agent answers, since when, and the last
      // report this server read from it (null where unknown).
      {"agent",
       {{"answers", s.agent_answers ? Json(*s.agent_answers) : Json(nullptr)},
        {"since", s.agent_since ? Json(FormatRfc3339(*s.agent_since)) : Json(nullptr)},
        {"last_report", s.last_report ? Json(FormatRfc3339(*s.last_report)) : Json(nullptr)}}}};
}

Json SledInstanceView(const model::Instance& i, const std::string& project_name,
                      const std::string& silo_name) {
  return Json{{"id", i.id.ToString()},
              {"active_sled_id", i.sled_id ? i.sled_id->ToString() : std::string()},
              {"memory", i.memory},
              {"migration_id", i.migration_id ? Json(i.migration_id->ToString()) : Json(nullptr)},
              {"name", i.name},
              {"ncpus", i.ncpus},
              {"project_name", project_name},
              {"silo_name", silo_name},
              {"state", std::string(ToString(i.run_state))},
              {"time_created", FormatRfc3339(i.time_created)},
              {"time_modified", FormatRfc3339(i.time_modified)}};
}

Json UtilizationView(const model::PoolUtilization& u) {
  return Json{{"capacity", u.capacity}, {"remaining", u.remaining}};
}

}  // namespace fp::api
