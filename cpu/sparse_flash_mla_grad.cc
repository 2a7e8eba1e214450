// CPU AOT kernel of `sparse_flash_mla_grad` (docs/contract.md section 8, backward).
//
// Per (query row, key group), per block of kBlock keys of the row's list (sparse_flash_mla_common.h): recompute
// S = scale Q K^T and P = exp(S - lse) from the forward's softmax_lse (which includes the sink), dP = dO K^T
// (K is V), dS = P (dP - delta), delta = dO . O; then dQ += scale dS K and dKV_block = scale dS^T Q + P^T dO,
// all on the GEMM wrapper with the group's G heads stacked. The softmax L1 norm of an index slot is
// sum_h P[h, key] / G (float32, heads in order), written by the one row owning the slot.
//
// Determinism: the query rows are cut into a fixed number of contiguous partitions (from the shapes only),
// each processed in row order by one thread, scatter-adding its key gradients into its own float32 buffers
// (the original and the compressed rows it can reach); the buffers are summed per key row in partition
// order, so d_ori_kv and d_cmp_kv are the same bits for any thread count. d_sinks[h] = -sum_t P_sink * delta:
// one float32 term per (row, head), summed per head in row order in float64 after the parallel loop.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "op_kernels.h"
#include "sparse_flash_attention_common.h"
#include "sparse_flash_mla_common.h"

namespace mgo::cpu::smla {
namespace {

constexpr const char* kOp = table::SparseFlashMlaGrad::kName;
using Grad = table::SparseFlashMlaGrad;
using In = Grad::In;
using OutParam = Grad::OutParam;
constexpr Slots kSlots = slots_of<Grad>();
constexpr int64_t kMaxPartitions = 8;

// Query rows [r0, r1) and the key rows they can reach: original [o0, o1), compressed [c0, c1) (global).
struct Partition {
  int64_t r0 = 0, r1 = 0, o0 = 0, o1 = 0, c0 = 0, c1 = 0;
};

// A partition's float32 key-gradient rows.
struct KeyGradRows {
  float *ori = nullptr, *cmp = nullptr;
  int64_t o0 = 0, c0 = 0;
};

std::vector<Partition> make_partitions(const Problem& p, const std::vector<int64_t>& counts) {
  // Up to kMaxPartitions, fewer when the buffers would be large next to the launch's key tensors.
  const int64_t key_bytes = (p.t2 + p.t3) * p.n2 * p.d * 4;
  const int64_t q_bytes = p.t1 * p.n1 * p.d * 4;
  int64_t parts = std::clamp<int64_t>(key_bytes > 0 ? 2 * q_bytes / key_bytes : 1, 1, kMaxPartitions);
  parts = std::max<int64_t>(1, std::min(parts, p.t1));
  std::vector<int64_t> work(p.t1);
  int64_t total = 0;
  for (int64_t t = 0; t < p.t1; ++t) {
    int64_t w = 64;
    for (int64_t grp = 0; grp < p.n2; ++grp) w += counts[t * p.n2 + grp];
    work[t] = w;
    total += w;
  }
  std::vector<Partition> out;
  int64_t t = 0, acc = 0;
  for (int64_t i = 0; i < parts; ++i) {
    Partition part;
    part.r0 = t;
    const int64_t target = total * (i + 1) / parts;
    while (t < p.t1 && (acc < target || i + 1 == parts)) acc += work[t++];
    part.r1 = t;
    part.o0 = p.t2, part.o1 = 0, part.c0 = p.t3, part.c1 = 0;
    for (int64_t r = part.r0; r < part.r1; ++r) {
      if (p.row_batch[r] < 0) continue;
      const Batch& b = p.batches[p.row_batch[r]];
      int64_t lo = 0, hi = b.ori_len;
      if (p.k_ori == 0) p.ori_range(r, lo, hi);
      if (hi > lo) part.o0 = std::min(part.o0, b.ori0 + lo), part.o1 = std::max(part.o1, b.ori0 + hi);
      const int64_t climit = p.has_cmp ? (p.k_cmp > 0 ? b.cmp_len : p.cmp_limit(r)) : 0;
      if (climit > 0) part.c0 = std::min(part.c0, b.cmp0), part.c1 = std::max(part.c1, b.cmp0 + climit);
    }
    if (part.o1 <= part.o0) part.o0 = part.o1 = 0;
    if (part.c1 <= part.c0) part.c0 = part.c1 = 0;
    out.push_back(part);
  }
  return out;
}

template <typename T, typename Op>
class Backward {
 public:
  Backward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts, float* sink_terms)
      : p_(p),
        counts_(counts),
        query_(args.as<const T>(kSlots.q)),
        ori_(args.as<const T>(kSlots.ori)),
        cmp_(p.has_cmp ? args.as<const T>(kSlots.cmp) : nullptr),
        ori_idx_(p.k_ori > 0 ? args.as<const int32_t>(kSlots.ori_idx) : nullptr),
        cmp_idx_(p.k_cmp > 0 ? args.as<const int32_t>(kSlots.cmp_idx) : nullptr),
        sinks_(args.numel(kSlots.sinks) > 0 ? args.as<const float>(kSlots.sinks) : nullptr),
        d_out_(args.as<const T>(In::kDOut)),
        out_(args.as<const T>(In::kOut)),
        lse_(args.as<const float>(In::kSoftmaxLse)),
        d_query_(args.as<T>(OutParam::kDQuery)),
        ori_l1_(p.k_ori > 0 ? args.as<float>(OutParam::kOriSoftmaxL1Norm) : nullptr),
        cmp_l1_(p.k_cmp > 0 ? args.as<float>(OutParam::kCmpSoftmaxL1Norm) : nullptr),
        sink_terms_(sink_terms),
        qt_(p.g * p.d),
        ot_(p.g * p.d),
        kt_(kBlock * p.d),
        pt_(kF32 ? 0 : p.g * kBlock),
        dst_(kF32 ? 0 : p.g * kBlock),
        sc_(p.g * kBlock),
        dp_(p.g * kBlock),
        dq_(p.g * p.d),
        dkv_(kBlock * p.d),
        fo_(p.d),
        fdo_(p.d),
        delta_(p.g),
        lse_row_(p.g) {}

  void run(int64_t t, int64_t grp, const KeyGradRows& kg) {
    const int64_t g = p_.g;
    std::fill(dq_.begin(), dq_.end(), 0.0f);
    if (p_.row_batch[t] >= 0 && counts_[t * p_.n2 + grp] > 0) backward(t, grp, kg);
    store(dq_.data(), d_query_ + (t * p_.n1 + grp * g) * p_.d, g * p_.d);
  }

 private:
  static constexpr bool kF32 = std::is_same_v<Op, float>;

  void backward(int64_t t, int64_t grp, const KeyGradRows& kg) {
    const int64_t g = p_.g;
    const int64_t head0 = t * p_.n1 + grp * g;
    to_operand(query_ + head0 * p_.d, qt_.data(), g * p_.d);
    to_operand(d_out_ + head0 * p_.d, ot_.data(), g * p_.d);
    const float* lse = lse_ + p_.lse_offset(t, grp);
    for (int64_t h = 0; h < g; ++h) {
      load(d_out_ + (head0 + h) * p_.d, fdo_.data(), p_.d);
      load(out_ + (head0 + h) * p_.d, fo_.data(), p_.d);
      delta_[h] = sfa::dot(fdo_.data(), fo_.data(), p_.d);
      lse_row_[h] = lse[h];
      if (sink_terms_ != nullptr) {
        sink_terms_[head0 + h] = -std::exp(sink_of(sinks_, grp * g + h) - lse[h]) * delta_[h];
      }
    }
    row_keys(p_, ori_idx_, cmp_idx_, t, grp, keys_);
    const int64_t n = keys_.size();
    for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
      const int64_t nc = std::min(kBlock, n - c0);
      const int64_t ncp = round_up(nc, kKeyPad);
      gather(p_, ori_, cmp_, keys_.rows.data() + c0, nc, ncp, grp, kt_.data());
      // S = scale Q K^T, dP = dO K^T (K is V): [G, ncp]
      mm(gemm::Trans::kNo, gemm::Trans::kYes, g, ncp, p_.d, p_.scale, qt_.data(), p_.d, kt_.data(), p_.d, 0.0f,
         sc_.data(), ncp);
      mm(gemm::Trans::kNo, gemm::Trans::kYes, g, ncp, p_.d, 1.0f, ot_.data(), p_.d, kt_.data(), p_.d, 0.0f,
         dp_.data(), ncp);
      for (int64_t h = 0; h < g; ++h) {  // P = exp(S - lse), dS = P (dP - delta)
        sfa::probs_and_grad(sc_.data() + h * ncp, dp_.data() + h * ncp, nc, ncp, lse_row_[h], 1.0f, delta_[h]);
      }
      write_l1_norms(t, grp, c0, nc, ncp);
      const Op* ptile = nullptr;
      const Op* dstile = nullptr;
      if constexpr (kF32) {
        ptile = sc_.data();
        dstile = dp_.data();
      } else {
        from_float(sc_.data(), pt_.data(), g * ncp);
        from_float(dp_.data(), dst_.data(), g * ncp);
        ptile = pt_.data();
        dstile = dst_.data();
      }
      // dQ [G, d] += scale dS [G, ncp] . K [ncp, d]
      mm(gemm::Trans::kNo, gemm::Trans::kNo, g, p_.d, ncp, p_.scale, dstile, ncp, kt_.data(), p_.d, 1.0f, dq_.data(),
         p_.d);
      // dKV [ncp, d] = scale dS^T . Q + P^T . dO, scatter-added per key row while the block is in cache
      mm(gemm::Trans::kYes, gemm::Trans::kNo, ncp, p_.d, g, p_.scale, dstile, ncp, qt_.data(), p_.d, 0.0f,
         dkv_.data(), p_.d);
      mm(gemm::Trans::kYes, gemm::Trans::kNo, ncp, p_.d, g, 1.0f, ptile, ncp, ot_.data(), p_.d, 1.0f, dkv_.data(),
         p_.d);
      for (int64_t r = 0; r < nc; ++r) {
        const int64_t row = keys_.rows[c0 + r];
        float* dst = row < p_.t2 ? kg.ori + ((row - kg.o0) * p_.n2 + grp) * p_.d
                                 : kg.cmp + ((row - p_.t2 - kg.c0) * p_.n2 + grp) * p_.d;
        sfa::add_to(dst, dkv_.data() + r * p_.d, p_.d);
      }
    }
  }

  // The softmax L1 norm (head mean of P) of every index slot in this block.
  void write_l1_norms(int64_t t, int64_t grp, int64_t c0, int64_t nc, int64_t ncp) {
    const float inv_g = 1.0f / static_cast<float>(p_.g);
    for (int64_t r = 0; r < nc; ++r) {
      const int64_t i = c0 + r;
      const int32_t slot = keys_.slots[i];
      if (slot < 0) continue;
      float* l1 = i < keys_.n_ori ? ori_l1_ + (t * p_.n2 + grp) * p_.k_ori
                                  : cmp_l1_ + (t * p_.n2 + grp) * p_.k_cmp;
      float sum = 0.0f;
      for (int64_t h = 0; h < p_.g; ++h) sum += sc_[h * ncp + r];
      l1[slot] = sum * inv_g;
    }
  }

  const Problem& p_;
  const std::vector<int64_t>& counts_;
  const T *query_, *ori_, *cmp_;
  const int32_t *ori_idx_, *cmp_idx_;
  const float* sinks_;
  const T *d_out_, *out_;
  const float* lse_;
  T* d_query_;
  float *ori_l1_, *cmp_l1_;
  float* sink_terms_;  // [T1, N1], null without sinks
  std::vector<Op> qt_, ot_, kt_, pt_, dst_;
  std::vector<float> sc_, dp_, dq_, dkv_, fo_, fdo_, delta_, lse_row_;
  RowKeys keys_;
};

// One source's key gradients: the partition buffers summed per key row in partition order, rounded once.
template <typename T>
void sum_partitions(const Problem& p, const std::vector<Partition>& parts, const std::vector<std::vector<float>>& bufs,
                    bool cmp, int64_t rows, T* dst) {
  std::vector<float> acc(p.d);
#pragma omp for schedule(static)
  for (int64_t row = 0; row < rows * p.n2; ++row) {
    const int64_t j = row / p.n2;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t pi = 0; pi < parts.size(); ++pi) {
      const int64_t k0 = cmp ? parts[pi].c0 : parts[pi].o0;
      const int64_t k1 = cmp ? parts[pi].c1 : parts[pi].o1;
      if (j < k0 || j >= k1) continue;
      sfa::add_to(acc.data(), bufs[pi].data() + (row - k0 * p.n2) * p.d, p.d);
    }
    store(acc.data(), dst + row * p.d, p.d);
  }
}

template <typename T, typename Op>
void backward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts) {
  const std::vector<Partition> parts = make_partitions(p, counts);
  const int64_t n_parts = static_cast<int64_t>(parts.size());
  std::vector<std::vector<float>> ori_buf(parts.size()), cmp_buf(parts.size());
  const bool sinks = args.numel(kSlots.sinks) > 0;
  std::vector<float> sink_terms(sinks ? p.t1 * p.n1 : 0, 0.0f);  // rows without keys add 0 (delta is 0)
  if (p.k_ori > 0) std::fill_n(args.as<float>(OutParam::kOriSoftmaxL1Norm), args.numel(OutParam::kOriSoftmaxL1Norm), 0.0f);
  if (p.k_cmp > 0) std::fill_n(args.as<float>(OutParam::kCmpSoftmaxL1Norm), args.numel(OutParam::kCmpSoftmaxL1Norm), 0.0f);
  bool failed = false;
  std::string error;
#pragma omp parallel
  {
    Backward<T, Op> worker(args, p, counts, sinks ? sink_terms.data() : nullptr);
#pragma omp for schedule(dynamic, 1)
    for (int64_t pi = 0; pi < n_parts; ++pi) {
      try {
        const Partition& part = parts[pi];
        ori_buf[pi].assign((part.o1 - part.o0) * p.n2 * p.d, 0.0f);
        cmp_buf[pi].assign((part.c1 - part.c0) * p.n2 * p.d, 0.0f);
        const KeyGradRows kg{ori_buf[pi].data(), cmp_buf[pi].data(), part.o0, part.c0};
        for (int64_t t = part.r0; t < part.r1; ++t) {
          for (int64_t grp = 0; grp < p.n2; ++grp) worker.run(t, grp, kg);
        }
      } catch (const std::exception& e) {
#pragma omp critical(smla_grad_error)
        {
          failed = true;
          error = e.what();
        }
      }
    }
    // (an implicit barrier ends the loop above)
    if (!failed) {
      sum_partitions(p, parts, ori_buf, false, p.t2, args.as<T>(OutParam::kDOriKv));
      if (p.has_cmp) sum_partitions(p, parts, cmp_buf, true, p.t3, args.as<T>(OutParam::kDCmpKv));
    }
  }
  if (failed) throw std::runtime_error(std::string(kOp) + ": " + error);
  if (sinks) {
    std::vector<double> acc(p.n1, 0.0);
    for (int64_t t = 0; t < p.t1; ++t) {
      for (int64_t h = 0; h < p.n1; ++h) acc[h] += sink_terms[t * p.n1 + h];
    }
    float* d_sinks = args.as<float>(OutParam::kDSinks);
    for (int64_t h = 0; h < p.n1; ++h) d_sinks[h] = static_cast<float>(acc[h]);
  }
}

void run(const aot::KernelArgs& args, const Grad::Attrs& attrs) {
  const Problem p = make_problem(kOp, args, attrs, kSlots);
  const std::vector<int64_t> counts =
      validate(kOp, p, p.k_ori > 0 ? args.as<const int32_t>(kSlots.ori_idx) : nullptr,
               p.k_cmp > 0 ? args.as<const int32_t>(kSlots.cmp_idx) : nullptr);
  dispatch_float(args.dtype(kSlots.q), [&](auto tag) {
    return with_operand<decltype(tag)>([&](auto, auto op) {
      backward<decltype(tag), decltype(op)>(args, p, counts);
      return 0;
    });
  });
}

}  // namespace
}  // namespace mgo::cpu::smla

void mgo::cpu::kernels::sparse_flash_mla_grad(const aot::KernelArgs& args,
                                              const table::SparseFlashMlaGrad::Attrs& attrs) {
  smla::run(args, attrs);
}
