// SparseFlashMlaGrad (docs/contract.md section 8) as a mixed kernel: the AIVs gather keys and do the
// element-wise softmax backward, the AIC of each core multiplies (high-level Matmul, float32 accumulation).
// Key is value (MLA's shared latent), so one gathered tile serves as K and V: [S; dP] = [Q; dO] Kᵀ is one
// product, and a key's gradient scale dSᵀ Q + Pᵀ dO is one product [scale dS; P]ᵀ [Q; dO].
//
// Two passes, separated by SyncAll over the AIVs:
//  1. Row pass (query rows (t, g), tiling.rowStart): delta = rowsum(dO * O) -> workspace; the row's keys in
//     chunks (the band of ori_kv read as contiguous ranges, or the entries of ori_sparse_indices inside it;
//     then every compressed entry below the causal limit, or the entries of cmp_sparse_indices below it);
//     per chunk [S; dP] (AIC), P = exp(scale S - lse) with the given lse (which holds the sink),
//     dS = P (dP - delta) (AIV), dQ += dS K (AIC); d_query = scale * dQ; the softmax L1 norms of the row's
//     index slots (head mean of P) and its d_sinks terms -P_sink * delta.
//  2. Key pass (key ownership, tiling.ori/cmpKeyStart): the AIV owning the first row of a key block of
//     either source scans the block's batch for the query rows that see it, in ascending token order (the
//     band makes them one contiguous range for ori_kv; index rows are scanned, a slot naming a key twice
//     counts twice), and per chunk of rowChunk rows recomputes S, dP, P, dS against the block and
//     accumulates the block's gradient; d_ori_kv / d_cmp_kv rows are written once.
// Every gradient sum is therefore formed by one core in a fixed order: the bits do not depend on the core
// count or the order in which cores run. d_sinks: after the SyncAll AIV 0 sums the rows' terms in token order.
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/kernel_helpers.h"
#include "../../common/sfa_kernel_common.h"
#include "../../common/smla_kernel_common.h"
#include "../sparse_flash_mla_grad_tiling.h"

namespace mgo::kernel {

// The row geometry is the forward's (smla_tiling_common.h; the length tensors: smla_kernel_common.h).
using mgo::tiling::SmlaBatch;
using mgo::tiling::SmlaBatchOf;
using mgo::tiling::SmlaBatchOfRow;
using mgo::tiling::SmlaBatchOfToken;
using mgo::tiling::SmlaCmpLimit;
using mgo::tiling::SmlaFirstOriRow;
using mgo::tiling::SmlaLseOffset;
using mgo::tiling::SmlaOriBand;

// The kernel's GM arguments (absent optional inputs are null).
struct SmlaGradIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query;
  GM_ADDR d_out;
  GM_ADDR out;
  GM_ADDR softmax_lse;
  GM_ADDR ori_kv;
  GM_ADDR cmp_kv;
  GM_ADDR ori_idx;
  GM_ADDR cmp_idx;
  GM_ADDR lens[static_cast<uint32_t>(mgo::tiling::SmlaLen::kCount)];  // SmlaLen order
  GM_ADDR sinks;
  GM_ADDR d_query;
  GM_ADDR d_ori_kv;
  GM_ADDR d_cmp_kv;
  GM_ADDR d_sinks;
  GM_ADDR ori_l1;
  GM_ADDR cmp_l1;
  GM_ADDR workspace;
};

// The UB buffers of one AIV, allocated exactly as PlanSmlaGradUb counts them.
struct SmlaGradUb {
  TBuf<TPosition::VECCALC> gather, score, aux, io[2], rowF[2], rowH[2], stat[mgo::tiling::SmlaGradUbPlan::kStats],
      red, work, colSum, colSlot, mult, l1Ori, l1Cmp, sink;

  __aicore__ inline void Init(TPipe& pipe, const mgo::tiling::SmlaGradUbPlan& p) {
    pipe.InitBuffer(gather, p.gatherBytes);
    pipe.InitBuffer(score, p.scoreBytes);
    pipe.InitBuffer(aux, p.auxBytes);
    for (auto& b : io) pipe.InitBuffer(b, p.ioBytes);
    for (uint32_t i = 0; i < 2; ++i) {
      pipe.InitBuffer(rowF[i], p.rowFBytes);
      pipe.InitBuffer(rowH[i], p.rowHBytes);
    }
    for (auto& s : stat) pipe.InitBuffer(s, p.statBytes);
    pipe.InitBuffer(red, mgo::tiling::SmlaGradUbPlan::kRedBytes);
    pipe.InitBuffer(work, p.workBytes);
    pipe.InitBuffer(colSum, p.colBytes);
    pipe.InitBuffer(colSlot, p.colBytes);
    pipe.InitBuffer(mult, p.multBytes);
    if (p.l1OriBytes > 0) pipe.InitBuffer(l1Ori, p.l1OriBytes);
    if (p.l1CmpBytes > 0) pipe.InitBuffer(l1Cmp, p.l1CmpBytes);
    if (p.sinkBytes > 0) pipe.InitBuffer(sink, p.sinkBytes);
  }
};

template <typename T>
class SparseFlashMlaGradKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;
  static constexpr uint32_t kMaxRowChunk = mgo::tiling::kSmlaKeyPassRows;
  static constexpr int32_t kCmpTag = 1 << 20;  // column slot tags: ori slot s, cmp slot s + kCmpTag, -1 none
  static constexpr float kExpCap = 64.0f;      // hidden key-pass columns: exp stays finite, times 0 is 0

 public:
  __aicore__ inline void Run(const SmlaGradIo& io, const mgo::tiling::SparseFlashMlaGradTilingData& t) {
    t_ = t;
    const TCubeTiling nt = ToCubeTiling(t.mmScore);
    const TCubeTiling nn = ToCubeTiling(t.mmDq);
    const TCubeTiling tn = ToCubeTiling(t.mmDkv);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmNT_, &nt, mmNN_, &nn, mmTN_, &tn);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(io);
    lens_.Init(t.geo, io.lens);
    const SmlaGeo& g = t.geo;
    ub_.Init(pipe_, mgo::tiling::PlanSmlaGradUb(t.gatherRows, t.ubTileRows, t.chunkCols, g.d, t.mRows, t.rowChunk,
                                                t.keyBlock, g.kOri, g.kCmp, g.hasSinks ? g.n1 : 0));
    gather_.Init(ub_.gather.template Get<T>(), t.gatherRows);
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) QueryRow(row);
    SyncAll();  // every delta is in the workspace before any key pass reads it
    for (uint32_t kr = t.oriKeyStart[aiv]; kr < t.oriKeyStart[aiv + 1]; ++kr) KeyRow(kr, true);
    for (uint32_t kr = t.cmpKeyStart[aiv]; kr < t.cmpKeyStart[aiv + 1]; ++kr) KeyRow(kr, false);
    if (g.hasSinks && aiv == 0) SumSinkTerms();
    mmNT_.End();
    mmNN_.End();
    mmTN_.End();
  }

 private:
  enum StatSlot : uint32_t { kLse = 0, kDelta = 1, kSink = 2, kSinkTerm = 3 };

  __aicore__ inline void InitGm(const SmlaGradIo& io) {
    const uint64_t q_rows = uint64_t{t_.geo.t1} * t_.geo.n1;
    qGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query), q_rows * t_.geo.d);
    doGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_out), q_rows * t_.geo.d);
    oGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.out), q_rows * t_.geo.d);
    lseGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_lse), q_rows);
    dqGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_query), q_rows * t_.geo.d);
    const uint64_t ori_rows = uint64_t{t_.geo.t2} * t_.geo.n2;
    kvGm_[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.ori_kv), ori_rows * t_.geo.d);
    dKvGm_[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_ori_kv), ori_rows * t_.geo.d);
    if (t_.geo.hasCmp) {
      const uint64_t cmp_rows = uint64_t{t_.geo.t3} * t_.geo.n2;
      kvGm_[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.cmp_kv), cmp_rows * t_.geo.d);
      dKvGm_[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_cmp_kv), cmp_rows * t_.geo.d);
    }
    const uint64_t idx_rows = uint64_t{t_.geo.t1} * t_.geo.n2;
    if (t_.geo.kOri > 0) {
      oriIdxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(io.ori_idx), idx_rows * t_.geo.kOri);
      l1OriGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.ori_l1), idx_rows * t_.geo.kOri);
    }
    if (t_.geo.kCmp > 0) {
      cmpIdxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(io.cmp_idx), idx_rows * t_.geo.kCmp);
      l1CmpGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.cmp_l1), idx_rows * t_.geo.kCmp);
    }
    GM_ADDR user = GetUserWorkspace(io.workspace);
    GM_ADDR ws = user + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    const uint64_t m2 = 2ull * t_.mRows;
    const uint64_t cw = t_.chunkCols;
    wsQd_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsQd), m2 * t_.geo.d);
    wsK_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsK), cw * t_.geo.d);
    wsSd_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSd), m2 * cw);
    wsPd_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsPd), m2 * cw);
    wsAcc_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsAcc), uint64_t{t_.geo.g} * t_.geo.d);
    const uint64_t block_cols = mgo::tiling::AlignUp(t_.keyBlock, mgo::tiling::kCubeAlign);
    wsDkv_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDkv), block_cols * t_.geo.d);
    wsDelta_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsDelta), q_rows);
    if (t_.geo.hasSinks) {
      sinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.sinks), t_.geo.n1);
      dSinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.d_sinks), t_.geo.n1);
      wsSink_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsSink), q_rows);
    }
  }

  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Stat(StatSlot s) { return ub_.stat[s].template Get<float>(); }
  __aicore__ inline uint64_t KvStride() const { return uint64_t{t_.geo.n2} * t_.geo.d; }

  // ---------------------------------------------------------------- row pass
  __aicore__ inline void QueryRow(uint32_t row) {
    const uint32_t t = row / t_.geo.n2;
    const uint32_t g = row % t_.geo.n2;
    const SmlaBatch bt = SmlaBatchOf(t_.geo, lens_, SmlaBatchOfToken(t_.geo, lens_, t));
    const uint64_t q_row0 = uint64_t{t} * t_.geo.n1 + uint64_t{g} * t_.geo.g;
    const bool padding = t - bt.q0 >= bt.qLen;
    const auto s = static_cast<uint32_t>(t - bt.q0);
    SyncPipes<HardEvent::V_S>();  // the previous row's vector work on the statistics is done
    if (t_.geo.kOri > 0) Duplicate(ub_.l1Ori.template Get<float>(), 0.0f, t_.geo.kOri);
    if (t_.geo.kCmp > 0) Duplicate(ub_.l1Cmp.template Get<float>(), 0.0f, t_.geo.kCmp);
    uint32_t chunks = 0;
    if (padding) {
      Duplicate(Stat(kDelta), 0.0f, t_.geo.g);
      StoreF32(wsDelta_[q_row0], Stat(kDelta), t_.geo.g);
    } else {
      gather_.Copy(wsQd_, qGm_[q_row0 * t_.geo.d], qGm_, t_.geo.d, t_.geo.g, t_.geo.d, 0);
      gather_.Copy(wsQd_[uint64_t{t_.geo.g} * t_.geo.d], doGm_[q_row0 * t_.geo.d], doGm_, t_.geo.d, t_.geo.g,
                   t_.geo.d, 0);
      RowDelta(q_row0);
      const uint64_t at = SmlaLseOffset(t_.geo, t, g);
      for (uint32_t h = 0; h < t_.geo.g; ++h) Stat(kLse).SetValue(h, lseGm_.GetValue(at + h));
      chunks = RowKeys(t, g, bt, s);
    }
    WriteRows(wsAcc_, chunks > 0, t_.geo.g, q_row0, 1, dqGm_, t_.geo.scale);
    const uint64_t slots = uint64_t{t} * t_.geo.n2 + g;
    SyncPipes<HardEvent::S_MTE3>();  // the slots' norms were set by the scalar unit
    if (t_.geo.kOri > 0) StoreF32(l1OriGm_[slots * t_.geo.kOri], ub_.l1Ori.template Get<float>(), t_.geo.kOri);
    if (t_.geo.kCmp > 0) StoreF32(l1CmpGm_[slots * t_.geo.kCmp], ub_.l1Cmp.template Get<float>(), t_.geo.kCmp);
    if (t_.geo.hasSinks) SinkTerms(q_row0, g * t_.geo.g, chunks > 0);
  }

  // Walks the row's keys in order (the original tokens, then the compressed entries), gathering them into the
  // chunk workspace; returns the number of chunks computed.
  __aicore__ inline uint32_t RowKeys(uint32_t t, uint32_t g, const SmlaBatch& bt, uint32_t s) {
    chunks_ = 0;
    filled_ = 0;
    g_ = g;
    const uint64_t slots = uint64_t{t} * t_.geo.n2 + g;
    int64_t lo = 0;
    int64_t hi = 0;
    SmlaOriBand(t_.geo, bt, s, &lo, &hi);
    if (t_.geo.kOri == 0) {
      if (hi > lo) AddKeys(0, bt.ori0 + lo, static_cast<uint32_t>(hi - lo), -1);
    } else {
      for (uint32_t slot = 0; slot < t_.geo.kOri; ++slot) {
        const int32_t v = oriIdxGm_.GetValue(slots * t_.geo.kOri + slot);
        if (v >= lo && v < hi) AddKeys(0, bt.ori0 + v, 1, static_cast<int32_t>(slot));
      }
    }
    if (t_.geo.hasCmp) {
      const int64_t limit = SmlaCmpLimit(t_.geo, bt, s);
      if (t_.geo.kCmp == 0) {
        if (limit > 0) AddKeys(1, bt.cmp0, static_cast<uint32_t>(limit), -1);
      } else {
        for (uint32_t slot = 0; slot < t_.geo.kCmp; ++slot) {
          const int32_t v = cmpIdxGm_.GetValue(slots * t_.geo.kCmp + slot);
          if (v >= 0 && v < limit) AddKeys(1, bt.cmp0 + v, 1, static_cast<int32_t>(slot) + kCmpTag);
        }
      }
    }
    if (filled_ > 0) RowChunk(filled_, chunks_++);
    return chunks_;
  }

  // Appends `count` consecutive key rows of source `src` (0 ori, 1 cmp) from row `token` to the chunk (one
  // contiguous read per piece), with column slot tag `tag`; computes every chunk that fills.
  __aicore__ inline void AddKeys(uint32_t src, uint64_t token, uint32_t count, int32_t tag) {
    const LocalTensor<int32_t> col_slot = ub_.colSlot.template Get<int32_t>();
    while (count > 0) {
      const uint32_t take = count < t_.keyChunk - filled_ ? count : t_.keyChunk - filled_;
      gather_.Copy(wsK_[uint64_t{filled_} * t_.geo.d], kvGm_[src][(token * t_.geo.n2 + g_) * t_.geo.d], kvGm_[src],
                   KvStride(), take, t_.geo.d, 0);
      for (uint32_t i = 0; i < take; ++i) col_slot.SetValue(filled_ + i, tag);
      filled_ += take;
      token += take;
      count -= take;
      if (filled_ == t_.keyChunk) {
        RowChunk(filled_, chunks_++);
        filled_ = 0;
      }
    }
  }

  // delta[h] = sum_d dO[h, d] * O[h, d] for the G heads of a row -> Stat(kDelta) and workspace.
  __aicore__ inline void RowDelta(uint64_t q_row0) {
    const LocalTensor<T> do16 = ub_.rowH[0].template Get<T>();
    const LocalTensor<T> o16 = ub_.rowH[1].template Get<T>();
    const LocalTensor<float> dof = ub_.rowF[0].template Get<float>();
    const LocalTensor<float> of = ub_.rowF[1].template Get<float>();
    const LocalTensor<float> red = ub_.red.template Get<float>();
    const LocalTensor<float> work = ub_.work.template Get<float>();
    for (uint32_t h = 0; h < t_.geo.g; ++h) {
      DataCopy(do16, doGm_[(q_row0 + h) * t_.geo.d], t_.geo.d);
      DataCopy(o16, oGm_[(q_row0 + h) * t_.geo.d], t_.geo.d);
      SyncPipes<HardEvent::MTE2_V>();
      Cast(dof, do16, RoundMode::CAST_NONE, t_.geo.d);
      Cast(of, o16, RoundMode::CAST_NONE, t_.geo.d);
      Mul(dof, dof, of, t_.geo.d);
      ReduceSum(red, dof, work, t_.geo.d);
      SyncPipes<HardEvent::V_S>();
      Stat(kDelta).SetValue(h, red.GetValue(0));
      SyncPipes<HardEvent::V_MTE2>();  // the next head's rows overwrite the buffers
    }
    SyncPipes<HardEvent::S_MTE3>();
    StoreF32(wsDelta_[q_row0], Stat(kDelta), t_.geo.g);
  }

  // The d_sinks terms of the G heads of a row (first head head0): -exp(sink - lse) * delta, 0 for a -inf sink
  // and for a row without keys (as the CPU kernel) -> wsSink.
  __aicore__ inline void SinkTerms(uint64_t q_row0, uint32_t head0, bool any) {
    const LocalTensor<float> sink = Stat(kSink);
    const LocalTensor<float> term = Stat(kSinkTerm);
    if (!any) {
      Duplicate(term, 0.0f, t_.geo.g);
      StoreF32(wsSink_[q_row0], term, t_.geo.g);
      return;
    }
    for (uint32_t h = 0; h < t_.geo.g; ++h) sink.SetValue(h, sinkGm_.GetValue(head0 + h));
    SyncPipes<HardEvent::S_V>();
    Sub(term, sink, Stat(kLse), t_.geo.g);
    Exp(term, term, t_.geo.g);
    Mul(term, term, Stat(kDelta), t_.geo.g);
    Muls(term, term, -1.0f, t_.geo.g);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < t_.geo.g; ++h) {
      if (sink.GetValue(h) < kLowestFloat) term.SetValue(h, 0.0f);  // -inf: no sink
    }
    SyncPipes<HardEvent::S_MTE3>();
    StoreF32(wsSink_[q_row0], term, t_.geo.g);
  }

  // d_sinks = the sum over query tokens, ascending, of the rows' terms: [t1, n1] through the score tile,
  // sinkTileRows token rows at a time, added row by row into the [n1] accumulator.
  __aicore__ inline void SumSinkTerms() {
    const LocalTensor<float> acc = ub_.sink.template Get<float>();
    const LocalTensor<float> tile = ub_.score.template Get<float>();
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(t_.geo.n1, 8));
    Duplicate(acc, 0.0f, t_.geo.n1);
    for (uint32_t t0 = 0; t0 < t_.geo.t1; t0 += t_.sinkTileRows) {
      const uint32_t rows = t_.geo.t1 - t0 < t_.sinkTileRows ? t_.geo.t1 - t0 : t_.sinkTileRows;
      SyncPipes<HardEvent::V_MTE2>();  // the previous tile is consumed
      LoadRowsF32(tile, wsSink_[uint64_t{t0} * t_.geo.n1], rows, t_.geo.n1);
      for (uint32_t i = 0; i < rows; ++i) Add(acc, acc, tile[i * pitch], t_.geo.n1);
    }
    StoreF32(dSinkGm_, acc, t_.geo.n1);
  }

  // One chunk of n keys of the current query row: [S; dP] (AIC); P, dS and the column sums of P (AIV);
  // dQ (+)= dS K (AIC); the L1 norms of the chunk's index slots.
  __aicore__ inline void RowChunk(uint32_t n, uint32_t index) {
    const uint32_t g = t_.geo.g;
    const bool norms = t_.geo.kOri > 0 || t_.geo.kCmp > 0;
    const LocalTensor<float> col_sum = ub_.colSum.template Get<float>();
    if (norms) Duplicate(col_sum, 0.0f, n);
    ScoresAndDp(g, n);
    for (uint32_t h0 = 0; h0 < g; h0 += t_.ubTileRows) {
      const uint32_t rows = g - h0 < t_.ubTileRows ? g - h0 : t_.ubTileRows;
      SoftmaxBackwardTile(g, h0, rows, n, false, norms);
    }
    mmNN_.SetOrgShape(g, t_.geo.d, n, n);
    mmNN_.SetSingleShape(g, t_.geo.d, n);
    mmNN_.SetTensorA(wsPd_);
    mmNN_.SetTensorB(wsK_);
    mmNN_.IterateAll(wsAcc_, index > 0 ? 1 : 0);
    if (!norms) return;
    // norm[slot] = sum_h P[h, column] / G, heads in order (the CPU kernel's float32 sum).
    const LocalTensor<int32_t> col_slot = ub_.colSlot.template Get<int32_t>();
    const float inv_g = 1.0f / static_cast<float>(g);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t c = 0; c < n; ++c) {
      const int32_t tag = col_slot.GetValue(c);
      if (tag < 0) continue;
      const float v = col_sum.GetValue(c) * inv_g;
      if (tag >= kCmpTag) {
        ub_.l1Cmp.template Get<float>().SetValue(static_cast<uint32_t>(tag - kCmpTag), v);
      } else {
        ub_.l1Ori.template Get<float>().SetValue(static_cast<uint32_t>(tag), v);
      }
    }
    SyncPipes<HardEvent::S_V>();
  }

  // [S; dP] = [Q; dO] Kᵀ: the 2m rows of wsQd against the n keys of wsK -> wsSd [2m, n].
  __aicore__ inline void ScoresAndDp(uint32_t m, uint32_t n) {
    mmNT_.SetOrgShape(2 * m, n, t_.geo.d, t_.geo.d);
    mmNT_.SetSingleShape(2 * m, n, t_.geo.d);
    mmNT_.SetTensorA(wsQd_);
    mmNT_.SetTensorB(wsK_, true);
    mmNT_.IterateAll(wsSd_);
  }

  // Rows [r0, r0 + rows) of the m score rows (and their dP rows, m further): P = exp(scale S - lse),
  // dS = P (dP - delta). Row pass: dS -> wsPd rows r0.., and with `norms` the column sums of P. Key pass
  // (`key_pass`): P and dS times the rows' slot multiplicities (0 hides a column), scale * dS -> wsPd rows
  // r0.., P -> wsPd rows m + r0...
  __aicore__ inline void SoftmaxBackwardTile(uint32_t m, uint32_t r0, uint32_t rows, uint32_t n, bool key_pass,
                                             bool norms) {
    const LocalTensor<float> s = ub_.score.template Get<float>();
    const LocalTensor<float> dp = ub_.aux.template Get<float>();
    const LocalTensor<T> ds16 = ub_.io[0].template Get<T>();
    const LocalTensor<T> p16 = ub_.io[1].template Get<T>();
    const LocalTensor<float> mult = ub_.mult.template Get<float>();
    const LocalTensor<float> col_sum = ub_.colSum.template Get<float>();
    const uint32_t pitch_f = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 8));
    const uint32_t pitch_h = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 16));
    const uint32_t pitch_m = static_cast<uint32_t>(mgo::tiling::AlignUp(t_.keyBlock, 8));
    LoadRowsF32(s, wsSd_[uint64_t{r0} * n], rows, n);
    LoadRowsF32(dp, wsSd_[uint64_t{m + r0} * n], rows, n);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t i = 0; i < rows; ++i) {
      const uint32_t j = r0 + i;
      const float lse = Stat(kLse).GetValue(j);
      const float delta = Stat(kDelta).GetValue(j);
      const LocalTensor<float> si = s[i * pitch_f];
      const LocalTensor<float> dpi = dp[i * pitch_f];
      Muls(si, si, t_.geo.scale, n);
      Adds(si, si, -lse, n);
      if (key_pass) Mins(si, si, kExpCap, n);
      Exp(si, si, n);
      if (key_pass) Mul(si, si, mult[(j / t_.geo.g) * pitch_m], n);
      if (norms) Add(col_sum, col_sum, si, n);
      Adds(dpi, dpi, -delta, n);
      Mul(dpi, dpi, si, n);
      if (key_pass) {
        Muls(dpi, dpi, t_.geo.scale, n);
        Cast(p16[i * pitch_h], si, RoundMode::CAST_RINT, n);
      }
      Cast(ds16[i * pitch_h], dpi, RoundMode::CAST_RINT, n);
    }
    StoreRows16(wsPd_[uint64_t{r0} * n], ds16, rows, n);
    if (key_pass) StoreRows16(wsPd_[uint64_t{m + r0} * n], p16, rows, n);
  }

  // Output rows row0 + i * stride (i < rows) = scale * acc row i, rounded once; zeros when no chunk contributed.
  __aicore__ inline void WriteRows(const GlobalTensor<float>& acc, bool any, uint32_t rows, uint64_t row0,
                                   uint64_t stride, const GlobalTensor<T>& dst, float scale) {
    const LocalTensor<float> rowf = ub_.rowF[0].template Get<float>();
    const LocalTensor<T> rowh = ub_.rowH[0].template Get<T>();
    if (!any) Duplicate(rowf, 0.0f, t_.geo.d);
    for (uint32_t i = 0; i < rows; ++i) {
      if (any) {
        DataCopy(rowf, acc[uint64_t{i} * t_.geo.d], t_.geo.d);
        SyncPipes<HardEvent::MTE2_V>();
        if (scale != 1.0f) Muls(rowf, rowf, scale, t_.geo.d);
      }
      Cast(rowh, rowf, RoundMode::CAST_RINT, t_.geo.d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(dst[(row0 + uint64_t{i} * stride) * t_.geo.d], rowh, t_.geo.d);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // ---------------------------------------------------------------- key pass
  // Key row kr = (token of ori_kv, or of cmp_kv when !ori, g); the AIV owning a block's first key row does the
  // whole block.
  __aicore__ inline void KeyRow(uint32_t kr, bool ori) {
    const uint32_t token = kr / t_.geo.n2;
    const uint32_t g = kr % t_.geo.n2;
    const SmlaLen cu = ori ? SmlaLen::kCuOri : SmlaLen::kCuCmp;
    const SmlaBatch bt = SmlaBatchOf(t_.geo, lens_, SmlaBatchOfRow(t_.geo, lens_, cu, token));
    const uint64_t src0 = ori ? bt.ori0 : bt.cmp0;
    const auto avail = static_cast<uint32_t>(ori ? bt.oriAvail : bt.cmpAvail);
    const auto local = static_cast<uint32_t>(token - src0);
    if (local % t_.keyBlock != 0) return;
    const uint32_t n = avail - local < t_.keyBlock ? avail - local : t_.keyBlock;
    const uint32_t si = ori ? 0 : 1;
    gather_.Copy(wsK_, kvGm_[si][(uint64_t{token} * t_.geo.n2 + g) * t_.geo.d], kvGm_[si], KvStride(), n, t_.geo.d, 0);
    g_ = g;
    uint32_t chunks = 0;
    uint32_t count = 0;
    const auto first = static_cast<uint32_t>(ori ? SmlaFirstOriRow(t_.geo, bt, local) : 0);
    for (uint32_t s = first; s < bt.qLen; ++s) {
      const int32_t seen = ori ? OriMultiplicity(bt, s, local, n, count) : CmpMultiplicity(bt, s, local, n, count);
      if (seen < 0) break;  // no later row reaches the block
      if (seen == 0) continue;
      rowT_[count] = static_cast<uint32_t>(bt.q0 + s);
      if (++count == t_.rowChunk) {
        KeyChunk(count, n, chunks++);
        count = 0;
      }
    }
    if (count > 0) KeyChunk(count, n, chunks++);
    WriteRows(wsDkv_, chunks > 0, n, uint64_t{token} * t_.geo.n2 + g, t_.geo.n2, dKvGm_[si], 1.0f);
  }

  // Fills mult row `entry` over the block's n columns with how often local query row s sees each of the
  // block's keys [key0, key0 + n) of ori_kv; returns whether any (1), none (0), or -1 when neither this row
  // nor any later one can (the band's start has passed the block).
  __aicore__ inline int32_t OriMultiplicity(const SmlaBatch& bt, uint32_t s, uint32_t key0, uint32_t n,
                                            uint32_t entry) {
    int64_t lo = 0;
    int64_t hi = 0;
    SmlaOriBand(t_.geo, bt, s, &lo, &hi);
    if (lo >= int64_t{key0} + n) return -1;
    const int64_t a = lo > key0 ? lo : key0;
    const int64_t e = hi < int64_t{key0} + n ? hi : int64_t{key0} + n;
    if (e <= a) return 0;
    const LocalTensor<float> mult = MultRow(entry, n);
    if (t_.geo.kOri == 0) {
      for (int64_t c = a; c < e; ++c) mult.SetValue(static_cast<uint32_t>(c - key0), 1.0f);
      return 1;
    }
    const uint64_t slots = (uint64_t{static_cast<uint32_t>(bt.q0 + s)} * t_.geo.n2 + g_) * t_.geo.kOri;
    int32_t any = 0;
    for (uint32_t slot = 0; slot < t_.geo.kOri; ++slot) {
      const int32_t v = oriIdxGm_.GetValue(slots + slot);
      if (v < a || v >= e) continue;
      const auto c = static_cast<uint32_t>(v - key0);
      mult.SetValue(c, mult.GetValue(c) + 1.0f);
      any = 1;
    }
    return any;
  }

  // As OriMultiplicity for the compressed entries [key0, key0 + n).
  __aicore__ inline int32_t CmpMultiplicity(const SmlaBatch& bt, uint32_t s, uint32_t key0, uint32_t n,
                                            uint32_t entry) {
    const int64_t limit = SmlaCmpLimit(t_.geo, bt, s);
    if (limit <= key0) return 0;
    const int64_t e = limit < int64_t{key0} + n ? limit : int64_t{key0} + n;
    const LocalTensor<float> mult = MultRow(entry, n);
    if (t_.geo.kCmp == 0) {
      for (int64_t c = key0; c < e; ++c) mult.SetValue(static_cast<uint32_t>(c - key0), 1.0f);
      return 1;
    }
    const uint64_t slots = (uint64_t{static_cast<uint32_t>(bt.q0 + s)} * t_.geo.n2 + g_) * t_.geo.kCmp;
    int32_t any = 0;
    for (uint32_t slot = 0; slot < t_.geo.kCmp; ++slot) {
      const int32_t v = cmpIdxGm_.GetValue(slots + slot);
      if (v < static_cast<int32_t>(key0) || v >= e) continue;
      const auto c = static_cast<uint32_t>(v - key0);
      mult.SetValue(c, mult.GetValue(c) + 1.0f);
      any = 1;
    }
    return any;
  }

  // Mult row `entry`, its n columns zeroed by the scalar unit (which fills it).
  __aicore__ inline LocalTensor<float> MultRow(uint32_t entry, uint32_t n) {
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(t_.keyBlock, 8));
    const LocalTensor<float> mult = ub_.mult.template Get<float>()[entry * pitch];
    for (uint32_t c = 0; c < n; ++c) mult.SetValue(c, 0.0f);
    return mult;
  }

  // Recomputes S, dP, P, dS of `count` query rows (tokens rowT_) against the block's n keys,
  // then dKV (+)= [scale dS; P]ᵀ [Q; dO].
  __aicore__ inline void KeyChunk(uint32_t count, uint32_t n, uint32_t index) {
    const uint32_t m = count * t_.geo.g;
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t q_row0 = uint64_t{rowT_[i]} * t_.geo.n1 + uint64_t{g_} * t_.geo.g;
      gather_.Copy(wsQd_[uint64_t{i} * t_.geo.g * t_.geo.d], qGm_[q_row0 * t_.geo.d], qGm_, t_.geo.d, t_.geo.g,
                   t_.geo.d, 0);
      gather_.Copy(wsQd_[uint64_t{m + i * t_.geo.g} * t_.geo.d], doGm_[q_row0 * t_.geo.d], doGm_, t_.geo.d,
                   t_.geo.g, t_.geo.d, 0);
      const uint64_t at = SmlaLseOffset(t_.geo, rowT_[i], g_);
      for (uint32_t h = 0; h < t_.geo.g; ++h) {
        Stat(kLse).SetValue(i * t_.geo.g + h, lseGm_.GetValue(at + h));
        Stat(kDelta).SetValue(i * t_.geo.g + h, wsDelta_.GetValue(q_row0 + h));
      }
    }
    SyncPipes<HardEvent::S_V>();
    ScoresAndDp(m, n);
    for (uint32_t r0 = 0; r0 < m; r0 += t_.ubTileRows) {
      const uint32_t rows = m - r0 < t_.ubTileRows ? m - r0 : t_.ubTileRows;
      SoftmaxBackwardTile(m, r0, rows, n, true, false);
    }
    mmTN_.SetOrgShape(n, t_.geo.d, 2 * m, 2 * m);
    mmTN_.SetSingleShape(n, t_.geo.d, 2 * m);
    mmTN_.SetTensorA(wsPd_, true);
    mmTN_.SetTensorB(wsQd_);
    mmTN_.IterateAll(wsDkv_, index > 0 ? 1 : 0);
    SyncPipes<HardEvent::V_S>();  // the scalar unit refills the statistics and multiplicities next
  }

  mgo::tiling::SparseFlashMlaGradTilingData t_{};
  TPipe pipe_;
  Matmul<A, AT, C> mmNT_;
  Matmul<A, A, C> mmNN_;
  Matmul<AT, A, C> mmTN_;
  SmlaLensGm lens_;
  SmlaGradUb ub_;
  RowGather<T> gather_;
  uint32_t chunks_ = 0;   // row pass: chunks of the current row so far
  uint32_t filled_ = 0;   // row pass: keys in the current chunk
  uint32_t g_ = 0;        // the current key group
  uint32_t rowT_[kMaxRowChunk] = {};
  GlobalTensor<T> qGm_, doGm_, oGm_, dqGm_, kvGm_[2], dKvGm_[2];
  GlobalTensor<int32_t> oriIdxGm_, cmpIdxGm_;
  GlobalTensor<float> lseGm_, l1OriGm_, l1CmpGm_, sinkGm_, dSinkGm_;
  GlobalTensor<T> wsQd_, wsK_, wsPd_;
  GlobalTensor<float> wsSd_, wsAcc_, wsDkv_, wsDelta_, wsSink_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
extern "C" __global__ __aicore__ void sparse_flash_mla_grad(
    GM_ADDR query, GM_ADDR d_out, GM_ADDR out, GM_ADDR softmax_lse, GM_ADDR ori_kv, GM_ADDR cmp_kv,
    GM_ADDR ori_sparse_indices, GM_ADDR cmp_sparse_indices, GM_ADDR cu_seqlens_q, GM_ADDR cu_seqlens_ori_kv,
    GM_ADDR cu_seqlens_cmp_kv, GM_ADDR seqused_q, GM_ADDR seqused_ori_kv, GM_ADDR seqused_cmp_kv,
    GM_ADDR cmp_residual_kv, GM_ADDR sinks, GM_ADDR d_query, GM_ADDR d_ori_kv, GM_ADDR d_cmp_kv, GM_ADDR d_sinks,
    GM_ADDR ori_softmax_l1_norm, GM_ADDR cmp_softmax_l1_norm, GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseFlashMlaGradTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SparseFlashMlaGradTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::SmlaGradIo io{query, d_out, out, softmax_lse, ori_kv, cmp_kv, ori_sparse_indices,
                                   cmp_sparse_indices,
                                   {cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv,
                                    seqused_cmp_kv, cmp_residual_kv},
                                   sinks, d_query, d_ori_kv,
                                   d_cmp_kv, d_sinks, ori_softmax_l1_norm, cmp_softmax_l1_norm, workspace};
  if (TILING_KEY_IS(SparseFlashMlaGradTilingKey(DType::kFloat16))) {
    mgo::kernel::SparseFlashMlaGradKernel<half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseFlashMlaGradTilingKey(DType::kBFloat16))) {
    mgo::kernel::SparseFlashMlaGradKernel<bfloat16_t> op;
    op.Run(io, tiling_data);
  }
}
