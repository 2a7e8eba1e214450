// Pure tiling of SparseFlashAttention (forward): (shapes, attributes, dtype, optional known
// sequence lengths, platform sizes and AIC count) -> tiling data, tiling key, workspace size.
#pragma once

#include <cstdint>

#include "../common/sfa_tiling_common.h"

namespace mgo::tiling {

// Tiling key = dtype; layout, sparse mode and rope presence are runtime fields of the data.
inline constexpr uint64_t SparseFlashAttentionTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

struct SparseFlashAttentionTiling {
  SfaTilingResult result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline SparseFlashAttentionTiling ComputeSparseFlashAttentionTiling(const SfaShape& shape, const SfaAttrs& attrs,
                                                                    DType dtype, const SfaSeqLengths& lens,
                                                                    const CubePlatform& platform) {
  return SparseFlashAttentionTiling{ComputeSfaTiling(SfaKernel::kForward, shape, attrs, lens, platform),
                                    SparseFlashAttentionTilingKey(dtype)};
}

}  // namespace mgo::tiling
