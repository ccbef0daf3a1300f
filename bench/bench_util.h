#pragma once

// What the benchmarks share: dying with a message, the API over HTTP, percentiles, and starting
// floatplane processes that announce their address.

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/uuid.h"
#include "http/client.h"
#include "http/host_port.h"

namespace fp::bench {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

// The public API as the admin, over one keep-alive connection.
class Api {
 public:
  Api(uint16_t port, std::string token)
      : http_("floatplane", "http://127.0.0.1:" + std::to_string(port), std::chrono::seconds(30)),
        headers_{{"Authorization", "Bearer " + token}} {}

  // The status and parsed body; dies on a transport error.
  std::pair<int, Json> Call(std::string_view method, const std::string& target,
                            const Json& body = nullptr) {
    auto answer =
        http_.Call(method, target, body.is_null() ? std::string() : body.dump(), headers_);
    if (!answer) Die(answer.error().message());
    Json parsed = answer->body.empty() ? Json() : Json::parse(answer->body, nullptr, false);
    return {answer->status, parsed};
  }

  Json Expect(int status, std::string_view method, const std::string& target,
              const Json& body = nullptr) {
    auto [got, reply] = Call(method, target, body);
    if (got != status) {
      Die(std::string(method) + " " + target + ": expected " + std::to_string(status) + ", got " +
          std::to_string(got) + " " + reply.dump());
    }
    return reply;
  }

 private:
  http::HttpClient http_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

// A "--name value" command-line flag and the variable it sets (an int's value read with atoi).
struct Flag {
  std::string name;
  std::variant<std::string*, int*> into;
};

// Sets the flags' variables from argv; dies with `usage` on an unknown flag or a missing value.
inline void ParseFlags(int argc, char** argv, const std::vector<Flag>& flags,
                       const std::string& usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    auto flag =
        std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == name; });
    if (flag == flags.end()) Die("usage: " + usage);
    if (i + 1 >= argc) Die(name + " needs a value");
    const char* value = argv[++i];
    if (auto* text = std::get_if<std::string*>(&flag->into)) {
      **text = value;
    } else {
      *std::get<int*>(flag->into) = std::atoi(value);
    }
  }
}

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(static_cast<double>(v.size()) * p))];
}

// A file in `dir` holding a fresh agent secret: the agents' --secret-file and the server's
// --agent-secret-file.
inline std::string WriteAgentSecret(const std::string& dir) {
  std::string path = dir + "/agent-secret";
  std::ofstream file(path);
  file << fp::Uuid::Random().ToString() << fp::Uuid::Random().ToString() << "\n";
  if (!file.flush()) Die("cannot write the agent secret " + path);
  return path;
}

// Starts `argv` with its stdout on a pipe and its stderr discarded, and returns its pid and the
// URL of its first stdout line ("listening on URL").
inline std::pair<pid_t, std::string> StartListening(const std::vector<std::string>& argv) {
  int out[2];
  if (pipe(out) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    // Ends with the benchmark, however it ends (a Die included): no server or agent outlives it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(out[1], 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(out[0]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  // The read end stays open: a child writing more to stdout must not get SIGPIPE.
  for (char c; read(out[0], &c, 1) == 1 && c != '\n';) line += c;
  constexpr std::string_view kListening = "listening on ";
  if (std::string_view(line).substr(0, kListening.size()) != kListening) {
    Die(argv[0] + " " + argv[1] + " did not start: \"" + line + "\"");
  }
  return {pid, line.substr(kListening.size())};
}

// The fields of /proc/PID/stat after the command's closing parenthesis (the 3rd field, the
// state, first), or none if the process is gone.
inline std::vector<long long> StatFields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(stat.substr(close + 2));
  std::vector<long long> out;
  std::string field;
  while (fields >> field) out.push_back(std::atoll(field.c_str()));  // the state reads as 0
  return out;
}

// The CPU seconds (user + system) of the process tree under `parent` so far: its own, that of
// its children alive now, and that of the children it has waited for (a PostgreSQL
// postmaster's backends, which come and go). 0 when `parent` is gone.
inline double TreeCpuSeconds(pid_t parent) {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  // utime, stime, cutime, cstime are fields 14-17; the 4th is the parent's pid.
  std::vector<long long> own = StatFields(parent);
  if (own.size() < 15) return 0;
  double total = static_cast<double>(own[11] + own[12] + own[13] + own[14]) / tick;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::vector<long long> f = StatFields(static_cast<pid_t>(std::atoll(name.c_str())));
    if (f.size() < 13 || f[1] != parent) continue;
    total += static_cast<double>(f[11] + f[12]) / tick;
  }
  return total;
}

// The CPU time (user + system) the processes `pids` have used so far, in seconds.
inline double CpuSeconds(const std::vector<pid_t>& pids) {
  double total = 0;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (pid_t pid : pids) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The fields after the command's closing parenthesis: state is the 3rd, utime the 14th.
    size_t close = stat.rfind(')');
    if (close == std::string::npos) Die("cannot read /proc/" + std::to_string(pid) + "/stat");
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    for (int i = 3; i < 14; ++i) fields >> field;
    long long utime = 0, stime = 0;
    fields >> utime >> stime;
    total += static_cast<double>(utime + stime) / tick;
  }
  return total;
}

// A process's resident memory now and at its peak (VmRSS, VmHWM), in MiB.
struct Memory {
  double rss_mib = 0, peak_mib = 0;
};
inline Memory MemoryOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  Memory m;
  for (std::string line; std::getline(in, line);) {
    auto kib = [&](std::string_view key) {
      return static_cast<double>(std::atoll(line.c_str() + key.size())) / 1024;
    };
    if (line.rfind("VmRSS:", 0) == 0) m.rss_mib = kib("VmRSS:");
    if (line.rfind("VmHWM:", 0) == 0) m.peak_mib = kib("VmHWM:");
  }
  return m;
}

inline uint16_t PortOf(const std::string& url) {
  constexpr std::string_view kHttp = "http://";
  auto address = http::ParseHostPort(std::string_view(url).substr(kHttp.size()));
  if (!address) Die("no address in " + url);
  return address->port;
}

}  // namespace fp::bench
