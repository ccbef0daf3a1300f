// Attach + detach cycles over HTTP against a dev server (issue 4's benchmark).
//
//   build/release/bench_attach [--binary build/release/floatplane] [--cycles 640]
//                              [--clients 16] [--data-dir DIR] [--idle-connections 5000]
//                              [--history-retention 3d] [--agents in-process|external]
//                              [--postgres URL [--servers 3] [--pool-size 2]] [--others 30]
//
// Starts `floatplane server --dev` on a fresh data directory (in-process simulated agents:
// every attach and detach also makes real HTTP calls to the switch and sled agents), creates one
// running instance and one floating IP per client, then for 1 and --clients concurrent clients runs
// attach + detach cycles, each client on its own thread with its own keep-alive connection,
// instance and floating IP. Prints cycles/s, attach and detach latency p50/p99, durable commits
// and write-ahead log syncs per cycle (from the server's /metrics), and, on the same disk, the
// raw rate of single-row durable commits (SQLite WAL, synchronous=FULL: one sync per commit,
// the machine's limit), and issue 4's target for the concurrent run: cycles/s at least half
// of (raw commits/s / durable commits per cycle). The raw rate is measured again right after
// the concurrent run and the target uses the mean of the two: this disk's rate drifts by a
// factor of two within minutes, and one measurement taken earlier says little about the
// seconds the run took. Last, with the server stopped, what the saga history takes in the
// database (rows and bytes per cycle), for the steady state under --history-retention.
//
// With --idle-connections N it then opens N keep-alive connections from ten loopback client
// addresses (127.0.1.1-10), each of which makes one request and then stays idle, and measures
// ping latency and the concurrent run again with them open (issue 10: idle connections must
// not cost the server's other clients anything).
//
// With --postgres URL (a PostgreSQL cluster's libpq URL; the benchmark creates its databases
// there and drops them at the end) the servers run on a fresh PostgreSQL database instead, with
// external simulated agents (`floatplane switch-agent --sim`, two `sled-agent --sim`) that every
// server shares, --servers N of them (client k talks to server k mod N). In place of the disk's
// raw commit rate it reports pgbench's rate on the same cluster in the same run (`pgbench -N`,
// the TPC-B-like script without the contended branch and teller updates, with the same client
// counts), and per cycle the database round trips the servers made (their /metrics, less the
// rate their background work makes when idle, measured first), and, when the cluster runs on
// this machine, PostgreSQL's CPU per cycle (its postmaster's process tree, from /proc). A last
// phase splits the round trips by operation: one client, the servers' counters read between
// every attach and detach, less what reading them costs (measured by reading them back to
// back).
//
// --pool-size N passes --postgres-pool-size N to the servers on PostgreSQL.
//
// With --agents external (always on PostgreSQL) the agents are processes of their own, so that
// the server CPU per cycle printed for each run (user + system time of the server processes,
// from /proc) counts the control plane alone; in process (`--dev`, the default) it includes
// the simulated agents.
//
// With --others N, before each client's instance and floating IP it creates N more of each,
// the instances stopped and each holding its floating IP, which the cycles never touch: the
// clients' rows then lie among others in every table and index, as a rack's few addresses
// changing at once lie among its many, instead of side by side in the same pages as rows
// created together do (on PostgreSQL, SERIALIZABLE's predicate locks are taken on an index's
// pages, so neighbours in one page collide where rows far apart would not).
//
// The load generator is C++ so that on a small machine the clients' own CPU does not decide the
// result; it shares the machine's cores with the server all the same.

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "http/client.h"

namespace {

using fp::bench::Api;
using fp::bench::Clock;
using fp::bench::CpuSeconds;
using fp::bench::Die;
using fp::bench::Json;
using fp::bench::Percentile;
using fp::bench::PortOf;
using fp::bench::StartListening;
using fp::bench::StatFields;
using fp::bench::TreeCpuSeconds;
using fp::bench::WriteAgentSecret;
using fp::http::HttpClient;

// Single-row commits, each made durable on its own, for `seconds`: the disk's commit rate.
double RawCommitRate(const std::string& dir, double seconds = 3.0) {
  std::string path = dir + "/raw-commits.db";
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) Die("cannot open " + path);
  auto exec = [&](const char* sql) {
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      Die(std::string("raw commits: ") + sqlite3_errmsg(db));
    }
  };
  exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
  exec("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)");
  int n = 0;
  auto start = Clock::now();
  std::chrono::duration<double> elapsed{};
  while ((elapsed = Clock::now() - start).count() < seconds) {
    exec("BEGIN IMMEDIATE; INSERT INTO t (v) VALUES ('x'); COMMIT;");
    ++n;
  }
  sqlite3_close(db);
  return n / elapsed.count();
}

// What the saga history takes in the database at `path` (opened after the server stopped, so
// the log is in the file): rows of the saga tables and the bytes of their B-trees and indexes
// (SQLite's dbstat table), and the file's size.
void ReportSagaHistory(const std::string& path, int64_t cycles) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    Die("cannot open " + path);
  }
  auto number = [&](const char* sql) -> int64_t {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
      Die(std::string("saga history: ") + sqlite3_errmsg(db));
    }
    int64_t value = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    return value;
  };
  const int64_t sagas = number("SELECT count(*) FROM saga");
  const int64_t events = number("SELECT count(*) FROM saga_node_event");
  const int64_t bytes = number(
      "SELECT sum(pgsize) FROM dbstat WHERE name IN ('saga', 'saga_node_event', "
      "'saga_unfinished', 'saga_finished')");
  const int64_t file =
      number("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()");
  sqlite3_close(db);
  std::printf(
      "saga history: %lld sagas (%.2f per cycle), %lld node events (%.2f per cycle), %.1f MiB "
      "in their tables and indexes (%.0f bytes per saga); database file %.1f MiB\n",
      static_cast<long long>(sagas), static_cast<double>(sagas) / cycles,
      static_cast<long long>(events), static_cast<double>(events) / cycles,
      static_cast<double>(bytes) / (1 << 20),
      sagas > 0 ? static_cast<double>(bytes) / static_cast<double>(sagas) : 0.0,
      static_cast<double>(file) / (1 << 20));
}

// Pings over one keep-alive connection: (p50, p99) in ms.
std::pair<double, double> PingLatency(uint16_t port, int count = 2000) {
  HttpClient http("floatplane", "http://127.0.0.1:" + std::to_string(port),
                  std::chrono::seconds(10));
  std::vector<double> ms;
  for (int i = 0; i < count; ++i) {
    auto t0 = Clock::now();
    auto answer = http.Call("GET", "/v1/ping");
    if (!answer || answer->status != 200) Die("ping failed");
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return {Percentile(ms, .5), Percentile(ms, .99)};
}

// Opens `count` connections from 127.0.1.1-10, each of which makes one request and is then left
// open and idle (a keep-alive client between requests). Returns their descriptors.
std::vector<int> OpenIdleConnections(uint16_t port, int count) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  std::vector<int> fds;
  const std::string request = "GET /v1/ping HTTP/1.1\r\nHost: bench\r\n\r\n";
  for (int i = 0; i < count; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl((127u << 24) | (1u << 8) | static_cast<unsigned>(1 + i % 10));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 ||
        send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size())) {
      Die("idle connection " + std::to_string(i) + ": " + std::strerror(errno));
    }
    char reply[1024];
    ssize_t n = recv(fd, reply, sizeof reply, 0);
    if (n < 12 || std::string_view(reply, 12) != "HTTP/1.1 200") {
      Die("idle connection " + std::to_string(i) +
          " was not served: " + std::string(reply, static_cast<size_t>(std::max<ssize_t>(0, n))));
    }
    fds.push_back(fd);
  }
  return fds;
}

// The same libpq URL with its database name replaced by `dbname`
// (postgresql://user@host:port[,host:port]/DB?params).
std::string WithDatabase(const std::string& url, const std::string& dbname) {
  size_t scheme = url.find("://");
  if (scheme == std::string::npos) Die("--postgres must be a postgresql:// URL: " + url);
  size_t path = url.find('/', scheme + 3);
  size_t query = url.find('?', scheme + 3);
  std::string head = url.substr(0, std::min(path, query));
  std::string tail = query == std::string::npos ? "" : url.substr(query);
  return head + "/" + dbname + tail;
}

// The cluster's postmaster when it runs on this machine (the parent of the backend that
// answers a connection, a process named "postgres"), else 0.
pid_t LocalPostmaster(const std::string& url) {
  // A backend's pid only means something here when the server is on a loopback address.
  size_t at = url.find("://");
  std::string host = at == std::string::npos ? "" : url.substr(at + 3);
  if (size_t user = host.find('@'); user != std::string::npos) host = host.substr(user + 1);
  host = host.substr(0, host.find_first_of(":/?,"));
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]") return 0;
  PGconn* conn = PQconnectdb(url.c_str());
  pid_t backend = PQstatus(conn) == CONNECTION_OK ? PQbackendPID(conn) : 0;
  pid_t postmaster = 0;
  if (backend > 0) {
    std::vector<long long> f = StatFields(backend);
    std::ifstream comm("/proc/" + std::to_string(backend) + "/comm");
    std::string name;
    std::getline(comm, name);
    if (f.size() > 1 && name == "postgres") postmaster = static_cast<pid_t>(f[1]);
  }
  PQfinish(conn);
  return postmaster;
}

// Runs `sql` on the database `url` names.
void AdminSql(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) Die("--postgres: " + std::string(PQerrorMessage(conn)));
  PGresult* res = PQexec(conn, sql.c_str());
  bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
  std::string error = PQerrorMessage(conn);
  PQclear(res);
  PQfinish(conn);
  if (!ok) Die(sql + ": " + error);
}

// A command's standard output; dies if it fails.
std::string Output(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) Die("cannot run " + command);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  if (pclose(pipe) != 0) Die(command + " failed:\n" + out);
  return out;
}

// pgbench's transactions per second with `clients` clients of `pgbench -N` (simple updates,
// prepared statements) for `seconds` on a fresh database of the cluster.
double PgbenchRate(const std::string& url, const std::string& dbname, int clients,
                   int seconds = 5) {
  std::string db = WithDatabase(url, dbname);
  std::string out = Output("pgbench -N -M prepared -c " + std::to_string(clients) + " -j " +
                           std::to_string(std::min(clients, 2)) + " -T " + std::to_string(seconds) +
                           " '" + db + "' 2>&1");
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(tps = ([0-9.]+))"))) Die("pgbench: " + out);
  return std::stod(m[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "build/release/floatplane";
  int cycles = 640;
  int concurrent = 16;
  std::string data_dir;
  std::string history_retention = "3d";  // the server's default
  int idle_connections = 0;
  std::string postgres;
  int server_count = 1;
  std::string agents = "in-process";
  int others = 0;
  int pool_size = 0;  // the server's default
  fp::bench::ParseFlags(
      argc, argv,
      {{"--binary", &binary},
       {"--cycles", &cycles},
       {"--clients", &concurrent},
       {"--data-dir", &data_dir},
       {"--history-retention", &history_retention},
       {"--idle-connections", &idle_connections},
       {"--postgres", &postgres},
       {"--servers", &server_count},
       {"--agents", &agents},
       {"--others", &others},
       {"--pool-size", &pool_size}},
      "bench_attach [--binary PATH] [--cycles N] [--clients N] [--data-dir DIR] "
      "[--idle-connections N] [--history-retention DURATION] [--agents in-process|external] "
      "[--postgres URL [--servers N] [--pool-size N]] [--others N]");
  if (concurrent < 2 || concurrent > 256) Die("--clients must be between 2 and 256");
  if (cycles < concurrent) Die("--cycles must be at least --clients");
  if (server_count < 1 || server_count > 16) Die("--servers must be between 1 and 16");
  if (server_count > 1 && postgres.empty()) Die("--servers above 1 needs --postgres");
  if (others < 0 || others > 1000) Die("--others must be between 0 and 1000");
  // Their floating IPs and the clients', with room for the instances' SNAT blocks, in a /16.
  if ((others + 1) * concurrent > 60'000) Die("--others times --clients must stay under 60,000");
  if (pool_size != 0 && postgres.empty()) Die("--pool-size needs --postgres");
  const bool pg = !postgres.empty();
  if (agents != "in-process" && agents != "external") {
    Die("--agents must be in-process or external, not \"" + agents + "\"");
  }
  if (pg) agents = "external";  // the servers share them
  const bool external_agents = agents == "external";
  const bool own_dir = data_dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/floatplane-bench-XXXXXX";
    if (!mkdtemp(tmpl)) Die("cannot create a temporary directory");
    data_dir = tmpl;
  } else {
    // The agents' secret file is written there before any server would create it.
    std::error_code ec;
    std::filesystem::create_directories(data_dir, ec);
    if (ec) Die("cannot create --data-dir " + data_dir + ": " + ec.message());
  }

  // The servers (and on PostgreSQL the agents they share), their stdout on a pipe (the first
  // line names the address), their logs discarded.
  std::vector<pid_t> children;
  std::vector<uint16_t> ports;
  const std::string suffix = std::to_string(getpid());
  const std::string database = "fp_bench_" + suffix;
  const std::string pgbench_database = "fp_pgbench_" + suffix;
  std::vector<pid_t> servers;  // their CPU is what a cycle costs the control plane
  if (!external_agents) {
    auto [pid, url] = StartListening({binary, "server", "--dev", "--data-dir", data_dir, "--listen",
                                      "127.0.0.1:0", "--history-retention", history_retention,
                                      "--history-prune-interval", "1s"});
    children.push_back(pid);
    servers.push_back(pid);
    ports.push_back(PortOf(url));
  } else {
    if (pg) {
      AdminSql(postgres, "CREATE DATABASE " + database);
      AdminSql(postgres, "CREATE DATABASE " + pgbench_database);
      Output("pgbench -i -q '" + WithDatabase(postgres, pgbench_database) + "' 2>&1");
    }
    const std::string secret = WriteAgentSecret(data_dir);
    auto [switch_pid, switch_url] = StartListening(
        {binary, "switch-agent", "--sim", "--listen", "127.0.0.1:0", "--secret-file", secret});
    children.push_back(switch_pid);
    std::vector<std::string> agents_args = {"--agent-secret-file", secret, "--switch-agent",
                                            switch_url};
    for (int s = 0; s < 2; ++s) {
      auto [sled_pid, sled_url] = StartListening(
          {binary, "sled-agent", "--sim", "--listen", "127.0.0.1:0", "--secret-file", secret});
      children.push_back(sled_pid);
      agents_args.insert(agents_args.end(), {"--sled-agent", sled_url});
    }
    // One after the other: the first bootstraps the database and writes the admin token.
    for (int n = 0; n < server_count; ++n) {
      std::string dir = data_dir + "/server-" + std::to_string(n);
      std::vector<std::string> args = {binary,
                                       "server",
                                       "--data-dir",
                                       dir,
                                       "--listen",
                                       "127.0.0.1:0",
                                       "--history-retention",
                                       history_retention,
                                       "--history-prune-interval",
                                       "1s"};
      args.insert(args.end(), {"--database", pg ? WithDatabase(postgres, database)
                                                : "sqlite:" + dir + "/floatplane.db"});
      args.insert(args.end(), agents_args.begin(), agents_args.end());
      if (pool_size > 0)
        args.insert(args.end(), {"--postgres-pool-size", std::to_string(pool_size)});
      auto [pid, url] = StartListening(args);
      children.push_back(pid);
      servers.push_back(pid);
      ports.push_back(PortOf(url));
    }
  }
  const uint16_t port = ports.front();
  std::string token;
  std::ifstream(external_agents ? data_dir + "/server-0/admin-token" : data_dir + "/admin-token") >>
      token;
  if (token.empty()) Die("no admin token in the first server's data directory");

  Api admin(port, token);
  admin.Expect(201, "POST", "/v1/system/ip-pools", {{"name", "bench"}, {"description", ""}});
  // 1,024 addresses, or with --others a /16 (65,536) for theirs too.
  admin.Expect(201, "POST", "/v1/system/ip-pools/bench/ranges/add",
               {{"first", "10.0.0.0"}, {"last", others > 0 ? "10.0.255.255" : "10.0.3.255"}});
  admin.Expect(201, "POST", "/v1/system/ip-pools/bench/silos",
               {{"silo", "default"}, {"is_default", true}});
  admin.Expect(201, "POST", "/v1/projects", {{"name", "bench"}, {"description", ""}});
  std::vector<std::pair<std::string, std::string>> pairs;  // (instance id, floating IP id)
  std::vector<std::string> others_ips;                     // attached as they are made
  for (int k = 0; k < concurrent; ++k) {
    for (int o = 0; o < others; ++o) {
      std::string other = "other-" + std::to_string(k) + "-" + std::to_string(o);
      Json vm = admin.Expect(201, "POST", "/v1/instances?project=bench",
                             {{"name", other},
                              {"description", ""},
                              {"hostname", other},
                              {"ncpus", 1},
                              {"memory", int64_t{1} << 30},
                              {"start", false}});
      Json fip = admin.Expect(201, "POST", "/v1/floating-ips?project=bench",
                              {{"name", "fip-" + other}, {"description", ""}});
      admin.Expect(202, "POST", "/v1/floating-ips/" + fip["id"].get<std::string>() + "/attach",
                   {{"kind", "instance"}, {"parent", vm["id"]}});
      others_ips.push_back(fip["id"].get<std::string>());
    }
    std::string name = "vm-" + std::to_string(k);
    Json vm = admin.Expect(201, "POST", "/v1/instances?project=bench",
                           {{"name", name},
                            {"description", ""},
                            {"hostname", name},
                            {"ncpus", 1},
                            {"memory", int64_t{1} << 30}});
    Json fip = admin.Expect(201, "POST", "/v1/floating-ips?project=bench",
                            {{"name", "fip-" + std::to_string(k)}, {"description", ""}});
    pairs.emplace_back(vm["id"], fip["id"]);
  }
  for (auto deadline = Clock::now() + std::chrono::seconds(30);;) {
    bool all = true;
    for (const auto& [vm, fip] : pairs) {
      all = all && admin.Expect(200, "GET", "/v1/instances/" + vm)["run_state"] == "running";
    }
    if (all) {
      std::erase_if(others_ips, [&](const std::string& id) {
        return !admin.Expect(200, "GET", "/v1/floating-ips/" + id)["instance_id"].is_null();
      });
      all = others_ips.empty();
    }
    if (all) break;
    if (Clock::now() > deadline) {
      Die("instances did not reach running, or the others' floating IPs their instances, within "
          "30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (others > 0) {
    std::printf("the clients' rows among %d other instances (stopped), each with a floating IP\n",
                others * concurrent);
  }
  if (pg) {
    // Statistics for the rows the setup made, as autovacuum takes them within a minute or so:
    // without them the first phase ran for a while on plans made for empty tables (the
    // attach's first statement read the whole instance table), and a run whose autovacuum came
    // late measured 100 cycles/s at 1 client where one whose came early measured 150.
    AdminSql(WithDatabase(postgres, database), "ANALYZE");
  }

  struct Counters {
    int64_t commits = 0, syncs = 0, sqlite_commits = 0, checkpoints = 0, log_restarts = 0,
            saga_rows = 0, sagas_pruned = 0, round_trips = 0, retries = 0, queued = 0, reads = 0,
            switches = 0;
  };
  // Summed over the servers; a counter an engine does not have counts 0 (e.g. SQLite's log
  // syncs on PostgreSQL, round trips on SQLite).
  auto metrics = [&]() -> Counters {
    Counters sum;
    for (uint16_t p : ports) {
      HttpClient client("floatplane", "http://127.0.0.1:" + std::to_string(p),
                        std::chrono::seconds(10));
      auto answer = client.Call("GET", "/metrics");
      if (!answer) Die(answer.error().message());
      auto counter = [&](const char* name) -> int64_t {
        std::smatch m;
        if (!std::regex_search(answer->body, m, std::regex(std::string(name) + R"( (\d+))"))) {
          return 0;
        }
        return std::stoll(m[1]);
      };
      sum.commits += counter("floatplane_durable_commits_total");
      sum.syncs += counter("floatplane_log_syncs_total");
      sum.sqlite_commits += counter("floatplane_sqlite_commits_total");
      sum.checkpoints += counter("floatplane_checkpoints_total");
      sum.log_restarts += counter("floatplane_log_restarts_total");
      sum.saga_rows = std::max(sum.saga_rows, counter("floatplane_saga_rows"));
      sum.sagas_pruned += counter("floatplane_sagas_pruned_total");
      sum.round_trips += counter("floatplane_db_round_trips_total");
      sum.retries += counter("floatplane_db_transaction_retries_total");
      sum.queued += counter("floatplane_db_queued_transactions_total");
      sum.reads += counter("floatplane_db_read_transactions_total");
      sum.switches += counter(R"(floatplane_process_context_switches_total\{kind="voluntary"\})") +
                      counter(R"(floatplane_process_context_switches_total\{kind="involuntary"\})");
    }
    return sum;
  };

  // The servers' background work (lease renewals, NAT sync, the sled watcher) talks to the
  // database too: its idle rate is measured first and taken out of the per-cycle figures.
  double idle_round_trips_per_s = 0;
  // On a cluster on this machine, its CPU per cycle too: its backends' and its background
  // processes' (other databases' work on the cluster counts as well).
  const pid_t postmaster = pg ? LocalPostmaster(postgres) : 0;
  if (pg) {
    Counters idle_before = metrics();
    auto idle_start = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    idle_round_trips_per_s = static_cast<double>(metrics().round_trips - idle_before.round_trips) /
                             std::chrono::duration<double>(Clock::now() - idle_start).count();
  }
  const std::string db_dir = external_agents ? data_dir + "/server-0" : data_dir;
  const double raw = pg ? 0 : RawCommitRate(db_dir);
  if (pg) {
    std::printf(
        "PostgreSQL, %d server(s); pgbench -N on the same cluster: 1 client %.0f tps, "
        "%d clients %.0f tps\n",
        server_count, PgbenchRate(postgres, pgbench_database, 1), concurrent,
        PgbenchRate(postgres, pgbench_database, concurrent));
  } else {
    std::printf("raw single-row durable commits on this disk: %.0f/s\n", raw);
  }
  int64_t total_cycles = 0;
  auto run = [&](int clients, bool judge) {
    int per_client = cycles / clients;
    total_cycles += clients * per_client;
    std::vector<double> attach_ms, detach_ms;
    std::mutex mu;
    Counters before = metrics();
    const double cpu_before = CpuSeconds(servers);
    const double db_cpu_before = postmaster ? TreeCpuSeconds(postmaster) : 0;
    auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int k = 0; k < clients; ++k) {
      threads.emplace_back([&, k] {
        Api api(ports[static_cast<size_t>(k) % ports.size()], token);
        const auto& [vm, fip] = pairs[static_cast<size_t>(k)];
        std::vector<double> a, d;
        for (int i = 0; i < per_client; ++i) {
          auto t0 = Clock::now();
          api.Expect(202, "POST", "/v1/floating-ips/" + fip + "/attach",
                     {{"kind", "instance"}, {"parent", vm}});
          auto t1 = Clock::now();
          api.Expect(202, "POST", "/v1/floating-ips/" + fip + "/detach");
          auto t2 = Clock::now();
          a.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          d.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        }
        std::lock_guard lock(mu);
        attach_ms.insert(attach_ms.end(), a.begin(), a.end());
        detach_ms.insert(detach_ms.end(), d.begin(), d.end());
      });
    }
    for (auto& t : threads) t.join();
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu = CpuSeconds(servers) - cpu_before;
    const double db_cpu = postmaster ? TreeCpuSeconds(postmaster) - db_cpu_before : 0;
    Counters after = metrics();
    int done = clients * per_client;
    auto per_cycle = [&](int64_t Counters::*field) {
      return static_cast<double>(after.*field - before.*field) / done;
    };
    std::printf(
        "%2d client(s): %d cycles in %.2f s = %.0f cycles/s; attach p50 %.2f ms p99 %.2f ms; "
        "detach p50 %.2f ms p99 %.2f ms; server CPU per cycle %.3f ms%s; context switches per "
        "cycle %.1f; read transactions per cycle %.2f; durable commits per cycle %.2f ",
        clients, done, elapsed, done / elapsed, Percentile(attach_ms, .5),
        Percentile(attach_ms, .99), Percentile(detach_ms, .5), Percentile(detach_ms, .99),
        1000 * cpu / done, external_agents ? "" : " (agents included)",
        per_cycle(&Counters::switches), per_cycle(&Counters::reads), per_cycle(&Counters::commits));
    if (pg) {
      std::printf("(database round trips %.2f, retried transactions %.2f, queued %.2f",
                  per_cycle(&Counters::round_trips) - idle_round_trips_per_s * elapsed / done,
                  per_cycle(&Counters::retries), per_cycle(&Counters::queued));
      if (postmaster) std::printf(", PostgreSQL's CPU per cycle %.3f ms", 1000 * db_cpu / done);
      std::printf(")\n");
    } else {
      std::printf("(SQLite commits %.2f, log syncs %.2f)\n", per_cycle(&Counters::sqlite_commits),
                  per_cycle(&Counters::syncs));
    }
    if (judge && !pg) {
      const double raw_after = RawCommitRate(db_dir);
      const double raw_mean = (raw + raw_after) / 2;
      double commits = per_cycle(&Counters::commits);
      double target = raw_mean / commits / 2;
      std::printf("raw single-row durable commits right after: %.0f/s\n", raw_after);
      std::printf(
          "target: (raw %.0f/s, the mean, / %.2f commits per cycle) / 2 = %.0f cycles/s: "
          "%s (%.0f%%)\n",
          raw_mean, commits, target, done / elapsed >= target ? "met" : "NOT met",
          100 * done / elapsed / target);
    }
    std::fflush(stdout);
  };
  auto ping = [&](const char* when) {
    auto [p50, p99] = PingLatency(port);
    std::printf("ping %s: p50 %.3f ms p99 %.3f ms\n", when, p50, p99);
  };
  ping("without idle connections");
  run(1, false);
  run(concurrent, true);
  if (pg) {
    // Round trips per operation. Reading /metrics makes round trips of its own (the history
    // counters are read from the database), and the servers' background work adds some at
    // times: the medians of the steps between reads, less the median of back-to-back reads.
    constexpr int kSplitCycles = 50;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    int64_t mark = metrics().round_trips;
    auto step = [&]() {
      int64_t now = metrics().round_trips;
      double trips = static_cast<double>(now - mark);
      mark = now;
      return trips;
    };
    std::vector<double> reads, attaches, detaches;
    for (int i = 0; i < kSplitCycles; ++i) reads.push_back(step());
    Api api(ports[0], token);
    const auto& [vm, fip] = pairs[0];
    for (int i = 0; i < kSplitCycles; ++i) {
      api.Expect(202, "POST", "/v1/floating-ips/" + fip + "/attach",
                 {{"kind", "instance"}, {"parent", vm}});
      attaches.push_back(step());
      api.Expect(202, "POST", "/v1/floating-ips/" + fip + "/detach");
      detaches.push_back(step());
    }
    const double per_read = median(reads);
    std::printf(
        "database round trips per operation (1 client, median of %d; %.0f per /metrics read "
        "taken out): attach %.0f, detach %.0f\n",
        kSplitCycles, per_read, median(attaches) - per_read, median(detaches) - per_read);
  }
  if (idle_connections > 0) {
    auto start = Clock::now();
    std::vector<int> idle = OpenIdleConnections(port, idle_connections);
    std::printf("opened %d idle keep-alive connections in %.1f s\n", idle_connections,
                std::chrono::duration<double>(Clock::now() - start).count());
    ping("with them open");
    run(concurrent, false);
    for (int fd : idle) close(fd);
  }
  const Counters end = metrics();
  if (!pg) {
    // A log that never starts over grows for as long as writes last and slows every commit.
    std::error_code ec;
    const auto wal_bytes = std::filesystem::file_size(db_dir + "/floatplane.db-wal", ec);
    std::printf("write-ahead log: %lld checkpoints, %lld restarts, %.1f MiB at the end\n",
                static_cast<long long>(end.checkpoints), static_cast<long long>(end.log_restarts),
                ec ? 0.0 : static_cast<double>(wal_bytes) / (1 << 20));
  }
  std::printf("saga rows at the end: %lld (%lld pruned)\n", static_cast<long long>(end.saga_rows),
              static_cast<long long>(end.sagas_pruned));
  // Servers first (they hold the agents' clients), agents last.
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    kill(*it, SIGTERM);
    waitpid(*it, nullptr, 0);
  }
  if (pg) {
    AdminSql(postgres, "DROP DATABASE " + database);
    AdminSql(postgres, "DROP DATABASE " + pgbench_database);
  } else {
    // With the default retention every cycle's sagas are still there.
    ReportSagaHistory(db_dir + "/floatplane.db", total_cycles);
  }
  if (own_dir) std::filesystem::remove_all(data_dir);
  return 0;
}
