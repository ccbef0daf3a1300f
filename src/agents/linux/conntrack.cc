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
  bool by_source = false;
  uint32_t source_v4 = 0;
  unsigned char source_v6[16] = {};
  std::vector<nf_conntrack*> found;
};

bool Involves(const nf_conntrack* ct, const Matches& m) {
  if (m.is_v4) {
    if (nfct_get_attr_u8(ct, ATTR_L3PROTO) != AF_INET) return false;
    bool reply = nfct_get_attr_u32(ct, ATTR_REPL_IPV4_DST) == m.v4;
    if (m.by_source) return reply && nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_SRC) == m.source_v4;
    return reply || nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_DST) == m.v4;
  }
  if (nfct_get_attr_u8(ct, ATTR_L3PROTO) != AF_INET6) return false;
  auto same = [](const void* a, const unsigned char* b) {
    return a != nullptr && std::memcmp(a, b, 16) == 0;
  };
  bool reply = same(nfct_get_attr(ct, ATTR_REPL_IPV6_DST), m.v6);
  if (m.by_source) return reply && same(nfct_get_attr(ct, ATTR_ORIG_IPV6_SRC), m.source_v6);
  return reply || same(nfct_get_attr(ct, ATTR_ORIG_IPV6_DST), m.v6);
}

int Collect(enum nf_conntrack_msg_type, nf_conntrack* ct, void* data) {
  auto* m = static_cast<Matches*>(data);
  if (Involves(ct, *m)) m->found.push_back(nfct_clone(ct));
  return NFCT_CB_CONTINUE;
}

}  // namespace

Result<size_t> FlushConntrack(const IpAddr& address, const std::optional<IpAddr>& source) {
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
  if (source) {
    m.by_source = true;
    std::string s = source->Key();
    if (source->version() == IpVersion::kV4) {
      std::memcpy(&m.source_v4, s.data() + 1, 4);
    } else {
      std::memcpy(m.source_v6, s.data() + 1, 16);
    }
  }
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
