// Kernel pieces shared by SparseFlashAttention and SparseFlashAttentionGrad (mixed kernels: the
// AIV code calls the high-level Matmul, the AIC of its core serves it). Include after
// "kernel_operator.h" and "lib/matmul_intf.h".
//
// Geometry (docs/contract.md section 3): query row = (token t, key group g), G = N1 / N2 heads; sparse_indices
// [T1, N2, K] (TND) or [B, S1, N2, K] (BSND) hold batch-local block indices; block i covers
// keys [i*bs, min((i+1)*bs, S2_b)); sparse_mode 3 hides key s2 from local query s1 unless
// s2 <= s1 + S2_b - S1_b, so the visible keys of a selected block are a prefix of it.
#pragma once

#include <cstdint>

#include "kernel_helpers.h"
#include "sfa_tiling_common.h"

namespace mgo::kernel {

using namespace AscendC;
using mgo::tiling::MatmulTiling;
using mgo::tiling::SfaTilingData;
using mgo::tiling::SfaUbPlan;

inline constexpr float kLowestFloat = -3.4028234663852886e38f;

// Where one query row or key block lives.
struct SfaRow {
  uint32_t t;       // packed query token
  uint32_t g;       // key group
  uint32_t b;       // batch
  uint32_t s1;      // local query position
  uint32_t s1Len;   // S1_b
  uint32_t s2Len;   // S2_b
  uint64_t kv0;     // first key token of the batch
  int64_t limit;    // last visible local key (-1: none)
};

// The cube tiling of one Matmul object from the pure tiling's shape and base block.
__aicore__ inline TCubeTiling ToCubeTiling(const MatmulTiling& m) {
  TCubeTiling t;
  t.usedCoreNum = 1;
  t.M = t.singleCoreM = static_cast<int32_t>(m.m);
  t.N = t.singleCoreN = static_cast<int32_t>(m.n);
  t.Ka = t.Kb = t.singleCoreK = static_cast<int32_t>(m.k);
  t.baseM = static_cast<int32_t>(m.baseM);
  t.baseN = static_cast<int32_t>(m.baseN);
  t.baseK = static_cast<int32_t>(m.baseK);
  t.depthA1 = 1;
  t.depthB1 = 1;
  t.stepM = 1;  // every field defaults to 0, and the Matmul divides by the steps
  t.stepN = 1;
  t.stepKa = 1;
  t.stepKb = 1;
  t.dbL0A = 2;
  t.dbL0B = 2;
  t.dbL0C = 1;
  return t;
}

// Batch geometry from the tiling (BSND) and the length tensors: TND's cumulative ones, BSND's
// per-batch ones (bsndLens: the sides given; a side not given is the full S1 or S2), int32 or
// int64. Every batch comes out as the same span, so the passes never ask which layout made it;
// a BSND padding query row (local s1 >= S1_b) sees no key (Limit -1) and a padding key is never
// in a batch's keys.
class SfaGeometry {
 public:
  __aicore__ inline void Init(const SfaTilingData& t, GM_ADDR lens_q, GM_ADDR lens_kv) {
    t_ = t;
    const bool q = Tnd() || (t.bsndLens & mgo::tiling::kBsndLensQuery) != 0;
    const bool kv = Tnd() || (t.bsndLens & mgo::tiling::kBsndLensKv) != 0;
    if (t.seqLensInt64) {
      if (q) lensQ64_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(lens_q), t.batch);
      if (kv) lensKv64_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(lens_kv), t.batch);
    } else {
      if (q) lensQ_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(lens_q), t.batch);
      if (kv) lensKv_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(lens_kv), t.batch);
    }
  }

  // Entry b of the query (or key) lengths, whichever integer type they have: cumulative in TND,
  // per batch in BSND.
  __aicore__ inline int64_t Cum(uint32_t b, bool keys) const {
    if (t_.seqLensInt64) return (keys ? lensKv64_ : lensQ64_).GetValue(b);
    return (keys ? lensKv_ : lensQ_).GetValue(b);
  }

  __aicore__ inline bool Tnd() const { return t_.layout == static_cast<uint32_t>(mgo::table::Layout::kTND); }

  // BSND: S1_b (or S2_b when `keys`) of batch b, the full S1 / S2 without that side's lengths.
  // The host checked 0 <= len <= S; the clamp keeps every read in bounds whatever the tensor holds.
  __aicore__ inline uint32_t BsndLen(uint32_t b, bool keys) const {
    const uint32_t full = keys ? t_.s2 : t_.s1;
    if ((t_.bsndLens & (keys ? mgo::tiling::kBsndLensKv : mgo::tiling::kBsndLensQuery)) == 0) return full;
    const int64_t len = Cum(b, keys);
    return len < 0 ? 0 : (len > full ? full : static_cast<uint32_t>(len));
  }

  // (first query token, S1_b, first key token, S2_b) of batch b.
  __aicore__ inline void Batch(uint32_t b, uint64_t* q0, uint32_t* s1_len, uint64_t* kv0, uint32_t* s2_len) const {
    if (!Tnd()) {
      *q0 = uint64_t{b} * t_.s1;
      *kv0 = uint64_t{b} * t_.s2;
      *s1_len = BsndLen(b, false);
      *s2_len = BsndLen(b, true);
      return;
    }
    const int64_t q_prev = b == 0 ? 0 : Cum(b - 1, false);
    const int64_t kv_prev = b == 0 ? 0 : Cum(b - 1, true);
    *q0 = static_cast<uint64_t>(q_prev);
    *kv0 = static_cast<uint64_t>(kv_prev);
    *s1_len = static_cast<uint32_t>(Cum(b, false) - q_prev);
    *s2_len = static_cast<uint32_t>(Cum(b, true) - kv_prev);
  }

  // The batch holding query token t (or key token t when `keys`).
  __aicore__ inline uint32_t BatchOf(uint64_t token, bool keys) const {
    if (!Tnd()) return static_cast<uint32_t>(token / (keys ? t_.s2 : t_.s1));
    uint32_t b = 0;
    while (b + 1 < t_.batch && static_cast<uint64_t>(Cum(b, keys)) <= token) ++b;
    return b;
  }

  // Last local key local query s1 may see (-1: none, as for a BSND padding row, s1 >= S1_b).
  __aicore__ inline int64_t Limit(uint32_t s1, uint32_t s1_len, uint32_t s2_len) const {
    if (s1 >= s1_len) return -1;
    int64_t lim = static_cast<int64_t>(s2_len) - 1;
    if (t_.sparseMode == static_cast<uint32_t>(mgo::table::SparseMode::kRightDownCausal)) {
      const int64_t causal = static_cast<int64_t>(s1) + s2_len - s1_len;
      lim = causal < lim ? causal : lim;
    }
    return lim;
  }

  // Compressed keys (docs/contract.md section 9.1; the indexer kernels): `ratio` original tokens per
  // key and, when `residual` is not null, int32 [batch] original tokens of each batch's last,
  // incomplete block (absent: 0). Ratio 1 (or never called) keeps Limit's integers.
  __aicore__ inline void InitCmp(uint32_t ratio, GM_ADDR residual) {
    cmpRatio_ = ratio;
    hasResidual_ = ratio > 1 && residual != nullptr;
    if (hasResidual_) residual_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(residual), t_.batch);
  }

  // Last local key local query s1 of batch b may see (-1: none): Limit, or with compressed keys
  // under rightDownCausal the shared rule (a residual outside [0, ratio) cannot reach past S2_b).
  __aicore__ inline int64_t LimitOf(uint32_t b, uint32_t s1, uint32_t s1_len, uint32_t s2_len) const {
    if (s1 >= s1_len) return -1;  // a BSND padding row sees nothing, compressed keys or not
    if (cmpRatio_ <= 1 || t_.sparseMode != static_cast<uint32_t>(mgo::table::SparseMode::kRightDownCausal)) {
      return Limit(s1, s1_len, s2_len);
    }
    const int32_t res = hasResidual_ ? residual_.GetValue(b) : 0;
    return static_cast<int64_t>(mgo::tiling::CmpVisibleKeys(s1, s1_len, s2_len, cmpRatio_,
                                                            res > 0 ? static_cast<uint64_t>(res) : 0)) - 1;
  }

  __aicore__ inline SfaRow Row(uint32_t row) const {
    SfaRow r{};
    r.t = row / t_.n2;
    r.g = row % t_.n2;
    r.b = BatchOf(r.t, false);
    uint64_t q0 = 0;
    Batch(r.b, &q0, &r.s1Len, &r.kv0, &r.s2Len);
    r.s1 = static_cast<uint32_t>(r.t - q0);
    r.limit = LimitOf(r.b, r.s1, r.s1Len, r.s2Len);
    return r;
  }

  // A BSND padding query row (beyond its batch's query length): fixed outputs, nothing read.
  __aicore__ inline bool Padding(const SfaRow& r) const { return r.s1 >= r.s1Len; }

  // Element offset of row (t, g) in the statistics: [N2, T1, G] (TND) or [B, N2, S1, G] (BSND).
  __aicore__ inline uint64_t StatsOffset(const SfaRow& r) const {
    if (Tnd()) return (uint64_t{r.g} * t_.t1 + r.t) * t_.g;
    return ((uint64_t{r.b} * t_.n2 + r.g) * t_.s1 + r.s1) * t_.g;
  }

  // Visible keys [first, end) (local) of block `idx` for a row, or false for -1 / an index
  // outside the batch (the host validates indices; the kernel never reads out of bounds).
  __aicore__ inline bool BlockKeys(int32_t idx, const SfaRow& r, uint32_t* first, uint32_t* end) const {
    const uint32_t bs = t_.blockSize;
    const uint32_t blocks = (r.s2Len + bs - 1) / bs;
    if (idx < 0 || static_cast<uint32_t>(idx) >= blocks) return false;
    const int64_t start = int64_t{idx} * bs;
    int64_t stop = start + bs;
    stop = stop < r.s2Len ? stop : r.s2Len;
    stop = stop < r.limit + 1 ? stop : r.limit + 1;
    if (stop <= start) return false;
    *first = static_cast<uint32_t>(start);
    *end = static_cast<uint32_t>(stop);
    return true;
  }

 private:
  SfaTilingData t_{};
  uint32_t cmpRatio_ = 1;
  bool hasResidual_ = false;
  GlobalTensor<int32_t> residual_;
  GlobalTensor<int32_t> lensQ_;
  GlobalTensor<int32_t> lensKv_;
  GlobalTensor<int64_t> lensQ64_;
  GlobalTensor<int64_t> lensKv64_;
};

// Copies `rows` rows of cat(main, rope) (row widths d and dr; consecutive source rows are
// `stride` elements apart in both tensors) through one UB buffer into a dense [rows, d + dr]
// workspace block. GM -> UB -> GM with the MTE2 -> MTE3 and MTE3 -> MTE2 syncs a device needs.
template <typename T>
class RowGather {
 public:
  __aicore__ inline void Init(const LocalTensor<T>& buf, uint32_t buf_rows) {
    buf_ = buf;
    bufRows_ = buf_rows;
  }

  __aicore__ inline void Copy(const GlobalTensor<T>& dst, const GlobalTensor<T>& main, const GlobalTensor<T>& rope,
                              uint64_t stride, uint32_t rows, uint32_t d, uint32_t dr) {
    const uint32_t w = d + dr;
    for (uint32_t done = 0; done < rows; done += bufRows_) {
      const uint32_t n = rows - done < bufRows_ ? rows - done : bufRows_;
      const DataCopyPadExtParams<T> no_pad{false, 0, 0, T(0.0f)};
      // Rows land w wide in UB: the gap after each d-row is dr elements (dr * 2 / 32 blocks).
      DataCopyPad(buf_, main[done * stride],
                  DataCopyExtParams{static_cast<uint16_t>(n), static_cast<uint32_t>(d * sizeof(T)),
                                    static_cast<uint32_t>((stride - d) * sizeof(T)),
                                    static_cast<uint32_t>(dr * sizeof(T) / 32), 0},
                  no_pad);
      if (dr > 0) {
        DataCopyPad(buf_[d], rope[done * stride / d * dr],
                    DataCopyExtParams{static_cast<uint16_t>(n), static_cast<uint32_t>(dr * sizeof(T)),
                                      static_cast<uint32_t>((stride / d * dr - dr) * sizeof(T)),
                                      static_cast<uint32_t>(d * sizeof(T) / 32), 0},
                    no_pad);
      }
      SyncPipes<HardEvent::MTE2_MTE3>();
      DataCopy(dst[uint64_t{done} * w], buf_, n * w);
      SyncPipes<HardEvent::MTE3_MTE2>();  // the next rows reuse the buffer
    }
  }

 private:
  LocalTensor<T> buf_;
  uint32_t bufRows_ = 0;
};

// The rope tensor from element `off`, or the (empty) tensor itself without rope.
template <typename T>
__aicore__ inline GlobalTensor<T> RopeAt(bool has_rope, const GlobalTensor<T>& g, uint64_t off) {
  return has_rope ? g[off] : g;
}

// Where the key side of a query row comes from and where its chunk goes.
template <typename T>
struct SfaKeyChunkIo {
  GlobalTensor<T> key, keyRope, value;  // inputs (value = key when key is value)
  GlobalTensor<T> wsKf, wsV;            // this AIV's chunk workspace: [chunk, dk] and [chunk, d]
};

// Walks the visible keys of query row `row` (geometry r) in slot order, gathering cat(key,
// key_rope) and value rows into the chunk workspace, and calls chunk(n, index) for every full
// chunk of keyChunk keys and for the last partial one. Returns the number of chunks.
template <typename T, typename OnChunk>
__aicore__ inline uint32_t GatherKeyChunks(const SfaTilingData& t, const SfaGeometry& geo, const SfaRow& r,
                                           uint32_t row, const GlobalTensor<int32_t>& indices, RowGather<T>& gather,
                                           const SfaKeyChunkIo<T>& io, OnChunk&& chunk) {
  uint32_t chunks = 0;
  uint32_t filled = 0;
  const uint64_t slots = uint64_t{row} * t.k;
  const uint64_t key_stride = uint64_t{t.n2} * t.d;
  for (uint32_t slot = 0; slot < t.k; ++slot) {
    uint32_t key = 0;
    uint32_t end = 0;
    if (!geo.BlockKeys(indices.GetValue(slots + slot), r, &key, &end)) continue;
    while (key < end) {
      const uint32_t take = end - key < t.keyChunk - filled ? end - key : t.keyChunk - filled;
      const uint64_t k_row = (r.kv0 + key) * t.n2 + r.g;
      gather.Copy(io.wsKf[uint64_t{filled} * t.dk], io.key[k_row * t.d], RopeAt(t.hasRope != 0, io.keyRope, k_row * t.dr),
                  key_stride, take, t.d, t.dr);
      gather.Copy(io.wsV[uint64_t{filled} * t.d], io.value[k_row * t.d], io.value, key_stride, take, t.d, 0);
      filled += take;
      key += take;
      if (filled == t.keyChunk) {
        chunk(filled, chunks++);
        filled = 0;
      }
    }
  }
  if (filled > 0) chunk(filled, chunks++);
  return chunks;
}

// The UB buffers of one AIV, allocated exactly as PlanSfaUb counts them.
struct SfaUb {
  TBuf<TPosition::VECCALC> gather, score, aux, io[2], rowF[2], rowH[2], stat[SfaUbPlan::kStats], red, work, sink;

  __aicore__ inline void Init(TPipe& pipe, const SfaUbPlan& p) {
    pipe.InitBuffer(gather, p.gatherBytes);
    pipe.InitBuffer(score, p.scoreBytes);
    if (p.auxBytes > 0) pipe.InitBuffer(aux, p.auxBytes);
    for (uint32_t i = 0; i < p.ioCount; ++i) pipe.InitBuffer(io[i], p.ioBytes);
    for (uint32_t i = 0; i < p.rowCount; ++i) {
      pipe.InitBuffer(rowF[i], p.rowFBytes);
      pipe.InitBuffer(rowH[i], p.rowHBytes);
    }
    for (auto& s : stat) pipe.InitBuffer(s, p.statBytes);
    pipe.InitBuffer(red, SfaUbPlan::kRedBytes);
    pipe.InitBuffer(work, p.workBytes);
    if (p.sinkBytes > 0) pipe.InitBuffer(sink, p.sinkBytes);
  }
};

// Loads `rows` rows of `cols` float32 (GM row pitch `cols`) into UB rows of pitch
// AlignUp(cols, 8), ready for vector ops.
__aicore__ inline void LoadRowsF32(const LocalTensor<float>& dst, const GlobalTensor<float>& src, uint32_t rows,
                                   uint32_t cols) {
  const DataCopyPadExtParams<float> no_pad{false, 0, 0, 0.0f};
  DataCopyPad(dst, src, DataCopyExtParams{static_cast<uint16_t>(rows), static_cast<uint32_t>(cols * 4), 0, 0, 0},
              no_pad);
  SyncPipes<HardEvent::MTE2_V>();
}

// Stores `rows` rows of `cols` 16-bit values (UB pitch AlignUp(cols, 16)) densely into GM.
template <typename T>
__aicore__ inline void StoreRows16(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t rows,
                                   uint32_t cols) {
  SyncPipes<HardEvent::V_MTE3>();
  DataCopyPad(dst, src,
              DataCopyExtParams{static_cast<uint16_t>(rows), static_cast<uint32_t>(cols * sizeof(T)), 0, 0, 0});
  SyncPipes<HardEvent::MTE3_V>();  // the buffer is refilled by the next tile
}

// Writes `count` float32 from UB to GM (any count: DataCopyPad), synced both ways.
__aicore__ inline void StoreF32(const GlobalTensor<float>& dst, const LocalTensor<float>& src, uint32_t count) {
  SyncPipes<HardEvent::V_MTE3>();
  DataCopyPad(dst, src, DataCopyExtParams{1, static_cast<uint32_t>(count * 4), 0, 0, 0});
  SyncPipes<HardEvent::MTE3_V>();
}

}  // namespace mgo::kernel
