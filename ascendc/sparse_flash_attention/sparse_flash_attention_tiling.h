// Pure tiling of SparseFlashAttention (forward): (shapes, the op's table attributes, dtype, optional
// known sequence lengths, platform sizes and AIC count) -> tiling data, tiling key, workspace size.
#pragma once

#include <cstdint>

#include "../common/sfa_tiling_common.h"

namespace mgo::tiling {

// Tiling key = dtype; layout, sparse mode and rope presence are runtime fields of the data.
inline constexpr uint64_t SparseFlashAttentionTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

// What the kernel reads: the SFA tiling and every attribute of the op, as the table has them.
struct SparseFlashAttentionTilingData : SfaTilingData {
  table::SparseFlashAttentionAttrs attrs;
};

struct SparseFlashAttentionTiling {
  TilingResult<SparseFlashAttentionTilingData> result;  // result.data.usedAicNum: the launch's blockDim
  uint64_t tilingKey;
};

inline SparseFlashAttentionTiling ComputeSparseFlashAttentionTiling(const SfaShape& shape,
                                                                    const table::SparseFlashAttentionAttrs& attrs,
                                                                    DType dtype, const SeqLengths& lens,
                                                                    const CubePlatform& platform) {
  return SparseFlashAttentionTiling{
      ComputeSfaTiling<SparseFlashAttentionTilingData>(SfaKernel::kForward, shape, attrs, lens, platform),
      SparseFlashAttentionTilingKey(dtype)};
}

}  // namespace mgo::tiling
