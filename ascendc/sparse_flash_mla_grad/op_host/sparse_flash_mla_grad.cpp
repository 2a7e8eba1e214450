// SparseFlashMlaGrad: what its op_host does that the table cannot say, SparseFlashMlaGradHost: Tile over the
// pure tiling in ascendc/sparse_flash_mla_grad/sparse_flash_mla_grad_tiling.h and the dtypes of absent
// outputs. The shape rule (infer_shape/sparse_flash_mla_grad.h) and the OpDef come from the table:
// SparseFlashMlaGradDef in common/op_host_table.h, sparse_flash_mla_grad_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in this repository's CI (no
// CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_table.h"
#include "../../common/op_host_tokens.h"
#include "../sparse_flash_mla_grad_tiling.h"

namespace mgo::op_host {

// Optional inputs may be omitted or be the zero-size placeholder; the gradient of an absent cmp_kv and the
// norm of absent indices are empty.
struct SparseFlashMlaGradHost : SparseFlashMlaGradDef {
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Table::Attrs& a) {
    mgo::infer::InferResult r = SparseFlashMlaGradDef::Infer(in, a);
    // An omitted cmp_kv has an empty gradient of query's dtype, as for the placeholder the Python layer passes.
    for (auto& t : r.dtypes) {
      if (t == mgo::infer::DType::kUnknown) t = in[Table::In::kQuery].dtype;
    }
    return r;
  }

  // The pure tiling's view of the shapes. The lengths' values live on the device (the kernel reads them),
  // so rows are balanced by count. The key pass waits for every core's row pass (SyncAll): all cores must
  // start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    using In = Table::In;
    const auto present = [&](int i) { return !mgo::infer::is_absent(in[i].shape); };
    const mgo::infer::TensorDesc &q = in[In::kQuery], &ori = in[In::kOriKv], &cmp = in[In::kCmpKv];
    const size_t r = CheckTokenRank(a.layout, {&q, &ori}, "query/ori_kv");
    const bool bsnd = a.layout == mgo::table::Layout::kBSND;
    const bool has_cmp = present(In::kCmpKv);
    mgo::tiling::SmlaGradShape s{};
    s.layout = static_cast<uint32_t>(a.layout);
    s.n1 = Dim(q, r - 2);
    s.n2 = Dim(ori, r - 2);
    s.d = Dim(q, r - 1);
    const auto numel = [](const mgo::infer::TensorDesc& t) {
      uint64_t n = 1;
      for (const int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      return n;
    };
    const uint64_t row = s.n1 * s.d;
    const uint64_t kv_row = s.n2 * s.d;
    s.t1 = row == 0 ? 0 : numel(q) / row;
    s.t2 = kv_row == 0 ? 0 : numel(ori) / kv_row;
    s.t3 = has_cmp && kv_row > 0 ? numel(cmp) / kv_row : 0;
    if (bsnd) {
      s.batch = Dim(q, 0);
      s.s1 = Dim(q, 1);
      s.s2 = Dim(ori, 1);
      s.s3 = has_cmp ? Dim(cmp, 1) : 0;
    } else {
      s.batch = present(In::kCuSeqlensQ) ? Dim(in[In::kCuSeqlensQ], 0) - 1 : 1;
    }
    s.kOri = present(In::kOriSparseIndices) ? Dim(in[In::kOriSparseIndices], r - 1) : 0;
    s.kCmp = present(In::kCmpSparseIndices) ? Dim(in[In::kCmpSparseIndices], r - 1) : 0;
    s.hasCmp = has_cmp;
    s.hasCu = !bsnd && present(In::kCuSeqlensQ);
    s.hasUsedQ = present(In::kSequsedQ);
    s.hasUsedOri = present(In::kSequsedOriKv);
    s.hasUsedCmp = has_cmp && present(In::kSequsedCmpKv);
    s.hasResidual = present(In::kCmpResidualKv);
    s.hasSinks = present(In::kSinks);
    const auto t = mgo::tiling::ComputeSparseFlashMlaGradTiling(s, a, dtype, CubeOf(p));
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

#include "sparse_flash_mla_grad_def.h"  // the OpDef, generated from the table
