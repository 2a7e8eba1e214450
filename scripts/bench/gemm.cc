// GEMM candidates benchmark for the CPU attention kernels (built and run by scripts/bench/gemm.py).
// oneDNN goes through cpu/gemm.cc (the wrapper actually used); OpenBLAS (scipy-openblas32)
// and MKL are loaded with dlopen from paths given in env vars MGO_OPENBLAS / MGO_MKL_RT
// (skipped when unset). Each of T OpenMP threads runs its own independent calls; GFLOP/s
// is total over the threads (FLOPs = 2*M*N*K per call).
#include <dlfcn.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/gemm.h"

namespace {
using mgo::gemm::Trans;
// CBLAS enums: RowMajor=101, NoTrans=111, Trans=112.
using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                          int, float, float*, int);
using bf16gemm_fn = void (*)(int, int, int, int64_t, int64_t, int64_t, float, const uint16_t*,
                             int64_t, const uint16_t*, int64_t, float, float*, int64_t);
struct Shape {
  const char* name;
  int64_t m, n, k;
  Trans ta, tb;
};
using Call = std::function<void(const Shape&, const void*, const void*, float*)>;

double bench(const Shape& s, int threads, bool bf16, const Call& call) {
  const double flop = 2.0 * s.m * s.n * s.k;
  const int reps = std::max<int>(3, static_cast<int>(3e9 / flop));
  double secs = 0;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> a32(s.m * s.k, 0.5f), b32(s.k * s.n, 0.25f), c(s.m * s.n);
    std::vector<uint16_t> a16(s.m * s.k, 0x3f00), b16(s.k * s.n, 0x3e80);
    const void* a = bf16 ? static_cast<const void*>(a16.data()) : a32.data();
    const void* b = bf16 ? static_cast<const void*>(b16.data()) : b32.data();
    call(s, a, b, c.data());  // warm-up (primitive creation, packing buffers)
#pragma omp barrier
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) call(s, a, b, c.data());
#pragma omp barrier
    const auto t1 = std::chrono::steady_clock::now();
#pragma omp master
    secs = std::chrono::duration<double>(t1 - t0).count();
  }
  return flop * reps * threads / secs / 1e9;
}
int64_t lda_of(const Shape& s) { return s.ta == Trans::kNo ? s.k : s.m; }
int64_t ldb_of(const Shape& s) { return s.tb == Trans::kNo ? s.n : s.k; }
}  // namespace

int main() {
  const Shape shapes[] = {
      {"[64x576]x[576x2048]", 64, 2048, 576, Trans::kNo, Trans::kNo},
      {"[64x2048]x[2048x512]", 64, 512, 2048, Trans::kNo, Trans::kNo},
      {"[2048x64]^T x[64x576]", 2048, 576, 64, Trans::kYes, Trans::kNo},
      {"[64x128]x[128x2048]", 64, 2048, 128, Trans::kNo, Trans::kNo},
      {"[64x128]x[2048x128]^T", 64, 2048, 128, Trans::kNo, Trans::kYes},
      {"[1x128]x[128x2048]", 1, 2048, 128, Trans::kNo, Trans::kNo},
      {"[64x576]x[1000x576]^T", 64, 1000, 576, Trans::kNo, Trans::kYes},
  };
  std::vector<std::pair<std::string, std::pair<bool, Call>>> libs;
  libs.push_back({"onednn f32", {false, [](const Shape& s, const void* a, const void* b, float* c) {
    mgo::gemm::gemm_f32(s.ta, s.tb, s.m, s.n, s.k, 1.0f, static_cast<const float*>(a), lda_of(s),
                        static_cast<const float*>(b), ldb_of(s), 0.0f, c, s.n);
  }}});
  libs.push_back({"onednn bf16", {true, [](const Shape& s, const void* a, const void* b, float* c) {
    mgo::gemm::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, static_cast<const uint16_t*>(a),
                         lda_of(s), static_cast<const uint16_t*>(b), ldb_of(s), 0.0f, c, s.n);
  }}});
  if (const char* p = std::getenv("MGO_OPENBLAS")) {
    void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::fprintf(stderr, "%s\n", dlerror()); return 1; }
    reinterpret_cast<void (*)(int)>(dlsym(h, "scipy_openblas_set_num_threads"))(1);
    const auto f = reinterpret_cast<sgemm_fn>(dlsym(h, "scipy_cblas_sgemm"));
    libs.push_back({"openblas f32", {false, [f](const Shape& s, const void* a, const void* b, float* c) {
      f(101, s.ta == Trans::kNo ? 111 : 112, s.tb == Trans::kNo ? 111 : 112, s.m, s.n, s.k, 1.0f,
        static_cast<const float*>(a), lda_of(s), static_cast<const float*>(b), ldb_of(s), 0.0f, c, s.n);
    }}});
  }
  if (const char* p = std::getenv("MGO_MKL_RT")) {  // run with MKL_THREADING_LAYER=SEQUENTIAL
    void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::fprintf(stderr, "%s\n", dlerror()); return 1; }
    const auto f = reinterpret_cast<sgemm_fn>(dlsym(h, "cblas_sgemm"));
    const auto g = reinterpret_cast<bf16gemm_fn>(dlsym(h, "cblas_gemm_bf16bf16f32"));
    libs.push_back({"mkl f32", {false, [f](const Shape& s, const void* a, const void* b, float* c) {
      f(101, s.ta == Trans::kNo ? 111 : 112, s.tb == Trans::kNo ? 111 : 112, s.m, s.n, s.k, 1.0f,
        static_cast<const float*>(a), lda_of(s), static_cast<const float*>(b), ldb_of(s), 0.0f, c, s.n);
    }}});
    libs.push_back({"mkl bf16", {true, [g](const Shape& s, const void* a, const void* b, float* c) {
      g(101, s.ta == Trans::kNo ? 111 : 112, s.tb == Trans::kNo ? 111 : 112, s.m, s.n, s.k, 1.0f,
        static_cast<const uint16_t*>(a), lda_of(s), static_cast<const uint16_t*>(b), ldb_of(s),
        0.0f, c, s.n);
    }}});
  }
  const dnnl_version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d (%s), cpu_runtime %u\n", v->major, v->minor, v->patch, v->hash, v->cpu_runtime);
  std::printf("%-14s %-24s %10s %10s\n", "library", "shape (per call)", "1thr GF/s", "2thr GF/s");
  for (const auto& [name, lib] : libs) {
    for (const Shape& s : shapes) {
      std::printf("%-14s %-24s %10.1f %10.1f\n", name.c_str(), s.name,
                  bench(s, 1, lib.first, lib.second), bench(s, 2, lib.first, lib.second));
      std::fflush(stdout);
    }
  }
  // First-call cost of a new bf16 shape (primitive creation) vs a cached call.
  for (const int64_t k : {513, 1025}) {
    std::vector<uint16_t> a(64 * k, 0x3f00), b(k * 128, 0x3f00);
    std::vector<float> c(64 * 128);
    const auto t0 = std::chrono::steady_clock::now();
    mgo::gemm::gemm_bf16(Trans::kNo, Trans::kYes, 64, 128, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), 128);
    const auto t1 = std::chrono::steady_clock::now();
    mgo::gemm::gemm_bf16(Trans::kNo, Trans::kYes, 64, 128, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), 128);
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("bf16 64x128x%ld (B^T): first call %.1f us, cached call %.1f us\n", static_cast<long>(k),
                std::chrono::duration<double, std::micro>(t1 - t0).count(),
                std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  return 0;
}
