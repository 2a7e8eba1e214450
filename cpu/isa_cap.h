// MGO_CPU_ISA caps the instruction-set paths the CPU kernels may take: "portable" (no
// ISA-specific code, float32 GEMM operands), "avx2" (no AVX-512); unset means the best the CPU
// has. The tests set it to check the lower paths on the machine they run on.
#pragma once

#include <cstdlib>
#include <string_view>

namespace mgo::cpu {

inline std::string_view isa_cap() {
  const char* cap = std::getenv("MGO_CPU_ISA");
  return cap != nullptr ? cap : "";
}

}  // namespace mgo::cpu
