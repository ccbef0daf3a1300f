#pragma once

#include <chrono>
#include <thread>

namespace fp::testing {

// Polls `condition` every `interval` until it holds or `timeout` passes; returns whether it
// held. Tests use it instead of sleeping for a fixed time: the one sleep here is the poll's.
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(5),
             std::chrono::milliseconds interval = std::chrono::milliseconds(1)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace fp::testing
