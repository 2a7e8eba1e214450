// DenseLightningIndexerGradKLLoss as a mixed kernel: the AIVs do the element-wise work, the AIC
// of each core multiplies (high-level Matmul, float32 accumulation). The sparse KL loss of
// SparseLightningIndexerGradKLLoss (docs/contract.md section 4.2) over every visible key of each
// token instead of its selected ones, with y from the given index statistics:
//   p_j = (1/N1) sum_h exp(scale S[h, j] - max_h) / sum_h, S = cat(q, q_rope) cat(k, k_rope)ᵀ;
//   I_j = sum_g w_g relu(Sx[g, j]), Sx = q_index k_indexᵀ; y_j = exp(I_j - max_index) / sum_index;
//   loss = sum_t sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8)); dI = y - p;
//   d_weights[t, g] = sum_j dI_j relu(Sx[g, j]); dS = dI w [Sx > 0];
//   d_query_index[t] = dS Ki; d_key_index[j] = sum_(t, g) dS[t, g, j] q_index[t, g].
// N2 = 1 (key [.., 1, D], MLA-absorbed: every head of a query against the one key head) or N2 = N1
// (CANN's MHA: head h against key head h). The visible keys of a token are a prefix of its
// batch's keys, so every operand is read in place and nothing of size S x S exists anywhere.
//
// Row pass (query tokens, tiling.rowStart, in groups of qGroup consecutive tokens of one batch):
// per chunk of keyChunk keys the group's S (+ the rope product, accumulated) on the cube: for
// N2 = 1 one [qGroup * N1, keys] product (qGroup = 1), for N2 = N1 one [qGroup, keys] product per
// head (Q_h and K_h read in place with a row pitch of N1 heads), never a one-row GEMV. Then per
// token of the group that sees keys of the chunk: Sx on the cube; p, y, the chunk's loss, dI,
// d_weights and dS on the AIV; d_query_index += dS Ki on the cube (float32 accumulator per token).
// A token's values do not depend on its group (its products are the same elements, its chunks
// start at multiples of keyChunk), so the groups may follow the core split. Key pass (key blocks of
// 16 key tokens, tiling.keyBlockStart): the owner walks the query tokens that see a key of its
// block in ascending order, tokChunk at a time, recomputes S, Sx, p, y, dI against the block and
// accumulates d_key_index += Coefᵀ Qi (Coef = dI w [Sx > 0], 0 on hidden keys) in its own float32
// block accumulator. SyncAll, then AIV 0 sums the per-token losses in token order. Every sum has
// one owner and an order the shape fixes: the bits do not depend on the core count or the order
// cores run in (deterministic = true is honoured; false gives the same result). relu and [Sx > 0]
// keep NaN as in the sparse kernel; unlike it, a NaN in query_index reaches the other keys of a
// block in the key pass (no NaN-as-zero copy of the rows read in place).
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_kernel_common.h"
#include "../dense_lightning_indexer_grad_kl_loss_tiling.h"

namespace mgo::kernel {

using mgo::tiling::DlgTilingData;

struct DlgIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query;
  GM_ADDR key;
  GM_ADDR query_index;
  GM_ADDR key_index;
  GM_ADDR weights;
  GM_ADDR softmax_max;
  GM_ADDR softmax_sum;
  GM_ADDR softmax_max_index;
  GM_ADDR softmax_sum_index;
  GM_ADDR query_rope;
  GM_ADDR key_rope;
  GM_ADDR lens_q;
  GM_ADDR lens_k;
  GM_ADDR cmp_residual_k;
  GM_ADDR d_query_index;
  GM_ADDR d_key_index;
  GM_ADDR d_weights;
  GM_ADDR loss;
  GM_ADDR workspace;
};

inline constexpr float kDlgLogFloor = 1e-8f;

// T: query/key/index dtype (half or bfloat16_t); W: weights and d_weights (T or float).
template <typename T, typename W>
class DenseLightningIndexerGradKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;
  using Plan = mgo::tiling::DlgUbPlan;

 public:
  __aicore__ inline void Run(const DlgIo& io, const DlgTilingData& t) {
    t_ = t;
    const TCubeTiling nt = ToCubeTiling(t.mmNT);
    const TCubeTiling nn = ToCubeTiling(t.mmNN);
    const TCubeTiling tn = ToCubeTiling(t.mmTN);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmNT_, &nt, mmNN_, &nn, mmTN_, &tn);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(io);
    geo_.Init(IndexerGeometry(t, t.n1), io.lens_q, io.lens_k);
    geo_.InitCmp(static_cast<uint32_t>(t.attrs.cmp_ratio), t.cmpResidual != 0 ? io.cmp_residual_k : nullptr);
    InitUb();
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t t0 = t.rowStart[aiv]; t0 < t.rowStart[aiv + 1];) t0 += QueryGroup(t0, t.rowStart[aiv + 1]);
    for (uint32_t u = t.keyBlockStart[aiv]; u < t.keyBlockStart[aiv + 1]; ++u) KeyBlock(u);
    SyncAll();  // every per-token loss is in the workspace
    if (aiv == 0) Loss();
    mmNT_.End();
    mmNN_.End();
    mmTN_.End();
  }

 private:
  __aicore__ inline void InitGm(const DlgIo& io) {
    const uint64_t q_rows = uint64_t{t_.t1} * t_.n1;
    const uint64_t qi_elems = uint64_t{t_.t1} * t_.nIdx * t_.dIdx;
    qGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query), q_rows * t_.d);
    const uint64_t k_rows = uint64_t{t_.t2} * t_.n2;
    kGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key), k_rows * t_.d);
    if (t_.hasRope) {
      qrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_rope), q_rows * t_.dr);
      krGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_rope), k_rows * t_.dr);
    }
    qiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_index), qi_elems);
    kiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_index), uint64_t{t_.t2} * t_.dIdx);
    wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.weights), uint64_t{t_.t1} * t_.nIdx);
    maxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_max), q_rows);
    sumGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_sum), q_rows);
    maxIdxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_max_index), t_.t1);
    sumIdxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_sum_index), t_.t1);
    dqiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_query_index), qi_elems);
    dkiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_key_index), uint64_t{t_.t2} * t_.dIdx);
    dwGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.d_weights), uint64_t{t_.t1} * t_.nIdx);
    lossGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.loss), 1);
    GM_ADDR user = GetUserWorkspace(io.workspace);
    GM_ADDR ws = user + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    wsS_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsS), uint64_t{t_.qGroup} * t_.n1 * t_.keyChunk);
    wsSx_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSx), uint64_t{t_.nIdx} * t_.keyChunk);
    wsDs_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsDs), uint64_t{t_.nIdx} * t_.keyChunk);
    wsDq_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDq),
                          uint64_t{t_.qGroup} * t_.nIdx * t_.dIdx);
    wsSk_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSk), uint64_t{t_.mMain} * t_.keyBlock);
    wsSxk_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSxk), uint64_t{t_.mKey} * t_.keyBlock);
    wsCoef_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsCoef), uint64_t{t_.mKey} * t_.keyBlock);
    wsDkb_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDkb), uint64_t{t_.keyBlock} * t_.dIdx);
    wsLoss_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsLoss), t_.t1);
  }

  // Allocates exactly the buffers PlanDlgUb counts.
  __aicore__ inline void InitUb() {
    const Plan p = mgo::tiling::PlanDlgUb(t_, std::is_same_v<W, float>);
    for (auto& v : vec_) pipe_.InitBuffer(v, p.vecBytes);
    pipe_.InitBuffer(vec16_, p.vec16Bytes);
    pipe_.InitBuffer(tile_, p.tileBytes);
    pipe_.InitBuffer(tileX_, p.tileXBytes);
    pipe_.InitBuffer(tile16_, p.tile16Bytes);
    for (auto& h : head_) pipe_.InitBuffer(h, p.headBytes);
    pipe_.InitBuffer(dw_, p.dwBytes);
    pipe_.InitBuffer(wRaw_, p.wBytes);
    pipe_.InitBuffer(rowF_, p.rowFBytes);
    pipe_.InitBuffer(rowH_, p.rowHBytes);
    pipe_.InitBuffer(work_, p.workBytes);
    pipe_.InitBuffer(red_, Plan::kRedBytes);
  }

  enum Vec : uint32_t { kP = 0, kI = 1, kSx = 2, kTmp = 3, kA = 4, kB = 5 };
  enum Head : uint32_t { kMax = 0, kSum = 1, kW = 2 };
  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> V(Vec v) { return vec_[v].template Get<float>(); }
  __aicore__ inline LocalTensor<float> H(Head h) { return head_[h].template Get<float>(); }
  __aicore__ inline LocalTensor<float> Red() { return red_.template Get<float>(); }
  __aicore__ inline LocalTensor<float> Work() { return work_.template Get<float>(); }
  // The d_weights accumulator of token i of a row-pass group.
  __aicore__ inline LocalTensor<float> Dw(uint32_t i) {
    return dw_.template Get<float>()[i * static_cast<uint32_t>(mgo::tiling::AlignUp(t_.nIdx, 8))];
  }
  // Row of head h of token i in an S product of m tokens: [m * N1] rows token-major for N2 = 1 (one
  // product), [N1, m] head-major for N2 = N1 (one product per head); HeadPitch(m) rows between heads.
  __aicore__ inline uint32_t HeadRow(uint32_t i, uint32_t h, uint32_t m) const {
    return t_.n2 == 1 ? i * t_.n1 + h : h * m + i;
  }
  __aicore__ inline uint32_t HeadPitch(uint32_t m) const { return t_.n2 == 1 ? 1 : m; }

  // The statistics and weights of token t (batch b, local position s1): softmax_max/sum of its heads
  // ([N2, T1, G] or [B, N2, S1, G], G = N1 / N2: offset t * N1 + h in both layouts for N2 = 1),
  // weights as float32; returns (max_index, sum_index) in *mi, *si.
  __aicore__ inline void LoadToken(uint32_t t, uint32_t b, uint32_t s1, float* mi, float* si) {
    const uint32_t g = t_.n1 / t_.n2;
    for (uint32_t h = 0; h < t_.n1; ++h) {
      const uint32_t hk = h / g;
      const uint64_t row = geo_.Tnd() ? uint64_t{hk} * t_.t1 + t : (uint64_t{b} * t_.n2 + hk) * t_.s1 + s1;
      const uint64_t at = row * g + h % g;
      H(kMax).SetValue(h, maxGm_.GetValue(at));
      H(kSum).SetValue(h, sumGm_.GetValue(at));
    }
    *mi = maxIdxGm_.GetValue(t);
    *si = sumIdxGm_.GetValue(t);
    LoadWeightsF32(wRaw_.template Get<W>(), wGm_[uint64_t{t} * t_.nIdx], H(kW), t_.nIdx);
  }

  // S = cat(q, q_rope) cat(k, k_rope)ᵀ of `m` query tokens from q_tok against `n` key tokens from
  // k_tok into ws, float32 rows of n in HeadRow order: for N2 = 1 one [m * N1, n] product, for
  // N2 = N1 one [m, n] product per head. The rope product accumulates onto the main one.
  __aicore__ inline void MainScores(uint64_t q_tok, uint32_t m, uint64_t k_tok, uint32_t n,
                                    const GlobalTensor<float>& ws) {
    if (t_.n2 == 1) {
      HeadScores(q_tok * t_.n1, m * t_.n1, k_tok, n, 1, ws);
      return;
    }
    for (uint32_t h = 0; h < t_.n1; ++h) {
      HeadScores(q_tok * t_.n1 + h, m, k_tok * t_.n1 + h, n, t_.n1, ws[uint64_t{h} * m * n]);
    }
  }

  // [m, n] = rows of query/query_rope from q_row against rows of key/key_rope from k_row, `heads`
  // rows apart (the row pitch: 1 packed, N1 for one head of every token).
  __aicore__ inline void HeadScores(uint64_t q_row, uint32_t m, uint64_t k_row, uint32_t n, uint32_t heads,
                                    const GlobalTensor<float>& ws) {
    mmNT_.SetOrgShape(m, n, heads * t_.d, heads * t_.d);
    mmNT_.SetSingleShape(m, n, t_.d);
    mmNT_.SetTensorA(qGm_[q_row * t_.d]);
    mmNT_.SetTensorB(kGm_[k_row * t_.d], true);
    mmNT_.IterateAll(ws);
    if (!t_.hasRope) return;
    mmNT_.SetOrgShape(m, n, heads * t_.dr, heads * t_.dr);
    mmNT_.SetSingleShape(m, n, t_.dr);
    mmNT_.SetTensorA(qrGm_[q_row * t_.dr]);
    mmNT_.SetTensorB(krGm_[k_row * t_.dr], true);
    mmNT_.IterateAll(ws, 1);
  }

  // p += P_h over n columns for head rows [h0, h0 + rows) of an S tile (row pitch `pitch`).
  __aicore__ inline void AddHeads(const LocalTensor<float>& p, const LocalTensor<float>& s, uint32_t pitch,
                                  uint32_t h0, uint32_t rows, uint32_t n) {
    AddHeadProbs(p, s, pitch, h0, rows, n, t_.scaleValue, H(kMax), H(kSum), V(kA));
  }

  // y = exp(I - mi) / si in place of I (n columns).
  __aicore__ inline void IndexSoftmax(const LocalTensor<float>& i_score, float mi, float si, uint32_t n) {
    Adds(i_score, i_score, -mi, n);
    Exp(i_score, i_score, n);
    Muls(i_score, i_score, 1.0f / si, n);
  }

  // ---------------------------------------------------------------- row pass
  // The row-pass group from token t0 (at most qGroup tokens, within one batch, one qGroup-aligned
  // run of local positions and the AIV's range [t0, end)); returns its token count.
  __aicore__ inline uint32_t QueryGroup(uint32_t t0, uint32_t end) {
    const SfaRow r = geo_.Row(t0);
    const uint32_t s1_end = (r.s1 / t_.qGroup + 1) * t_.qGroup;
    // a BSND padding row (s1 >= S1_b) is a group of its own: no key, zero outputs
    uint32_t m = geo_.Padding(r) ? 1 : (s1_end < r.s1Len ? s1_end : r.s1Len) - r.s1;
    m = end - t0 < m ? end - t0 : m;
    uint32_t nmax = 0;
    for (uint32_t i = 0; i < m; ++i) {
      const int64_t limit = geo_.LimitOf(r.b, r.s1 + i, r.s1Len, r.s2Len);
      keys_[i] = limit < 0 ? 0 : static_cast<uint32_t>(limit + 1);
      nmax = keys_[i] > nmax ? keys_[i] : nmax;
      loss_[i] = 0.0f;
      Duplicate(Dw(i), 0.0f, t_.nIdx);
    }
    SyncPipes<HardEvent::V_S>();
    for (uint32_t c0 = 0; c0 < nmax; c0 += t_.keyChunk) {
      const uint32_t cols = nmax - c0 < t_.keyChunk ? nmax - c0 : t_.keyChunk;
      MainScores(t0, m, r.kv0 + c0, cols, wsS_);
      for (uint32_t i = 0; i < m; ++i) {
        if (keys_[i] <= c0) continue;
        const uint32_t n = keys_[i] - c0 < cols ? keys_[i] - c0 : cols;
        float mi = 0.0f;
        float si = 0.0f;
        LoadToken(t0 + i, r.b, r.s1 + i, &mi, &si);
        const uint32_t pitch = HeadPitch(m) * cols;
        loss_[i] += RowChunk(t0 + i, i, wsS_[uint64_t{HeadRow(i, 0, m)} * cols], pitch, r.kv0 + c0, n, c0 == 0,
                             mi, si);
      }
    }
    for (uint32_t i = 0; i < m; ++i) FinishToken(t0 + i, i, keys_[i] > 0);
    return m;
  }

  // Token t (group slot i): d_weights, d_query_index (zero without a visible key) and its loss.
  __aicore__ inline void FinishToken(uint32_t t, uint32_t i, bool any) {
    WriteWeightsGrad(t, Dw(i));
    WriteRows(wsDq_[uint64_t{i} * t_.nIdx * t_.dIdx], any, t_.nIdx, uint64_t{t} * t_.nIdx, dqiGm_);
    const LocalTensor<float> red = Red();
    red.SetValue(0, loss_[i]);
    SyncPipes<HardEvent::V_MTE3>();
    SyncPipes<HardEvent::S_MTE3>();
    DataCopyPad(wsLoss_[t], red, DataCopyExtParams{1, 4, 0, 0, 0});
    PipeBarrier<PIPE_ALL>();  // the next token rewrites red (scalar and V after MTE3)
  }

  // Keys [key0, key0 + cols) of token t (group slot i), its head rows of S from s_rows, s_pitch
  // floats apart (the first cols of each); returns the chunk's loss.
  __aicore__ inline float RowChunk(uint32_t t, uint32_t i, const GlobalTensor<float>& s_rows, uint32_t s_pitch,
                                  uint64_t key0, uint32_t cols, bool first, float mi, float si) {
    // Teacher p over the chunk.
    const LocalTensor<float> p = V(kP);
    const LocalTensor<float> s = tile_.template Get<float>();
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(cols, 8));
    Duplicate(p, 0.0f, cols);
    for (uint32_t h0 = 0; h0 < t_.n1; h0 += t_.tileRows) {
      const uint32_t rows = t_.n1 - h0 < t_.tileRows ? t_.n1 - h0 : t_.tileRows;
      DataCopyPad(s, s_rows[uint64_t{h0} * s_pitch],
                  DataCopyExtParams{static_cast<uint16_t>(rows), static_cast<uint32_t>(cols * 4),
                                    static_cast<uint32_t>((s_pitch - cols) * 4), 0, 0},
                  DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
      SyncPipes<HardEvent::MTE2_V>();
      AddHeads(p, s, pitch, h0, rows, cols);
      SyncPipes<HardEvent::V_MTE2>();  // the next tile overwrites s
    }
    Muls(p, p, 1.0f / static_cast<float>(t_.n1), cols);

    // y from I and the index statistics; the loss; dI = y - p.
    const LocalTensor<float> y = V(kI);
    IndexScores(mmNT_, qiGm_[uint64_t{t} * t_.nIdx * t_.dIdx], kiGm_[key0 * t_.dIdx], wsSx_, t_.nIdx, t_.dIdx, cols,
                H(kW), y, V(kSx), V(kTmp));
    IndexSoftmax(y, mi, si, cols);
    const float loss = ChunkLoss(p, y, cols);
    Sub(y, y, p, cols);

    // d_weights, dS (16-bit, per head row) and d_query_index (+)= dS Ki.
    const LocalTensor<float> di = y;
    const LocalTensor<float> sx = V(kSx);
    const LocalTensor<float> tmp = V(kTmp);
    const LocalTensor<T> ds16 = vec16_.template Get<T>();
    const LocalTensor<float> dw = Dw(i);
    for (uint32_t g = 0; g < t_.nIdx; ++g) {
      LoadRowsF32(sx, wsSx_[uint64_t{g} * cols], 1, cols);
      ReluKeepNan(tmp, sx, cols);
      Mul(tmp, tmp, di, cols);
      ReduceSum(Red(), tmp, Work(), cols);
      Muls(tmp, di, H(kW).GetValue(g), cols);
      SyncPipes<HardEvent::V_S>();
      dw.SetValue(g, dw.GetValue(g) + Red().GetValue(0));
      for (uint32_t j = 0; j < cols; ++j) tmp.SetValue(j, tmp.GetValue(j) * ReluStep(sx.GetValue(j)));
      SyncPipes<HardEvent::S_V>();
      Cast(ds16, tmp, RoundMode::CAST_RINT, cols);
      StoreRows16(wsDs_[uint64_t{g} * cols], ds16, 1, cols);
      SyncPipes<HardEvent::V_MTE2>();
    }
    mmNN_.SetOrgShape(t_.nIdx, t_.dIdx, cols, cols);
    mmNN_.SetSingleShape(t_.nIdx, t_.dIdx, cols);
    mmNN_.SetTensorA(wsDs_);
    mmNN_.SetTensorB(kiGm_[key0 * t_.dIdx]);
    mmNN_.IterateAll(wsDq_[uint64_t{i} * t_.nIdx * t_.dIdx], first ? 0 : 1);
    return loss;
  }

  // sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8)) over n columns.
  __aicore__ inline float ChunkLoss(const LocalTensor<float>& p, const LocalTensor<float>& y, uint32_t n) {
    const LocalTensor<float> a = V(kA);
    const LocalTensor<float> b = V(kB);
    const LocalTensor<float> nan_of_y = V(kTmp);
    Maxs(a, p, kDlgLogFloor, n);
    Ln(a, a, n);
    Maxs(b, y, kDlgLogFloor, n);
    Ln(b, b, n);
    // + (y - y): 0 for a finite y, NaN for a NaN y, which the documented Maxs leaves unspecified.
    Sub(nan_of_y, y, y, n);
    Add(b, b, nan_of_y, n);
    Sub(a, a, b, n);
    Mul(a, a, p, n);
    ReduceSum(Red(), a, Work(), n);
    SyncPipes<HardEvent::V_S>();
    return Red().GetValue(0);
  }

  // ---------------------------------------------------------------- key pass
  // Key block u: global key tokens [u * keyBlock, ...), possibly spanning batches.
  __aicore__ inline void KeyBlock(uint32_t u) {
    const uint64_t g0 = uint64_t{u} * t_.keyBlock;
    const uint32_t nb = static_cast<uint32_t>(t_.t2 - g0 < t_.keyBlock ? t_.t2 - g0 : t_.keyBlock);
    uint32_t chunks = 0;
    const uint32_t b_first = geo_.BatchOf(g0, true);
    const uint32_t b_last = geo_.BatchOf(g0 + nb - 1, true);
    for (uint32_t b = b_first; b <= b_last; ++b) {
      BlockBatch bb{};
      bb.b = b;
      bb.g0 = g0;
      bb.nb = nb;
      geo_.Batch(b, &bb.q0, &bb.s1Len, &bb.kv0, &bb.s2Len);
      const uint64_t lo = g0 > bb.kv0 ? g0 : bb.kv0;
      const uint64_t hi = g0 + nb < bb.kv0 + bb.s2Len ? g0 + nb : bb.kv0 + bb.s2Len;
      if (lo >= hi || bb.s1Len == 0) continue;
      // The first local query that sees local key lo - kv0 (limits grow with s1): a bisection over the
      // geometry's rule, causal or compressed alike.
      const auto key = static_cast<int64_t>(lo - bb.kv0);
      uint32_t first = 0;
      for (uint32_t end = bb.s1Len; first < end;) {
        const uint32_t mid = first + (end - first) / 2;
        if (geo_.LimitOf(b, mid, bb.s1Len, bb.s2Len) >= key) {
          end = mid;
        } else {
          first = mid + 1;
        }
      }
      for (uint32_t s1 = first; s1 < bb.s1Len; s1 += t_.tokChunk) {
        const uint32_t rows = bb.s1Len - s1 < t_.tokChunk ? bb.s1Len - s1 : t_.tokChunk;
        KeyChunk(bb, s1, rows, chunks++);
      }
    }
    WriteRows(wsDkb_, chunks > 0, nb, g0, dkiGm_);
  }

  // One batch's share of a key block: the block's global keys [g0, g0 + nb), the batch's tokens.
  struct BlockBatch {
    uint32_t b;
    uint64_t g0;
    uint32_t nb;
    uint64_t q0;
    uint32_t s1Len;
    uint64_t kv0;
    uint32_t s2Len;
  };

  // Loads `rows` rows of `cols` (<= keyBlock) float32 from GM into UB rows of pitch keyBlock.
  __aicore__ inline void LoadBlockRows(const LocalTensor<float>& dst, const GlobalTensor<float>& src, uint32_t rows,
                                       uint32_t cols) {
    const uint32_t row_blocks = static_cast<uint32_t>(mgo::tiling::AlignUp(cols, 8) / 8);
    const uint32_t gap = t_.keyBlock / 8 - row_blocks;
    DataCopyPad(dst, src,
                DataCopyExtParams{static_cast<uint16_t>(rows), static_cast<uint32_t>(cols * 4), 0, gap, 0},
                DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    SyncPipes<HardEvent::MTE2_V>();
    SyncPipes<HardEvent::MTE2_S>();
  }

  // Local queries [s1, s1 + rows) of batch bb against the block: Coef -> d_key_index block.
  __aicore__ inline void KeyChunk(const BlockBatch& bb, uint32_t s1, uint32_t rows, uint32_t index) {
    const uint64_t t0 = bb.q0 + s1;
    const uint32_t nb = bb.nb;
    const uint32_t kb = t_.keyBlock;
    MainScores(t0, rows, bb.g0, nb, wsSk_);
    mmNT_.SetOrgShape(rows * t_.nIdx, nb, t_.dIdx, t_.dIdx);
    mmNT_.SetSingleShape(rows * t_.nIdx, nb, t_.dIdx);
    mmNT_.SetTensorA(qiGm_[t0 * t_.nIdx * t_.dIdx]);
    mmNT_.SetTensorB(kiGm_[bb.g0 * t_.dIdx], true);
    mmNT_.IterateAll(wsSxk_);
    const LocalTensor<float> s = tile_.template Get<float>();
    const LocalTensor<float> x = tileX_.template Get<float>();
    LoadBlockRows(s, wsSk_, rows * t_.n1, nb);
    LoadBlockRows(x, wsSxk_, rows * t_.nIdx, nb);
    const LocalTensor<float> p = V(kP);
    const LocalTensor<float> y = V(kI);
    const LocalTensor<float> tmp = V(kTmp);
    for (uint32_t i = 0; i < rows; ++i) {
      float mi = 0.0f;
      float si = 0.0f;
      LoadToken(static_cast<uint32_t>(t0 + i), bb.b, s1 + i, &mi, &si);
      Duplicate(p, 0.0f, nb);
      AddHeads(p, s[HeadRow(i, 0, rows) * kb], HeadPitch(rows) * kb, 0, t_.n1, nb);
      Muls(p, p, 1.0f / static_cast<float>(t_.n1), nb);
      Duplicate(y, 0.0f, nb);
      for (uint32_t g = 0; g < t_.nIdx; ++g) {
        ReluKeepNan(tmp, x[(i * t_.nIdx + g) * kb], nb);
        Muls(tmp, tmp, H(kW).GetValue(g), nb);
        Add(y, y, tmp, nb);
      }
      IndexSoftmax(y, mi, si, nb);
      Sub(y, y, p, nb);
      SyncPipes<HardEvent::V_S>();
      // Coef over the block's columns, in place of Sx: dI w [Sx > 0] on visible keys, else 0.
      const int64_t limit = geo_.LimitOf(bb.b, s1 + i, bb.s1Len, bb.s2Len);
      for (uint32_t c = 0; c < kb; ++c) {
        const uint64_t key = bb.g0 + c;
        const bool seen = c < nb && key >= bb.kv0 && key < bb.kv0 + bb.s2Len &&
                          static_cast<int64_t>(key - bb.kv0) <= limit;
        const float di = seen ? y.GetValue(c) : 0.0f;
        for (uint32_t g = 0; g < t_.nIdx; ++g) {
          const uint32_t at = (i * t_.nIdx + g) * kb + c;
          x.SetValue(at, seen ? di * H(kW).GetValue(g) * ReluStep(x.GetValue(at)) : 0.0f);
        }
      }
      SyncPipes<HardEvent::S_V>();
    }
    const uint32_t m = rows * t_.nIdx;
    const LocalTensor<T> coef16 = tile16_.template Get<T>();
    Cast(coef16, x, RoundMode::CAST_RINT, m * kb);
    StoreRows16(wsCoef_, coef16, m, nb);
    SyncPipes<HardEvent::V_MTE2>();
    mmTN_.SetOrgShape(nb, t_.dIdx, m, m);
    mmTN_.SetSingleShape(nb, t_.dIdx, m);
    mmTN_.SetTensorA(wsCoef_, true);
    mmTN_.SetTensorB(qiGm_[t0 * t_.nIdx * t_.dIdx]);
    mmTN_.IterateAll(wsDkb_, index > 0 ? 1 : 0);
  }

  // ---------------------------------------------------------------- outputs
  // d_weights row t from dw (scalar-written), in W.
  __aicore__ inline void WriteWeightsGrad(uint32_t t, const LocalTensor<float>& dw) {
    SyncPipes<HardEvent::S_V>();
    SyncPipes<HardEvent::S_MTE3>();
    const DataCopyExtParams one{1, static_cast<uint32_t>(t_.nIdx * sizeof(W)), 0, 0, 0};
    if constexpr (std::is_same_v<W, float>) {
      SyncPipes<HardEvent::V_MTE3>();
      DataCopyPad(dwGm_[uint64_t{t} * t_.nIdx], dw, one);
    } else {
      const LocalTensor<W> raw = wRaw_.template Get<W>();
      Cast(raw, dw, RoundMode::CAST_RINT, t_.nIdx);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopyPad(dwGm_[uint64_t{t} * t_.nIdx], raw, one);
    }
    PipeBarrier<PIPE_ALL>();  // the next token rewrites dw and the weights buffer
  }

  // Output rows row0 + i (i < rows, dIdx wide) = acc row i cast to T; zeros when !any.
  __aicore__ inline void WriteRows(const GlobalTensor<float>& acc, bool any, uint32_t rows, uint64_t row0,
                                   const GlobalTensor<T>& out) {
    const LocalTensor<float> row_f = rowF_.template Get<float>();
    const LocalTensor<T> row_h = rowH_.template Get<T>();
    if (!any) Duplicate(row_f, 0.0f, t_.dIdx);
    for (uint32_t i = 0; i < rows; ++i) {
      if (any) {
        DataCopy(row_f, acc[uint64_t{i} * t_.dIdx], t_.dIdx);
        SyncPipes<HardEvent::MTE2_V>();
      }
      Cast(row_h, row_f, RoundMode::CAST_RINT, t_.dIdx);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(out[(row0 + i) * t_.dIdx], row_h, t_.dIdx);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // loss = sum over tokens (ascending) of the per-token losses, float32.
  __aicore__ inline void Loss() {
    float acc = 0.0f;
    for (uint32_t t = 0; t < t_.t1; ++t) acc += wsLoss_.GetValue(t);
    const LocalTensor<float> red = Red();
    red.SetValue(0, acc);
    SyncPipes<HardEvent::V_MTE3>();
    SyncPipes<HardEvent::S_MTE3>();
    DataCopyPad(lossGm_, red, DataCopyExtParams{1, 4, 0, 0, 0});
  }

  DlgTilingData t_{};
  TPipe pipe_;
  Matmul<A, AT, C> mmNT_;
  Matmul<A, A, C> mmNN_;
  Matmul<AT, A, C> mmTN_;
  SfaGeometry geo_;
  TBuf<TPosition::VECCALC> vec_[Plan::kVecs], vec16_, tile_, tileX_, tile16_, head_[Plan::kHeads], dw_, wRaw_,
      rowF_, rowH_, work_, red_;
  uint32_t keys_[mgo::tiling::kDlgMhaGroup];  // visible keys of each token of the row-pass group
  float loss_[mgo::tiling::kDlgMhaGroup];     // loss of each token of the row-pass group
  GlobalTensor<T> qGm_, kGm_, qrGm_, krGm_, qiGm_, kiGm_, dqiGm_, dkiGm_;
  GlobalTensor<W> wGm_, dwGm_;
  GlobalTensor<float> maxGm_, sumGm_, maxIdxGm_, sumIdxGm_, lossGm_;
  GlobalTensor<T> wsDs_, wsCoef_;
  GlobalTensor<float> wsS_, wsSx_, wsDq_, wsSk_, wsSxk_, wsDkb_, wsLoss_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
// cmp_residual_k is read only where the tiling says it is given and cmp_ratio > 1 (at ratio 1 every
// residual is 0).
extern "C" __global__ __aicore__ void dense_lightning_indexer_grad_kl_loss(
    GM_ADDR query, GM_ADDR key, GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights, GM_ADDR softmax_max,
    GM_ADDR softmax_sum, GM_ADDR softmax_max_index, GM_ADDR softmax_sum_index, GM_ADDR query_rope, GM_ADDR key_rope,
    GM_ADDR actual_seq_lengths_query, GM_ADDR actual_seq_lengths_key, GM_ADDR cmp_residual_k,
    GM_ADDR d_query_index, GM_ADDR d_key_index, GM_ADDR d_weights, GM_ADDR loss, GM_ADDR workspace,
    GM_ADDR tiling) {
  using mgo::tiling::DenseLightningIndexerGradKLLossTilingKey;
  using mgo::tiling::DType;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::DlgTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::DlgIo io{query, key, query_index, key_index, weights, softmax_max, softmax_sum,
                              softmax_max_index, softmax_sum_index, query_rope, key_rope, actual_seq_lengths_query,
                              actual_seq_lengths_key, cmp_residual_k, d_query_index, d_key_index, d_weights, loss, workspace};
  if (TILING_KEY_IS(DenseLightningIndexerGradKLLossTilingKey(DType::kFloat16, false))) {
    mgo::kernel::DenseLightningIndexerGradKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(DenseLightningIndexerGradKLLossTilingKey(DType::kFloat16, true))) {
    mgo::kernel::DenseLightningIndexerGradKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(DenseLightningIndexerGradKLLossTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::DenseLightningIndexerGradKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(DenseLightningIndexerGradKLLossTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::DenseLightningIndexerGradKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
