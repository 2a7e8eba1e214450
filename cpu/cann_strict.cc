// See cann_strict.h.
#include "cann_strict.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mgo::cpu {

bool cann_strict() {
  const char* v = std::getenv("MGO_CANN_STRICT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void check_cann_row(const char* op, const int32_t* row, int64_t k, int64_t slots, int64_t t, int64_t grp,
                    std::vector<int32_t>& seen) {
  const auto fail = [&](int64_t s, const std::string& why) {
    throw std::runtime_error(std::string(op) + ": sparse_indices row " + std::to_string(t) + " (key group " +
                             std::to_string(grp) + "), slot " + std::to_string(s) + " = " + std::to_string(row[s]) +
                             " is outside CANN's rules (MGO_CANN_STRICT=1): " + why);
  };
  seen.clear();
  int64_t first_unused = -1;
  for (int64_t s = 0; s < k; ++s) {
    if (row[s] < 0) {
      if (first_unused < 0) first_unused = s;
      continue;
    }
    if (first_unused >= 0) {
      fail(s, "a valid entry after the -1 in slot " + std::to_string(first_unused) +
                  " (CANN requires the valid entries first and stops reading at the first -1)");
    }
    if (s >= slots) {
      fail(s, "more valid entries than the " + std::to_string(slots) +
                  " slots CANN reads for this row (min(K, ceil(visible keys / sparse_block_size)))");
    }
    seen.push_back(row[s]);
  }
  std::sort(seen.begin(), seen.end());
  const auto dup = std::adjacent_find(seen.begin(), seen.end());
  if (dup != seen.end()) {
    const int32_t* first = std::find(row, row + k, *dup);
    fail(std::find(first + 1, row + k, *dup) - row,
         "an index given twice in the row (this package counts it twice; a top-k selection never repeats one and "
         "CANN specifies none)");
  }
}

}  // namespace mgo::cpu
