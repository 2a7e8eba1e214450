// SparseFlashAttentionGrad as a mixed kernel: the AIVs gather and do the element-wise softmax
// backward, the AIC of each core multiplies (high-level Matmul, float32 accumulation).
//
// Two passes, separated by SyncAll over the AIVs:
//  1. Row pass (query rows (t, g), tiling.rowStart): delta = rowsum(dO * O) -> workspace; per
//     chunk of gathered visible keys S = qf kfᵀ, dP = dO vᵀ (AIC); P = exp(scale S - m) / l,
//     dS = P (dP - delta) (AIV); dqf += dS kf (AIC, atomic add into the same core's accumulator);
//     d_query | d_query_rope = scale * dqf.
//  2. Key pass (key ownership, tiling.keyRowStart): the AIV owning the first key row of a key
//     block scans the block's batch for the query rows that select it, in ascending token order
//     (a slot selecting it twice counts twice), and per chunk of rowChunk such rows recomputes
//     S, dP, P, dS for the block (AIC / AIV) and accumulates dkf += dSᵀ qf and dv += Pᵀ dO
//     (AIC) into its own block accumulators, then writes d_key | d_key_rope = scale * dkf and
//     d_value once.
// Every dK/dV sum is therefore formed by one core in a fixed order: the bits do not depend on
// the core count or the order in which cores run (deterministic in every mode; the
// `deterministic` attribute changes nothing). The price is a second S/dP computation.
// Rows without a visible key contribute nothing; key rows nobody selects get zeros. Without
// value (key is value) V is read from key and d_key = scale * dK + dV (one rounding), no d_value.
// With sinks the statistics already hold the sink (the forward's), so P and dS are unchanged; the
// row pass also writes each head's d_sinks term -P_sink * delta, P_sink = exp(sink - m) / l (0 for
// a -inf sink), to the workspace, and after the SyncAll AIV 0 sums the terms in token order into
// d_sinks: an order fixed by the shape, so d_sinks too has the same bits for any core count.
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/sfa_kernel_common.h"
#include "../sparse_flash_attention_grad_tiling.h"

namespace mgo::kernel {

// The kernel's GM arguments (absent optional inputs are null).
struct SfaGradIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query;
  GM_ADDR key;
  GM_ADDR value;
  GM_ADDR indices;
  GM_ADDR d_out;
  GM_ADDR out;
  GM_ADDR softmax_max;
  GM_ADDR softmax_sum;
  GM_ADDR lens_q;
  GM_ADDR lens_kv;
  GM_ADDR query_rope;
  GM_ADDR key_rope;
  GM_ADDR sinks;
  GM_ADDR d_query;
  GM_ADDR d_key;
  GM_ADDR d_value;
  GM_ADDR d_query_rope;
  GM_ADDR d_key_rope;
  GM_ADDR d_sinks;
  GM_ADDR workspace;
};

template <typename T>
class SparseFlashAttentionGradKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;
  static constexpr uint32_t kMaxRowChunk = 128;

 public:
  __aicore__ inline void Run(const SfaGradIo& io, const mgo::tiling::SparseFlashAttentionGradTilingData& t) {
    t_ = t;
    const TCubeTiling nt = ToCubeTiling(t.mmScore);
    const TCubeTiling nn = ToCubeTiling(t.mmDq);
    const TCubeTiling tn = ToCubeTiling(t.mmDk);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmNT_, &nt, mmNN_, &nn, mmTN_, &tn);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(io);
    geo_.Init(t, io.lens_q, io.lens_kv);
    ub_.Init(pipe_, mgo::tiling::PlanSfaUb(true, t.gatherRows, t.ubTileRows, t.chunkCols, t.dk, t.mRows,
                                           t.hasSinks ? t.n1 : 0));
    gather_.Init(ub_.gather.template Get<T>(), t.gatherRows);
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) QueryRow(row);
    SyncAll();  // every delta is in the workspace before any key pass reads it
    for (uint32_t kr = t.keyRowStart[aiv]; kr < t.keyRowStart[aiv + 1]; ++kr) KeyRow(kr);
    if (t.hasSinks && aiv == 0) SumSinkTerms();
    mmNT_.End();
    mmNN_.End();
    mmTN_.End();
  }

 private:
  enum StatSlot : uint32_t { kMax = 0, kSum = 1, kDelta = 2, kSink = 3, kSinkTerm = 4 };

  __aicore__ inline void InitGm(const SfaGradIo& io) {
    const uint64_t q_rows = uint64_t{t_.t1} * t_.n1;
    const uint64_t k_rows = uint64_t{t_.t2} * t_.n2;
    qGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query), q_rows * t_.d);
    kGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key), k_rows * t_.d);
    // Without value, key is value (shared latent KV): V rows are the key rows.
    vGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(t_.hasValue ? io.value : io.key), k_rows * t_.d);
    doGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_out), q_rows * t_.d);
    oGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.out), q_rows * t_.d);
    idxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(io.indices), uint64_t{t_.t1} * t_.n2 * t_.k);
    maxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_max), q_rows);
    sumGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_sum), q_rows);
    dqGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_query), q_rows * t_.d);
    dkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_key), k_rows * t_.d);
    if (t_.hasValue) dvGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_value), k_rows * t_.d);
    if (t_.hasRope) {
      qrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_rope), q_rows * t_.dr);
      krGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_rope), k_rows * t_.dr);
      dqrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_query_rope), q_rows * t_.dr);
      dkrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_key_rope), k_rows * t_.dr);
    }
    GM_ADDR user = GetUserWorkspace(io.workspace);
    GM_ADDR ws = user + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    const uint64_t m = t_.mRows;
    const uint64_t cw = t_.chunkCols;
    wsQf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsQf), m * t_.dk);
    wsKf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsKf), cw * t_.dk);
    wsV_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsV), cw * t_.d);
    wsDo_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsDo), m * t_.d);
    wsS_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsS), m * cw);
    wsDp_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDp), m * cw);
    wsP_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsP), m * cw);
    wsDs_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsDs), m * cw);
    wsAcc_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsAcc), m * t_.dk);
    const uint64_t block_cols = mgo::tiling::AlignUp(t_.blockSize, mgo::tiling::kCubeAlign);
    wsDk_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDk), block_cols * t_.dk);
    wsDv_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDv), block_cols * t_.d);
    wsDelta_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsDelta), q_rows);
    if (t_.hasSinks) {
      sinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.sinks), t_.n1);
      dSinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.d_sinks), t_.n1);
      wsSink_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsSink), q_rows);
    }
  }

  __aicore__ inline GlobalTensor<T> Rope(const GlobalTensor<T>& g, uint64_t off) const {
    return RopeAt(t_.hasRope != 0, g, off);
  }
  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Stat(StatSlot s) { return ub_.stat[s].template Get<float>(); }

  // ---------------------------------------------------------------- row pass
  __aicore__ inline void QueryRow(uint32_t row) {
    const SfaRow r = geo_.Row(row);
    const uint64_t q_row0 = uint64_t{r.t} * t_.n1 + uint64_t{r.g} * t_.g;
    if (geo_.Padding(r)) {
      PaddingRow(q_row0);
      return;
    }
    gather_.Copy(wsQf_, qGm_[q_row0 * t_.d], Rope(qrGm_, q_row0 * t_.dr), t_.d, t_.g, t_.d, t_.dr);
    RowDelta(q_row0);
    const uint64_t at = geo_.StatsOffset(r);
    for (uint32_t h = 0; h < t_.g; ++h) {
      Stat(kMax).SetValue(h, maxGm_.GetValue(at + h));
      Stat(kSum).SetValue(h, sumGm_.GetValue(at + h));
    }
    if (t_.hasSinks) SinkTerms(q_row0, r.g * t_.g);

    const SfaKeyChunkIo<T> io{kGm_, krGm_, vGm_, wsKf_, wsV_};
    const uint32_t chunks = GatherKeyChunks(t_, geo_, r, row, idxGm_, gather_, io,
                                            [this, q_row0](uint32_t n, uint32_t i) { RowChunk(q_row0, n, i); });
    WriteRows(wsAcc_, chunks > 0, t_.g, q_row0, 1, dqGm_, dqrGm_, t_.dk, t_.dr, t_.scaleValue, nullptr);
  }

  // A BSND padding row reads nothing: zero d_query (and d_query_rope) rows and d_sinks terms.
  // The key pass never visits it (its local s1 is beyond S1_b), so its delta is never read.
  __aicore__ inline void PaddingRow(uint64_t q_row0) {
    if (t_.hasSinks) {
      const LocalTensor<float> term = Stat(kSinkTerm);
      Duplicate(term, 0.0f, t_.g);
      StoreF32(wsSink_[q_row0], term, t_.g);
    }
    WriteRows(wsAcc_, false, t_.g, q_row0, 1, dqGm_, dqrGm_, t_.dk, t_.dr, t_.scaleValue, nullptr);
  }

  // delta[h] = sum_d dO[h, d] * O[h, d] for the G heads of a row -> Stat(kDelta) and workspace.
  __aicore__ inline void RowDelta(uint64_t q_row0) {
    const LocalTensor<T> do16 = ub_.rowH[0].template Get<T>();
    const LocalTensor<T> o16 = ub_.rowH[1].template Get<T>();
    const LocalTensor<float> dof = ub_.rowF[0].template Get<float>();
    const LocalTensor<float> of = ub_.rowF[1].template Get<float>();
    const LocalTensor<float> red = ub_.red.template Get<float>();
    const LocalTensor<float> work = ub_.work.template Get<float>();
    for (uint32_t h = 0; h < t_.g; ++h) {
      DataCopy(do16, doGm_[(q_row0 + h) * t_.d], t_.d);
      DataCopy(o16, oGm_[(q_row0 + h) * t_.d], t_.d);
      SyncPipes<HardEvent::MTE2_V>();
      Cast(dof, do16, RoundMode::CAST_NONE, t_.d);
      Cast(of, o16, RoundMode::CAST_NONE, t_.d);
      Mul(dof, dof, of, t_.d);
      ReduceSum(red, dof, work, t_.d);
      SyncPipes<HardEvent::V_S>();
      Stat(kDelta).SetValue(h, red.GetValue(0));
      SyncPipes<HardEvent::V_MTE2>();  // the next head's rows overwrite the buffers
    }
    SyncPipes<HardEvent::S_MTE3>();
    StoreF32(wsDelta_[q_row0], Stat(kDelta), t_.g);
  }

  // The d_sinks terms of the G heads of a row (first head head0): -exp(sink - m) / l * delta,
  // 0 for a -inf sink (whose row may have l = 0) -> wsSink. An empty row has delta = 0.
  __aicore__ inline void SinkTerms(uint64_t q_row0, uint32_t head0) {
    const LocalTensor<float> sink = Stat(kSink);
    const LocalTensor<float> term = Stat(kSinkTerm);
    for (uint32_t h = 0; h < t_.g; ++h) sink.SetValue(h, sinkGm_.GetValue(head0 + h));
    SyncPipes<HardEvent::S_V>();
    Sub(term, sink, Stat(kMax), t_.g);
    Exp(term, term, t_.g);
    Div(term, term, Stat(kSum), t_.g);
    Mul(term, term, Stat(kDelta), t_.g);
    Muls(term, term, -1.0f, t_.g);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < t_.g; ++h) {
      if (sink.GetValue(h) < kLowestFloat) term.SetValue(h, 0.0f);  // -inf: no sink
    }
    SyncPipes<HardEvent::S_MTE3>();
    StoreF32(wsSink_[q_row0], term, t_.g);
  }

  // d_sinks = the sum over query tokens, ascending, of the rows' terms: [t1, n1] through the score
  // tile, sinkTileRows token rows at a time, added row by row into the [n1] accumulator.
  __aicore__ inline void SumSinkTerms() {
    const LocalTensor<float> acc = ub_.sink.template Get<float>();
    const LocalTensor<float> tile = ub_.score.template Get<float>();
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(t_.n1, 8));
    Duplicate(acc, 0.0f, t_.n1);
    for (uint32_t t0 = 0; t0 < t_.t1; t0 += t_.sinkTileRows) {
      const uint32_t rows = t_.t1 - t0 < t_.sinkTileRows ? t_.t1 - t0 : t_.sinkTileRows;
      SyncPipes<HardEvent::V_MTE2>();  // the previous tile is consumed
      LoadRowsF32(tile, wsSink_[uint64_t{t0} * t_.n1], rows, t_.n1);
      for (uint32_t i = 0; i < rows; ++i) Add(acc, acc, tile[i * pitch], t_.n1);
    }
    StoreF32(dSinkGm_, acc, t_.n1);
  }

  // One chunk of n keys of a query row: S, dP (AIC); P, dS (AIV); dqf (+)= dS kf (AIC).
  __aicore__ inline void RowChunk(uint64_t q_row0, uint32_t n, uint32_t index) {
    const uint32_t g = t_.g;
    ScoresAndDp(wsQf_, doGm_[q_row0 * t_.d], g, n);
    for (uint32_t h0 = 0; h0 < g; h0 += t_.ubTileRows) {
      const uint32_t rows = g - h0 < t_.ubTileRows ? g - h0 : t_.ubTileRows;
      SoftmaxBackwardTile(h0, rows, n, nullptr, 0, false);
    }
    mmNN_.SetOrgShape(g, t_.dk, n, n);
    mmNN_.SetSingleShape(g, t_.dk, n);
    mmNN_.SetTensorA(wsDs_);
    mmNN_.SetTensorB(wsKf_);
    mmNN_.IterateAll(wsAcc_, index > 0 ? 1 : 0);
  }

  // S = qf kfᵀ [m, n] -> wsS, dP = dO vᵀ [m, n] -> wsDp (dO rows at `d_out`, D apart).
  __aicore__ inline void ScoresAndDp(const GlobalTensor<T>& qf, const GlobalTensor<T>& d_out, uint32_t m, uint32_t n) {
    mmNT_.SetOrgShape(m, n, t_.dk, t_.dk);
    mmNT_.SetSingleShape(m, n, t_.dk);
    mmNT_.SetTensorA(qf);
    mmNT_.SetTensorB(wsKf_, true);
    mmNT_.IterateAll(wsS_);
    mmNT_.SetOrgShape(m, n, t_.d, t_.d);
    mmNT_.SetSingleShape(m, n, t_.d);
    mmNT_.SetTensorA(d_out);
    mmNT_.SetTensorB(wsV_, true);
    mmNT_.IterateAll(wsDp_);
  }

  // Rows [r0, r0 + rows) of the chunk's [m, n] S and dP: P = exp(scale S - m) / l,
  // dS = P (dP - delta); with `visible`, columns from visible[(r0 + i) / G] on are hidden
  // (P = dS = 0). Writes dS (and P when `keep_p`) as 16-bit into the workspace.
  __aicore__ inline void SoftmaxBackwardTile(uint32_t r0, uint32_t rows, uint32_t n, const uint32_t* visible,
                                             uint32_t stat0, bool keep_p) {
    const LocalTensor<float> s = ub_.score.template Get<float>();
    const LocalTensor<float> dp = ub_.aux.template Get<float>();
    const LocalTensor<T> p16 = ub_.io[0].template Get<T>();
    const LocalTensor<T> ds16 = ub_.io[1].template Get<T>();
    const uint32_t pitch_f = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 8));
    const uint32_t pitch_h = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 16));
    LoadRowsF32(s, wsS_[uint64_t{r0} * n], rows, n);
    LoadRowsF32(dp, wsDp_[uint64_t{r0} * n], rows, n);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t i = 0; i < rows; ++i) {
      const uint32_t j = stat0 + r0 + i;
      const float max = Stat(kMax).GetValue(j);
      const float inv_sum = 1.0f / Stat(kSum).GetValue(j);
      const float delta = Stat(kDelta).GetValue(j);
      const LocalTensor<float> si = s[i * pitch_f];
      const LocalTensor<float> dpi = dp[i * pitch_f];
      Muls(si, si, t_.scaleValue, n);
      Adds(si, si, -max, n);
      Exp(si, si, n);
      Muls(si, si, inv_sum, n);
      if (visible != nullptr && visible[(r0 + i) / t_.g] < n) {
        SyncPipes<HardEvent::V_S>();
        for (uint32_t c = visible[(r0 + i) / t_.g]; c < n; ++c) si.SetValue(c, 0.0f);
        SyncPipes<HardEvent::S_V>();
      }
      Adds(dpi, dpi, -delta, n);
      Mul(dpi, dpi, si, n);
      if (keep_p) Cast(p16[i * pitch_h], si, RoundMode::CAST_RINT, n);
      Cast(ds16[i * pitch_h], dpi, RoundMode::CAST_RINT, n);
    }
    if (keep_p) StoreRows16(wsP_[uint64_t{r0} * n], p16, rows, n);
    StoreRows16(wsDs_[uint64_t{r0} * n], ds16, rows, n);
  }

  // Output rows row0 + i * stride (i < rows) = scale * acc row i (+ row i of `plus`, d wide,
  // added in float32 to the first d columns), split d | dr into `main` and `rope`; zeros when no
  // chunk contributed.
  __aicore__ inline void WriteRows(const GlobalTensor<float>& acc, bool any, uint32_t rows, uint64_t row0,
                                   uint64_t stride, const GlobalTensor<T>& main, const GlobalTensor<T>& rope,
                                   uint32_t width, uint32_t dr, float scale, const GlobalTensor<float>* plus) {
    const LocalTensor<float> rowf = ub_.rowF[0].template Get<float>();
    const LocalTensor<float> plusf = ub_.rowF[1].template Get<float>();
    const LocalTensor<T> rowh = ub_.rowH[0].template Get<T>();
    const uint32_t d = width - dr;
    if (!any) Duplicate(rowf, 0.0f, width);
    for (uint32_t i = 0; i < rows; ++i) {
      if (any) {
        DataCopy(rowf, acc[uint64_t{i} * width], width);
        if (plus != nullptr) DataCopy(plusf, (*plus)[uint64_t{i} * d], d);
        SyncPipes<HardEvent::MTE2_V>();
        if (scale != 1.0f) Muls(rowf, rowf, scale, width);
        if (plus != nullptr) Add(rowf, rowf, plusf, d);
      }
      Cast(rowh, rowf, RoundMode::CAST_RINT, width);
      SyncPipes<HardEvent::V_MTE3>();
      const uint64_t row = row0 + uint64_t{i} * stride;
      DataCopy(main[row * d], rowh, d);
      if (dr > 0) DataCopy(rope[row * dr], rowh[d], dr);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // ---------------------------------------------------------------- key pass
  // Key row kr = (key token, g); the AIV owning a block's first key row does the whole block.
  __aicore__ inline void KeyRow(uint32_t kr) {
    const uint32_t token = kr / t_.n2;
    const uint32_t g = kr % t_.n2;
    const uint32_t b = geo_.BatchOf(token, true);
    uint64_t q0 = 0;
    uint64_t kv0 = 0;
    uint32_t s1_len = 0;
    uint32_t s2_len = 0;
    geo_.Batch(b, &q0, &s1_len, &kv0, &s2_len);
    const auto local = static_cast<uint32_t>(token - kv0);
    const uint64_t k_row = uint64_t{token} * t_.n2 + g;
    if (local >= s2_len) {  // a BSND padding key: no query sees it, zero gradients
      WriteRows(wsDk_, false, 1, k_row, t_.n2, dkGm_, dkrGm_, t_.dk, t_.dr, 1.0f, nullptr);
      if (t_.hasValue) WriteRows(wsDv_, false, 1, k_row, t_.n2, dvGm_, dvGm_, t_.d, 0, 1.0f, nullptr);
      return;
    }
    if (local % t_.blockSize != 0) return;
    const uint32_t block = local / t_.blockSize;
    const uint32_t n = s2_len - local < t_.blockSize ? s2_len - local : t_.blockSize;
    const uint64_t key_stride = uint64_t{t_.n2} * t_.d;
    gather_.Copy(wsKf_, kGm_[k_row * t_.d], Rope(krGm_, k_row * t_.dr), key_stride, n, t_.d, t_.dr);
    gather_.Copy(wsV_, vGm_[k_row * t_.d], vGm_, key_stride, n, t_.d, 0);

    uint32_t chunks = 0;
    uint32_t count = 0;
    for (uint32_t s1 = 0; s1 < s1_len; ++s1) {
      const int64_t limit = geo_.Limit(s1, s1_len, s2_len);
      if (limit < static_cast<int64_t>(local)) continue;  // the whole block is hidden from this row
      const int64_t vis = limit - local + 1;
      const uint32_t visible = vis < n ? static_cast<uint32_t>(vis) : n;
      const uint64_t t = q0 + s1;
      const uint64_t slots = (t * t_.n2 + g) * t_.k;
      for (uint32_t slot = 0; slot < t_.k; ++slot) {
        if (idxGm_.GetValue(slots + slot) != static_cast<int32_t>(block)) continue;
        rowT_[count] = static_cast<uint32_t>(t);
        rowVis_[count] = visible;
        if (++count == t_.rowChunk) {
          KeyChunk(g, count, n, chunks++);
          count = 0;
        }
      }
    }
    if (count > 0) KeyChunk(g, count, n, chunks++);
    if (t_.hasValue) {
      WriteRows(wsDk_, chunks > 0, n, k_row, t_.n2, dkGm_, dkrGm_, t_.dk, t_.dr, t_.scaleValue, nullptr);
      WriteRows(wsDv_, chunks > 0, n, k_row, t_.n2, dvGm_, dvGm_, t_.d, 0, 1.0f, nullptr);
    } else {  // key is value: d_key = scale * dK + dV, rounded once
      WriteRows(wsDk_, chunks > 0, n, k_row, t_.n2, dkGm_, dkrGm_, t_.dk, t_.dr, t_.scaleValue, &wsDv_);
    }
  }

  // Recomputes S, dP, P, dS of `count` query rows against the block's n keys, then
  // dkf (+)= dSᵀ qf and dv (+)= Pᵀ dO.
  __aicore__ inline void KeyChunk(uint32_t g, uint32_t count, uint32_t n, uint32_t index) {
    const uint32_t m = count * t_.g;
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t q_row0 = uint64_t{rowT_[i]} * t_.n1 + uint64_t{g} * t_.g;
      gather_.Copy(wsQf_[uint64_t{i} * t_.g * t_.dk], qGm_[q_row0 * t_.d], Rope(qrGm_, q_row0 * t_.dr), t_.d, t_.g,
                   t_.d, t_.dr);
      gather_.Copy(wsDo_[uint64_t{i} * t_.g * t_.d], doGm_[q_row0 * t_.d], doGm_, t_.d, t_.g, t_.d, 0);
      const SfaRow r = geo_.Row(rowT_[i] * t_.n2 + g);
      const uint64_t at = geo_.StatsOffset(r);
      for (uint32_t h = 0; h < t_.g; ++h) {
        Stat(kMax).SetValue(i * t_.g + h, maxGm_.GetValue(at + h));
        Stat(kSum).SetValue(i * t_.g + h, sumGm_.GetValue(at + h));
        Stat(kDelta).SetValue(i * t_.g + h, wsDelta_.GetValue(q_row0 + h));
      }
    }
    SyncPipes<HardEvent::S_V>();
    ScoresAndDp(wsQf_, wsDo_, m, n);
    for (uint32_t r0 = 0; r0 < m; r0 += t_.ubTileRows) {
      const uint32_t rows = m - r0 < t_.ubTileRows ? m - r0 : t_.ubTileRows;
      SoftmaxBackwardTile(r0, rows, n, rowVis_, 0, true);
    }
    mmTN_.SetOrgShape(n, t_.dk, m, m);
    mmTN_.SetSingleShape(n, t_.dk, m);
    mmTN_.SetTensorA(wsDs_, true);
    mmTN_.SetTensorB(wsQf_);
    mmTN_.IterateAll(wsDk_, index > 0 ? 1 : 0);
    mmTN_.SetOrgShape(n, t_.d, m, m);
    mmTN_.SetSingleShape(n, t_.d, m);
    mmTN_.SetTensorA(wsP_, true);
    mmTN_.SetTensorB(wsDo_);
    mmTN_.IterateAll(wsDv_, index > 0 ? 1 : 0);
  }

  mgo::tiling::SparseFlashAttentionGradTilingData t_{};  // the SFA tiling and the op's attributes (t_.attrs)
  TPipe pipe_;
  Matmul<A, AT, C> mmNT_;
  Matmul<A, A, C> mmNN_;
  Matmul<AT, A, C> mmTN_;
  SfaGeometry geo_;
  SfaUb ub_;
  RowGather<T> gather_;
  uint32_t rowT_[kMaxRowChunk] = {};
  uint32_t rowVis_[kMaxRowChunk] = {};
  GlobalTensor<T> qGm_, kGm_, vGm_, doGm_, oGm_, qrGm_, krGm_, dqGm_, dkGm_, dvGm_, dqrGm_, dkrGm_;
  GlobalTensor<int32_t> idxGm_;
  GlobalTensor<float> maxGm_, sumGm_;
  GlobalTensor<T> wsQf_, wsKf_, wsV_, wsDo_, wsP_, wsDs_;
  GlobalTensor<float> wsS_, wsDp_, wsAcc_, wsDk_, wsDv_, wsDelta_;
  GlobalTensor<float> sinkGm_, dSinkGm_, wsSink_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
extern "C" __global__ __aicore__ void sparse_flash_attention_grad(
    GM_ADDR query, GM_ADDR key, GM_ADDR value, GM_ADDR sparse_indices, GM_ADDR d_out, GM_ADDR out,
    GM_ADDR softmax_max, GM_ADDR softmax_sum, GM_ADDR actual_seq_lengths_query, GM_ADDR actual_seq_lengths_kv,
    GM_ADDR query_rope, GM_ADDR key_rope, GM_ADDR sinks, GM_ADDR d_query, GM_ADDR d_key, GM_ADDR d_value,
    GM_ADDR d_query_rope, GM_ADDR d_key_rope, GM_ADDR d_sinks, GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseFlashAttentionGradTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SparseFlashAttentionGradTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::SfaGradIo io{query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum,
                                  actual_seq_lengths_query, actual_seq_lengths_kv, query_rope, key_rope, sinks,
                                  d_query, d_key, d_value, d_query_rope, d_key_rope, d_sinks, workspace};
  if (TILING_KEY_IS(SparseFlashAttentionGradTilingKey(DType::kFloat16))) {
    mgo::kernel::SparseFlashAttentionGradKernel<half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseFlashAttentionGradTilingKey(DType::kBFloat16))) {
    mgo::kernel::SparseFlashAttentionGradKernel<bfloat16_t> op;
    op.Run(io, tiling_data);
  }
}
