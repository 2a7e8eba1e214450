// Benchmark entry points of the kernel library (not kernels): the GEMM rate reached through
// mgo::gemm, the wrapper the attention kernels call, and which oneDNN this process runs.
// scripts/bench/common.py calls them with ctypes on the same file MindSpore loads, after
// `import mindspore`, so they measure the libdnnl.so.3 the kernels resolve to in that process.
// Plain C functions: no exception crosses them (errors return a negative value).
#include <dlfcn.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "convert.h"
#include "gemm.h"

namespace {

using mgo::gemm::Trans;
using Clock = std::chrono::steady_clock;

struct Shape {
  bool bf16;
  Trans ta, tb;
  int64_t m, n, k;
  // Dense storage: A is [m, k] or [k, m] (ta), B is [k, n] or [n, k] (tb), C is [m, n].
  int64_t lda() const { return ta == Trans::kNo ? k : m; }
  int64_t ldb() const { return tb == Trans::kNo ? n : k; }
};

Shape make_shape(const int bf16, const int ta, const int tb, const int64_t m, const int64_t n,
                 const int64_t k) {
  return Shape{bf16 != 0, ta ? Trans::kYes : Trans::kNo, tb ? Trans::kYes : Trans::kNo, m, n, k};
}

// The one call both exports make: C = A B on the calling thread, in the kernels' operand type.
void run(const Shape& s, const void* a, const void* b, float* c) {
  if (s.bf16) {
    mgo::gemm::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, static_cast<const uint16_t*>(a), s.lda(),
                         static_cast<const uint16_t*>(b), s.ldb(), 0.0f, c, s.n);
  } else {
    mgo::gemm::gemm_f32(s.ta, s.tb, s.m, s.n, s.k, 1.0f, static_cast<const float*>(a), s.lda(),
                        static_cast<const float*>(b), s.ldb(), 0.0f, c, s.n);
  }
}

// One thread's operands: random values of magnitude in [0.5, 1.5) and random sign, never zero
// (a zero operand could let a library take a shortcut the kernels never get).
class Operands {
 public:
  Operands(const Shape& s, const uint32_t seed) : c_(static_cast<size_t>(s.m * s.n)) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> mag(0.5f, 1.5f);
    const auto fill = [&](const int64_t n) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = (gen() & 1u) ? mag(gen) : -mag(gen);
      return v;
    };
    a32_ = fill(s.m * s.k);
    b32_ = fill(s.k * s.n);
    if (s.bf16) {
      a16_ = to_bf16(a32_);
      b16_ = to_bf16(b32_);
    }
    a_ = s.bf16 ? static_cast<const void*>(a16_.data()) : a32_.data();
    b_ = s.bf16 ? static_cast<const void*>(b16_.data()) : b32_.data();
  }
  const void* a() const { return a_; }
  const void* b() const { return b_; }
  float* c() { return c_.data(); }

 private:
  static std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    mgo::cpu::store(v.data(), reinterpret_cast<mgo::cpu::BFloat16*>(out.data()),
                    static_cast<std::ptrdiff_t>(v.size()));
    return out;
  }
  std::vector<float> a32_, b32_, c_;
  std::vector<uint16_t> a16_, b16_;
  const void* a_ = nullptr;
  const void* b_ = nullptr;
};

bool valid(const int64_t m, const int64_t n, const int64_t k) { return m > 0 && n > 0 && k > 0; }

}  // namespace

extern "C" {

// C[m, n] = op(A) op(B) through the same call MgoGemmRate times: A, B dense (leading dims from the
// transposes, see Shape), bf16 raw bits when bf16 != 0 else float32; C dense float32.
// Returns 0, or -1 on bad sizes or a GEMM error.
int MgoGemm(const int bf16, const int ta, const int tb, const int64_t m, const int64_t n, const int64_t k,
            const void* a, const void* b, float* c) {
  if (!valid(m, n, k) || a == nullptr || b == nullptr || c == nullptr) return -1;
  try {
    run(make_shape(bf16, ta, tb, m, n, k), a, b, c);
    return 0;
  } catch (...) {
    return -1;
  }
}

// Total GFLOP/s (2mnk per call) of `threads` OpenMP threads, each running its own independent
// calls of C = op(A) op(B) on its own random non-zero operands for about `seconds` after one
// warm-up call (oneDNN primitive creation). Time runs from a common start to the last thread's
// end. Returns -1 on bad arguments or a GEMM error.
double MgoGemmRate(const int bf16, const int ta, const int tb, const int64_t m, const int64_t n, const int64_t k,
                   const int threads, const double seconds) {
  if (!valid(m, n, k) || threads < 1 || !(seconds > 0.0)) return -1.0;
  const Shape s = make_shape(bf16, ta, tb, m, n, k);
  std::vector<int64_t> calls(static_cast<size_t>(threads), 0);
  std::vector<double> ends(static_cast<size_t>(threads), 0.0);
  bool failed = false;
  Clock::time_point start;
#pragma omp parallel num_threads(threads) shared(calls, ends, failed, start)
  {
    const int t = omp_get_thread_num();
    Operands ops(s, 1234u + static_cast<uint32_t>(t));
    bool ok = true;
    try {
      run(s, ops.a(), ops.b(), ops.c());
    } catch (...) {
      ok = false;
    }
#pragma omp barrier
#pragma omp single
    start = Clock::now();  // implicit barrier: every thread starts from the same instant
    double elapsed = 0.0;
    int64_t n_calls = 0;
    while (ok && elapsed < seconds) {
      try {
        run(s, ops.a(), ops.b(), ops.c());
      } catch (...) {
        ok = false;
      }
      ++n_calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
    calls[static_cast<size_t>(t)] = n_calls;
    ends[static_cast<size_t>(t)] = elapsed;
    if (!ok) {
#pragma omp atomic write
      failed = true;
    }
  }
  if (failed) return -1.0;
  int64_t total = 0;
  for (const int64_t c : calls) total += c;
  const double wall = *std::max_element(ends.begin(), ends.end());
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
         static_cast<double>(total) / wall / 1e9;
}

// 1 when the kernels multiply bf16 inputs as raw bf16 on this CPU (mgo::gemm::bf16_native()).
int MgoBf16Native() {
  try {
    return mgo::gemm::bf16_native() ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// dnnl_version() of the oneDNN this process runs: version, git hash and CPU runtime
// (DNNL_RUNTIME_*: 2 OpenMP, 8 threadpool, ...).
void MgoDnnlVersion(int* major, int* minor, int* patch, unsigned* cpu_runtime) {
  const dnnl_version_t* v = dnnl_version();
  *major = v->major;
  *minor = v->minor;
  *patch = v->patch;
  *cpu_runtime = v->cpu_runtime;
}

const char* MgoDnnlHash() { return dnnl_version()->hash; }

// Path of the loaded libdnnl (the object that defines dnnl_sgemm in this process), or "".
const char* MgoDnnlPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&dnnl_sgemm), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

}  // extern "C"
