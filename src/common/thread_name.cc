#include "common/thread_name.h"

#include <pthread.h>

#include <string>

namespace fp {

void NameThisThread(std::string_view name) {
  const std::string text(name.substr(0, 15));
  (void)pthread_setname_np(pthread_self(), text.c_str());
}

}  // namespace fp
