// CPU AOT kernel of `lightning_indexer` (docs/contract.md section 4.1): index scores over the visible keys of
// every query row and the top-`sparse_count` selection.
//
// Inputs: query_index, key_index, weights, actual_seq_lengths_query, actual_seq_lengths_key, cmp_residual_k
// (zero-size placeholders when None); compressed keys (cmp_ratio) only change each row's visible count. Outputs: sparse_indices int32 and sparse_values float32
// [T1, 1, K] / [B, S1, 1, K]; values are the float32 scores I (-inf in unused slots).
//
// Per row: I over the visible keys (IndexScorer, lightning_indexer_common.h); selection is
// nth_element + sort of integer rank keys: O(S2 + K log K) per row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>

#include "lightning_indexer_common.h"
#include "op_kernels.h"

namespace {

using Li = mgo::table::LightningIndexer;
using In = Li::In;
using OutParam = Li::OutParam;

// Rank key of (score, index): larger is better. Descending score with NaN ranked as -inf (below
// every number) and -0 equal to +0, ties to the lower index: the score's bits mapped to an
// unsigned order in the high half, the inverted index in the low half, so selection compares
// integers only.
inline uint64_t rank_key(float score, int64_t index) {
  const float s = std::isnan(score) ? -std::numeric_limits<float>::infinity() : score == 0.0f ? 0.0f : score;
  uint32_t u;
  std::memcpy(&u, &s, sizeof u);
  const uint32_t ordered = (u & 0x80000000u) ? ~u : u | 0x80000000u;
  return (uint64_t{ordered} << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}

inline int32_t key_index(uint64_t key) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key)); }

// The min(k, n) best of scores[0, n) in rank order into `keys`: O(n + k log k).
void select_top_k(const float* scores, int64_t n, int64_t k, std::vector<uint64_t>& keys) {
  keys.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) keys[j] = rank_key(scores[j], j);
  const auto top = keys.begin() + std::min(k, n);
  if (top != keys.end()) std::nth_element(keys.begin(), top, keys.end(), std::greater<>());
  std::sort(keys.begin(), top, std::greater<>());
  keys.resize(static_cast<size_t>(top - keys.begin()));
}

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const mgo::cpu::RowPlan& plan, bool bsnd, int64_t k) {
  using Scorer = mgo::cpu::IndexScorer<X, Op, W>;
  const int r = bsnd ? 4 : 3;
  const int64_t t1 = mgo::cpu::token_count(args, In::kQueryIndex, bsnd);
  const int64_t t2 = mgo::cpu::token_count(args, In::kKeyIndex, bsnd);
  const int64_t nidx = args.dim(In::kQueryIndex, r - 2);
  const int64_t didx = args.dim(In::kQueryIndex, r - 1);
  const X* qi = args.as<const X>(In::kQueryIndex);
  const W* weights = args.as<const W>(In::kWeights);
  int32_t* out_idx = args.as<int32_t>(OutParam::kSparseIndices);
  float* out_val = args.as<float>(OutParam::kSparseValues);
  std::vector<Op> ki_conv;
  const Op* ki = Scorer::keys(args, In::kKeyIndex, t2 * didx, ki_conv);

  mgo::cpu::ParallelError error;
#pragma omp parallel
  {
    Scorer scorer(nidx, didx);
    std::vector<float> scores;
    std::vector<uint64_t> top;
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < t1; ++t) {
      error.guard([&] {
      const int64_t n = plan.limit[t];
      const Op* keys = ki + plan.key_base[t] * didx;
      scorer.load_row(qi + t * nidx * didx, weights + t * nidx);
      scores.resize(static_cast<size_t>(n));
      for (int64_t c0 = 0; c0 < n; c0 += Scorer::kBlock) {
        scorer.block(keys + c0 * didx, std::min(Scorer::kBlock, n - c0), scores.data() + c0);
      }
      select_top_k(scores.data(), n, k, top);
      int32_t* oi = out_idx + t * k;
      float* ov = out_val + t * k;
      for (int64_t s = 0; s < k; ++s) {
        const bool used = s < static_cast<int64_t>(top.size());
        oi[s] = used ? key_index(top[s]) : -1;
        ov[s] = used ? scores[oi[s]] : -std::numeric_limits<float>::infinity();
      }
      });
    }
  }
  error.rethrow(Li::kName);
}

}  // namespace

void mgo::cpu::kernels::lightning_indexer(const aot::KernelArgs& args, const table::LightningIndexer::Attrs& attrs) {
  const bool bsnd = attrs.layout == table::Layout::kBSND;
  const int64_t k = attrs.sparse_count;
  const RowPlan plan = plan_rows(Li::kName, args, bsnd, In::kQueryIndex, In::kKeyIndex, In::kActualSeqLengthsQuery,
                                 In::kActualSeqLengthsKey, attrs.sparse_mode,
                                 Compression{attrs.cmp_ratio, In::kCmpResidualK});
  dispatch_indexer(args, In::kQueryIndex, In::kWeights, [&](auto x, auto op, auto w) {
    run<decltype(x), decltype(op), decltype(w)>(args, plan, bsnd, k);
  });
}
