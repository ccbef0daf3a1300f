// libnftables and libnetfilter_conntrack, loaded when the Linux agents first use them rather
// than at every start of the binary (servers, the simulated agents and the command-line client
// never do): as libpq and libcurl are (db/postgres/libpq_loader.cc has the measurements). The
// functions the dataplane calls are defined here, each forwarding to the one of the same name
// in the library, opened with dlopen on first use; the declarations come from the libraries'
// headers, so a signature that differs from theirs does not compile. Nftables::Open and
// FlushConntrack ask LoadNftables() and LoadConntrack() first.

#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <nftables/libnftables.h>

#include <cstdint>
#include <string>

#include "agents/linux/conntrack.h"
#include "agents/linux/nftables.h"
#include "common/loaded_library.h"

#define FP_NFTABLES_FUNCTIONS(X)                                                              \
  X(int, nft_ctx_buffer_error, (struct nft_ctx * ctx), (ctx))                                 \
  X(int, nft_ctx_buffer_output, (struct nft_ctx * ctx), (ctx))                                \
  X(void, nft_ctx_free, (struct nft_ctx * ctx), (ctx))                                        \
  X(const char*, nft_ctx_get_error_buffer, (struct nft_ctx * ctx), (ctx))                     \
  X(const char*, nft_ctx_get_output_buffer, (struct nft_ctx * ctx), (ctx))                    \
  X(struct nft_ctx*, nft_ctx_new, (uint32_t flags), (flags))                                  \
  X(unsigned int, nft_ctx_output_get_flags, (struct nft_ctx * ctx), (ctx))                    \
  X(void, nft_ctx_output_set_flags, (struct nft_ctx * ctx, unsigned int flags), (ctx, flags)) \
  X(int, nft_run_cmd_from_buffer, (struct nft_ctx * nft, const char* buf), (nft, buf))

using FpConntrackCallback = int (*)(enum nf_conntrack_msg_type, struct nf_conntrack*, void*);

#define FP_CONNTRACK_FUNCTIONS(X)                                                                  \
  X(int, nfct_attr_is_set, (const struct nf_conntrack* ct, const enum nf_conntrack_attr type),     \
    (ct, type))                                                                                    \
  X(int, nfct_callback_register,                                                                   \
    (struct nfct_handle * h, enum nf_conntrack_msg_type type, FpConntrackCallback cb, void* data), \
    (h, type, cb, data))                                                                           \
  X(struct nf_conntrack*, nfct_clone, (const struct nf_conntrack* ct), (ct))                       \
  X(int, nfct_close, (struct nfct_handle * h), (h))                                                \
  X(void, nfct_destroy, (struct nf_conntrack * ct), (ct))                                          \
  X(const void*, nfct_get_attr,                                                                    \
    (const struct nf_conntrack* ct, const enum nf_conntrack_attr type), (ct, type))                \
  X(uint16_t, nfct_get_attr_u16,                                                                   \
    (const struct nf_conntrack* ct, const enum nf_conntrack_attr type), (ct, type))                \
  X(uint8_t, nfct_get_attr_u8, (const struct nf_conntrack* ct, const enum nf_conntrack_attr type), \
    (ct, type))                                                                                    \
  X(struct nfct_handle*, nfct_open, (uint8_t subsys, unsigned subscriptions),                      \
    (subsys, subscriptions))                                                                       \
  X(int, nfct_query,                                                                               \
    (struct nfct_handle * h, const enum nf_conntrack_query query, const void* data),               \
    (h, query, data))

namespace fp::agents::dataplane {
namespace {

struct NftablesFunctions {
  LoadedLibrary library{"libnftables.so.1", "Debian's libnftables1"};
  FP_NFTABLES_FUNCTIONS(FP_LOADED_FUNCTION)
};

struct ConntrackFunctions {
  LoadedLibrary library{"libnetfilter_conntrack.so.3", "Debian's libnetfilter-conntrack3"};
  FP_CONNTRACK_FUNCTIONS(FP_LOADED_FUNCTION)
};

}  // namespace

std::string LoadNftables() { return LoadedOnce<NftablesFunctions>().library.error(); }
std::string LoadConntrack() { return LoadedOnce<ConntrackFunctions>().library.error(); }

}  // namespace fp::agents::dataplane

#define FP_NFTABLES_FORWARD(ret, name, params, args) \
  FP_FORWARD_TO_LOADED(fp::agents::dataplane::NftablesFunctions, ret, name, params, args)
#define FP_CONNTRACK_FORWARD(ret, name, params, args) \
  FP_FORWARD_TO_LOADED(fp::agents::dataplane::ConntrackFunctions, ret, name, params, args)
extern "C" {
FP_NFTABLES_FUNCTIONS(FP_NFTABLES_FORWARD)
FP_CONNTRACK_FUNCTIONS(FP_CONNTRACK_FORWARD)
}
#undef FP_CONNTRACK_FORWARD
#undef FP_NFTABLES_FORWARD
