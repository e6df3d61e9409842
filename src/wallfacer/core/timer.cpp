#include "wallfacer/core/timer.h"

#include <sys/resource.h>

namespace wallfacer {

int64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace wallfacer
