#pragma once

// bench_rack --agents external: the rack with every agent a process of its own and the server
// one more (rack_processes.cc), so the server's own CPU and memory are measured apart from the
// agents', and every call between them crosses a process boundary as in a real rack.

namespace fp::bench {

struct RackProcessOptions {
  const char* binary = "build/release/floatplane";
  int instances = 10000;
  int sleds = 32;
  int nat = 100000;
  int idle_s = 10;
  int burst = 50;    // stops on one sled, at 10 per second
  int spread = 500;  // stops over the whole rack, in 10 seconds
  int threads = 8;   // concurrent instance creates while populating
};

// Runs the measurements and prints them; the process exit status.
int RunRackAgainstProcesses(const RackProcessOptions& options);

}  // namespace fp::bench
