#include "model/instances.h"

#include <array>

namespace fp::model {

namespace {
constexpr std::array<std::string_view, 5> kStates = {"creating", "no_vmm", "vmm", "failed",
                                                     "destroyed"};
constexpr std::array<std::string_view, 10> kRunStates = {
    "creating",  "starting",  "running",   "stopping", "stopped",
    "rebooting", "migrating", "repairing", "failed",   "destroyed"};
}  // namespace

std::string_view ToString(RunState s) { return kRunStates[static_cast<size_t>(s)]; }

std::optional<RunState> ParseRunState(std::string_view text) {
  for (size_t i = 0; i < kRunStates.size(); ++i) {
    if (kRunStates[i] == text) return static_cast<RunState>(i);
  }
  return std::nullopt;
}

std::string_view ToString(InstanceState s) { return kStates[static_cast<size_t>(s)]; }

std::optional<InstanceState> ParseInstanceState(std::string_view text) {
  for (size_t i = 0; i < kStates.size(); ++i) {
    if (kStates[i] == text) return static_cast<InstanceState>(i);
  }
  return std::nullopt;
}

std::string_view Label(InstanceState s) {
  switch (s) {
    case InstanceState::kNoVmm:
      return "no_VMM";
    case InstanceState::kVmm:
      return "VMM";
    default:
      return ToString(s);
  }
}

}  // namespace fp::model
