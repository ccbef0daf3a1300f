#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace fp {
namespace {

// The calling thread's name as the kernel keeps it.
std::string OwnName() {
  std::ifstream comm("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThreadCutToFifteenCharacters) {
  std::string short_name;
  std::string long_name;
  std::thread([&] {
    NameThisThread("api-worker");
    short_name = OwnName();
    NameThisThread("a-name-of-twenty-chars");
    long_name = OwnName();
  }).join();
  EXPECT_EQ(short_name, "api-worker");
  EXPECT_EQ(long_name, "a-name-of-twent");
  EXPECT_NE(OwnName(), "a-name-of-twent");  // only the thread that asked
}

}  // namespace
}  // namespace fp
