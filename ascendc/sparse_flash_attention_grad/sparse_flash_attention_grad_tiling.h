// Pure tiling of SparseFlashAttentionGrad: (shapes, attributes incl. deterministic, dtype,
// optional known sequence lengths, platform sizes and AIC count) -> tiling data, tiling key,
// workspace size.
#pragma once

#include <cstdint>

#include "../common/sfa_tiling_common.h"

namespace mgo::tiling {

// Tiling key = dtype; layout, sparse mode, rope presence and determinism are runtime fields.
inline constexpr uint64_t SparseFlashAttentionGradTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

struct SparseFlashAttentionGradTiling {
  SfaTilingResult result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline SparseFlashAttentionGradTiling ComputeSparseFlashAttentionGradTiling(const SfaShape& shape,
                                                                            const SfaAttrs& attrs, DType dtype,
                                                                            const SfaSeqLengths& lens,
                                                                            const CubePlatform& platform) {
  return SparseFlashAttentionGradTiling{ComputeSfaTiling(SfaKernel::kGrad, shape, attrs, lens, platform),
                                        SparseFlashAttentionGradTilingKey(dtype)};
}

}  // namespace mgo::tiling
