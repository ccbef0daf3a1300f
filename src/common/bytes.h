#pragma once

// Byte counts as people read them.

#include <cstdint>
#include <string>

namespace fp {

// In the largest binary unit that divides it, as Oxide's ByteCount displays one: "1 GiB",
// "1536 GiB", "512 MiB", "1000 B".
std::string ShowByteCount(uint64_t bytes);

}  // namespace fp
