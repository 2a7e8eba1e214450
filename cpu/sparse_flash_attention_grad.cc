// CPU AOT kernel of `sparse_flash_attention_grad` (docs/contract.md section 3, backward).
//
// Per group of query rows of one key group (sparse_flash_attention_groups.h), per block of kBlock keys
// of the union of their visible selected keys: recompute S = scale*Q Kf^T and P = exp(S - max)/sum
// from the statistics, dP = dO V^T, dS = P (dP - delta), then dQf += scale dS Kf,
// dKf_block = scale dS^T Q, dV_block = P^T dO, all on the GEMM wrapper with the rows' G heads stacked
// (M = rows * G: the key products get a K-dim of M, and the scatter-add below runs once per union key
// of the group instead of once per row and key). The backward needs no running softmax, so blocks
// are independent.
//
// Determinism: the query rows are cut into a fixed number of contiguous partitions (a function of
// the shapes only, never of the thread count), balanced by visible-key work, and grouped from the
// indices only. Each partition is processed in row order by one thread and scatter-adds its key
// gradients into its own float32 buffer covering just the key rows it can reach; the buffers are
// then summed per key row in partition order. So every output bit is the same for any OMP_NUM_THREADS.
//
// Shared latent KV (value absent: key is value): dV is added to dK in the same float32 partition
// buffers, so d_key = dK + dV is rounded once and d_value is absent (zero-size). Absent ropes give
// absent rope gradients.
//
// Sinks (docs/contract.md section 0.7): the statistics include them, so P = exp(S - max)/sum and dS
// are unchanged. d_sinks[h] = -sum over rows of P_sink * delta (delta = dO . O, as dS uses): each
// (row, head) term goes to its own slot of a [T1, N1] buffer, summed per head in row order after
// the parallel loop, so d_sinks too is the same for any thread count. Absent sinks: d_sinks absent.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "op_kernels.h"
#include "sparse_flash_attention_common.h"
#include "sparse_flash_attention_groups.h"

namespace mgo::cpu::sfa {
namespace {

constexpr const char* kOp = table::SparseFlashAttentionGrad::kName;
constexpr int64_t kMaxPartitions = 8;

using Grad = table::SparseFlashAttentionGrad;
using In = Grad::In;
using OutParam = Grad::OutParam;
constexpr Slots kSlots = slots_of<Grad>();

// Contiguous query rows [r0, r1) and the key rows [k0, k1) they can reach.
struct Partition {
  int64_t r0 = 0, r1 = 0, k0 = 0, k1 = 0;
};

int64_t elem_bytes(infer::DType t) {
  return t == infer::DType::kFloat32 || t == infer::DType::kInt32 ? 4 : t == infer::DType::kInt64 ? 8 : 2;
}

// Partition count: up to kMaxPartitions, with the partition buffers (at most T2 key rows each)
// limited to a quarter of the launch's input+output bytes so peak memory stays near I/O size.
std::vector<Partition> make_partitions(const aot::KernelArgs& args, const Problem& p,
                                       const std::vector<int64_t>& counts) {
  int64_t io_bytes = 0;
  // Not sinks and d_sinks: the key-gradient summation order must not depend on whether they are given
  // (sinks of -inf give bitwise the gradients of no sinks).
  for (int i = 0; i < args.count(); ++i) {
    if (i != In::kSinks && i != OutParam::kDSinks) io_bytes += args.numel(i) * elem_bytes(args.dtype(i));
  }
  const int64_t buf_bytes = std::max<int64_t>(1, p.t2 * p.n2 * (p.dq + (p.shared_kv ? 0 : p.dv)) * 4);
  int64_t parts = std::clamp<int64_t>(io_bytes / 4 / buf_bytes, 1, kMaxPartitions);
  parts = std::max<int64_t>(1, std::min(parts, p.t1));
  std::vector<int64_t> work(static_cast<size_t>(p.t1));
  int64_t total = 0;
  for (int64_t t = 0; t < p.t1; ++t) {
    int64_t w = 64;  // per-row overhead (tiles, statistics)
    for (int64_t grp = 0; grp < p.n2; ++grp) w += counts[t * p.n2 + grp];
    work[t] = w;
    total += w;
  }
  std::vector<Partition> out;
  int64_t t = 0;
  int64_t acc = 0;
  for (int64_t i = 0; i < parts; ++i) {
    Partition part;
    part.r0 = t;
    const int64_t target = total * (i + 1) / parts;
    while (t < p.t1 && (acc < target || i + 1 == parts)) acc += work[t++];
    part.r1 = t;
    part.k0 = p.t2;
    part.k1 = 0;
    for (int64_t r = part.r0; r < part.r1; ++r) {
      if (p.limit(r) < 0) continue;  // nothing visible
      const int64_t kv0 = p.key_start(r);
      part.k0 = std::min(part.k0, kv0);
      part.k1 = std::max(part.k1, kv0 + p.limit(r) + 1);
    }
    if (part.k1 <= part.k0) part.k0 = part.k1 = 0;
    out.push_back(part);
  }
  return out;
}

// Where a partition accumulates its key gradients: float32 rows of the keys [k0, k1) x N2 groups.
struct KeyGradRows {
  float* dk = nullptr;  // [rows, dq]
  float* dv = nullptr;  // [rows, ldv]; the first dv columns of dk when key is value
  int64_t ldv = 0;
  int64_t k0 = 0;
};

// d_sinks[h] = sum over rows t of terms[t, h], in row order (float64, rounded once).
void sum_sink_terms(const Problem& p, const std::vector<float>& terms, float* d_sinks) {
  std::vector<double> acc(static_cast<size_t>(p.n1), 0.0);
  for (int64_t t = 0; t < p.t1; ++t) {
    for (int64_t h = 0; h < p.n1; ++h) acc[h] += terms[t * p.n1 + h];
  }
  for (int64_t h = 0; h < p.n1; ++h) d_sinks[h] = static_cast<float>(acc[h]);
}

// One thread's tiles and the work of one row group (sparse_flash_attention_groups.h).
template <typename T, typename Op>
class Backward {
 public:
  Backward(const aot::KernelArgs& args, const Problem& p, const Inputs<T>& in, const std::vector<int64_t>& counts,
           int64_t max_rows, float* sink_terms)
      : p_(p),
        in_(in),
        counts_(counts),
        d_out_(args.as<const T>(In::kDOut)),
        out_(args.as<const T>(In::kOut)),
        smax_(args.as<const float>(In::kSoftmaxMax)),
        ssum_(args.as<const float>(In::kSoftmaxSum)),
        d_query_(args.as<T>(OutParam::kDQuery)),
        d_query_rope_(p.dr > 0 ? args.as<T>(OutParam::kDQueryRope) : nullptr),
        sink_terms_(sink_terms),
        qt_(max_rows * p.g * p.dq),
        ot_(max_rows * p.g * p.dv),
        keys_(p, in.v_in_k),
        pt_(kF32 ? 0 : max_rows * p.g * kBlock),
        dst_(kF32 ? 0 : max_rows * p.g * kBlock),
        sc_(max_rows * p.g * kBlock),
        dp_(max_rows * p.g * kBlock),
        dq_acc_(max_rows * p.g * p.dq),
        dkc_(kBlock * p.dq),
        dvc_(kBlock * p.dv),
        fo_(p.dv),
        fdo_(p.dv),
        delta_(max_rows * p.g),
        mx_(max_rows * p.g),
        inv_l_(max_rows * p.g) {}

  // d_query (| d_query_rope) of the group's rows; adds their key gradients to kg.
  void run(const RowGroup& rg, const KeyGradRows& kg) {
    const int64_t g = p_.g;
    const int64_t rows = rg.rows;
    const int64_t mrows = rows * g;
    if (counts_[rg.t0 * p_.n2 + rg.grp] == 0) {  // nothing visible (such rows are never grouped)
      std::fill(dq_acc_.begin(), dq_acc_.begin() + g * p_.dq, 0.0f);
      write(rg);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head0 = (rg.t0 + r) * p_.n1 + rg.grp * g;
      gather_heads(p_, in_.query, in_.query_rope, rg.t0 + r, rg.grp, qt_.data() + r * g * p_.dq);
      to_operand(d_out_ + head0 * p_.dv, ot_.data() + r * g * p_.dv, g * p_.dv);
    }
    // A weight-0 pair adds 0 * Q to dK and 0 * dO to dV: exact only for finite rows.
    if (rows > 1 && !(all_finite(qt_.data(), mrows * p_.dq) && all_finite(ot_.data(), mrows * p_.dv))) {
      for (int64_t r = 0; r < rows; ++r) run({rg.t0 + r, 1, rg.grp}, kg);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head0 = (rg.t0 + r) * p_.n1 + rg.grp * g;
      const int64_t so = p_.stats_offset(rg.t0 + r, rg.grp);
      for (int64_t h = 0; h < g; ++h) {
        load(d_out_ + (head0 + h) * p_.dv, fdo_.data(), p_.dv);
        load(out_ + (head0 + h) * p_.dv, fo_.data(), p_.dv);
        delta_[r * g + h] = dot(fdo_.data(), fo_.data(), p_.dv);
        mx_[r * g + h] = smax_[so + h];
        inv_l_[r * g + h] = 1.0f / ssum_[so + h];
      }
    }
    if (sink_terms_ != nullptr) {  // -P_sink * delta of every (row, head)
      for (int64_t i = 0; i < mrows; ++i) {
        const int64_t head = rg.grp * g + i % g;
        const float p_sink = std::exp(in_.sink(head) - mx_[i]) * inv_l_[i];
        sink_terms_[(rg.t0 + i / g) * p_.n1 + head] = -p_sink * delta_[i];
      }
    }
    key_union(p_, in_.indices, rg, scratch_, u_);
    const int64_t n = static_cast<int64_t>(u_.keys.size());
    std::fill(dq_acc_.begin(), dq_acc_.begin() + mrows * p_.dq, 0.0f);
    for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
      const int64_t nc = std::min(kBlock, n - c0);
      const int64_t ncp = round_up(nc, kKeyPad);
      // S = scale Q Kf^T, dP = dO V^T: [M, ncp], M = rows * G
      keys_.gather_and_score(p_, in_, u_.keys.data() + c0, nc, ncp, rg.grp, qt_.data(), mrows, sc_.data());
      mm(gemm::Trans::kNo, gemm::Trans::kYes, mrows, ncp, p_.dv, 1.0f, ot_.data(), p_.dv, keys_.v(), keys_.ldv(p_),
         0.0f, dp_.data(), ncp);
      for (int64_t i = 0; i < mrows; ++i) {
        const float* w = u_.weighted ? u_.weight.data() + (i / g) * n + c0 : nullptr;
        probs_and_grad(sc_.data() + i * ncp, dp_.data() + i * ncp, nc, ncp, mx_[i], inv_l_[i], delta_[i], w);
      }
      const Op* ptile = nullptr;
      const Op* dstile = nullptr;
      if constexpr (kF32) {
        ptile = sc_.data();
        dstile = dp_.data();
      } else {
        from_float(sc_.data(), pt_.data(), mrows * ncp);
        from_float(dp_.data(), dst_.data(), mrows * ncp);
        ptile = pt_.data();
        dstile = dst_.data();
      }
      // dQf [M, dq] += scale dS [M, ncp] . Kf [ncp, dq]
      mm(gemm::Trans::kNo, gemm::Trans::kNo, mrows, p_.dq, ncp, p_.scale, dstile, ncp, keys_.kf(), p_.dq, 1.0f,
         dq_acc_.data(), p_.dq);
      // dKf [ncp, dq] = scale dS^T . Q and dV [ncp, dv] = P^T . dO (K-dim M), scatter-added per key row while
      // the block is still in cache.
      mm(gemm::Trans::kYes, gemm::Trans::kNo, ncp, p_.dq, mrows, p_.scale, dstile, ncp, qt_.data(), p_.dq, 0.0f,
         dkc_.data(), p_.dq);
      mm(gemm::Trans::kYes, gemm::Trans::kNo, ncp, p_.dv, mrows, 1.0f, ptile, ncp, ot_.data(), p_.dv, 0.0f,
         dvc_.data(), p_.dv);
      for (int64_t r = 0; r < nc; ++r) {
        const int64_t local = (u_.keys[c0 + r] - kg.k0) * p_.n2 + rg.grp;
        add_to(kg.dk + local * p_.dq, dkc_.data() + r * p_.dq, p_.dq);
        add_to(kg.dv + local * kg.ldv, dvc_.data() + r * p_.dv, p_.dv);
      }
    }
    write(rg);
  }

 private:
  static constexpr bool kF32 = std::is_same_v<Op, float>;

  // Stores dq_acc into d_query | d_query_rope for the group's rows.
  void write(const RowGroup& rg) {
    const int64_t g = p_.g;
    for (int64_t i = 0; i < rg.rows * g; ++i) {
      const int64_t head = rg.t0 * p_.n1 + (i / g) * p_.n1 + rg.grp * g + i % g;
      store(dq_acc_.data() + i * p_.dq, d_query_ + head * p_.d, p_.d);
      if (p_.dr > 0) store(dq_acc_.data() + i * p_.dq + p_.d, d_query_rope_ + head * p_.dr, p_.dr);
    }
  }

  const Problem& p_;
  const Inputs<T>& in_;
  const std::vector<int64_t>& counts_;
  const T *d_out_, *out_;
  const float *smax_, *ssum_;
  T *d_query_, *d_query_rope_;
  float* sink_terms_;  // [T1, N1], null without sinks
  std::vector<Op> qt_, ot_;
  KeyTiles<Op> keys_;
  std::vector<Op> pt_, dst_;
  std::vector<float> sc_, dp_, dq_acc_, dkc_, dvc_, fo_, fdo_, delta_, mx_, inv_l_;
  std::vector<int32_t> scratch_;
  KeyUnion u_;
};

template <typename T, typename Op>
void backward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts) {
  const Inputs<T> in(args, p, kSlots);
  T* d_key = args.as<T>(OutParam::kDKey);
  T* d_value = p.shared_kv ? nullptr : args.as<T>(OutParam::kDValue);
  T* d_key_rope = p.dr > 0 ? args.as<T>(OutParam::kDKeyRope) : nullptr;
  const std::vector<uint8_t> key_ok = finite_key_rows(p, in);
  const int64_t max_rows = max_group_rows(p.g);
  const std::vector<Partition> parts = make_partitions(args, p, counts);
  const int64_t n_parts = static_cast<int64_t>(parts.size());
  std::vector<std::vector<float>> dk_buf(parts.size()), dv_buf(parts.size());
  // Rows with nothing visible keep 0: their delta is 0 (out is 0).
  std::vector<float> sink_terms(in.sinks != nullptr ? p.t1 * p.n1 : 0, 0.0f);
  float* terms = in.sinks != nullptr ? sink_terms.data() : nullptr;
  bool failed = false;
  std::string error;
#pragma omp parallel
  {
    Backward<T, Op> worker(args, p, in, counts, max_rows, terms);
#pragma omp for schedule(dynamic, 1)
    for (int64_t pi = 0; pi < n_parts; ++pi) {
      try {
        const Partition& part = parts[pi];
        std::vector<float>& dkb = dk_buf[pi];
        std::vector<float>& dvb = dv_buf[pi];
        dkb.assign((part.k1 - part.k0) * p.n2 * p.dq, 0.0f);
        dvb.assign(p.shared_kv ? 0 : (part.k1 - part.k0) * p.n2 * p.dv, 0.0f);
        // Shared KV: dV goes into the first dv (= D) columns of the dK row, in float32.
        const KeyGradRows kg{dkb.data(), p.shared_kv ? dkb.data() : dvb.data(), p.shared_kv ? p.dq : p.dv, part.k0};
        for (const RowGroup& rg : group_rows(p, in.indices, counts, key_ok, part.r0, part.r1, max_rows)) {
          worker.run(rg, kg);
        }
      } catch (const std::exception& e) {
#pragma omp critical(sfa_grad_error)
        {
          failed = true;
          error = e.what();
        }
      }
    }
    // Key gradients: sum the partition buffers per key row in partition order.
    std::vector<float> kacc(p.dq), vacc(p.dv);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t row = 0; row < p.t2 * p.n2; ++row) {
      const int64_t j = row / p.n2;
      std::fill(kacc.begin(), kacc.end(), 0.0f);
      std::fill(vacc.begin(), vacc.end(), 0.0f);
      for (int64_t pi = 0; pi < n_parts && !failed; ++pi) {
        const Partition& part = parts[pi];
        if (j < part.k0 || j >= part.k1) continue;
        const int64_t local = row - part.k0 * p.n2;
        add_to(kacc.data(), dk_buf[pi].data() + local * p.dq, p.dq);
        if (d_value != nullptr) add_to(vacc.data(), dv_buf[pi].data() + local * p.dv, p.dv);
      }
      store(kacc.data(), d_key + row * p.d, p.d);
      if (p.dr > 0) store(kacc.data() + p.d, d_key_rope + row * p.dr, p.dr);
      if (d_value != nullptr) store(vacc.data(), d_value + row * p.dv, p.dv);
    }
  }
  if (failed) throw std::runtime_error(std::string(kOp) + ": " + error);
  if (terms != nullptr) sum_sink_terms(p, sink_terms, args.as<float>(OutParam::kDSinks));
}

void run(const aot::KernelArgs& args, const table::SparseFlashAttentionGrad::Attrs& attrs) {
  const Problem p = make_problem(kOp, args, attrs, kSlots);
  const std::vector<int64_t> counts = validate_indices(kOp, p, args.as<const int32_t>(kSlots.idx));
  dispatch_float(args.dtype(kSlots.q), [&](auto tag) {
    return with_operand<decltype(tag)>([&](auto, auto op) {
      backward<decltype(tag), decltype(op)>(args, p, counts);
      return 0;
    });
  });
}

}  // namespace
}  // namespace mgo::cpu::sfa

void mgo::cpu::kernels::sparse_flash_attention_grad(const aot::KernelArgs& args,
                                                    const table::SparseFlashAttentionGrad::Attrs& attrs) {
  sfa::run(args, attrs);
}
