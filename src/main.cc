// floatplane: the control plane for external IP addresses. `floatplane server --dev` runs the
// API server on an embedded SQLite database.

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "api/http_server.h"
#include "api/log.h"
#include "api/routes.h"
#include "app/control_plane.h"
#include "db/datastore.h"

namespace {

using fp::Error;
using fp::Result;
using fp::Status;

struct ListenAddress {
  std::string host;
  uint16_t port = 0;
};

// Accepts HOST:PORT, with IPv6 hosts in brackets ([::1]:8080).
Result<ListenAddress> ParseListen(const std::string& text) {
  ListenAddress out;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return fp::Fail(
          Error::InvalidRequest(fmt::format("--listen \"{}\": expected [IPV6]:PORT", text)));
    }
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) {
      return fp::Fail(
          Error::InvalidRequest(fmt::format("--listen \"{}\": expected HOST:PORT", text)));
    }
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  try {
    size_t used = 0;
    unsigned long p = std::stoul(port, &used);
    if (used != port.size() || p > 65535) throw std::out_of_range("port");
    out.port = static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    return fp::Fail(Error::InvalidRequest(
        fmt::format("--listen \"{}\": the port must be a number from 0 to 65535", text)));
  }
  return out;
}

// Writes `content` to `path` atomically (temporary file, fsync, rename), readable by the owner
// only.
Status WriteSecretFile(const std::filesystem::path& path, const std::string& content) {
  std::string tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fp::Fail(Error::Internal(fmt::format("cannot write {}", tmp)));
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return fp::Fail(Error::Internal(fmt::format("cannot write {}", path.string())));
  }
  return fp::Ok();
}

int RunServer(bool dev, const std::string& data_dir, const std::string& listen) {
  if (!dev) {
    std::cerr << "floatplane server: only the embedded dev mode exists so far; run "
                 "`floatplane server --dev` (see README.md)\n";
    return 2;
  }
  auto address = ParseListen(listen);
  if (!address) {
    std::cerr << "floatplane server: " << address.error().message() << "\n";
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    std::cerr << "floatplane server: cannot create data directory " << data_dir << ": "
              << ec.message() << "\n";
    return 1;
  }
  std::filesystem::path dir(data_dir);
  auto datastore = fp::db::Datastore::OpenSqlite((dir / "floatplane.db").string(),
                                                 std::make_shared<fp::SystemClock>());
  if (!datastore) {
    std::cerr << "floatplane server: " << datastore.error().message() << "\n";
    return 1;
  }
  fp::app::ControlPlane control_plane(**datastore);

  auto minted = control_plane.BootstrapDev();
  if (!minted) {
    std::cerr << "floatplane server: bootstrap failed: " << minted.error().message() << "\n";
    return 1;
  }
  std::filesystem::path token_file = dir / "admin-token";
  std::optional<std::string> secret = *minted;
  if (!secret && !std::filesystem::exists(token_file)) {
    // The database survived but the token file did not: mint a replacement rather than lock
    // the operator out.
    auto replacement = control_plane.MintFleetAdminToken("dev-admin-replacement");
    if (!replacement) {
      std::cerr << "floatplane server: " << replacement.error().message() << "\n";
      return 1;
    }
    fp::api::LogEvent("warn", "admin-token file was missing; minted a new fleet admin token",
                      {{"path", token_file.string()}});
    secret = *replacement;
  }
  if (secret) {
    if (auto w = WriteSecretFile(token_file, *secret + "\n"); !w) {
      std::cerr << "floatplane server: " << w.error().message() << "\n";
      return 1;
    }
  }

  // Block the stop signals before any thread starts, so that only sigwait() sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  fp::api::HttpServerOptions options;
  options.host = address->host;
  options.port = address->port;
  auto server = fp::api::HttpServer::Start(options, fp::api::MakeApiHandler(control_plane));
  if (!server) {
    std::cerr << "floatplane server: " << server.error().message() << "\n";
    return 1;
  }
  std::string host =
      address->host.find(':') != std::string::npos ? "[" + address->host + "]" : address->host;
  std::cout << "listening on http://" << host << ":" << (*server)->port() << std::endl;
  fp::api::LogEvent("info", "serving",
                    {{"address", fmt::format("{}:{}", host, (*server)->port())},
                     {"data_dir", data_dir},
                     {"admin_token_file", token_file.string()}});

  int sig = 0;
  sigwait(&stop_signals, &sig);
  fp::api::LogEvent("info", "stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  (*server)->Stop();
  fp::api::LogEvent("info", "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"floatplane: the control plane for cloud VMs' public IP addresses"};
  app.require_subcommand(1);

  bool dev = false;
  std::string data_dir = ".floatplane-dev";
  std::string listen = "127.0.0.1:12220";
  CLI::App* server = app.add_subcommand("server", "Run the API server");
  server->add_flag("--dev", dev,
                   "Embedded mode: SQLite database in --data-dir; creates silo `default` and a "
                   "fleet admin token (DATA_DIR/admin-token) on first start");
  server->add_option("--data-dir", data_dir, "Directory for the database and admin-token")
      ->capture_default_str();
  server->add_option("--listen", listen, "HOST:PORT to serve on (port 0 picks a free port)")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (server->parsed()) return RunServer(dev, data_dir, listen);
  return 2;
}
