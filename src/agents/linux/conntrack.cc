#include "agents/linux/conntrack.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace fp::agents::dataplane {

namespace {

struct Matches {
  uint32_t v4 = 0;  // network order
  bool is_v4 = false;
  unsigned char v6[16] = {};
  std::optional<uint16_t> zone;
  std::vector<nf_conntrack*> found;
};

bool Involves(const nf_conntrack* ct, const Matches& m) {
  // Without a zone attribute a connection is in zone 0.
  if (m.zone &&
      (nfct_attr_is_set(ct, ATTR_ZONE) > 0 ? nfct_get_attr_u16(ct, ATTR_ZONE) : 0) != *m.zone) {
    return false;
  }
  if (m.is_v4) {
    if (nfct_get_attr_u8(ct, ATTR_L3PROTO) != AF_INET) return false;
    return nfct_get_attr_u32(ct, ATTR_REPL_IPV4_DST) == m.v4 ||
           nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_DST) == m.v4;
  }
  if (nfct_get_attr_u8(ct, ATTR_L3PROTO) != AF_INET6) return false;
  auto same = [](const void* a, const unsigned char* b) {
    return a != nullptr && std::memcmp(a, b, 16) == 0;
  };
  return same(nfct_get_attr(ct, ATTR_REPL_IPV6_DST), m.v6) ||
         same(nfct_get_attr(ct, ATTR_ORIG_IPV6_DST), m.v6);
}

int Collect(enum nf_conntrack_msg_type, nf_conntrack* ct, void* data) {
  auto* m = static_cast<Matches*>(data);
  if (Involves(ct, *m)) m->found.push_back(nfct_clone(ct));
  return NFCT_CB_CONTINUE;
}

}  // namespace

Result<size_t> FlushConntrack(const IpAddr& address, std::optional<uint16_t> zone) {
  std::unique_ptr<nfct_handle, decltype(&nfct_close)> h(nfct_open(CONNTRACK, 0), &nfct_close);
  if (!h) {
    return Fail(Error::Internal(fmt::format("cannot open conntrack: {}", std::strerror(errno))));
  }
  Matches m;
  std::string key = address.Key();  // version byte, then the address in network order
  if (address.version() == IpVersion::kV4) {
    m.is_v4 = true;
    std::memcpy(&m.v4, key.data() + 1, 4);
  } else {
    std::memcpy(m.v6, key.data() + 1, 16);
  }
  m.zone = zone;
  nfct_callback_register(h.get(), NFCT_T_ALL, Collect, &m);
  uint32_t family = m.is_v4 ? AF_INET : AF_INET6;
  if (nfct_query(h.get(), NFCT_Q_DUMP, &family) != 0) {
    for (nf_conntrack* ct : m.found) nfct_destroy(ct);
    return Fail(Error::Internal(fmt::format("cannot list conntrack: {}", std::strerror(errno))));
  }
  size_t deleted = 0;
  for (nf_conntrack* ct : m.found) {
    // Gone already (it expired meanwhile) is as good as deleted.
    if (nfct_query(h.get(), NFCT_Q_DESTROY, ct) == 0 || errno == ENOENT) ++deleted;
    nfct_destroy(ct);
  }
  return deleted;
}

}  // namespace fp::agents::dataplane
