// CPU AOT kernel of `sparse_flash_mla` (docs/contract.md section 8, forward): attn_out and softmax_lse.
//
// Per (query row, key group): list the row's keys (the band or selected original tokens, then the visible or
// selected compressed entries, sparse_flash_mla_common.h), gather them block by block (kBlock keys) from their
// source into one tile that is both K and V (shared KV), S = scale * Q K^T and O += P V on the GEMM wrapper with
// the group's G heads stacked, an online softmax across blocks started from the sink (max sigma, sum 1). Never a
// concatenated KV, a [T, K, D] gather or a [T, S] score matrix. Rows are independent, so any schedule gives the
// same bits. softmax_lse = max + ln(sum), the sink included (CANN's convention).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "op_kernels.h"
#include "sparse_flash_attention_common.h"
#include "sparse_flash_mla_common.h"

namespace mgo::cpu::smla {
namespace {

constexpr const char* kOp = table::SparseFlashMla::kName;
using Fwd = table::SparseFlashMla;
constexpr Slots kSlots = slots_of<Fwd>();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <typename T, typename Op>
class Forward {
 public:
  Forward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts)
      : p_(p),
        counts_(counts),
        query_(args.as<const T>(kSlots.q)),
        ori_(args.as<const T>(kSlots.ori)),
        cmp_(p.has_cmp ? args.as<const T>(kSlots.cmp) : nullptr),
        ori_idx_(p.k_ori > 0 ? args.as<const int32_t>(kSlots.ori_idx) : nullptr),
        cmp_idx_(p.k_cmp > 0 ? args.as<const int32_t>(kSlots.cmp_idx) : nullptr),
        sinks_(args.numel(kSlots.sinks) > 0 ? args.as<const float>(kSlots.sinks) : nullptr),
        out_(args.as<T>(Fwd::OutParam::kAttnOut)),
        lse_(args.as<float>(Fwd::OutParam::kSoftmaxLse)),
        qt_(p.g * p.d),
        kt_(kBlock * p.d),
        pt_(std::is_same_v<Op, float> ? 0 : p.g * kBlock),
        sc_(p.g * kBlock),
        acc_(p.g * p.d),
        m_(p.g),
        l_(p.g) {}

  void run(int64_t t, int64_t grp) {
    const int64_t g = p_.g;
    std::fill(acc_.begin(), acc_.end(), 0.0f);
    const bool padding = p_.row_batch[t] < 0;
    for (int64_t h = 0; h < g; ++h) {  // the online softmax starts from the sink (a key of logit sigma, value 0)
      const float sigma = sink_of(sinks_, grp * g + h);
      m_[h] = sigma;
      l_[h] = sigma == kNegInf ? 0.0f : 1.0f;
    }
    if (!padding && counts_[t * p_.n2 + grp] > 0) {
      row_keys(p_, ori_idx_, cmp_idx_, t, grp, keys_);
      load_query(t, grp);
      const int64_t n = keys_.size();
      for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
        const int64_t nc = std::min(kBlock, n - c0);
        const int64_t ncp = round_up(nc, kKeyPad);
        gather(p_, ori_, cmp_, keys_.rows.data() + c0, nc, ncp, grp, kt_.data());
        mm(gemm::Trans::kNo, gemm::Trans::kYes, g, ncp, p_.d, p_.scale, qt_.data(), p_.d, kt_.data(), p_.d, 0.0f,
           sc_.data(), ncp);
        for (int64_t h = 0; h < g; ++h) {
          float* srow = sc_.data() + h * ncp;
          const float m_new = sfa::max_keep_nan(sfa::row_max(srow, nc), m_[h]);
          if (c0 > 0 || l_[h] != 0.0f) {  // an earlier block or the sink is in m and l already
            const float alpha = std::exp(m_[h] - m_new);
            l_[h] *= alpha;
            sfa::scale_row(acc_.data() + h * p_.d, p_.d, alpha);
          }
          l_[h] += sfa::exp_shift_sum(srow, nc, ncp, m_new);
          m_[h] = m_new;
        }
        const Op* ptile = nullptr;  // bf16 operands: P rounded to bf16, as the cube does
        if constexpr (std::is_same_v<Op, float>) {
          ptile = sc_.data();
        } else {
          from_float(sc_.data(), pt_.data(), g * ncp);
          ptile = pt_.data();
        }
        mm(gemm::Trans::kNo, gemm::Trans::kNo, g, p_.d, ncp, 1.0f, ptile, ncp, kt_.data(), p_.d, 1.0f, acc_.data(),
           p_.d);
      }
      for (int64_t h = 0; h < g; ++h) sfa::scale_row(acc_.data() + h * p_.d, p_.d, 1.0f / l_[h]);
    }
    store(acc_.data(), out_ + (t * p_.n1 + grp * g) * p_.d, g * p_.d);
    float* lse = lse_ + p_.lse_offset(t, grp);
    for (int64_t h = 0; h < g; ++h) {
      // A padding row is never read: 0, as CANN's golden leaves it. A row without a key: the sink's sigma
      // (ln 1 = 0), or -inf without a sink.
      lse[h] = padding ? 0.0f : l_[h] == 0.0f ? kNegInf : m_[h] + std::log(l_[h]);
    }
  }

 private:
  void load_query(int64_t t, int64_t grp) {
    to_operand(query_ + (t * p_.n1 + grp * p_.g) * p_.d, qt_.data(), p_.g * p_.d);
  }

  const Problem& p_;
  const std::vector<int64_t>& counts_;
  const T *query_, *ori_, *cmp_;
  const int32_t *ori_idx_, *cmp_idx_;
  const float* sinks_;
  T* out_;
  float* lse_;
  std::vector<Op> qt_, kt_, pt_;
  std::vector<float> sc_, acc_, m_, l_;
  RowKeys keys_;
};

template <typename T, typename Op>
void forward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts) {
  const int64_t tasks = p.t1 * p.n2;
  bool failed = false;
  std::string error;
#pragma omp parallel
  {
    Forward<T, Op> worker(args, p, counts);
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < tasks; ++i) {
      try {
        worker.run(i / p.n2, i % p.n2);
      } catch (const std::exception& e) {
#pragma omp critical(smla_forward_error)
        {
          failed = true;
          error = e.what();
        }
      }
    }
  }
  if (failed) throw std::runtime_error(std::string(kOp) + ": " + error);
}

void run(const aot::KernelArgs& args, const Fwd::Attrs& attrs) {
  const Problem p = make_problem(kOp, args, attrs, kSlots);
  const std::vector<int64_t> counts =
      validate(kOp, p, p.k_ori > 0 ? args.as<const int32_t>(kSlots.ori_idx) : nullptr,
               p.k_cmp > 0 ? args.as<const int32_t>(kSlots.cmp_idx) : nullptr);
  dispatch_float(args.dtype(kSlots.q), [&](auto tag) {
    return with_operand<decltype(tag)>([&](auto, auto op) {
      forward<decltype(tag), decltype(op)>(args, p, counts);
      return 0;
    });
  });
}

}  // namespace
}  // namespace mgo::cpu::smla

void mgo::cpu::kernels::sparse_flash_mla(const aot::KernelArgs& args, const table::SparseFlashMla::Attrs& attrs) {
  smla::run(args, attrs);
}
