#include "common/log.h"

#include <cstdio>
#include <mutex>

#include "common/time.h"

namespace fp {

void LogEvent(std::string_view level, std::string_view msg, nlohmann::json fields) {
  static std::mutex mu;
  nlohmann::json line = nlohmann::json::object();
  line["time"] = FormatRfc3339(SystemClock().Now());
  line["level"] = level;
  line["msg"] = msg;
  if (fields.is_object()) {
    for (auto& [k, v] : fields.items()) line[k] = v;
  }
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::lock_guard lock(mu);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace fp
