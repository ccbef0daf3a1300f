#pragma once

// What this binary was built from: the CLI's `version`, the server's build_info metric and the
// CLI's `docs` print it. Defined in a source that CMake writes at configure time
// (src/common/version.cc.in), so a new commit recompiles that one file, not the files that
// print it.

#include <string_view>

namespace fp {

// The release, e.g. "0.1.0" (CMake's project version).
std::string_view BuildVersion();
// The git commit the build was configured at (short hash), or "" outside a git checkout.
std::string_view BuildCommit();

}  // namespace fp
