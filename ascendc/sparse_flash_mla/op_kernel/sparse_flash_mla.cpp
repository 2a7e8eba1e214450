// SparseFlashMla (forward, docs/contract.md section 8) as a mixed kernel: the AIVs gather and do the softmax,
// the AIC of each core multiplies (high-level Matmul, float32 accumulation). The SFA forward's scheme with
// two key sources and shared KV.
//
// Every AIV owns a contiguous range of query rows (t, grp) (tiling.rowStart). Per row: gather its G query heads
// [G, D] into the workspace; walk its keys (smla_kernel_common.h: the band of original tokens as one run of
// consecutive ori_kv rows, or the ori index entries inside it; then every visible compressed entry or the cmp
// index entries below the causal limit), gathering them into chunks of up to keyChunk rows, which are both K
// and V; per chunk
//   S = Q Kᵀ (AIC) -> scale, running max m, P = exp(S - m), running sum l (AIV)
//   acc = acc * exp(m_old - m) (AIV), acc += P V (AIC)
// and finally attn_out = acc / l, softmax_lse = m + ln(l). The online softmax of head h starts from its sink
// (m = sinks[h], l = 1; without sinks or with a -inf sink m = lowest, l = 0), so softmax_lse includes the sink.
// A row without keys: attn_out 0, softmax_lse = sinks[h] (-inf without a sink); a padding row (beyond
// seqused_q): attn_out 0, softmax_lse 0. A row is one AIV's, its keys in a fixed order: the same bits for any
// core count and execution order.
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/sfa_kernel_common.h"
#include "../../common/smla_kernel_common.h"
#include "../sparse_flash_mla_tiling.h"

namespace mgo::kernel {

// The inputs in the table's order (absent optional ones are null). One declaration per member: GM_ADDR may be
// a macro of a pointer type.
struct SmlaForwardArgs {
  GM_ADDR query;
  GM_ADDR ori_kv;
  GM_ADDR cmp_kv;
  GM_ADDR ori_idx;
  GM_ADDR cmp_idx;
  GM_ADDR lens[static_cast<uint32_t>(mgo::tiling::SmlaLen::kCount)];
  GM_ADDR sinks;
  GM_ADDR out;
  GM_ADDR lse;
  GM_ADDR workspace;
};

template <typename T>
class SparseFlashMlaKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using BT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;

 public:
  __aicore__ inline void Run(const SmlaForwardArgs& in, const mgo::tiling::SparseFlashMlaTilingData& t) {
    t_ = t;
    const TCubeTiling score_tiling = ToCubeTiling(t.mmScore);
    const TCubeTiling pv_tiling = ToCubeTiling(t.mmPv);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmScore_, &score_tiling, mmPv_, &pv_tiling);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(in);
    lens_.Init(t.geo, in.lens);
    ub_.Init(pipe_, mgo::tiling::PlanSparseFlashMlaUb(t));
    gather_.Init(ub_.gather.template Get<T>(), t.gatherRows, t.geo, SmlaKv<T>{oriGm_, cmpGm_});
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) ProcessRow(row);
    mmScore_.End();
    mmPv_.End();
  }

 private:
  __aicore__ inline void InitGm(const SmlaForwardArgs& in) {
    const SmlaGeo& g = t_.geo;
    const uint64_t q_rows = uint64_t{g.t1} * g.n1;
    qGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(in.query), q_rows * g.d);
    oriGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(in.ori_kv), uint64_t{g.t2} * g.n2 * g.d);
    if (g.hasCmp) cmpGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(in.cmp_kv), uint64_t{g.t3} * g.n2 * g.d);
    if (g.kOri > 0) {
      idx_.ori.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(in.ori_idx), uint64_t{g.t1} * g.n2 * g.kOri);
    }
    if (g.kCmp > 0) {
      idx_.cmp.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(in.cmp_idx), uint64_t{g.t1} * g.n2 * g.kCmp);
    }
    if (g.hasSinks) sinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(in.sinks), g.n1);
    outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(in.out), q_rows * g.d);
    lseGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(in.lse), q_rows);
    GM_ADDR ws = GetUserWorkspace(in.workspace) + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    const uint64_t cw = t_.keyChunk;
    wsQ_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsQ), uint64_t{g.g} * g.d);
    wsKv_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsKv), cw * g.d);
    wsS_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsS), uint64_t{g.g} * cw);
    wsP_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsP), uint64_t{g.g} * cw);
    wsAcc_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsAcc), uint64_t{g.g} * g.d);
  }

  enum StatSlot : uint32_t { kMax = 0, kSum = 1, kNewMax = 2, kRowSum = 3, kAlpha = 4 };
  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Stat(StatSlot s) { return ub_.stat[s].template Get<float>(); }

  __aicore__ inline void ProcessRow(uint32_t row) {
    const SmlaGeo& g = t_.geo;
    const SmlaRow r = mgo::tiling::SmlaRowOf(g, lens_, row);
    const uint64_t q_row0 = uint64_t{r.t} * g.n1 + uint64_t{r.grp} * g.g;  // first head row of the group
    Duplicate(Stat(kMax), kLowestFloat, g.g);
    Duplicate(Stat(kSum), 0.0f, g.g);
    uint32_t chunks = 0;
    if (!r.padding) {
      if (g.hasSinks) StartWithSinks(r.grp * g.g);
      // The query heads of the group: G consecutive rows of D.
      LoadQuery(q_row0);
      chunks = GatherSmlaChunks(
          g, r, idx_, gather_, wsKv_, t_.keyChunk, [](const SmlaKeyRun&, uint32_t, uint32_t, uint32_t) {},
          [this](uint32_t n, uint32_t i) { Chunk(n, i); });
    }
    Finish(r, q_row0, chunks > 0);
  }

  // wsQ = the G query rows from q_row0 (contiguous in GM), through the gather buffer.
  __aicore__ inline void LoadQuery(uint64_t q_row0) {
    const SmlaGeo& g = t_.geo;
    const LocalTensor<T> buf = ub_.gather.template Get<T>();
    for (uint32_t h0 = 0; h0 < g.g; h0 += t_.gatherRows) {
      const uint32_t n = g.g - h0 < t_.gatherRows ? g.g - h0 : t_.gatherRows;
      DataCopy(buf, qGm_[(q_row0 + h0) * g.d], n * g.d);
      SyncPipes<HardEvent::MTE2_MTE3>();
      DataCopy(wsQ_[uint64_t{h0} * g.d], buf, n * g.d);
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // The sink of each head of the group (from head0) as the first term of its softmax: m = sink, l = 1.
  // A -inf sink keeps the start without sink.
  __aicore__ inline void StartWithSinks(uint32_t head0) {
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < t_.geo.g; ++h) {
      const float sink = sinkGm_.GetValue(head0 + h);
      if (sink < kLowestFloat) continue;  // -inf
      Stat(kMax).SetValue(h, sink);
      Stat(kSum).SetValue(h, 1.0f);
    }
    SyncPipes<HardEvent::S_V>();
  }

  // One chunk of n gathered keys: scores, online softmax update, acc (+)= P V.
  __aicore__ inline void Chunk(uint32_t n, uint32_t index) {
    const SmlaGeo& geo = t_.geo;
    const uint32_t g = geo.g;
    mmScore_.SetOrgShape(g, n, geo.d, geo.d);
    mmScore_.SetSingleShape(g, n, geo.d);
    mmScore_.SetTensorA(wsQ_);
    mmScore_.SetTensorB(wsKv_, true);
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
        Muls(s, s, geo.scale, n);
        ReduceMax(red, s, work, n);
        SyncPipes<HardEvent::V_S>();
        const float old_max = Stat(kMax).GetValue(h0 + i);
        const float chunk_max = red.GetValue(0);
        const float new_max = chunk_max > old_max ? chunk_max : old_max;
        Stat(kNewMax).SetValue(h0 + i, new_max);
        SyncPipes<HardEvent::S_V>();
        Adds(s, s, -new_max, n);
        Exp(s, s, n);
        ReduceSum(red, s, work, n);
        Cast(p16[i * pitch_h], s, RoundMode::CAST_RINT, n);
        SyncPipes<HardEvent::V_S>();
        const float row_sum = red.GetValue(0);
        Stat(kRowSum).SetValue(h0 + i, row_sum);
        // A NaN score makes the row sum NaN; the max must be NaN too (IEEE propagation, as the reference's),
        // whatever ReduceMax does with NaN. (+inf - +inf is NaN too: keep +inf.)
        if (row_sum != row_sum && !(new_max > 3.0e38f)) Stat(kNewMax).SetValue(h0 + i, row_sum);
      }
      StoreRows16(wsP_[uint64_t{h0} * n], p16, rows, n);
    }
    SyncPipes<HardEvent::S_V>();
    // alpha = exp(m_old - m_new) rescales what earlier chunks (and the sink) accumulated.
    Sub(Stat(kAlpha), Stat(kMax), Stat(kNewMax), g);
    Exp(Stat(kAlpha), Stat(kAlpha), g);
    Mul(Stat(kSum), Stat(kSum), Stat(kAlpha), g);
    Add(Stat(kSum), Stat(kSum), Stat(kRowSum), g);
    Muls(Stat(kMax), Stat(kNewMax), 1.0f, g);
    if (index > 0) RescaleAcc();

    mmPv_.SetOrgShape(g, geo.d, n, n);
    mmPv_.SetSingleShape(g, geo.d, n);
    mmPv_.SetTensorA(wsP_);
    mmPv_.SetTensorB(wsKv_);
    mmPv_.IterateAll(wsAcc_, index > 0 ? 1 : 0);
  }

  // acc[h] *= alpha[h], row by row through UB.
  __aicore__ inline void RescaleAcc() {
    const uint32_t d = t_.geo.d;
    const LocalTensor<float> rowf = ub_.rowF[0].template Get<float>();
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < t_.geo.g; ++h) {
      const float alpha = Stat(kAlpha).GetValue(h);
      DataCopy(rowf, wsAcc_[uint64_t{h} * d], d);
      SyncPipes<HardEvent::MTE2_V>();
      Muls(rowf, rowf, alpha, d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(wsAcc_[uint64_t{h} * d], rowf, d);
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // attn_out = acc / l (or 0 without keys), then softmax_lse: m + ln(l) with keys; without keys the sink
  // (m = sink, l = 1) or -inf (l = 0); 0 for a padding row.
  __aicore__ inline void Finish(const SmlaRow& r, uint64_t q_row0, bool any) {
    const SmlaGeo& geo = t_.geo;
    const uint32_t d = geo.d;
    const LocalTensor<float> rowf = ub_.rowF[0].template Get<float>();
    const LocalTensor<T> rowh = ub_.rowH[0].template Get<T>();
    if (!any) Duplicate(rowf, 0.0f, d);
    for (uint32_t h = 0; h < geo.g; ++h) {
      if (any) {
        SyncPipes<HardEvent::V_S>();
        const float inv = 1.0f / Stat(kSum).GetValue(h);
        DataCopy(rowf, wsAcc_[uint64_t{h} * d], d);
        SyncPipes<HardEvent::MTE2_V>();
        Muls(rowf, rowf, inv, d);
      }
      Cast(rowh, rowf, RoundMode::CAST_RINT, d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(outGm_[(q_row0 + h) * d], rowh, d);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
    const LocalTensor<float> lse = Stat(kAlpha);
    if (r.padding) {
      Duplicate(lse, 0.0f, geo.g);
    } else if (any) {
      Ln(lse, Stat(kSum), geo.g);
      Add(lse, lse, Stat(kMax), geo.g);
    } else {
      SyncPipes<HardEvent::V_S>();
      for (uint32_t h = 0; h < geo.g; ++h) {
        const float m = Stat(kMax).GetValue(h);
        lse.SetValue(h, Stat(kSum).GetValue(h) == 0.0f ? -__builtin_huge_valf() : m);
      }
      SyncPipes<HardEvent::S_V>();
    }
    StoreF32(lseGm_[mgo::tiling::SmlaLseOffset(geo, r)], lse, geo.g);
  }

  mgo::tiling::SparseFlashMlaTilingData t_{};
  TPipe pipe_;
  Matmul<A, BT, C> mmScore_;
  Matmul<A, A, C> mmPv_;
  SmlaLensGm lens_;
  SmlaIndices idx_;
  SfaUb ub_;
  SmlaKeyGather<T> gather_;
  GlobalTensor<T> qGm_, oriGm_, cmpGm_, outGm_;
  GlobalTensor<float> sinkGm_, lseGm_;
  GlobalTensor<T> wsQ_, wsKv_, wsP_;
  GlobalTensor<float> wsS_, wsAcc_;
};

}  // namespace mgo::kernel

// Argument order: inputs in the table's order (absent optional inputs are null), outputs, workspace, tiling.
extern "C" __global__ __aicore__ void sparse_flash_mla(GM_ADDR query, GM_ADDR ori_kv, GM_ADDR cmp_kv,
                                                       GM_ADDR ori_sparse_indices, GM_ADDR cmp_sparse_indices,
                                                       GM_ADDR cu_seqlens_q, GM_ADDR cu_seqlens_ori_kv,
                                                       GM_ADDR cu_seqlens_cmp_kv, GM_ADDR seqused_q,
                                                       GM_ADDR seqused_ori_kv, GM_ADDR seqused_cmp_kv,
                                                       GM_ADDR cmp_residual_kv, GM_ADDR sinks, GM_ADDR attn_out,
                                                       GM_ADDR softmax_lse, GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseFlashMlaTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SparseFlashMlaTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::SmlaForwardArgs args{query,
                                          ori_kv,
                                          cmp_kv,
                                          ori_sparse_indices,
                                          cmp_sparse_indices,
                                          {cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q,
                                           seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv},
                                          sinks,
                                          attn_out,
                                          softmax_lse,
                                          workspace};
  if (TILING_KEY_IS(SparseFlashMlaTilingKey(DType::kFloat16))) {
    mgo::kernel::SparseFlashMlaKernel<half> op;
    op.Run(args, tiling_data);
  } else if (TILING_KEY_IS(SparseFlashMlaTilingKey(DType::kBFloat16))) {
    mgo::kernel::SparseFlashMlaKernel<bfloat16_t> op;
    op.Run(args, tiling_data);
  }
}
