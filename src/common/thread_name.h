#pragma once

// Names for the process's threads: what `top -H`, `ps -L`, /proc/PID/task/*/comm and perf
// show, so that an operator sees which part of the server is busy.

#include <string_view>

namespace fp {

// Names the calling thread: at most 15 characters (the kernel's limit), the rest cut. Best
// effort: a name that cannot be set changes nothing else.
void NameThisThread(std::string_view name);

}  // namespace fp
