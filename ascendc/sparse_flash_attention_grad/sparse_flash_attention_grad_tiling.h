// Pure tiling of SparseFlashAttentionGrad: (shapes, the op's table attributes, dtype, optional known
// sequence lengths, platform sizes and AIC count) -> tiling data, tiling key, workspace size.
#pragma once

#include <cstdint>

#include "../common/sfa_tiling_common.h"

namespace mgo::tiling {

// Tiling key = dtype; layout, sparse mode and rope presence are runtime fields of the data.
inline constexpr uint64_t SparseFlashAttentionGradTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

// What the kernel reads: the SFA tiling and every attribute of the op, as the table has them
// (deterministic among them: the kernel is deterministic in every mode).
struct SparseFlashAttentionGradTilingData : SfaTilingData {
  table::SparseFlashAttentionGradAttrs attrs;
};

struct SparseFlashAttentionGradTiling {
  TilingResult<SparseFlashAttentionGradTilingData> result;  // result.data.usedAicNum: the launch's blockDim
  uint64_t tilingKey;
};

inline SparseFlashAttentionGradTiling ComputeSparseFlashAttentionGradTiling(
    const SfaShape& shape, const table::SparseFlashAttentionGradAttrs& attrs, DType dtype, const SeqLengths& lens,
    const CubePlatform& platform) {
  return SparseFlashAttentionGradTiling{
      ComputeSfaTiling<SparseFlashAttentionGradTilingData>(SfaKernel::kGrad, shape, attrs, lens, platform),
      SparseFlashAttentionGradTilingKey(dtype)};
}

}  // namespace mgo::tiling
