// TEST STUB, not CANN: platform_ascendc::PlatformAscendC as documented, reporting an Atlas A2
// (910B: 24 AIC / 48 AIV, UB 192 KiB, L1 512 KiB, L0A/L0B 64 KiB, L0C 128 KiB). See
// ../../register/op_def_registry.h.
#pragma once

#include <cstdint>

#include "../../register/op_def_registry.h"

namespace platform_ascendc {

enum class CoreMemType { L0_A, L0_B, L0_C, L1, L2, UB, HBM };

class PlatformAscendC {
 public:
  explicit PlatformAscendC(fe::PlatFormInfos*) {}
  uint32_t GetCoreNumAiv() const { return 48; }
  uint32_t GetCoreNumAic() const { return 24; }
  uint32_t GetLibApiWorkSpaceSize() const { return 16 * 1024 * 1024; }
  void GetCoreMemSize(CoreMemType t, uint64_t& size) const {
    switch (t) {
      case CoreMemType::UB: size = 192 * 1024; break;
      case CoreMemType::L1: size = 512 * 1024; break;
      case CoreMemType::L0_A:
      case CoreMemType::L0_B: size = 64 * 1024; break;
      case CoreMemType::L0_C: size = 128 * 1024; break;
      default: size = 0; break;
    }
  }
};

}  // namespace platform_ascendc
