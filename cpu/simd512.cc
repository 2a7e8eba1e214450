#include "simd512.h"

#include <cstdlib>
#include <string_view>

namespace mgo::cpu {

bool use_avx512() {
  static const bool yes = [] {
    const char* isa = std::getenv("MGO_CPU_ISA");
    if (isa != nullptr && std::string_view(isa) == "portable") return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }();
  return yes;
}

}  // namespace mgo::cpu
