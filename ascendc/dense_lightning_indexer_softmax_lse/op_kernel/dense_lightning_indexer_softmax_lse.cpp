// DenseLightningIndexerSoftmaxLse as a mixed kernel: per query token t, over its visible keys j
// (a prefix of its batch's keys), the index scores I_j = sum_g w_g relu(q_index[g] . k_index[j])
// (exactly LightningIndexer's) and their statistics softmax_max_index[t] = max_j I_j and
// softmax_sum_index[t] = sum_j exp(I_j - max); a token without a visible key gets 0 and 0
// (docs/contract.md section 0.6).
//
// The cube reads key_index in place: per chunk of keyChunk keys Sx = q_index Kiᵀ (float32), the
// AIV forms I (IndexScores, heads in ascending order) and folds the chunk into the running pair
// (m, l): m' = max(m, max_j I_j), l' = l exp(m - m') + sum_j exp(I_j - m'). Chunk boundaries
// depend on the shape only and every token is one AIV's, so the bits do not depend on the core
// count or the order the cores run in. UB holds O(keyChunk) floats at any sequence length.
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_kernel_common.h"
#include "../dense_lightning_indexer_softmax_lse_tiling.h"

namespace mgo::kernel {

using mgo::tiling::DliTilingData;

struct DliIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query_index;
  GM_ADDR key_index;
  GM_ADDR weights;
  GM_ADDR lens_q;
  GM_ADDR lens_k;
  GM_ADDR cmp_residual_k;
  GM_ADDR softmax_max_index;
  GM_ADDR softmax_sum_index;
  GM_ADDR workspace;
};

template <typename T, typename W>
class DenseLightningIndexerSoftmaxLseKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;

 public:
  __aicore__ inline void Run(const DliIo& io, const DliTilingData& t) {
    t_ = t;
    const TCubeTiling sx = ToCubeTiling(t.mmSx);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mm_, &sx);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(io);
    geo_.Init(IndexerGeometry(t, 1), io.lens_q, io.lens_k);
    geo_.InitCmp(static_cast<uint32_t>(t.attrs.cmp_ratio), t.cmpResidual != 0 ? io.cmp_residual_k : nullptr);
    InitUb();
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) Row(row);
    mm_.End();
  }

 private:
  __aicore__ inline void InitGm(const DliIo& io) {
    qiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_index), uint64_t{t_.t1} * t_.nIdx * t_.dIdx);
    kiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_index), uint64_t{t_.t2} * t_.dIdx);
    wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.weights), uint64_t{t_.t1} * t_.nIdx);
    maxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_max_index), t_.t1);
    sumGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_sum_index), t_.t1);
    GM_ADDR ws = GetUserWorkspace(io.workspace) + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    wsSx_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSx), uint64_t{t_.nIdx} * t_.keyChunk);
  }

  __aicore__ inline void InitUb() {
    const mgo::tiling::DliUbPlan p = mgo::tiling::PlanDliUb(t_, std::is_same_v<W, float>);
    for (auto& b : chunk_) pipe_.InitBuffer(b, p.chunkBytes);
    pipe_.InitBuffer(wRaw_, p.wRawBytes);
    pipe_.InitBuffer(w_, p.wBytes);
    pipe_.InitBuffer(work_, p.workBytes);
    for (auto& b : small_) pipe_.InitBuffer(b, mgo::tiling::DliUbPlan::kSmallBytes);
  }

  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Chunk(uint32_t i) { return chunk_[i].template Get<float>(); }
  __aicore__ inline LocalTensor<float> Small(uint32_t i) { return small_[i].template Get<float>(); }

  __aicore__ inline void Row(uint32_t t) {
    const SfaRow r = geo_.Row(t);
    // Visible keys: the batch-local prefix [0, n) (the causal limit may lie before key 0).
    const uint32_t n = r.limit < 0 ? 0 : static_cast<uint32_t>(r.limit + 1);
    LoadWeightsF32(wRaw_.template Get<W>(), wGm_[uint64_t{t} * t_.nIdx], w_.template Get<float>(), t_.nIdx);
    float m = 0.0f;
    float l = 0.0f;
    for (uint32_t c0 = 0; c0 < n; c0 += t_.keyChunk) {
      const uint32_t cols = n - c0 < t_.keyChunk ? n - c0 : t_.keyChunk;
      IndexScores(mm_, qiGm_[uint64_t{t} * t_.nIdx * t_.dIdx], kiGm_[(r.kv0 + c0) * t_.dIdx], wsSx_, t_.nIdx,
                  t_.dIdx, cols, w_.template Get<float>(), Chunk(0), Chunk(1), Chunk(2));
      Fold(cols, c0 == 0, &m, &l);
    }
    Store(t, m, l);
  }

  // Folds the chunk's scores (Chunk(0), `cols` of them) into the running max m and sum l.
  __aicore__ inline void Fold(uint32_t cols, bool first, float* m, float* l) {
    const LocalTensor<float> score = Chunk(0);
    const LocalTensor<float> red = Small(0);
    const LocalTensor<float> factor = Small(1);
    const LocalTensor<float> work = work_.template Get<float>();
    ReduceMax(red, score, work, cols);
    SyncPipes<HardEvent::V_S>();
    const float chunk_max = red.GetValue(0);
    const float next = first || chunk_max > *m ? chunk_max : *m;
    // exp(m - m') on the vector unit (the scalar unit has no exp); 0 for the first chunk.
    factor.SetValue(0, first ? 0.0f : *m - next);
    SyncPipes<HardEvent::S_V>();
    Exp(factor, factor, 1);
    Adds(score, score, -next, cols);
    Exp(score, score, cols);
    ReduceSum(red, score, work, cols);
    SyncPipes<HardEvent::V_S>();
    *l = (first ? 0.0f : *l * factor.GetValue(0)) + red.GetValue(0);
    *m = next;
  }

  __aicore__ inline void Store(uint32_t t, float m, float l) {
    const LocalTensor<float> mv = Small(0);
    const LocalTensor<float> lv = Small(1);
    mv.SetValue(0, m);
    lv.SetValue(0, l);
    SyncPipes<HardEvent::V_MTE3>();
    SyncPipes<HardEvent::S_MTE3>();
    const DataCopyExtParams one{1, 4, 0, 0, 0};
    DataCopyPad(maxGm_[t], mv, one);
    DataCopyPad(sumGm_[t], lv, one);
    PipeBarrier<PIPE_ALL>();  // the next token rewrites these buffers (scalar and V after MTE3)
  }

  DliTilingData t_{};
  TPipe pipe_;
  Matmul<A, AT, C> mm_;
  SfaGeometry geo_;
  TBuf<TPosition::VECCALC> chunk_[mgo::tiling::DliUbPlan::kChunkBufs], wRaw_, w_, work_,
      small_[mgo::tiling::DliUbPlan::kSmall];
  GlobalTensor<T> qiGm_, kiGm_;
  GlobalTensor<W> wGm_;
  GlobalTensor<float> maxGm_, sumGm_, wsSx_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
// cmp_residual_k is read only where the tiling says it is given and cmp_ratio > 1 (at ratio 1 every
// residual is 0).
extern "C" __global__ __aicore__ void dense_lightning_indexer_softmax_lse(
    GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights, GM_ADDR actual_seq_lengths_query,
    GM_ADDR actual_seq_lengths_key, GM_ADDR cmp_residual_k, GM_ADDR softmax_max_index, GM_ADDR softmax_sum_index,
    GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DenseLightningIndexerSoftmaxLseTilingKey;
  using mgo::tiling::DType;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::DliTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::DliIo io{query_index, key_index, weights, actual_seq_lengths_query, actual_seq_lengths_key,
                              cmp_residual_k, softmax_max_index, softmax_sum_index, workspace};
  if (TILING_KEY_IS(DenseLightningIndexerSoftmaxLseTilingKey(DType::kFloat16, false))) {
    mgo::kernel::DenseLightningIndexerSoftmaxLseKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(DenseLightningIndexerSoftmaxLseTilingKey(DType::kFloat16, true))) {
    mgo::kernel::DenseLightningIndexerSoftmaxLseKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(DenseLightningIndexerSoftmaxLseTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::DenseLightningIndexerSoftmaxLseKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(DenseLightningIndexerSoftmaxLseTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::DenseLightningIndexerSoftmaxLseKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
