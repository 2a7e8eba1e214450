// CPU AOT kernel of `sparse_flash_attention` (docs/contract.md section 3, forward): out, softmax_max, softmax_sum.
//
// Per group of query rows of one key group (sparse_flash_attention_groups.h): gather the union of
// their visible selected keys into a tile (blocks of kBlock), S = scale * Q Kf^T and O += P V on the
// GEMM wrapper with the rows' G heads stacked (M = rows * G), online softmax across blocks. Never
// forms a [T, K, D] gather or a [T, S2] score matrix. Groups depend on the indices only and are
// independent, so any schedule is deterministic. Absent optional inputs are zero-size placeholders: value (key is value), the
// rope pair, the lengths, sinks (a sink starts each row's online softmax: max sigma, sum 1).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "op_kernels.h"
#include "sparse_flash_attention_common.h"
#include "sparse_flash_attention_groups.h"

namespace mgo::cpu::sfa {
namespace {

constexpr const char* kOp = table::SparseFlashAttention::kName;

using Sfa = table::SparseFlashAttention;
using OutParam = Sfa::OutParam;
constexpr Slots kSlots = slots_of<Sfa>();

// One thread's tiles and the work of one row group (sparse_flash_attention_groups.h).
template <typename T, typename Op>
class Forward {
 public:
  Forward(const aot::KernelArgs& args, const Problem& p, const Inputs<T>& in, const std::vector<int64_t>& counts,
          int64_t max_rows)
      : p_(p),
        in_(in),
        counts_(counts),
        out_(args.as<T>(OutParam::kOut)),
        smax_(args.as<float>(OutParam::kSoftmaxMax)),
        ssum_(args.as<float>(OutParam::kSoftmaxSum)),
        qt_(max_rows * p.g * p.dq),
        keys_(p, in.v_in_k),
        pt_(std::is_same_v<Op, float> ? 0 : max_rows * p.g * kBlock),
        sc_(max_rows * p.g * kBlock),
        acc_(max_rows * p.g * p.dv),
        m_(max_rows * p.g),
        l_(max_rows * p.g) {}

  // out, softmax_max and softmax_sum of the group's rows.
  void run(const RowGroup& rg) {
    const int64_t g = p_.g;
    const int64_t rows = rg.rows;
    const int64_t mrows = rows * g;
    if (counts_[rg.t0 * p_.n2 + rg.grp] == 0) {  // nothing visible (such rows are never grouped):
      // out 0; softmax_max and softmax_sum 0, or the sink's sigma and 1 unless it is a BSND padding
      // row (docs/contract.md section 0.6)
      std::fill(acc_.begin(), acc_.begin() + g * p_.dv, 0.0f);
      const bool padding = p_.row_batch[rg.t0] < 0;
      for (int64_t h = 0; h < g; ++h) {
        const float sigma = in_.sink(rg.grp * g + h);
        const bool sink = !padding && sigma != -std::numeric_limits<float>::infinity();
        m_[h] = sink ? sigma : 0.0f;
        l_[h] = sink ? 1.0f : 0.0f;
      }
      write(rg);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      gather_heads(p_, in_.query, in_.query_rope, rg.t0 + r, rg.grp, qt_.data() + r * g * p_.dq);
    }
    if (rows > 1 && !all_finite(qt_.data(), mrows * p_.dq)) {  // 0 * Inf would leak into the other rows
      for (int64_t r = 0; r < rows; ++r) run({rg.t0 + r, 1, rg.grp});
      return;
    }
    key_union(p_, in_.indices, rg, scratch_, u_);
    const int64_t n = static_cast<int64_t>(u_.keys.size());
    std::fill(acc_.begin(), acc_.begin() + mrows * p_.dv, 0.0f);
    // The online softmax starts from the sink (a key of logit sigma and value 0): max sigma, sum
    // exp(0) = 1; with no sink (or sigma = -inf) from max -inf, sum 0.
    for (int64_t i = 0; i < mrows; ++i) {
      const float sigma = in_.sink(rg.grp * g + i % g);
      m_[i] = sigma;
      l_[i] = sigma == -std::numeric_limits<float>::infinity() ? 0.0f : 1.0f;
    }
    for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
      const int64_t nc = std::min(kBlock, n - c0);
      const int64_t ncp = round_up(nc, kKeyPad);
      // S [M, ncp], M = rows * G
      keys_.gather_and_score(p_, in_, u_.keys.data() + c0, nc, ncp, rg.grp, qt_.data(), mrows, sc_.data());
      for (int64_t i = 0; i < mrows; ++i) {
        const float* w = u_.weighted ? u_.weight.data() + (i / g) * n + c0 : nullptr;
        float* srow = sc_.data() + i * ncp;
        const float m_new = max_keep_nan(row_max(srow, nc, w), m_[i]);  // a NaN score makes the row's max NaN
        if (w != nullptr && m_new == -std::numeric_limits<float>::infinity()) {
          // None of this row's keys seen yet (it shares the block with other rows): nothing to add.
          std::fill(srow, srow + ncp, 0.0f);
          continue;
        }
        if (c0 > 0 || l_[i] != 0.0f) {  // something (an earlier block, the sink) is in m and l already
          const float alpha = std::exp(m_[i] - m_new);
          l_[i] *= alpha;
          scale_row(acc_.data() + i * p_.dv, p_.dv, alpha);
        }
        l_[i] += exp_shift_sum(srow, nc, ncp, m_new, w);
        m_[i] = m_new;
      }
      // acc [M, dv] += P [M, ncp] . V [ncp, dv]   (bf16: P rounded to bf16, as the cube does)
      const Op* ptile = nullptr;
      if constexpr (std::is_same_v<Op, float>) {
        ptile = sc_.data();
      } else {
        from_float(sc_.data(), pt_.data(), mrows * ncp);
        ptile = pt_.data();
      }
      mm(gemm::Trans::kNo, gemm::Trans::kNo, mrows, p_.dv, ncp, 1.0f, ptile, ncp, keys_.v(), keys_.ldv(p_), 1.0f,
         acc_.data(), p_.dv);
    }
    for (int64_t i = 0; i < mrows; ++i) scale_row(acc_.data() + i * p_.dv, p_.dv, 1.0f / l_[i]);
    write(rg);
  }

 private:
  // Stores acc (normalised), m and l of the group's rows.
  void write(const RowGroup& rg) {
    const int64_t g = p_.g;
    for (int64_t r = 0; r < rg.rows; ++r) {
      const int64_t t = rg.t0 + r;
      const int64_t so = p_.stats_offset(t, rg.grp);
      store(acc_.data() + r * g * p_.dv, out_ + (t * p_.n1 + rg.grp * g) * p_.dv, g * p_.dv);
      std::copy_n(m_.data() + r * g, g, smax_ + so);
      std::copy_n(l_.data() + r * g, g, ssum_ + so);
    }
  }

  const Problem& p_;
  const Inputs<T>& in_;
  const std::vector<int64_t>& counts_;
  T* out_;
  float *smax_, *ssum_;
  std::vector<Op> qt_;
  KeyTiles<Op> keys_;
  std::vector<Op> pt_;
  std::vector<float> sc_, acc_, m_, l_;
  std::vector<int32_t> scratch_;
  KeyUnion u_;
};

template <typename T, typename Op>
void forward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts) {
  const Inputs<T> in(args, p, kSlots);
  const int64_t max_rows = max_group_rows(p.g);
  const std::vector<RowGroup> groups = group_rows(p, in.indices, counts, finite_key_rows(p, in), 0, p.t1, max_rows);
  const int64_t n_groups = static_cast<int64_t>(groups.size());
  bool failed = false;
  std::string error;
#pragma omp parallel
  {
    Forward<T, Op> worker(args, p, in, counts, max_rows);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_groups; ++i) {
      try {
        worker.run(groups[i]);
      } catch (const std::exception& e) {
#pragma omp critical(sfa_forward_error)
        {
          failed = true;
          error = e.what();
        }
      }
    }
  }
  if (failed) throw std::runtime_error(std::string(kOp) + ": " + error);
}

void run(const aot::KernelArgs& args, const table::SparseFlashAttention::Attrs& attrs) {
  const Problem p = make_problem(kOp, args, attrs, kSlots);
  const std::vector<int64_t> counts = validate_indices(kOp, p, args.as<const int32_t>(kSlots.idx));
  dispatch_float(args.dtype(kSlots.q), [&](auto tag) {
    return with_operand<decltype(tag)>([&](auto, auto op) {
      forward<decltype(tag), decltype(op)>(args, p, counts);
      return 0;
    });
  });
}

}  // namespace
}  // namespace mgo::cpu::sfa

void mgo::cpu::kernels::sparse_flash_attention(const aot::KernelArgs& args,
                                               const table::SparseFlashAttention::Attrs& attrs) {
  sfa::run(args, attrs);
}
