// LightningIndexer as a mixed kernel (docs/contract.md section 4.1): per query token, the scores of its visible keys
// I_j = sum_g w_g relu(q_index[g] . k_index[j]) and the top-`sparse_count` keys by descending
// score, ties to the lower index, -1 / -inf in unused slots (as the CPU kernel).
//
// The visible keys of a token are a prefix [0, n) of its batch's keys (also over compressed keys:
// cmp_ratio and cmp_residual_k, docs/contract.md section 9.1, change only n), so the cube reads the
// key_index rows in place: per chunk of keyChunk keys Sx = q_index Kiᵀ (AIC, float32). The AIV
// forms I (float32, heads in ascending order), Sort32 orders each group of 32 keys (descending,
// equal scores by position, i.e. by key index), and a scalar merge folds the sorted groups into
// the running top-k list with the explicit rule (higher score first, then lower index), so the
// selection never depends on an undocumented tie order. A NaN score ranks below every number (as
// the CPU kernel): Sort32 documents no order for NaN, so it sorts as -inf with kNanFlag set in its
// index, and the slot gets its NaN value back when the row is written.
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_kernel_common.h"
#include "../lightning_indexer_tiling.h"

namespace mgo::kernel {

using mgo::tiling::LiTilingData;

struct LiIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query_index;
  GM_ADDR key_index;
  GM_ADDR weights;
  GM_ADDR lens_q;
  GM_ADDR lens_k;
  GM_ADDR cmp_residual_k;
  GM_ADDR sparse_indices;
  GM_ADDR sparse_values;
  GM_ADDR workspace;
};

template <typename T, typename W>
class LightningIndexerKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;
  static constexpr bool kWeightsF32 = std::is_same_v<W, float>;
  // Set in a key's index (bit 31; key indices are < 2^31) while its NaN score sorts as -inf.
  static constexpr uint32_t kNanFlag = 0x80000000u;
  __aicore__ static inline int32_t KeyOf(int32_t i) { return static_cast<int32_t>(static_cast<uint32_t>(i) & ~kNanFlag); }

 public:
  __aicore__ inline void Run(const LiIo& io, const LiTilingData& t) {
    t_ = t;
    const TCubeTiling sx = ToCubeTiling(t.mmSx);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mm_, &sx);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(io);
    geo_.Init(IndexerGeometry(t.layout, t.sparseMode, t.batch, t.s1, t.s2, t.t1, t.t2, 1), io.lens_q, io.lens_k);
    geo_.InitCmp(static_cast<uint32_t>(t.attrs.cmp_ratio), t.cmpResidual != 0 ? io.cmp_residual_k : nullptr);
    InitUb();
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) Row(row);
    mm_.End();
  }

 private:
  __aicore__ inline void InitGm(const LiIo& io) {
    qiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_index), uint64_t{t_.t1} * t_.nIdx * t_.dIdx);
    kiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_index), uint64_t{t_.t2} * t_.dIdx);
    wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.weights), uint64_t{t_.t1} * t_.nIdx);
    idxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(io.sparse_indices), uint64_t{t_.t1} * t_.k);
    valGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.sparse_values), uint64_t{t_.t1} * t_.k);
    GM_ADDR ws = GetUserWorkspace(io.workspace) + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    wsSx_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSx), uint64_t{t_.nIdx} * t_.keyChunk);
  }

  __aicore__ inline void InitUb() {
    const mgo::tiling::LiUbPlan p = mgo::tiling::PlanLiUb(t_, kWeightsF32);
    for (auto& b : chunk_) pipe_.InitBuffer(b, p.chunkBytes);
    pipe_.InitBuffer(index_, p.indexBytes);
    pipe_.InitBuffer(sorted_, p.sortedBytes);
    for (auto& b : top_) pipe_.InitBuffer(b, p.topBytes);
    pipe_.InitBuffer(wRaw_, p.wRawBytes);
    pipe_.InitBuffer(w_, p.wBytes);
  }

  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Chunk(uint32_t i) { return chunk_[i].template Get<float>(); }

  // Top-k list `which` (0 or 1): values and indices.
  __aicore__ inline LocalTensor<float> TopV(uint32_t which) { return top_[2 * which].template Get<float>(); }
  __aicore__ inline LocalTensor<int32_t> TopI(uint32_t which) {
    return top_[2 * which + 1].template Get<int32_t>();
  }

  __aicore__ inline void LoadWeights(uint64_t t) {
    LoadWeightsF32(wRaw_.template Get<W>(), wGm_[t * t_.nIdx], w_.template Get<float>(), t_.nIdx);
  }

  __aicore__ inline void Row(uint32_t t) {
    const SfaRow r = geo_.Row(t);
    // Visible keys: the batch-local prefix [0, n) (the causal limit may lie before key 0).
    const uint32_t n = r.limit < 0 ? 0 : static_cast<uint32_t>(r.limit + 1);
    LoadWeights(t);
    uint32_t cur = 0;
    uint32_t count = 0;
    for (uint32_t c0 = 0; c0 < n; c0 += t_.keyChunk) {
      const uint32_t cols = n - c0 < t_.keyChunk ? n - c0 : t_.keyChunk;
      Scores(t, r.kv0 + c0, cols);
      const uint32_t groups = (cols + mgo::tiling::kLiSortGroup - 1) / mgo::tiling::kLiSortGroup;
      const LocalTensor<float> score = Chunk(0);
      const LocalTensor<uint32_t> index = index_.template Get<uint32_t>();
      SyncPipes<HardEvent::V_S>();
      for (uint32_t j = 0; j < groups * mgo::tiling::kLiSortGroup; ++j) {
        const float v = j < cols ? score.GetValue(j) : 0.0f;
        const bool nan = j < cols && v != v;
        // padding sorts after every finite score; a NaN score as -inf, flagged
        if (j >= cols || nan) score.SetValue(j, -__builtin_huge_valf());
        index.SetValue(j, nan ? (c0 + j) | kNanFlag : c0 + j);
      }
      SyncPipes<HardEvent::S_V>();
      Sort32(sorted_.template Get<float>(), score, index, static_cast<int32_t>(groups));
      SyncPipes<HardEvent::V_S>();
      count = Merge(cur, count, cols, groups);
      cur ^= 1u;
    }
    WriteRow(t, cur, count);
  }

  // I over keys [key0, key0 + cols) of the token into Chunk(0).
  __aicore__ inline void Scores(uint32_t t, uint64_t key0, uint32_t cols) {
    IndexScores(mm_, qiGm_[uint64_t{t} * t_.nIdx * t_.dIdx], kiGm_[key0 * t_.dIdx], wsSx_, t_.nIdx, t_.dIdx, cols,
                w_.template Get<float>(), Chunk(0), Chunk(1), Chunk(2));
  }

  // Merges list `cur` (count entries) with the chunk's `groups` sorted groups (cols valid keys)
  // into list cur ^ 1, keeping the best k: higher score first, then the lower index.
  __aicore__ inline uint32_t Merge(uint32_t cur, uint32_t count, uint32_t cols, uint32_t groups) {
    const LocalTensor<float> sorted = sorted_.template Get<float>();
    const LocalTensor<uint32_t> sorted_idx = sorted.template ReinterpretCast<uint32_t>();
    const LocalTensor<float> av = TopV(cur);
    const LocalTensor<int32_t> ai = TopI(cur);
    const LocalTensor<float> bv = TopV(cur ^ 1u);
    const LocalTensor<int32_t> bi = TopI(cur ^ 1u);
    uint32_t head[kMaxGroups] = {};
    uint32_t a = 0;
    uint32_t out = 0;
    while (out < t_.k) {
      // Best candidate: the current list's head or a group's head.
      bool found = a < count;
      float best_v = found ? av.GetValue(a) : 0.0f;
      int32_t best_i = found ? ai.GetValue(a) : 0;
      int32_t best_src = found ? -1 : -2;
      for (uint32_t g = 0; g < groups; ++g) {
        const uint32_t valid = cols - g * 32 < 32 ? cols - g * 32 : 32;
        if (head[g] >= valid) continue;
        const uint32_t at = 2 * (g * 32 + head[g]);
        const float v = sorted.GetValue(at);
        const auto i = static_cast<int32_t>(sorted_idx.GetValue(at + 1));
        if (!found || v > best_v || (v == best_v && KeyOf(i) < KeyOf(best_i))) {
          found = true;
          best_v = v;
          best_i = i;
          best_src = static_cast<int32_t>(g);
        }
      }
      if (!found) break;
      if (best_src == -1) {
        ++a;
      } else {
        ++head[best_src];
      }
      bv.SetValue(out, best_v);
      bi.SetValue(out, best_i);
      ++out;
    }
    return out;
  }

  // sparse_indices / sparse_values row t from list `cur` (count entries), -1 / -inf after.
  __aicore__ inline void WriteRow(uint32_t t, uint32_t cur, uint32_t count) {
    const LocalTensor<float> v = TopV(cur);
    const LocalTensor<int32_t> i = TopI(cur);
    for (uint32_t s = 0; s < count; ++s) {
      const int32_t key = i.GetValue(s);
      if (key == KeyOf(key)) continue;
      v.SetValue(s, __builtin_nanf(""));
      i.SetValue(s, KeyOf(key));
    }
    for (uint32_t s = count; s < t_.k; ++s) {
      v.SetValue(s, -__builtin_huge_valf());
      i.SetValue(s, -1);
    }
    SyncPipes<HardEvent::S_MTE3>();
    const DataCopyExtParams row{1, static_cast<uint32_t>(t_.k * 4), 0, 0, 0};
    DataCopyPad(idxGm_[uint64_t{t} * t_.k], i, row);
    DataCopyPad(valGm_[uint64_t{t} * t_.k], v, row);
    PipeBarrier<PIPE_ALL>();  // the next token's merge rewrites these lists (scalar after MTE3)
  }

  static constexpr uint32_t kMaxGroups = mgo::tiling::kLiMaxKeyChunk / mgo::tiling::kLiSortGroup;

  LiTilingData t_{};
  TPipe pipe_;
  Matmul<A, AT, C> mm_;
  SfaGeometry geo_;
  TBuf<TPosition::VECCALC> chunk_[mgo::tiling::LiUbPlan::kChunkBufs], index_, sorted_,
      top_[mgo::tiling::LiUbPlan::kTops], wRaw_, w_;
  GlobalTensor<T> qiGm_, kiGm_;
  GlobalTensor<W> wGm_;
  GlobalTensor<int32_t> idxGm_;
  GlobalTensor<float> valGm_, wsSx_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling. cmp_residual_k is
// read only where the tiling says it is given and cmp_ratio > 1 (at ratio 1 every residual is 0).
extern "C" __global__ __aicore__ void lightning_indexer(GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights,
                                                        GM_ADDR actual_seq_lengths_query,
                                                        GM_ADDR actual_seq_lengths_key, GM_ADDR cmp_residual_k,
                                                        GM_ADDR sparse_indices,
                                                        GM_ADDR sparse_values, GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::LightningIndexerTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::LiTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::LiIo io{query_index, key_index, weights, actual_seq_lengths_query, actual_seq_lengths_key,
                             cmp_residual_k, sparse_indices, sparse_values, workspace};
  if (TILING_KEY_IS(LightningIndexerTilingKey(DType::kFloat16, false))) {
    mgo::kernel::LightningIndexerKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(LightningIndexerTilingKey(DType::kFloat16, true))) {
    mgo::kernel::LightningIndexerKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(LightningIndexerTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::LightningIndexerKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(LightningIndexerTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::LightningIndexerKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
