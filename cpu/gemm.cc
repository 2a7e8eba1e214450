// GEMM wrapper over oneDNN's C API, run on MindSpore's bundled libdnnl.so.3 (see setup.py).
//   f32 : dnnl_sgemm (BLAS-like, no per-shape objects).
//   bf16: matmul primitive (bf16 x bf16 -> f32), one per exact shape, cached per thread. oneDNN
//         has an optimised one only on CPUs with AVX-512 (BF16/AMX for full speed); elsewhere (or
//         with MGO_CPU_ISA=avx2/portable) the operands are widened to float32 and go to sgemm. Widening
//         is exact, so both paths compute the same products and differ only in summation order.
// Every call is forced onto the calling thread, so results do not depend on thread count.
#include "gemm.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <oneapi/dnnl/dnnl_version.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "isa_cap.h"

namespace mgo::gemm {
namespace {

void check(const dnnl_status_t st, const char* what) {
  if (st != dnnl_success) {
    throw std::runtime_error(std::string("mgo::gemm: oneDNN ") + what + " failed: " +
                             dnnl_status2str(st));
  }
}

void check_args(const int64_t m, const int64_t n, const int64_t k, const int64_t lda,
                const int64_t ldb, const int64_t ldc, const Trans ta, const Trans tb) {
  const int64_t min_lda = ta == Trans::kNo ? k : m;
  const int64_t min_ldb = tb == Trans::kNo ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < std::max<int64_t>(1, min_lda) ||
      ldb < std::max<int64_t>(1, min_ldb) || ldc < std::max<int64_t>(1, n)) {
    throw std::runtime_error("mgo::gemm: bad sizes m=" + std::to_string(m) + " n=" +
                             std::to_string(n) + " k=" + std::to_string(k) + " lda=" +
                             std::to_string(lda) + " ldb=" + std::to_string(ldb) +
                             " ldc=" + std::to_string(ldc));
  }
}

// MindSpore's oneDNN is a threadpool build, which runs a call on the calling thread when no
// threadpool is attached to the stream; an OpenMP build (if one were loaded) would parallelise a
// call outside a parallel region with omp_get_max_threads() threads, so pin it to one thread for
// the call (the ICV is per task).
class SingleThreadScope {
 public:
  SingleThreadScope() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThreadScope() { omp_set_num_threads(saved_); }
  SingleThreadScope(const SingleThreadScope&) = delete;
  SingleThreadScope& operator=(const SingleThreadScope&) = delete;

 private:
  const int saved_;
};

// C = beta * C for the k == 0 case.
void scale_c(const int64_t m, const int64_t n, const float beta, float* c, const int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

template <typename T, dnnl_status_t (*Destroy)(T)>
struct Deleter {
  void operator()(T p) const { Destroy(p); }
};
template <typename T, dnnl_status_t (*Destroy)(T)>
using Handle = std::unique_ptr<std::remove_pointer_t<T>, Deleter<T, Destroy>>;

using Engine = Handle<dnnl_engine_t, dnnl_engine_destroy>;
using Stream = Handle<dnnl_stream_t, dnnl_stream_destroy>;
using Primitive = Handle<dnnl_primitive_t, dnnl_primitive_destroy>;
using PrimDesc = Handle<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy>;
using MemDesc = Handle<dnnl_memory_desc_t, dnnl_memory_desc_destroy>;
using Memory = Handle<dnnl_memory_t, dnnl_memory_destroy>;
using Attr = Handle<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy>;
using PostOps = Handle<dnnl_post_ops_t, dnnl_post_ops_destroy>;

// The loaded oneDNN must provide the C API of the headers built against: same major version
// (oneDNN's ABI promise), same or newer minor.
void check_library_version() {
  const dnnl_version_t* v = dnnl_version();
  if (v->major != DNNL_VERSION_MAJOR || v->minor < DNNL_VERSION_MINOR) {
    throw std::runtime_error("mgo::gemm: the loaded oneDNN is " + std::to_string(v->major) + "." +
                             std::to_string(v->minor) + "." + std::to_string(v->patch) +
                             "; the kernels were built against the C API of " +
                             std::to_string(DNNL_VERSION_MAJOR) + "." + std::to_string(DNNL_VERSION_MINOR) +
                             " and need " + std::to_string(DNNL_VERSION_MAJOR) + ".x with x >= " +
                             std::to_string(DNNL_VERSION_MINOR) + " (MindSpore 2.10 ships 3.10)");
  }
}

dnnl_engine_t engine() {
  static const Engine eng = [] {
    check_library_version();
    dnnl_engine_t e = nullptr;
    check(dnnl_engine_create(&e, dnnl_cpu, 0), "engine_create");
    return Engine(e);
  }();
  return eng.get();
}

MemDesc make_md(const int64_t rows, const int64_t cols, const int64_t row_stride,
                const int64_t col_stride, const dnnl_data_type_t dt) {
  const dnnl_dims_t dims = {rows, cols};
  const dnnl_dims_t strides = {row_stride, col_stride};
  dnnl_memory_desc_t md = nullptr;
  check(dnnl_memory_desc_create_with_strides(&md, 2, dims, dt, strides), "memory_desc_create");
  return MemDesc(md);
}

Memory make_mem(const dnnl_memory_desc_t md) {
  dnnl_memory_t mem = nullptr;
  check(dnnl_memory_create(&mem, md, engine(), DNNL_MEMORY_NONE), "memory_create");
  return Memory(mem);
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       uint32_t, uint32_t>;
struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = 0;
    const auto mix = [&h](const uint64_t v) { h = (h ^ v) * 0x100000001b3ULL + (h >> 29); };
    std::apply([&mix](const auto&... v) { (mix(static_cast<uint64_t>(v)), ...); }, key);
    return h;
  }
};

uint32_t bits(const float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// oneDNN names its scalar fallback implementations "ref:...".
bool is_reference(const_dnnl_primitive_desc_t pd) {
  const char* impl = nullptr;
  check(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "primitive_desc_query");
  return impl != nullptr && std::strncmp(impl, "ref", 3) == 0;
}

// A bf16 matmul primitive for one exact shape/stride/alpha/beta, with memory objects whose
// data handles are swapped per call. A null prim means oneDNN has no bf16 kernel for it.
struct Bf16Matmul {
  Primitive prim;
  Memory src, wei, dst;
};

Bf16Matmul make_bf16_matmul(const Trans ta, const Trans tb, const int64_t m, const int64_t n,
                            const int64_t k, const float alpha, const int64_t lda,
                            const int64_t ldb, const float beta, const int64_t ldc) {
  const MemDesc src_md = ta == Trans::kNo ? make_md(m, k, lda, 1, dnnl_bf16)
                                          : make_md(m, k, 1, lda, dnnl_bf16);
  const MemDesc wei_md = tb == Trans::kNo ? make_md(k, n, ldb, 1, dnnl_bf16)
                                          : make_md(k, n, 1, ldb, dnnl_bf16);
  const MemDesc dst_md = make_md(m, n, ldc, 1, dnnl_f32);

  dnnl_post_ops_t raw_ops = nullptr;
  check(dnnl_post_ops_create(&raw_ops), "post_ops_create");
  const PostOps ops(raw_ops);
  if (alpha != 1.0f) {
    check(dnnl_post_ops_append_eltwise(ops.get(), dnnl_eltwise_linear, alpha, 0.0f),
          "append_eltwise");
  }
  if (beta != 0.0f) check(dnnl_post_ops_append_sum(ops.get(), beta, 0, dnnl_data_type_undef),
                          "append_sum");
  dnnl_primitive_attr_t raw_attr = nullptr;
  check(dnnl_primitive_attr_create(&raw_attr), "attr_create");
  const Attr attr(raw_attr);
  check(dnnl_primitive_attr_set_post_ops(attr.get(), ops.get()), "attr_set_post_ops");

  dnnl_primitive_desc_t raw_pd = nullptr;
  const dnnl_status_t st = dnnl_matmul_primitive_desc_create(
      &raw_pd, engine(), src_md.get(), wei_md.get(), nullptr, dst_md.get(), attr.get());
  if (st == dnnl_unimplemented) return Bf16Matmul{};  // no bf16 matmul on this ISA
  check(st, "matmul_primitive_desc_create (bf16)");
  const PrimDesc pd(raw_pd);
  if (is_reference(pd.get())) return Bf16Matmul{};  // scalar loops: widening to sgemm is faster
  dnnl_primitive_t raw_prim = nullptr;
  check(dnnl_primitive_create(&raw_prim, pd.get()), "primitive_create");
  return Bf16Matmul{Primitive(raw_prim), make_mem(src_md.get()), make_mem(wei_md.get()),
                    make_mem(dst_md.get())};
}

// Per-thread state: no locks, and a thread only ever executes its own primitives.
struct ThreadState {
  Stream stream;
  std::unordered_map<Key, Bf16Matmul, KeyHash> cache;
  std::vector<float> wide_a, wide_b;  // float32 copies of bf16 operands for the widening path
};

ThreadState& thread_state() {
  thread_local ThreadState st = [] {
    dnnl_stream_t s = nullptr;
    check(dnnl_stream_create(&s, engine(), dnnl_stream_default_flags), "stream_create");
    return ThreadState{Stream(s), {}};
  }();
  return st;
}

constexpr size_t kMaxCachedShapes = 4096;

// Copies a rows x cols bf16 matrix (leading dim ld) into a dense float32 one (leading dim cols).
const float* widen(const uint16_t* src, const int64_t rows, const int64_t cols, const int64_t ld,
                   std::vector<float>& dst) {
  dst.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* in = src + i * ld;
    float* out = dst.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const uint32_t u = static_cast<uint32_t>(in[j]) << 16;
      std::memcpy(out + j, &u, sizeof(float));
    }
  }
  return dst.data();
}

void gemm_bf16_widened(const Trans ta, const Trans tb, const int64_t m, const int64_t n,
                       const int64_t k, const float alpha, const uint16_t* a, const int64_t lda,
                       const uint16_t* b, const int64_t ldb, const float beta, float* c,
                       const int64_t ldc, ThreadState& st) {
  const int64_t a_cols = ta == Trans::kNo ? k : m, b_cols = tb == Trans::kNo ? n : k;
  const float* wa = widen(a, ta == Trans::kNo ? m : k, a_cols, lda, st.wide_a);
  const float* wb = widen(b, tb == Trans::kNo ? k : n, b_cols, ldb, st.wide_b);
  check(dnnl_sgemm(ta == Trans::kNo ? 'N' : 'T', tb == Trans::kNo ? 'N' : 'T', m, n, k, alpha,
                   wa, a_cols, wb, b_cols, beta, c, ldc),
        "sgemm (widened bf16)");
}

}  // namespace

bool bf16_native() {
  // oneDNN's bf16 matmul is an AVX-512 path (AVX512-BF16, AMX): a cap at AVX2 or below takes the
  // widening path an AVX2-only CPU takes.
  static const bool yes = cpu::isa_cap() != "portable" && cpu::isa_cap() != "avx2" &&
                          make_bf16_matmul(Trans::kNo, Trans::kNo, 16, 16, 16, 1.0f, 16, 16, 0.0f, 16).prim;
  return yes;
}

void gemm_f32(const Trans ta, const Trans tb, const int64_t m, const int64_t n,
              const int64_t k, const float alpha, const float* a, const int64_t lda,
              const float* b, const int64_t ldb, const float beta, float* c,
              const int64_t ldc) {
  check_args(m, n, k, lda, ldb, ldc, ta, tb);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  const SingleThreadScope one_thread;
  check(dnnl_sgemm(ta == Trans::kNo ? 'N' : 'T', tb == Trans::kNo ? 'N' : 'T', m, n, k, alpha,
                   a, lda, b, ldb, beta, c, ldc),
        "sgemm");
}

void gemm_bf16(const Trans ta, const Trans tb, const int64_t m, const int64_t n,
               const int64_t k, const float alpha, const uint16_t* a, const int64_t lda,
               const uint16_t* b, const int64_t ldb, const float beta, float* c,
               const int64_t ldc) {
  check_args(m, n, k, lda, ldb, ldc, ta, tb);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  const SingleThreadScope one_thread;
  ThreadState& st = thread_state();
  if (!bf16_native()) {
    return gemm_bf16_widened(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, st);
  }
  const Key key{ta == Trans::kYes, tb == Trans::kYes, m, n, k, lda, ldb, ldc,
                bits(alpha), bits(beta)};
  auto it = st.cache.find(key);
  if (it == st.cache.end()) {
    if (st.cache.size() >= kMaxCachedShapes) st.cache.clear();
    it = st.cache.emplace(key, make_bf16_matmul(ta, tb, m, n, k, alpha, lda, ldb, beta, ldc))
             .first;
  }
  const Bf16Matmul& mm = it->second;
  if (!mm.prim) return gemm_bf16_widened(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, st);
  check(dnnl_memory_set_data_handle(mm.src.get(), const_cast<uint16_t*>(a)), "set_data_handle");
  check(dnnl_memory_set_data_handle(mm.wei.get(), const_cast<uint16_t*>(b)), "set_data_handle");
  check(dnnl_memory_set_data_handle(mm.dst.get(), c), "set_data_handle");
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm.src.get()},
                                  {DNNL_ARG_WEIGHTS, mm.wei.get()},
                                  {DNNL_ARG_DST, mm.dst.get()}};
  check(dnnl_primitive_execute(mm.prim.get(), st.stream.get(), 3, args), "matmul execute");
}

}  // namespace mgo::gemm
