#pragma once

// What this binary was built from: the CLI's `version`, the server's build_info metric and the
// CLI's `docs` print it. Defined in a source that CMake writes when it configures
// (src/common/version.cc.in), so the files that print them carry no per-file definitions and
// stay in their unity batches. The commit is the one checked out when CMake last configured.

#include <string_view>

namespace fp {

// The release, e.g. "0.1.0" (CMake's project version).
std::string_view BuildVersion();
// The git commit the build was configured at (short hash), or "" outside a git checkout.
std::string_view BuildCommit();

}  // namespace fp
