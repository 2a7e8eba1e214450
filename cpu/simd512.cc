#include "simd512.h"

#include "isa_cap.h"

namespace mgo::cpu {

Isa cpu_isa() {
  static const Isa isa = [] {
    const std::string_view cap = isa_cap();
    if (cap == "portable") return Isa::kPortable;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    if (avx512 && cap != "avx2") return Isa::kAvx512;
    return avx2 ? Isa::kAvx2 : Isa::kPortable;
  }();
  return isa;
}

}  // namespace mgo::cpu
