#include "common/loaded_library.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

namespace fp {
namespace {

TEST(LoadedLibraryTest, ALibraryThatIsMissingIsAnErrorNamingItAndWhatInstallsIt) {
  LoadedLibrary lib("libfloatplane-none.so.9", "Debian's libfloatplane-none9");
  EXPECT_NE(lib.error().find("cannot load libfloatplane-none.so.9 (Debian's libfloatplane-none9)"),
            std::string::npos)
      << lib.error();
  EXPECT_EQ(lib.Function<size_t (*)(const char*)>("strlen"), nullptr);
}

TEST(LoadedLibraryTest, ItsFunctionsAreCalledAndAMissingOneIsAnError) {
  LoadedLibrary lib("libc.so.6", "Debian's libc6");
  auto length = lib.Function<size_t (*)(const char*)>("strlen");
  ASSERT_NE(length, nullptr) << lib.error();
  EXPECT_EQ(length("floatplane"), 10u);
  EXPECT_EQ(lib.error(), "");
  EXPECT_EQ(lib.Function<void (*)()>("fp_no_such_function"), nullptr);
  EXPECT_EQ(lib.error(),
            "libc.so.6 has no function fp_no_such_function: an older version than "
            "this build's");
  lib.Function<size_t (*)(const char*)>("strlen");
  EXPECT_NE(lib.error().find("fp_no_such_function"), std::string::npos) << "the first error stays";
}

}  // namespace
}  // namespace fp
