#include "http/static_site.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <system_error>

#include "common/sha256.h"
#include "http/url.h"

namespace fp::http {
namespace {

bool Hidden(const std::filesystem::path& relative) {
  for (const auto& part : relative) {
    if (!part.empty() && part.string()[0] == '.') return true;
  }
  return false;
}

}  // namespace

std::string_view ContentTypeFor(std::string_view file_name) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".webmanifest", "application/manifest+json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".woff", "font/woff"},
      {".ttf", "font/ttf"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".avif", "image/avif"},
      {".wasm", "application/wasm"},
      {".txt", "text/plain; charset=utf-8"},
  };
  for (const auto& [extension, type] : kTypes) {
    if (file_name.size() > extension.size() && file_name.ends_with(extension)) return type;
  }
  return "application/octet-stream";
}

Result<std::shared_ptr<const StaticSite>> StaticSite::Load(const std::filesystem::path& dir,
                                                           size_t max_bytes) {
  namespace fs = std::filesystem;
  auto fail = [&](std::string_view why) {
    return tl::unexpected(Error::InvalidRequest(fmt::format("{}: {}", dir.string(), why)));
  };
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fail("not a directory");
  auto site = std::make_shared<StaticSite>();
  site->dir_ = dir;
  size_t total = 0;
  // Symbolic links are neither followed into nor served: what is served is what is under dir.
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return fail(ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return fail(ec.message());
    fs::file_status status = it->symlink_status(ec);
    if (ec) return fail(ec.message());
    fs::path relative = it->path().lexically_relative(dir);
    if (Hidden(relative)) {
      if (fs::is_directory(status)) it.disable_recursion_pending();
      continue;
    }
    if (!fs::is_regular_file(status)) continue;
    // Refused by its size before it is read.
    const uintmax_t size = fs::file_size(it->path(), ec);
    if (ec) return fail(ec.message());
    if (total + size > max_bytes) {
      return fail(fmt::format("holds more than {} MiB: not a built console", max_bytes >> 20));
    }
    std::ifstream in(it->path(), std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return fail("cannot read " + relative.string());
    total += body.size();
    if (total > max_bytes) {
      return fail(fmt::format("holds more than {} MiB: not a built console", max_bytes >> 20));
    }
    std::string name = relative.filename().string();
    // (fmt rather than operator+: GCC 12's -Wrestrict misfires on a literal + string at -O2.)
    std::string etag = fmt::format("\"{}\"", Sha256Hex(body).substr(0, 32));
    File file{.body = std::move(body),
              .content_type = std::string(ContentTypeFor(name)),
              .etag = std::move(etag)};
    site->files_.emplace(fmt::format("/{}", relative.generic_string()), std::move(file));
  }
  auto index = site->files_.find(std::string_view("/index.html"));
  if (index == site->files_.end()) return fail("holds no index.html (build the console first)");
  site->index_ = &index->second;
  return std::shared_ptr<const StaticSite>(std::move(site));
}

const StaticSite::File* StaticSite::Find(std::string_view path) const {
  auto decoded = PercentDecode(path, Plus::kLiteral);
  if (!decoded || decoded->empty() || (*decoded)[0] != '/') return nullptr;
  // Keys hold no such segments, but a decoded path is checked anyway: nothing that names a
  // parent or a current directory matches, even if a key ever did.
  std::string_view rest(*decoded);
  if (rest.find('\0') != std::string_view::npos || rest.find('\\') != std::string_view::npos) {
    return nullptr;
  }
  size_t start = 1;
  while (start <= rest.size()) {
    size_t end = rest.find('/', start);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view segment = rest.substr(start, end - start);
    if (segment == "." || segment == ".." || segment.empty()) return nullptr;
    start = end + 1;
  }
  auto found = files_.find(rest);
  return found == files_.end() ? nullptr : &found->second;
}

}  // namespace fp::http
