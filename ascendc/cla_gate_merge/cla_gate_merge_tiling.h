// Pure tiling of ClaGateMerge: (shapes, dtype, core count, UB size) -> tiling data + key.
#pragma once

#include <cstdint>

#include "../common/cla_gate_tiling_common.h"

namespace mgo::tiling {

struct ClaGateMergeTiling {
  ClaGateTilingResult result;
  uint64_t tilingKey;  // = dtype; the kernel entry dispatches on it with TILING_KEY_IS
};

inline ClaGateMergeTiling ComputeClaGateMergeTiling(const ClaGateShape& shape, DType dtype, uint32_t core_num, uint64_t ub_bytes) {
  return ClaGateMergeTiling{ComputeClaGateTiling(ClaGateKernel::kMerge, shape, core_num, ub_bytes),
                   static_cast<uint64_t>(dtype)};
}

}  // namespace mgo::tiling
