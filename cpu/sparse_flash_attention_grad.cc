// CPU AOT kernel of `sparse_flash_attention_grad` (SPEC section 3, backward).
//
// Per query row and key group, per block of kBlock visible selected keys: recompute S = scale*Q Kf^T and
// P = exp(S - max)/sum from the statistics, dP = dO V^T, dS = P (dP - delta), then
// dQf += scale dS Kf, dKf_block = scale dS^T Q, dV_block = P^T dO, all on the GEMM wrapper.
//
// Determinism: the query rows are cut into a fixed number of contiguous partitions (a function of
// the shapes only, never of the thread count), balanced by visible-key work. Each partition is
// processed in row order by one thread and scatter-adds its key gradients into its own float32
// buffer covering just the key rows it can reach; the buffers are then summed per key row in
// partition order. So every output bit is the same for any OMP_NUM_THREADS.
//
// Shared latent KV (value absent: key is value): dV is added to dK in the same float32 partition
// buffers, so d_key = dK + dV is rounded once and d_value is absent (zero-size). Absent ropes give
// absent rope gradients.
#include "../infer_shape/sparse_flash_attention_grad.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "sparse_flash_attention_common.h"

using mgo::aot::AotExtra;
using mgo::aot::TypeId;

namespace mgo::cpu::sfa {
namespace {

constexpr const char* kOp = "sparse_flash_attention_grad";
constexpr int64_t kMaxPartitions = 8;
// Keys per block (a multiple of kKeyPad). The backward needs no running softmax (P comes from the
// saved statistics), so every block is independent: GEMM shapes are then one of kBlock / kKeyPad
// per product whatever K is, which bounds the per-thread oneDNN primitive cache (each cached
// bf16 primitive holds ~100 KB; with whole-row chunks it grew with K to ~100 MB), and a block's
// key tile and dK/dV rows stay in L2 for the scatter-add.
constexpr int64_t kBlock = 256;

constexpr int kInputs = 12;
constexpr Slots kSlots{0, 1, 2, 3, 10, 11, 8, 9};
constexpr int kDOut = 4, kOut = 5, kMax = 6, kSum = 7;
constexpr int kDQuery = 12, kDKey = 13, kDValue = 14, kDQueryRope = 15, kDKeyRope = 16;

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
  for (int i = 0; i < args.count(); ++i) io_bytes += args.numel(i) * elem_bytes(args.dtype(i));
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
      const int64_t kv0 = p.ckv[p.row_batch[r]];
      const int64_t end = kv0 + p.limit(r) + 1;
      if (end > kv0) {
        part.k0 = std::min(part.k0, kv0);
        part.k1 = std::max(part.k1, end);
      }
    }
    if (part.k1 <= part.k0) part.k0 = part.k1 = 0;
    out.push_back(part);
  }
  return out;
}

template <typename T, typename Op>
void backward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts) {
  constexpr bool kF32 = std::is_same_v<Op, float>;
  const Slots& s = kSlots;
  const T* query = args.as<const T>(s.q);
  const T* key = args.as<const T>(s.k);
  const T* value = p.shared_kv ? key : args.as<const T>(s.v);
  const T* d_out = args.as<const T>(kDOut);
  const T* out = args.as<const T>(kOut);
  const T* query_rope = p.dr > 0 ? args.as<const T>(s.qr) : nullptr;
  const T* key_rope = p.dr > 0 ? args.as<const T>(s.kr) : nullptr;
  const float* smax = args.as<const float>(kMax);
  const float* ssum = args.as<const float>(kSum);
  const int32_t* indices = args.as<const int32_t>(s.idx);
  T* d_query = args.as<T>(kDQuery);
  T* d_key = args.as<T>(kDKey);
  T* d_value = p.shared_kv ? nullptr : args.as<T>(kDValue);
  T* d_query_rope = p.dr > 0 ? args.as<T>(kDQueryRope) : nullptr;
  T* d_key_rope = p.dr > 0 ? args.as<T>(kDKeyRope) : nullptr;
  const bool v_in_k = static_cast<const void*>(value) == static_cast<const void*>(key) && p.dv <= p.d;
  const int64_t ldv = v_in_k ? p.dq : p.dv;
  const int64_t g = p.g;

  const std::vector<Partition> parts = make_partitions(args, p, counts);
  const int64_t n_parts = static_cast<int64_t>(parts.size());
  std::vector<std::vector<float>> dk_buf(parts.size()), dv_buf(parts.size());
  bool failed = false;
  std::string error;
#pragma omp parallel
  {
    std::vector<int32_t> keys;
    std::vector<Op> qt(g * p.dq), ot(g * p.dv), kt(kBlock * p.dq), vt(v_in_k ? 0 : kBlock * p.dv);
    std::vector<Op> pt(kF32 ? 0 : g * kBlock), dst(kF32 ? 0 : g * kBlock);
    std::vector<float> sc(g * kBlock), dp(g * kBlock), dq_acc(g * p.dq), dkc(kBlock * p.dq), dvc(kBlock * p.dv);
    std::vector<float> fo(g * p.dv), fdo(g * p.dv), delta(g);
#pragma omp for schedule(dynamic, 1)
    for (int64_t pi = 0; pi < n_parts; ++pi) {
      try {
        const Partition& part = parts[pi];
        std::vector<float>& dkb = dk_buf[pi];
        std::vector<float>& dvb = dv_buf[pi];
        dkb.assign((part.k1 - part.k0) * p.n2 * p.dq, 0.0f);
        dvb.assign(p.shared_kv ? 0 : (part.k1 - part.k0) * p.n2 * p.dv, 0.0f);
        // Shared KV: dV goes into the first dv (= D) columns of the dK row, in float32.
        float* dv_rows = p.shared_kv ? dkb.data() : dvb.data();
        const int64_t ld_dv = p.shared_kv ? p.dq : p.dv;
        for (int64_t t = part.r0; t < part.r1; ++t) {
          for (int64_t grp = 0; grp < p.n2; ++grp) {
            const int64_t head0 = t * p.n1 + grp * g;
            if (counts[t * p.n2 + grp] == 0) {
              std::fill(dq_acc.begin(), dq_acc.end(), 0.0f);
            } else {
              visible_keys(p, indices, t, grp, keys);
              const int64_t n = static_cast<int64_t>(keys.size());
              const int64_t so = p.stats_offset(t, grp);
              gather_heads(p, query, query_rope, t, grp, qt.data());
              to_operand(d_out + head0 * p.dv, ot.data(), g * p.dv);
              load(d_out + head0 * p.dv, fdo.data(), g * p.dv);
              load(out + head0 * p.dv, fo.data(), g * p.dv);
              for (int64_t h = 0; h < g; ++h) delta[h] = dot(fdo.data() + h * p.dv, fo.data() + h * p.dv, p.dv);
              std::fill(dq_acc.begin(), dq_acc.end(), 0.0f);
              for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
                const int64_t nc = std::min(kBlock, n - c0);
                const int64_t ncp = round_up(nc, kKeyPad);
                const Op* vtile = v_in_k ? kt.data() : vt.data();
                gather_keys(p, key, key_rope, value, keys.data() + c0, nc, ncp, grp, kt.data(),
                            v_in_k ? nullptr : vt.data());
                // S = scale Q Kf^T, dP = dO V^T: [G, ncp]
                mm(gemm::Trans::kNo, gemm::Trans::kYes, g, ncp, p.dq, p.scale, qt.data(), p.dq, kt.data(), p.dq,
                   0.0f, sc.data(), ncp);
                mm(gemm::Trans::kNo, gemm::Trans::kYes, g, ncp, p.dv, 1.0f, ot.data(), p.dv, vtile, ldv, 0.0f,
                   dp.data(), ncp);
                for (int64_t h = 0; h < g; ++h) {
                  probs_and_grad(sc.data() + h * ncp, dp.data() + h * ncp, nc, ncp, smax[so + h], 1.0f / ssum[so + h],
                                 delta[h]);
                }
                const Op* ptile = nullptr;
                const Op* dstile = nullptr;
                if constexpr (kF32) {
                  ptile = sc.data();
                  dstile = dp.data();
                } else {
                  from_float(sc.data(), pt.data(), g * ncp);
                  from_float(dp.data(), dst.data(), g * ncp);
                  ptile = pt.data();
                  dstile = dst.data();
                }
                // dQf [G, dq] += scale dS [G, ncp] . Kf [ncp, dq]
                mm(gemm::Trans::kNo, gemm::Trans::kNo, g, p.dq, ncp, p.scale, dstile, ncp, kt.data(), p.dq, 1.0f,
                   dq_acc.data(), p.dq);
                // dKf [ncp, dq] = scale dS^T . Q and dV [ncp, dv] = P^T . dO, scatter-added per key row while
                // the block is still in cache.
                mm(gemm::Trans::kYes, gemm::Trans::kNo, ncp, p.dq, g, p.scale, dstile, ncp, qt.data(), p.dq, 0.0f,
                   dkc.data(), p.dq);
                mm(gemm::Trans::kYes, gemm::Trans::kNo, ncp, p.dv, g, 1.0f, ptile, ncp, ot.data(), p.dv, 0.0f,
                   dvc.data(), p.dv);
                for (int64_t r = 0; r < nc; ++r) {
                  const int64_t local = (keys[c0 + r] - part.k0) * p.n2 + grp;
                  add_to(dkb.data() + local * p.dq, dkc.data() + r * p.dq, p.dq);
                  add_to(dv_rows + local * ld_dv, dvc.data() + r * p.dv, p.dv);
                }
              }
            }
            for (int64_t h = 0; h < g; ++h) {
              store(dq_acc.data() + h * p.dq, d_query + (head0 + h) * p.d, p.d);
              if (p.dr > 0) store(dq_acc.data() + h * p.dq + p.d, d_query_rope + (head0 + h) * p.dr, p.dr);
            }
          }
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
}

void run(const aot::KernelArgs& args, AotExtra* extra) {
  const infer::SfaAttrs attrs = read_attrs(extra, true);
  std::vector<infer::TensorDesc> in;
  for (int i = 0; i < kInputs; ++i) in.push_back(args.desc(i));
  infer::sparse_flash_attention_grad(in, attrs);
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

extern "C" std::vector<std::vector<int64_t>> SparseFlashAttentionGradInferShape(int* ndims, int64_t** shapes,
                                                                                AotExtra* extra) {
  return mgo::infer::sparse_flash_attention_grad(mgo::aot::shape_descs(mgo::cpu::sfa::kInputs, ndims, shapes),
                                                 mgo::cpu::sfa::read_attrs(extra, true))
      .shapes;
}

extern "C" std::vector<TypeId> SparseFlashAttentionGradInferType(std::vector<TypeId> types, AotExtra* extra) {
  return mgo::aot::type_ids(mgo::infer::sparse_flash_attention_grad(mgo::aot::type_descs(types),
                                                                    mgo::cpu::sfa::read_attrs(extra, true)));
}

extern "C" int SparseFlashAttentionGrad(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                                        void*, void* extra) {
  const mgo::aot::KernelArgs args(nparam, params, ndims, shapes, dtypes);
  mgo::cpu::sfa::run(args, static_cast<AotExtra*>(extra));
  return 0;
}
