// MGO_CPU_ISA caps the instruction-set paths the CPU kernels may take: "portable" (no
// ISA-specific code, float32 GEMM operands), "avx2" (no AVX-512: no oneDNN bf16 matmul either,
// float32 GEMM operands); unset means the best the CPU has. The tests set it to check the lower
// paths on the machine they run on (with ONEDNN_MAX_CPU_ISA=AVX2 beside "avx2", oneDNN's own
// kernels are those of an AVX2-only CPU too).
#pragma once

#include <cstdlib>
#include <string_view>

namespace mgo::cpu {

inline std::string_view isa_cap() {
  const char* cap = std::getenv("MGO_CPU_ISA");
  return cap != nullptr ? cap : "";
}

}  // namespace mgo::cpu
