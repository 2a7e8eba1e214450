// The SoC's cores and memory sizes as the tilings take them: the one place the op_host reads the
// platform (CANN's platform_ascendc::PlatformAscendC over the tiling context's fe::PlatFormInfos).
//
// What the real platform reports (asc-devkit impl/utils/tiling/platform/platform_ascendc.cpp over
// runtime's SoC .ini files): core counts per SoC (Ascend910B1 / 910_93: 24 AIC, 48 AIV;
// Ascend910B4: 20 / 40; Ascend950PR: 36 / 72), never a constant; UB and L1 of 910B and 910_93
// already 256 bytes below the ini's ub_size / l1_size (196352 and 524032: the Matmul client's
// reserve), so a mixed kernel's tiling budgets the reported UB as it is.
//
// CANN-only like op_host_adapter.h; scripts/check_ascend_host.py runs it on CANN's real platform
// library, tests/ascend/test_ascendc_op_host.py on tests/ascend/cann_stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "tiling/platform/platform_ascendc.h"

#include "tiling_common.h"

namespace mgo::op_host {

// Core counts and per-core memory sizes of the SoC the op is being tiled for.
struct Platform {
  uint32_t aivNum;  // vector cores: the block dim of a vector-only kernel
  uint32_t aicNum;  // cube cores: the block dim of a mixed (1 AIC + 2 AIV) kernel
  uint64_t ubBytes;  // per AIV, as GetCoreMemSize(UB) reports it (reserve already taken off)
  uint64_t l1Bytes;  // per AIC, likewise
  uint64_t l0aBytes;
  uint64_t l0bBytes;
  uint64_t l0cBytes;
  uint32_t sysWorkspace;  // the library's system workspace, in front of the op's own
};

// The platform of the tiling context `ctx`; throws (the adapter logs it with the op's name) when
// the context holds no platform or the platform reports no cores or no UB.
template <typename Ctx>
Platform QueryPlatform(Ctx* ctx) {
  fe::PlatFormInfos* const infos = ctx->GetPlatformInfo();
  if (infos == nullptr) throw std::invalid_argument("the tiling context holds no platform info");
  const platform_ascendc::PlatformAscendC ascendc(infos);
  Platform p{ascendc.GetCoreNumAiv(), ascendc.GetCoreNumAic(), 0, 0, 0, 0, 0, ascendc.GetLibApiWorkSpaceSize()};
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, p.ubBytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L1, p.l1Bytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L0_A, p.l0aBytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L0_B, p.l0bBytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L0_C, p.l0cBytes);
  if (p.aivNum == 0 || p.aicNum == 0) {
    throw std::invalid_argument("the platform reports " + std::to_string(p.aicNum) + " AI cores and " +
                                std::to_string(p.aivNum) + " vector cores");
  }
  if (p.ubBytes == 0 || p.l1Bytes == 0) throw std::invalid_argument("the platform reports no UB or L1");
  // GetLibApiWorkSpaceSize returns uint32_t(-1) when the platform names no NPU architecture.
  if (p.sysWorkspace == UINT32_MAX) throw std::invalid_argument("the platform reports no system workspace size");
  return p;
}

// The platform as the mixed (cube + vector) tilings take it.
inline mgo::tiling::CubePlatform CubeOf(const Platform& p) {
  return {p.aicNum, p.ubBytes, p.l1Bytes, p.l0aBytes, p.l0bBytes, p.l0cBytes};
}

}  // namespace mgo::op_host
