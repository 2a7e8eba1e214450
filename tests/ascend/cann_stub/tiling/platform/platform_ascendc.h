// TEST STUB, not CANN: platform_ascendc::PlatformAscendC as asc-devkit declares it
// (include/utils/tiling/platform/platform_ascendc.h) and computes it
// (impl/utils/tiling/platform/platform_ascendc.cpp) over the SoC values of runtime's platform .ini
// files (src/platform/platform_config): core counts per SoC, UB and L1 256 bytes below the ini on
// Ascend910B and Ascend910_93 (the Matmul client's reserve), the library workspace per NPU arch.
// tests/ascend/test_ascendc_op_host.py compares Socs() with the real .ini files when they are
// given. See ../../register/op_def_registry.h.
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "../../register/op_def_registry.h"

namespace platform_ascendc {

enum class CoreMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6 };

// Stub only: the SoCs the tests tile for, by SoC_version (the ini's values).
inline std::array<fe::PlatFormInfos, 4>& Socs() {
  static std::array<fe::PlatFormInfos, 4> socs{{
      {"Ascend910B1", "Ascend910B", 2201, 24, 48, 196608, 524288, 65536, 65536, 131072},
      {"Ascend910B4", "Ascend910B", 2201, 20, 40, 196608, 524288, 65536, 65536, 131072},
      {"Ascend910_9392", "Ascend910_93", 2201, 24, 48, 196608, 524288, 65536, 65536, 131072},
      {"Ascend950PR_9599", "Ascend950", 3510, 36, 72, 253952, 524288, 65536, 65536, 262144},
  }};
  return socs;
}

inline fe::PlatFormInfos* FindSoc(const char* soc) {
  for (auto& s : Socs()) {
    if (std::strcmp(s.soc, soc) == 0) return &s;
  }
  return nullptr;
}

class PlatformAscendC {
 public:
  PlatformAscendC() = delete;
  explicit PlatformAscendC(fe::PlatFormInfos* infos) : infos_(infos) {}
  uint32_t GetCoreNumAiv() const { return Infos().aivNum; }
  uint32_t GetCoreNumAic() const { return Infos().aicNum; }
  uint32_t GetLibApiWorkSpaceSize() const {
    return Infos().npuArch == 2201 || Infos().npuArch == 3510 ? 16 * 1024 * 1024 : 2 * 1024 * 1024;
  }
  void GetCoreMemSize(const CoreMemType& t, uint64_t& size) const {
    const fe::PlatFormInfos& p = Infos();
    switch (t) {
      case CoreMemType::UB: size = p.ubBytes; break;
      case CoreMemType::L1: size = p.l1Bytes; break;
      case CoreMemType::L0_A: size = p.l0aBytes; break;
      case CoreMemType::L0_B: size = p.l0bBytes; break;
      case CoreMemType::L0_C: size = p.l0cBytes; break;
      default: size = 0; break;
    }
    // Only Ascend910B (Short_SoC_version Ascend910B and Ascend910_93) reserves UB and L1 for the
    // Matmul client.
    const bool a2a3 = std::strcmp(p.shortSoc, "Ascend910B") == 0 || std::strcmp(p.shortSoc, "Ascend910_93") == 0;
    if (a2a3 && (t == CoreMemType::UB || t == CoreMemType::L1)) size -= 256;
  }

 private:
  // CANN asserts a non-null platform (ASCENDC_ASSERT in GetPlatFormInfo).
  const fe::PlatFormInfos& Infos() const {
    if (infos_ == nullptr) std::abort();
    return *infos_;
  }
  fe::PlatFormInfos* infos_;
};

}  // namespace platform_ascendc
