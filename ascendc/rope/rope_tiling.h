// Pure tiling of Rope (forward): (shapes, dtype, core count, UB size) -> tiling data + key.
#pragma once

#include <cstdint>

#include "../common/rope_tiling_common.h"

namespace mgo::tiling {

// Tiling key = dtype; the kernel entry dispatches on it with TILING_KEY_IS.
inline constexpr uint64_t RopeTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

struct RopeTiling {
  RopeTilingResult result;
  uint64_t tilingKey;
};

inline RopeTiling ComputeRopeTiling(const RopeShape& shape, DType dtype, uint32_t core_num, uint64_t ub_bytes) {
  return RopeTiling{ComputeRopeFamilyTiling(shape, core_num, ub_bytes), RopeTilingKey(dtype)};
}

}  // namespace mgo::tiling
