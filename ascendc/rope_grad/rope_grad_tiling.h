// Pure tiling of RopeGrad: (shapes, dtype, mode, core count, UB size) -> tiling data + key.
#pragma once

#include <cstdint>

#include "../../infer_shape/op_attrs.h"
#include "../common/rope_tiling_common.h"

namespace mgo::tiling {

// Tiling key = 10 * mode + dtype (mode as the table numbers it: atb 0, vjp 1); the kernel entry
// dispatches on it with TILING_KEY_IS.
inline constexpr uint64_t RopeGradTilingKey(DType dtype, mgo::table::Mode mode) {
  return 10u * static_cast<uint64_t>(mode) + static_cast<uint64_t>(dtype);
}

struct RopeGradTiling {
  RopeTilingResult result;
  uint64_t tilingKey;
};

inline RopeGradTiling ComputeRopeGradTiling(const RopeShape& shape, DType dtype, mgo::table::Mode mode,
                                            uint32_t core_num, uint64_t ub_bytes) {
  return RopeGradTiling{ComputeRopeFamilyTiling(shape, core_num, ub_bytes), RopeGradTilingKey(dtype, mode)};
}

}  // namespace mgo::tiling
