// The RoPE-family kernel body shared by Rope (forward) and RopeGrad (ATB and VJP modes).
// Include after "kernel_operator.h".
//
// Rows are tokens, each `hidden` = 128 * heads wide. Each core owns a contiguous run of tokens
// (CoreRows) and walks it in tiles of tileRows tokens. Per tile it loads the cos/sin rows of
// the tile's token positions once, then streams the q tile and the k tile through the same
// double-buffered queues: copy in -> float32 compute -> copy out.
//
// With c = cos row, s = sin row of the token's position, lo/hi = first/second 64 of a head:
//   forward  y = x*c + swap(x)*P,  P = cat(-s_lo, s_hi)        (x*c + rotate_half(x)*s)
//   vjp     dx = g*c + swap(g)*P,  P = cat( s_hi, -s_lo)       (exact gradient of forward)
//   atb    out = g*W,              W = c + cat(s_hi, -s_lo)    (ATB RopeGrad, see docs/contract.md section 1)
// where swap(x) = cat(x_hi, x_lo).
//
// Token positions come from q_seq_len, an int32 GM tensor read by the scalar unit, so new
// lengths need no recompilation. Lengths are validated on the host; the kernel still never
// reads outside cos/sin: rows of a sequence longer than maxSeqLen, and tokens beyond the sum of
// the lengths, produce zeros.
#pragma once

#include <cstdint>

#include "kernel_helpers.h"
#include "rope_tiling_common.h"

namespace mgo::kernel {

using namespace AscendC;
using mgo::tiling::kRopeHeadDim;
using mgo::tiling::RopeTilingData;

enum class RopeVariant { kForward, kGradAtb, kGradVjp };

// Where the walk over packed tokens stands: sequence index and position inside it.
struct SeqCursor {
  uint32_t batch;
  uint32_t pos;
};

// A run of consecutive tokens of one sequence: cos/sin rows [pos, pos + len), or `len` tokens
// without a valid row (valid == false).
struct TokenRun {
  uint32_t pos;
  uint32_t len;
  bool valid;
};

template <typename T, RopeVariant V>
class RopeKernel {
 public:
  __aicore__ inline void Init(GM_ADDR x1, GM_ADDR x2, GM_ADDR cos, GM_ADDR sin, GM_ADDR seq_len, GM_ADDR y1,
                              GM_ADDR y2, const RopeTilingData& t) {
    t_ = t;
    range_ = mgo::tiling::CoreRows(t.rowsPerCore, t.rowsRemainder, static_cast<uint64_t>(GetBlockIdx()));
    const uint64_t h = t.hidden;
    xGm_[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x1) + range_.start * h, range_.count * h);
    xGm_[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x2) + range_.start * h, range_.count * h);
    yGm_[0].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y1) + range_.start * h, range_.count * h);
    yGm_[1].SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y2) + range_.start * h, range_.count * h);
    cosGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(cos), uint64_t{t.maxSeqLen} * kRopeHeadDim);
    sinGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(sin), uint64_t{t.maxSeqLen} * kRopeHeadDim);
    seqLenGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(seq_len), t.batch);

    const auto plan = mgo::tiling::PlanRopeUb(t.tileRows, t.hidden);
    constexpr uint8_t kDepth = mgo::tiling::RopeUbPlan::kQueueDepth;
    pipe_.InitBuffer(inQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(trigQue_, kDepth, plan.trigBytes);
    pipe_.InitBuffer(outQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(xF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(yF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(cosF_, plan.trigF32Bytes);
    pipe_.InitBuffer(sinF_, plan.trigF32Bytes);
    pipe_.InitBuffer(wF_, plan.trigF32Bytes);
    pipe_.InitBuffer(tmpF_, plan.tmpBytes);
  }

  __aicore__ inline void Process() {
    if (range_.count == 0) return;
    SeqCursor cursor = Skip(SeqCursor{0, 0}, range_.start);
    for (uint64_t done = 0; done < range_.count; done += t_.tileRows) {
      const uint64_t left = range_.count - done;
      const auto rows = static_cast<uint32_t>(left < t_.tileRows ? left : t_.tileRows);
      const SeqCursor tile_start = cursor;
      cursor = CopyInTrig(tile_start, rows);
      ComputeWeights(tile_start, rows);
      for (uint32_t which = 0; which < 2; ++which) {  // q, then k: same positions, same weights
        CopyIn(which, done, rows);
        Compute(rows);
        CopyOut(which, done, rows);
      }
    }
  }

 private:
  static constexpr uint32_t kHalf = kRopeHeadDim / 2;

  __aicore__ inline uint32_t SeqLen(uint32_t b) const {
    const int32_t len = seqLenGm_.GetValue(b);
    return len > 0 ? static_cast<uint32_t>(len) : 0u;
  }

  // The next run of at most `want` tokens from `c`, advancing `c` past it.
  __aicore__ inline TokenRun NextRun(SeqCursor& c, uint32_t want) const {
    while (c.batch < t_.batch && c.pos >= SeqLen(c.batch)) {
      ++c.batch;
      c.pos = 0;
    }
    if (c.batch >= t_.batch) return TokenRun{0, want, false};  // more tokens than the lengths sum to
    const uint32_t in_seq = SeqLen(c.batch) - c.pos;
    uint32_t len = want < in_seq ? want : in_seq;
    const bool valid = c.pos < t_.maxSeqLen;
    if (valid && t_.maxSeqLen - c.pos < len) len = t_.maxSeqLen - c.pos;  // stop at the table's end
    const TokenRun run{c.pos, len, valid};
    c.pos += len;
    return run;
  }

  __aicore__ inline SeqCursor Skip(SeqCursor c, uint64_t tokens) const {
    while (tokens > 0) {
      const uint32_t want = tokens < UINT32_MAX ? static_cast<uint32_t>(tokens) : UINT32_MAX;
      tokens -= NextRun(c, want).len;
    }
    return c;
  }

  // cos rows land at [0, rows*128), sin rows at [tileRows*128, ...) of one trig buffer.
  __aicore__ inline SeqCursor CopyInTrig(SeqCursor c, uint32_t rows) {
    LocalTensor<T> trig = trigQue_.template AllocTensor<T>();
    const uint32_t sin_base = t_.tileRows * kRopeHeadDim;
    for (uint32_t r = 0; r < rows;) {
      const TokenRun run = NextRun(c, rows - r);
      if (run.valid) {
        const uint64_t src = uint64_t{run.pos} * kRopeHeadDim;
        DataCopy(trig[r * kRopeHeadDim], cosGm_[src], run.len * kRopeHeadDim);
        DataCopy(trig[sin_base + r * kRopeHeadDim], sinGm_[src], run.len * kRopeHeadDim);
      }
      r += run.len;
    }
    trigQue_.EnQue(trig);
    return c;
  }

  // cosF/sinF in float32 (zero for rows without a valid position), then P (or W for ATB) in wF.
  __aicore__ inline void ComputeWeights(SeqCursor c, uint32_t rows) {
    const LocalTensor<float> cosF = cosF_.Get<float>();
    const LocalTensor<float> sinF = sinF_.Get<float>();
    const LocalTensor<float> w = wF_.Get<float>();
    LocalTensor<T> trig = trigQue_.template DeQue<T>();
    Cast(cosF, trig, RoundMode::CAST_NONE, rows * kRopeHeadDim);
    Cast(sinF, trig[t_.tileRows * kRopeHeadDim], RoundMode::CAST_NONE, rows * kRopeHeadDim);
    trigQue_.FreeTensor(trig);
    for (uint32_t r = 0; r < rows;) {  // the same walk as CopyInTrig, to find rows never loaded
      const TokenRun run = NextRun(c, rows - r);
      if (!run.valid) {
        Duplicate(cosF[r * kRopeHeadDim], 0.0f, run.len * kRopeHeadDim);
        Duplicate(sinF[r * kRopeHeadDim], 0.0f, run.len * kRopeHeadDim);
      }
      r += run.len;
    }
    // Signs and halves of P per variant (see the header comment).
    constexpr bool kForward = V == RopeVariant::kForward;
    constexpr float kSignLo = kForward ? -1.0f : 1.0f;
    constexpr float kSignHi = kForward ? 1.0f : -1.0f;
    constexpr uint32_t kSrcLo = kForward ? 0 : kHalf;  // P_lo takes s_lo (forward) or s_hi
    constexpr uint32_t kSrcHi = kForward ? kHalf : 0;
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t row = r * kRopeHeadDim;
      Muls(w[row], sinF[row + kSrcLo], kSignLo, kHalf);
      Muls(w[row + kHalf], sinF[row + kSrcHi], kSignHi, kHalf);
      if constexpr (V == RopeVariant::kGradAtb) {
        Add(w[row], cosF[row], w[row], kRopeHeadDim);
      }
    }
  }

  __aicore__ inline void CopyIn(uint32_t which, uint64_t done, uint32_t rows) {
    LocalTensor<T> x = inQue_.template AllocTensor<T>();
    DataCopy(x, xGm_[which][done * t_.hidden], rows * t_.hidden);
    inQue_.EnQue(x);
  }

  __aicore__ inline void Compute(uint32_t rows) {
    const LocalTensor<float> xF = xF_.Get<float>();
    const LocalTensor<float> yF = yF_.Get<float>();
    const LocalTensor<float> cosF = cosF_.Get<float>();
    const LocalTensor<float> w = wF_.Get<float>();
    const LocalTensor<float> tmp = tmpF_.Get<float>();
    const uint32_t n = rows * t_.hidden;
    LocalTensor<T> x = inQue_.template DeQue<T>();
    Cast(xF, x, RoundMode::CAST_NONE, n);
    inQue_.FreeTensor(x);
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t trig_row = r * kRopeHeadDim;
      for (uint32_t head = 0; head < t_.headNum; ++head) {
        const uint32_t at = r * t_.hidden + head * kRopeHeadDim;
        if constexpr (V == RopeVariant::kGradAtb) {
          Mul(yF[at], xF[at], w[trig_row], kRopeHeadDim);
        } else {
          Mul(yF[at], xF[at], cosF[trig_row], kRopeHeadDim);
          Mul(tmp, xF[at + kHalf], w[trig_row], kHalf);             // swap(x)_lo * P_lo
          Mul(tmp[kHalf], xF[at], w[trig_row + kHalf], kHalf);     // swap(x)_hi * P_hi
          Add(yF[at], yF[at], tmp, kRopeHeadDim);
        }
      }
    }
    LocalTensor<T> y = outQue_.template AllocTensor<T>();
    Cast(y, yF, RoundMode::CAST_RINT, n);
    outQue_.EnQue(y);
  }

  __aicore__ inline void CopyOut(uint32_t which, uint64_t done, uint32_t rows) {
    LocalTensor<T> y = outQue_.template DeQue<T>();
    DataCopy(yGm_[which][done * t_.hidden], y, rows * t_.hidden);
    outQue_.FreeTensor(y);
  }

  RopeTilingData t_{};
  mgo::tiling::RowRange range_{};
  TPipe pipe_;
  TQue<QuePosition::VECIN, 2> inQue_, trigQue_;
  TQue<QuePosition::VECOUT, 2> outQue_;
  TBuf<TPosition::VECCALC> xF_, yF_, cosF_, sinF_, wF_, tmpF_;
  GlobalTensor<T> xGm_[2], yGm_[2], cosGm_, sinGm_;
  GlobalTensor<int32_t> seqLenGm_;
};

template <typename T, RopeVariant V>
__aicore__ inline void RunRope(GM_ADDR x1, GM_ADDR x2, GM_ADDR cos, GM_ADDR sin, GM_ADDR seq_len, GM_ADDR y1,
                               GM_ADDR y2, const RopeTilingData& t) {
  RopeKernel<T, V> op;
  op.Init(x1, x2, cos, sin, seq_len, y1, y2, t);
  op.Process();
}

}  // namespace mgo::kernel
