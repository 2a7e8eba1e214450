// SparseFlashAttention (forward) as a mixed kernel: the AIVs gather and do the softmax, the
// AIC of each core multiplies (high-level Matmul, float32 accumulation).
//
// Every AIV owns a contiguous range of query rows (t, g) (tiling.rowStart, balanced by visible
// keys). Per row: gather qf = cat(q, q_rope) [G, dk] into its workspace; walk the K index
// slots, gathering the visible keys of each selected block (kf = cat(key, key_rope) rows and
// value rows) into chunks of up to keyChunk keys; per chunk
//   S = qf kfᵀ (AIC) -> scale, running max m, P = exp(S - m), running sum l (AIV)
//   acc = acc * exp(m_old - m) (AIV), acc += P v (AIC, atomic add into the same core's acc)
// and finally out = acc / l, softmax_max = m, softmax_sum = l. A row with no visible key gives
// out = 0, softmax_max = 0, softmax_sum = 0 (docs/contract.md section 0.6).
// With sinks (float32 [N1], one unscaled logit per query head, a key whose value is zero) the
// running statistics of head h start at m = sinks[h], l = 1 instead of m = lowest, l = 0: the
// chunks then rescale the sink's term like any earlier chunk's, so m and l include it, and a row
// with no visible key gives out = 0, softmax_max = sinks[h], softmax_sum = 1. A sink of -inf
// starts as no sink does (its term is exp(-inf) = 0): the same bits as without sinks.
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/sfa_kernel_common.h"
#include "../../common/sfa_online_softmax.h"
#include "../sparse_flash_attention_tiling.h"

namespace mgo::kernel {

template <typename T>
class SparseFlashAttentionKernel {
 public:
  __aicore__ inline void Run(GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR indices, GM_ADDR query_rope,
                             GM_ADDR key_rope, GM_ADDR lens_q, GM_ADDR lens_kv, GM_ADDR sinks, GM_ADDR out,
                             GM_ADDR softmax_max, GM_ADDR softmax_sum, GM_ADDR workspace,
                             const mgo::tiling::SparseFlashAttentionTilingData& t) {
    t_ = t;
    const TCubeTiling score_tiling = ToCubeTiling(t.mmScore);
    const TCubeTiling pv_tiling = ToCubeTiling(t.mmPv);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), softmax_.mmScore, &score_tiling, softmax_.mmPv, &pv_tiling);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(query, key, value, indices, query_rope, key_rope, out, softmax_max, softmax_sum, workspace);
    if (t.hasSinks) sinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(sinks), t.n1);
    geo_.Init(t, lens_q, lens_kv);
    ub_.Init(pipe_, mgo::tiling::PlanSfaUb(false, t.gatherRows, t.ubTileRows, t.chunkCols, t.dk, t.mRows, 0));
    gather_.Init(ub_.gather.template Get<T>(), t.gatherRows);
    softmax_.Init(&ub_, SfaChunkWs<T>{wsQf_, wsKf_, wsV_, wsP_, wsS_, wsAcc_},
                  SfaSoftmaxDims{t.g, t.dk, t.d, t.ubTileRows, t.scaleValue});
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) ProcessRow(row);
    softmax_.End();
  }

 private:
  __aicore__ inline void InitGm(GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR indices, GM_ADDR query_rope,
                                GM_ADDR key_rope, GM_ADDR out, GM_ADDR softmax_max, GM_ADDR softmax_sum,
                                GM_ADDR workspace) {
    const uint64_t q_rows = uint64_t{t_.t1} * t_.n1;
    const uint64_t k_rows = uint64_t{t_.t2} * t_.n2;
    qGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(query), q_rows * t_.d);
    kGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key), k_rows * t_.d);
    // Without value, key is value (shared latent KV): V rows are the key rows.
    vGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(t_.hasValue ? value : key), k_rows * t_.d);
    if (t_.hasRope) {
      qrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(query_rope), q_rows * t_.dr);
      krGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(key_rope), k_rows * t_.dr);
    }
    idxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(indices), uint64_t{t_.t1} * t_.n2 * t_.k);
    outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), q_rows * t_.d);
    maxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(softmax_max), q_rows);
    sumGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(softmax_sum), q_rows);
    GM_ADDR ws = GetUserWorkspace(workspace) + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    const uint64_t m = t_.mRows;
    const uint64_t cw = t_.chunkCols;
    wsQf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsQf), m * t_.dk);
    wsKf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsKf), cw * t_.dk);
    wsV_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsV), cw * t_.d);
    wsS_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsS), m * cw);
    wsP_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsP), m * cw);
    wsAcc_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsAcc), m * t_.dk);
  }

  __aicore__ inline void ProcessRow(uint32_t row) {
    const SfaRow r = geo_.Row(row);
    const uint64_t q_row0 = uint64_t{r.t} * t_.n1 + uint64_t{r.g} * t_.g;  // first head row of the group
    softmax_.Start();
    if (geo_.Padding(r)) {  // a BSND padding row: out 0, statistics 0 / 0 even with sinks (contract 0.3)
      Finish(r, q_row0, false);
      return;
    }
    gather_.Copy(wsQf_, qGm_[q_row0 * t_.d], RopeAt(t_.hasRope != 0, qrGm_, q_row0 * t_.dr), t_.d, t_.g, t_.d,
                 t_.dr);
    if (t_.hasSinks) softmax_.StartWithSinks(sinkGm_, r.g * t_.g);

    const SfaKeyChunkIo<T> io{kGm_, krGm_, vGm_, wsKf_, wsV_};
    const uint32_t chunks = GatherKeyChunks(t_, geo_, r, row, idxGm_, gather_, io,
                                            [this](uint32_t n, uint32_t i) { softmax_.Chunk(n, i); });
    Finish(r, q_row0, chunks > 0);
  }

  // out = acc / l (or 0 without visible keys), then the statistics.
  __aicore__ inline void Finish(const SfaRow& r, uint64_t q_row0, bool any) {
    using Sm = SfaOnlineSoftmax<T>;
    // Nothing visible: out, softmax_max, softmax_sum all 0 ...
    if (!any && !t_.hasSinks) Duplicate(softmax_.Stat(Sm::kMax), 0.0f, t_.g);
    if (!any && t_.hasSinks) {
      // ... but heads with a sink keep (sink, 1); those with a -inf sink (l = 0) report 0 / 0.
      SyncPipes<HardEvent::V_S>();
      for (uint32_t h = 0; h < t_.g; ++h) {
        if (softmax_.Stat(Sm::kSum).GetValue(h) == 0.0f) softmax_.Stat(Sm::kMax).SetValue(h, 0.0f);
      }
      SyncPipes<HardEvent::S_MTE3>();
    }
    softmax_.WriteOut(outGm_, q_row0, any);
    const uint64_t at = geo_.StatsOffset(r);
    StoreF32(maxGm_[at], softmax_.Stat(Sm::kMax), t_.g);
    StoreF32(sumGm_[at], softmax_.Stat(Sm::kSum), t_.g);
  }

  mgo::tiling::SparseFlashAttentionTilingData t_{};  // the SFA tiling and the op's attributes (t_.attrs)
  TPipe pipe_;
  SfaGeometry geo_;
  SfaUb ub_;
  RowGather<T> gather_;
  SfaOnlineSoftmax<T> softmax_;
  GlobalTensor<T> qGm_, kGm_, vGm_, qrGm_, krGm_, outGm_;
  GlobalTensor<int32_t> idxGm_;
  GlobalTensor<float> maxGm_, sumGm_, sinkGm_;
  GlobalTensor<T> wsQf_, wsKf_, wsV_, wsP_;
  GlobalTensor<float> wsS_, wsAcc_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
extern "C" __global__ __aicore__ void sparse_flash_attention(GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                                             GM_ADDR sparse_indices, GM_ADDR query_rope,
                                                             GM_ADDR key_rope, GM_ADDR actual_seq_lengths_query,
                                                             GM_ADDR actual_seq_lengths_kv, GM_ADDR sinks,
                                                             GM_ADDR out,
                                                             GM_ADDR softmax_max, GM_ADDR softmax_sum,
                                                             GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseFlashAttentionTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SparseFlashAttentionTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  if (TILING_KEY_IS(SparseFlashAttentionTilingKey(DType::kFloat16))) {
    mgo::kernel::SparseFlashAttentionKernel<half> op;
    op.Run(query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query, actual_seq_lengths_kv,
           sinks, out, softmax_max, softmax_sum, workspace, tiling_data);
  } else if (TILING_KEY_IS(SparseFlashAttentionTilingKey(DType::kBFloat16))) {
    mgo::kernel::SparseFlashAttentionKernel<bfloat16_t> op;
    op.Run(query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query, actual_seq_lengths_kv,
           sinks, out, softmax_max, softmax_sum, workspace, tiling_data);
  }
}
