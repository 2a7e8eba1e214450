// Kernel pieces sparse_flash_mla and sparse_flash_mla_grad share (mixed kernels; include after
// "kernel_operator.h" and "lib/matmul_intf.h"): the length tensors as SmlaRowOf reads them (SmlaLensGm), a query
// row's keys as runs of consecutive source rows (ForEachSmlaKeyRun: the band as ONE run, never 128 slots; index
// entries one run each, in slot order; the original tokens first, then the compressed entries), and the gather
// of those keys into chunks of a per-AIV workspace (GatherSmlaChunks), which is both K and V (shared KV).
//
// Visibility (docs/contract.md section 8): an ori index entry is a key iff it lies in the row's band
// [oriLo, oriHi); a cmp entry iff it lies in [0, cmpLimit). -1, any other negative value and any value outside
// are skipped unread (the kernel never reads outside an input whatever the indices hold); an entry given twice
// is two keys.
#pragma once

#include <cstdint>

#include "kernel_helpers.h"
#include "smla_tiling_common.h"

namespace mgo::kernel {

using namespace AscendC;
using mgo::tiling::SmlaGeo;
using mgo::tiling::SmlaLen;
using mgo::tiling::SmlaRow;

// The length inputs in GM (int32), read by SmlaRowOf / SmlaBatchOf through Get. lens[i] is the i-th length
// input in SmlaLen order (null when absent).
class SmlaLensGm {
 public:
  __aicore__ inline void Init(const SmlaGeo& g, GM_ADDR const* lens) {
    for (uint32_t i = 0; i < static_cast<uint32_t>(SmlaLen::kCount); ++i) {
      if ((g.lenMask & (1u << i)) == 0) continue;
      const uint32_t n = i <= static_cast<uint32_t>(SmlaLen::kCuCmp) ? g.batch + 1 : g.batch;
      t_[i].SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(lens[i]), n);
    }
  }
  __aicore__ inline int64_t Get(SmlaLen l, uint32_t i) const { return t_[static_cast<uint32_t>(l)].GetValue(i); }

 private:
  GlobalTensor<int32_t> t_[static_cast<uint32_t>(SmlaLen::kCount)];
};

enum class SmlaSource : uint32_t { kOri = 0, kCmp = 1 };

// `count` consecutive rows of one source from global row `row0` (ori_kv / cmp_kv token rows; the key group's
// head is the caller's), and the index slot it came from (-1: the band or every visible compressed entry).
struct SmlaKeyRun {
  SmlaSource source;
  uint64_t row0;
  uint32_t count;
  int32_t slot;
};

// The index inputs of a launch (a tensor is unused when its geometry says absent: kOri / kCmp = 0).
struct SmlaIndices {
  GlobalTensor<int32_t> ori, cmp;
};

// Calls visit(run) for every key run of query row r (not padding) in key order.
template <typename Visit>
__aicore__ inline void ForEachSmlaKeyRun(const SmlaGeo& g, const SmlaRow& r, const SmlaIndices& idx, Visit&& visit) {
  const uint64_t slots_row = uint64_t{r.t} * g.n2 + r.grp;
  if (g.kOri == 0) {
    if (r.oriHi > r.oriLo) {
      visit(SmlaKeyRun{SmlaSource::kOri, r.batch.ori0 + static_cast<uint64_t>(r.oriLo),
                       static_cast<uint32_t>(r.oriHi - r.oriLo), -1});
    }
  } else {
    for (uint32_t s = 0; s < g.kOri; ++s) {
      const int32_t v = idx.ori.GetValue(slots_row * g.kOri + s);
      if (v >= r.oriLo && v < r.oriHi) {
        visit(SmlaKeyRun{SmlaSource::kOri, r.batch.ori0 + static_cast<uint64_t>(v), 1, static_cast<int32_t>(s)});
      }
    }
  }
  if (r.cmpLimit <= 0) return;
  if (g.kCmp == 0) {
    visit(SmlaKeyRun{SmlaSource::kCmp, r.batch.cmp0, static_cast<uint32_t>(r.cmpLimit), -1});
    return;
  }
  for (uint32_t s = 0; s < g.kCmp; ++s) {
    const int32_t v = idx.cmp.GetValue(slots_row * g.kCmp + s);
    if (v >= 0 && v < r.cmpLimit) {
      visit(SmlaKeyRun{SmlaSource::kCmp, r.batch.cmp0 + static_cast<uint64_t>(v), 1, static_cast<int32_t>(s)});
    }
  }
}

// The key count of query row r (0 for padding): how many keys ForEachSmlaKeyRun yields.
__aicore__ inline uint32_t CountSmlaKeys(const SmlaGeo& g, const SmlaRow& r, const SmlaIndices& idx) {
  if (r.padding) return 0;
  uint32_t n = 0;
  ForEachSmlaKeyRun(g, r, idx, [&n](const SmlaKeyRun& run) { n += run.count; });
  return n;
}

// The sources a row's keys are gathered from: ori_kv and cmp_kv ([rows, N2, D]).
template <typename T>
struct SmlaKv {
  GlobalTensor<T> ori, cmp;
};

// Gathers key rows (D wide, one key group) through a UB buffer of `bufRows` rows into consecutive rows of a
// workspace chunk: rows are loaded (GM -> UB, strided by N2 * D) until the buffer is full, then written out in
// one copy (UB -> GM), with the MTE2 -> MTE3 and MTE3 -> MTE2 syncs a device needs.
template <typename T>
class SmlaKeyGather {
 public:
  __aicore__ inline void Init(const LocalTensor<T>& buf, uint32_t buf_rows, const SmlaGeo& g, const SmlaKv<T>& kv) {
    buf_ = buf;
    bufRows_ = buf_rows;
    d_ = g.d;
    n2_ = g.n2;
    kv_ = kv;
  }

  // Starts a chunk written to `dst` ([chunk rows, D]).
  __aicore__ inline void Begin(const GlobalTensor<T>& dst) {
    dst_ = dst;
    written_ = 0;
    pending_ = 0;
  }

  // Appends rows [first, first + n) of `run` (group grp) after the rows appended so far.
  __aicore__ inline void Append(const SmlaKeyRun& run, uint32_t first, uint32_t n, uint32_t grp) {
    const GlobalTensor<T>& src = run.source == SmlaSource::kOri ? kv_.ori : kv_.cmp;
    const uint64_t stride = uint64_t{n2_} * d_;
    uint64_t row = run.row0 + first;
    while (n > 0) {
      if (pending_ == bufRows_) Flush();
      const uint32_t take = n < bufRows_ - pending_ ? n : bufRows_ - pending_;
      const DataCopyPadExtParams<T> no_pad{false, 0, 0, T(0.0f)};
      DataCopyPad(buf_[pending_ * d_], src[(row * n2_ + grp) * d_],
                  DataCopyExtParams{static_cast<uint16_t>(take), static_cast<uint32_t>(d_ * sizeof(T)),
                                    static_cast<uint32_t>((stride - d_) * sizeof(T)), 0, 0},
                  no_pad);
      pending_ += take;
      row += take;
      n -= take;
    }
  }

  // Writes the buffered rows out; the chunk is complete in GM after it.
  __aicore__ inline void Flush() {
    if (pending_ == 0) return;
    SyncPipes<HardEvent::MTE2_MTE3>();
    DataCopy(dst_[uint64_t{written_} * d_], buf_, pending_ * d_);
    SyncPipes<HardEvent::MTE3_MTE2>();  // the next rows reuse the buffer
    written_ += pending_;
    pending_ = 0;
  }

 private:
  LocalTensor<T> buf_;
  uint32_t bufRows_ = 0, d_ = 0, n2_ = 0, written_ = 0, pending_ = 0;
  SmlaKv<T> kv_;
  GlobalTensor<T> dst_;
};

// Walks the keys of query row r (not padding) in key order, gathering them into chunks of at most `chunk` rows
// at `dst` ([chunk, D], both K and V), and calls
//   place(run, first, n, pos)  for every piece of a run put into the current chunk: rows [first, first + n) of
//                              the run at chunk rows [pos, pos + n) (the grad's slot bookkeeping; may do nothing)
//   onChunk(n, index)          for every full chunk and the last partial one, once its rows are in GM.
// Returns the number of chunks (0: the row has no key).
template <typename T, typename Place, typename OnChunk>
__aicore__ inline uint32_t GatherSmlaChunks(const SmlaGeo& g, const SmlaRow& r, const SmlaIndices& idx,
                                            SmlaKeyGather<T>& gather, const GlobalTensor<T>& dst, uint32_t chunk,
                                            Place&& place, OnChunk&& onChunk) {
  uint32_t chunks = 0;
  uint32_t filled = 0;
  gather.Begin(dst);
  ForEachSmlaKeyRun(g, r, idx, [&](const SmlaKeyRun& run) {
    uint32_t first = 0;
    while (first < run.count) {
      const uint32_t take = run.count - first < chunk - filled ? run.count - first : chunk - filled;
      gather.Append(run, first, take, r.grp);
      place(run, first, take, filled);
      filled += take;
      first += take;
      if (filled == chunk) {
        gather.Flush();
        onChunk(filled, chunks++);
        filled = 0;
        gather.Begin(dst);
      }
    }
  });
  if (filled > 0) {
    gather.Flush();
    onChunk(filled, chunks++);
  }
  return chunks;
}

}  // namespace mgo::kernel
