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
#include "../sparse_flash_attention_tiling.h"

namespace mgo::kernel {

template <typename T>
class SparseFlashAttentionKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using BT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;

 public:
  __aicore__ inline void Run(GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR indices, GM_ADDR query_rope,
                             GM_ADDR key_rope, GM_ADDR lens_q, GM_ADDR lens_kv, GM_ADDR sinks, GM_ADDR out,
                             GM_ADDR softmax_max, GM_ADDR softmax_sum, GM_ADDR workspace,
                             const mgo::tiling::SparseFlashAttentionTilingData& t) {
    t_ = t;
    const TCubeTiling score_tiling = ToCubeTiling(t.mmScore);
    const TCubeTiling pv_tiling = ToCubeTiling(t.mmPv);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmScore_, &score_tiling, mmPv_, &pv_tiling);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(query, key, value, indices, query_rope, key_rope, out, softmax_max, softmax_sum, workspace);
    if (t.hasSinks) sinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(sinks), t.n1);
    geo_.Init(t, lens_q, lens_kv);
    ub_.Init(pipe_, mgo::tiling::PlanSfaUb(false, t.gatherRows, t.ubTileRows, t.chunkCols, t.dk, t.mRows, 0));
    gather_.Init(ub_.gather.template Get<T>(), t.gatherRows);
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) ProcessRow(row);
    mmScore_.End();
    mmPv_.End();
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
    Duplicate(Stat(kMax), kLowestFloat, t_.g);
    Duplicate(Stat(kSum), 0.0f, t_.g);
    if (geo_.Padding(r)) {  // a BSND padding row: out 0, statistics 0 / 0 even with sinks (contract 0.3)
      Finish(r, q_row0, false);
      return;
    }
    gather_.Copy(wsQf_, qGm_[q_row0 * t_.d], RopeAt(t_.hasRope != 0, qrGm_, q_row0 * t_.dr), t_.d, t_.g, t_.d,
                 t_.dr);
    if (t_.hasSinks) StartWithSinks(r.g * t_.g);

    const SfaKeyChunkIo<T> io{kGm_, krGm_, vGm_, wsKf_, wsV_};
    const uint32_t chunks =
        GatherKeyChunks(t_, geo_, r, row, idxGm_, gather_, io, [this](uint32_t n, uint32_t i) { Chunk(n, i); });
    Finish(r, q_row0, chunks > 0);
  }

  // The sink of each head of the group (from head0) as the first term of its softmax: m = sink,
  // l = exp(sink - sink) = 1. A -inf sink keeps the start without sink.
  __aicore__ inline void StartWithSinks(uint32_t head0) {
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < t_.g; ++h) {
      const float sink = sinkGm_.GetValue(head0 + h);
      if (sink < kLowestFloat) continue;  // -inf
      Stat(kMax).SetValue(h, sink);
      Stat(kSum).SetValue(h, 1.0f);
    }
    SyncPipes<HardEvent::S_V>();
  }

  enum StatSlot : uint32_t { kMax = 0, kSum = 1, kNewMax = 2, kRowSum = 3, kAlpha = 4 };
  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Stat(StatSlot s) { return ub_.stat[s].template Get<float>(); }

  // One chunk of n gathered keys: scores, online softmax update, acc (+)= P v.
  __aicore__ inline void Chunk(uint32_t n, uint32_t index) {
    const uint32_t g = t_.g;
    mmScore_.SetOrgShape(g, n, t_.dk, t_.dk);
    mmScore_.SetSingleShape(g, n, t_.dk);
    mmScore_.SetTensorA(wsQf_);
    mmScore_.SetTensorB(wsKf_, true);
    mmScore_.IterateAll(wsS_);

    const LocalTensor<float> score = ub_.score.template Get<float>();
    const LocalTensor<T> p16 = ub_.io[0].template Get<T>();
    const LocalTensor<float> red = ub_.red.template Get<float>();
    const LocalTensor<float> work = ub_.work.template Get<float>();
    const uint32_t pitch_f = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 8));
    const uint32_t pitch_h = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 16));
    for (uint32_t h0 = 0; h0 < g; h0 += t_.ubTileRows) {
      const uint32_t rows = g - h0 < t_.ubTileRows ? g - h0 : t_.ubTileRows;
      LoadRowsF32(score, wsS_[uint64_t{h0} * n], rows, n);
      for (uint32_t i = 0; i < rows; ++i) {
        const LocalTensor<float> s = score[i * pitch_f];
        Muls(s, s, t_.scaleValue, n);
        ReduceMax(red, s, work, n);
        SyncPipes<HardEvent::V_S>();
        const float old_max = Stat(kMax).GetValue(h0 + i);
        const float chunk_max = red.GetValue(0);
        const float new_max = chunk_max > old_max ? chunk_max : old_max;
        Stat(kNewMax).SetValue(h0 + i, new_max);
        Adds(s, s, -new_max, n);
        Exp(s, s, n);
        ReduceSum(red, s, work, n);
        Cast(p16[i * pitch_h], s, RoundMode::CAST_RINT, n);
        SyncPipes<HardEvent::V_S>();
        const float row_sum = red.GetValue(0);
        Stat(kRowSum).SetValue(h0 + i, row_sum);
        // A NaN score makes the row sum NaN; the max must be NaN too (IEEE propagation, as the
        // reference's), whatever ReduceMax does with NaN. (+inf - +inf is NaN too: keep +inf.)
        if (row_sum != row_sum && !(new_max > 3.0e38f)) Stat(kNewMax).SetValue(h0 + i, row_sum);
      }
      StoreRows16(wsP_[uint64_t{h0} * n], p16, rows, n);
    }
    SyncPipes<HardEvent::S_V>();
    // alpha = exp(m_old - m_new) rescales what earlier chunks accumulated (0 for the first).
    Sub(Stat(kAlpha), Stat(kMax), Stat(kNewMax), g);
    Exp(Stat(kAlpha), Stat(kAlpha), g);
    Mul(Stat(kSum), Stat(kSum), Stat(kAlpha), g);
    Add(Stat(kSum), Stat(kSum), Stat(kRowSum), g);
    Muls(Stat(kMax), Stat(kNewMax), 1.0f, g);
    if (index > 0) RescaleAcc();

    mmPv_.SetOrgShape(g, t_.d, n, n);
    mmPv_.SetSingleShape(g, t_.d, n);
    mmPv_.SetTensorA(wsP_);
    mmPv_.SetTensorB(wsV_);
    mmPv_.IterateAll(wsAcc_, index > 0 ? 1 : 0);
  }

  // acc[h] *= alpha[h], row by row through UB.
  __aicore__ inline void RescaleAcc() {
    const LocalTensor<float> rowf = ub_.rowF[0].template Get<float>();
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < t_.g; ++h) {
      const float alpha = Stat(kAlpha).GetValue(h);
      DataCopy(rowf, wsAcc_[uint64_t{h} * t_.d], t_.d);
      SyncPipes<HardEvent::MTE2_V>();
      Muls(rowf, rowf, alpha, t_.d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(wsAcc_[uint64_t{h} * t_.d], rowf, t_.d);
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // out = acc / l (or 0 without visible keys), then the statistics.
  __aicore__ inline void Finish(const SfaRow& r, uint64_t q_row0, bool any) {
    const LocalTensor<float> rowf = ub_.rowF[0].template Get<float>();
    const LocalTensor<T> rowh = ub_.rowH[0].template Get<T>();
    SyncPipes<HardEvent::V_S>();
    if (!any) Duplicate(rowf, 0.0f, t_.d);
    // Nothing visible: out, softmax_max, softmax_sum all 0 ...
    if (!any && !t_.hasSinks) Duplicate(Stat(kMax), 0.0f, t_.g);
    if (!any && t_.hasSinks) {
      // ... but heads with a sink keep (sink, 1); those with a -inf sink (l = 0) report 0 / 0.
      for (uint32_t h = 0; h < t_.g; ++h) {
        if (Stat(kSum).GetValue(h) == 0.0f) Stat(kMax).SetValue(h, 0.0f);
      }
      SyncPipes<HardEvent::S_MTE3>();
    }
    for (uint32_t h = 0; h < t_.g; ++h) {
      if (any) {
        const float inv = 1.0f / Stat(kSum).GetValue(h);
        DataCopy(rowf, wsAcc_[uint64_t{h} * t_.d], t_.d);
        SyncPipes<HardEvent::MTE2_V>();
        Muls(rowf, rowf, inv, t_.d);
      }
      Cast(rowh, rowf, RoundMode::CAST_RINT, t_.d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(outGm_[(q_row0 + h) * t_.d], rowh, t_.d);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
    const uint64_t at = geo_.StatsOffset(r);
    StoreF32(maxGm_[at], Stat(kMax), t_.g);
    StoreF32(sumGm_[at], Stat(kSum), t_.g);
  }

  mgo::tiling::SparseFlashAttentionTilingData t_{};  // the SFA tiling and the op's attributes (t_.attrs)
  TPipe pipe_;
  Matmul<A, BT, C> mmScore_;
  Matmul<A, A, C> mmPv_;
  SfaGeometry geo_;
  SfaUb ub_;
  RowGather<T> gather_;
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
