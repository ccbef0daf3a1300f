#include "agents/linux/tunnel.h"

#include <fmt/format.h>

namespace fp::agents::dataplane {

std::string SledTunnelMac(const IpAddr& sled_underlay) {
  // FNV-1a over the address key: stable across builds and machines.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : sled_underlay.Key()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", (h >> 32) & 0xff, (h >> 24) & 0xff,
                     (h >> 16) & 0xff, (h >> 8) & 0xff, h & 0xff);
}

}  // namespace fp::agents::dataplane
