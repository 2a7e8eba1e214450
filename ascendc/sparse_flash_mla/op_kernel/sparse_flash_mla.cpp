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

#include "../../common/sfa_online_softmax.h"
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
 public:
  __aicore__ inline void Run(const SmlaForwardArgs& in, const mgo::tiling::SparseFlashMlaTilingData& t) {
    t_ = t;
    const TCubeTiling score_tiling = ToCubeTiling(t.mmScore);
    const TCubeTiling pv_tiling = ToCubeTiling(t.mmPv);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), softmax_.mmScore, &score_tiling, softmax_.mmPv, &pv_tiling);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(in);
    lens_.Init(t.geo, in.lens);
    ub_.Init(pipe_, mgo::tiling::PlanSparseFlashMlaUb(t));
    gather_.Init(ub_.gather.template Get<T>(), t.gatherRows, t.geo, SmlaKv<T>{oriGm_, cmpGm_});
    // Shared KV: the gathered rows are both the keys and the values.
    softmax_.Init(&ub_, SfaChunkWs<T>{wsQ_, wsKv_, wsKv_, wsP_, wsS_, wsAcc_},
                  SfaSoftmaxDims{t.geo.g, t.geo.d, t.geo.d, t.ubTileRows, t.geo.scale});
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) ProcessRow(row);
    softmax_.End();
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

  __aicore__ inline void ProcessRow(uint32_t row) {
    const SmlaGeo& g = t_.geo;
    const SmlaRow r = mgo::tiling::SmlaRowOf(g, lens_, row);
    const uint64_t q_row0 = uint64_t{r.t} * g.n1 + uint64_t{r.grp} * g.g;  // first head row of the group
    softmax_.Start();
    uint32_t chunks = 0;
    if (!r.padding) {
      if (g.hasSinks) softmax_.StartWithSinks(sinkGm_, r.grp * g.g);
      // The query heads of the group: G consecutive rows of D.
      LoadQuery(q_row0);
      chunks = GatherSmlaChunks(
          g, r, idx_, gather_, wsKv_, t_.keyChunk, [](const SmlaKeyRun&, uint32_t, uint32_t, uint32_t) {},
          [this](uint32_t n, uint32_t i) { softmax_.Chunk(n, i); });
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

  // attn_out = acc / l (or 0 without keys), then softmax_lse: m + ln(l) with keys; without keys the sink
  // (m = sink, l = 1) or -inf (l = 0); 0 for a padding row.
  __aicore__ inline void Finish(const SmlaRow& r, uint64_t q_row0, bool any) {
    using Sm = SfaOnlineSoftmax<T>;
    const SmlaGeo& geo = t_.geo;
    softmax_.WriteOut(outGm_, q_row0, any);
    const LocalTensor<float> lse = softmax_.Stat(Sm::kAlpha);
    if (r.padding) {
      Duplicate(lse, 0.0f, geo.g);
    } else if (any) {
      Ln(lse, softmax_.Stat(Sm::kSum), geo.g);
      Add(lse, lse, softmax_.Stat(Sm::kMax), geo.g);
    } else {
      SyncPipes<HardEvent::V_S>();
      for (uint32_t h = 0; h < geo.g; ++h) {
        const float m = softmax_.Stat(Sm::kMax).GetValue(h);
        lse.SetValue(h, softmax_.Stat(Sm::kSum).GetValue(h) == 0.0f ? -__builtin_huge_valf() : m);
      }
      SyncPipes<HardEvent::S_V>();
    }
    StoreF32(lseGm_[mgo::tiling::SmlaLseOffset(geo, r)], lse, geo.g);
  }

  mgo::tiling::SparseFlashMlaTilingData t_{};
  TPipe pipe_;
  SmlaLensGm lens_;
  SmlaIndices idx_;
  SfaUb ub_;
  SmlaKeyGather<T> gather_;
  SfaOnlineSoftmax<T> softmax_;
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
