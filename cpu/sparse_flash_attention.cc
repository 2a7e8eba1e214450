// CPU AOT kernel of `sparse_flash_attention` (SPEC section 3, forward): out, softmax_max, softmax_sum.
//
// Per query row and key group: gather the visible selected keys into a tile (chunks of kChunk),
// S = scale * Q Kf^T and O += P V on the GEMM wrapper, online softmax across chunks. Never forms a
// [T, K, D] gather or a [T, S2] score matrix. Rows are independent, so any schedule is
// deterministic. Absent optional inputs are zero-size placeholders: value (key is value), the
// rope pair, the lengths.
#include "../infer_shape/sparse_flash_attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "sparse_flash_attention_common.h"

using mgo::aot::AotExtra;
using mgo::aot::TypeId;

namespace mgo::cpu::sfa {
namespace {

constexpr const char* kOp = "sparse_flash_attention";

constexpr int kInputs = 8;
constexpr Slots kSlots{0, 1, 2, 3, 4, 5, 6, 7};
constexpr int kOut = 8, kMax = 9, kSum = 10;

template <typename T, typename Op>
void forward(const aot::KernelArgs& args, const Problem& p, const std::vector<int64_t>& counts) {
  const Slots& s = kSlots;
  const T* query = args.as<const T>(s.q);
  const T* key = args.as<const T>(s.k);
  const T* value = p.shared_kv ? key : args.as<const T>(s.v);
  const T* query_rope = p.dr > 0 ? args.as<const T>(s.qr) : nullptr;
  const T* key_rope = p.dr > 0 ? args.as<const T>(s.kr) : nullptr;
  const int32_t* indices = args.as<const int32_t>(s.idx);
  T* out = args.as<T>(kOut);
  float* smax = args.as<float>(kMax);
  float* ssum = args.as<float>(kSum);
  // Key is value (absent value, or one tensor passed twice): V is the first dv columns of the key tile.
  const bool v_in_k = static_cast<const void*>(value) == static_cast<const void*>(key) && p.dv <= p.d;
  const int64_t ldv = v_in_k ? p.dq : p.dv;
  const int64_t g = p.g;
  const int64_t rows = p.t1 * p.n2;
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  bool failed = false;
  std::string error;
#pragma omp parallel
  {
    std::vector<int32_t> keys;
    std::vector<Op> qt(g * p.dq), kt(kChunk * p.dq), vt(v_in_k ? 0 : kChunk * p.dv),
        pt(std::is_same_v<Op, float> ? 0 : g * kChunk);
    std::vector<float> sc(g * kChunk), acc(g * p.dv), m(g), l(g);
#pragma omp for schedule(dynamic, 4)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t t = row / p.n2;
      const int64_t grp = row % p.n2;
      const int64_t so = p.stats_offset(t, grp);
      T* out_row = out + (t * p.n1 + grp * g) * p.dv;
      if (counts[row] == 0) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        store(acc.data(), out_row, g * p.dv);
        for (int64_t h = 0; h < g; ++h) {
          smax[so + h] = kLowest;
          ssum[so + h] = 0.0f;
        }
        continue;
      }
      try {
        visible_keys(p, indices, t, grp, keys);
        const int64_t n = static_cast<int64_t>(keys.size());
        gather_heads(p, query, query_rope, t, grp, qt.data());
        std::fill(acc.begin(), acc.end(), 0.0f);
        std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
        std::fill(l.begin(), l.end(), 0.0f);
        for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
          const int64_t nc = std::min(kChunk, n - c0);
          const int64_t ncp = round_up(nc, kKeyPad);
          Op* vtile = v_in_k ? kt.data() : vt.data();
          gather_keys(p, key, key_rope, value, keys.data() + c0, nc, ncp, grp, kt.data(),
                      v_in_k ? nullptr : vt.data());
          // S [G, ncp] = scale * Q [G, dq] . Kf^T
          mm(gemm::Trans::kNo, gemm::Trans::kYes, g, ncp, p.dq, p.scale, qt.data(), p.dq, kt.data(), p.dq, 0.0f,
             sc.data(), ncp);
          for (int64_t h = 0; h < g; ++h) {
            float* srow = sc.data() + h * ncp;
            const float cm = row_max(srow, nc);
            const float m_new = max_keep_nan(cm, m[h]);  // a NaN score makes the row's max NaN
            if (c0 > 0) {
              const float alpha = std::exp(m[h] - m_new);
              l[h] *= alpha;
              scale_row(acc.data() + h * p.dv, p.dv, alpha);
            }
            l[h] += exp_shift_sum(srow, nc, ncp, m_new);
            m[h] = m_new;
          }
          // acc [G, dv] += P [G, ncp] . V [ncp, dv]   (bf16: P rounded to bf16, as the cube does)
          const Op* ptile = nullptr;
          if constexpr (std::is_same_v<Op, float>) {
            ptile = sc.data();
          } else {
            from_float(sc.data(), pt.data(), g * ncp);
            ptile = pt.data();
          }
          mm(gemm::Trans::kNo, gemm::Trans::kNo, g, p.dv, ncp, 1.0f, ptile, ncp, vtile, ldv, 1.0f, acc.data(),
             p.dv);
        }
        for (int64_t h = 0; h < g; ++h) {
          scale_row(acc.data() + h * p.dv, p.dv, 1.0f / l[h]);
          smax[so + h] = m[h];
          ssum[so + h] = l[h];
        }
        store(acc.data(), out_row, g * p.dv);
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

void run(const aot::KernelArgs& args, AotExtra* extra) {
  const infer::SfaAttrs attrs = read_attrs(extra, false);
  std::vector<infer::TensorDesc> in;
  for (int i = 0; i < kInputs; ++i) in.push_back(args.desc(i));
  infer::sparse_flash_attention(in, attrs);
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

extern "C" std::vector<std::vector<int64_t>> SparseFlashAttentionInferShape(int* ndims, int64_t** shapes,
                                                                            AotExtra* extra) {
  return mgo::infer::sparse_flash_attention(mgo::aot::shape_descs(mgo::cpu::sfa::kInputs, ndims, shapes),
                                            mgo::cpu::sfa::read_attrs(extra, false))
      .shapes;
}

extern "C" std::vector<TypeId> SparseFlashAttentionInferType(std::vector<TypeId> types, AotExtra* extra) {
  return mgo::aot::type_ids(
      mgo::infer::sparse_flash_attention(mgo::aot::type_descs(types), mgo::cpu::sfa::read_attrs(extra, false)));
}

extern "C" int SparseFlashAttention(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                                    void*, void* extra) {
  const mgo::aot::KernelArgs args(nparam, params, ndims, shapes, dtypes);
  mgo::cpu::sfa::run(args, static_cast<AotExtra*>(extra));
  return 0;
}
