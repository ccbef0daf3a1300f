#include "agents/linux/conntrack.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

namespace fp::agents::dataplane {

namespace {

struct Matches {
  std::set<std::string> keys;  // IpAddr::Key() of each address
  std::optional<uint16_t> zone;
  std::vector<nf_conntrack*> found;
};

// The key (as IpAddr::Key: the version byte, then the address in network order) of a
// connection's address attribute.
std::string KeyOf(const nf_conntrack* ct, bool v4, nf_conntrack_attr attribute) {
  const void* raw = nfct_get_attr(ct, attribute);
  if (raw == nullptr) return {};
  std::string key(1, static_cast<char>(v4 ? 4 : 6));
  key.append(static_cast<const char*>(raw), v4 ? 4 : 16);
  return key;
}

bool Involves(const nf_conntrack* ct, const Matches& m) {
  // Without a zone attribute a connection is in zone 0.
  if (m.zone &&
      (nfct_attr_is_set(ct, ATTR_ZONE) > 0 ? nfct_get_attr_u16(ct, ATTR_ZONE) : 0) != *m.zone) {
    return false;
  }
  const uint8_t family = nfct_get_attr_u8(ct, ATTR_L3PROTO);
  if (family != AF_INET && family != AF_INET6) return false;
  const bool v4 = family == AF_INET;
  return m.keys.count(KeyOf(ct, v4, v4 ? ATTR_REPL_IPV4_DST : ATTR_REPL_IPV6_DST)) > 0 ||
         m.keys.count(KeyOf(ct, v4, v4 ? ATTR_ORIG_IPV4_DST : ATTR_ORIG_IPV6_DST)) > 0;
}

int Collect(enum nf_conntrack_msg_type, nf_conntrack* ct, void* data) {
  auto* m = static_cast<Matches*>(data);
  if (Involves(ct, *m)) m->found.push_back(nfct_clone(ct));
  return NFCT_CB_CONTINUE;
}

}  // namespace

Result<size_t> FlushConntrack(const std::vector<IpAddr>& addresses, std::optional<uint16_t> zone) {
  if (addresses.empty()) return size_t{0};
  if (std::string why = LoadConntrack(); !why.empty()) return Fail(Error::Unavailable(why));
  std::unique_ptr<nfct_handle, decltype(&nfct_close)> h(nfct_open(CONNTRACK, 0), &nfct_close);
  if (!h) {
    return Fail(Error::Internal(fmt::format("cannot open conntrack: {}", std::strerror(errno))));
  }
  Matches m;
  for (const IpAddr& address : addresses) m.keys.insert(address.Key());
  m.zone = zone;
  nfct_callback_register(h.get(), NFCT_T_ALL, Collect, &m);
  // One dump for both families: the kernel walks its whole hash table for each (about 11 ms
  // with 262,144 buckets, however few connections there are), so one walk, not one per address.
  uint32_t family = AF_UNSPEC;
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
