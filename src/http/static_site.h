#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace fp::http {

// The files of a directory, read into memory once, served by their path under it: a built
// single-page app (the console), whose files change only when it is built again. Only what was
// a regular file under the directory when it was loaded can be served (no symbolic links, no
// hidden files), so no request path can reach outside it, whatever its dots and encodings.
class StaticSite {
 public:
  struct File {
    std::string body;
    std::string content_type;
    std::string etag;  // a strong validator: the content's hash, quoted
  };

  // Reads every regular file under `dir` (at most `max_bytes` in all). Fails naming the
  // directory when it cannot be read, holds no index.html, or is larger.
  static Result<std::shared_ptr<const StaticSite>> Load(const std::filesystem::path& dir,
                                                        size_t max_bytes = 64 << 20);

  // The file at `path`, a request path as received (percent-encoded, starting with '/'), or
  // null. Paths whose decoding has a "." or ".." segment, a NUL or a backslash match nothing.
  const File* Find(std::string_view path) const;

  // The directory's index.html (served for every page of the app).
  const File& Index() const { return *index_; }

  const std::filesystem::path& dir() const { return dir_; }
  size_t file_count() const { return files_.size(); }

 private:
  std::filesystem::path dir_;
  std::map<std::string, File, std::less<>> files_;  // key: "/assets/x.js"
  const File* index_ = nullptr;
};

// The Content-Type for a file name, by its extension (application/octet-stream if unknown).
std::string_view ContentTypeFor(std::string_view file_name);

}  // namespace fp::http
