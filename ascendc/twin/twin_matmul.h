// Twin of the high-level Matmul API in a mixed kernel: the AIV calls it, the AIC of its core
// computes (REGIST_MATMUL_OBJ on the AIC serves the requests until its AIVs End() them).
// Semantics: C[m, n] (+)= sum_k A[m, k] * B[k, n] with 16-bit operands widened exactly and a
// float32 accumulation in k order, as the cube accumulates in L0C; C leaves as float32 (or is
// rounded to nearest even for a 16-bit C, as Fixpipe does). ND format, GM operands.
//
// Rules checked (silent wrong results or hangs on the device):
//   * Matmul only from an AIV of a mixed launch (never on the AIC, never in a vector launch);
//   * REGIST_MATMUL_OBJ before any InitBuffer, at most four objects;
//   * the tiling's depths and steps set (> 0: TCubeTiling's fields default to 0);
//   * the tiling's base block is whole 16 x 16 fractals (512-byte L0 operands) and, with its
//     double buffers, fits L0A / L0B / L0C and L1;
//   * the single shape stays within the tiling's singleCore shape and the org shape;
//   * isTransposeA/B = true only for a MatmulType declared ISTRANS;
//   * every operand element read was written (workspace poison), and C stores follow the GM
//     race rules (enAtomic = 1 needs a written target).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "twin_copy.h"
#include "twin_mix.h"
#include "twin_pipe.h"
#include "twin_tensor.h"

namespace AscendC::tiling {
// The standard cube tiling, the fields the twin reads. On the device it is generated into
// kernel_tiling/kernel_tiling.h (impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py) as
// AscendC::tiling::TCubeTiling, every field an int32_t defaulting to 0, and exported to the
// global namespace. Zero defaults here too: a field the kernel leaves unset is 0 on the device,
// and Matmul::Init rejects the zeros the real Matmul cannot run with. The constructor (the
// generated struct is an aggregate) keeps a positional `TCubeTiling{...}` from compiling: the
// twin's field order is not the generated one.
struct TCubeTiling {
  TCubeTiling() {}  // NOLINT(modernize-use-equals-default): user-provided on purpose, see above

  int32_t usedCoreNum = 0;
  int32_t M = 0;
  int32_t N = 0;
  int32_t Ka = 0;
  int32_t Kb = 0;
  int32_t singleCoreM = 0;
  int32_t singleCoreN = 0;
  int32_t singleCoreK = 0;
  int32_t baseM = 0;
  int32_t baseN = 0;
  int32_t baseK = 0;
  int32_t depthA1 = 0;
  int32_t depthB1 = 0;
  int32_t stepM = 0;
  int32_t stepN = 0;
  int32_t isBias = 0;
  int32_t iterateOrder = 0;
  int32_t stepKa = 0;
  int32_t stepKb = 0;
  int32_t dbL0A = 0;
  int32_t dbL0B = 0;
  int32_t dbL0C = 0;
};
}  // namespace AscendC::tiling

using AscendC::tiling::TCubeTiling;

// Global and without a fixed underlying type, as in the real API (include/adv_api/matmul/matmul_config.h).
enum class CubeFormat { ND, NZ };

namespace AscendC {

template <TPosition POS, CubeFormat FORMAT, typename TYPE, bool ISTRANS = false>
struct MatmulType {
  static constexpr TPosition pos = POS;
  static constexpr CubeFormat format = FORMAT;
  static constexpr bool isTrans = ISTRANS;
  using T = TYPE;
};

namespace twin {
inline GM_ADDR& SysWorkspace() {
  static thread_local GM_ADDR ws = nullptr;
  return ws;
}

// The system workspace in front of the user workspace (the device's is 16 MiB; the twin's
// Matmul needs none, so a token size keeps the tests small). Hosts declare sys + user bytes.
inline constexpr uint64_t kSysWorkspaceBytes = 1024;
}  // namespace twin

inline void SetSysWorkspace(GM_ADDR workspace) { twin::SysWorkspace() = workspace; }
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return workspace + twin::kSysWorkspaceBytes; }

template <class A_TYPE, class B_TYPE, class C_TYPE, class BIAS_TYPE = C_TYPE>
class Matmul {
  using SrcAT = typename A_TYPE::T;
  using SrcBT = typename B_TYPE::T;
  using DstT = typename C_TYPE::T;
  static_assert(std::is_same_v<SrcAT, SrcBT>, "A and B share one type");
  static_assert(std::is_same_v<SrcAT, half> || std::is_same_v<SrcAT, bfloat16_t>,
                "the twin's cube takes float16 / bfloat16 operands");
  static_assert(A_TYPE::pos == TPosition::GM && B_TYPE::pos == TPosition::GM && C_TYPE::pos == TPosition::GM,
                "the twin models GM operands only");
  static_assert(A_TYPE::format == CubeFormat::ND && B_TYPE::format == CubeFormat::ND &&
                    C_TYPE::format == CubeFormat::ND,
                "the twin models ND operands only");

 public:
  void Init(const TCubeTiling* tiling, TPipe* pipe = nullptr) {
    (void)pipe;
    twin::Require(tiling != nullptr, [] { return std::string("Matmul::Init with a null tiling"); });
    const TCubeTiling& t = *tiling;
    const auto& cube = twin::CurrentMix("Matmul::Init").Cube();
    // The counts the real Matmul divides by or loops over (CPU-debug NumericalValidCheck in
    // impl/adv_api/detail/matmul/param/matmul_shape_tiling.h; stepKa / stepKb divide the K loop in
    // copy_cube_in_params_base.h). TCubeTiling's fields default to 0, so an unset one trips this.
    twin::Require(t.depthA1 > 0 && t.depthB1 > 0 && t.stepM > 0 && t.stepN > 0 && t.stepKa > 0 && t.stepKb > 0 &&
                      t.isBias >= 0 && t.iterateOrder >= 0,
                  [&] {
                    return twin::Cat("Matmul tiling: depthA1 ", t.depthA1, ", depthB1 ", t.depthB1, ", stepM ",
                                     t.stepM, ", stepN ", t.stepN, ", stepKa ", t.stepKa, ", stepKb ", t.stepKb,
                                     " must be > 0 and isBias ", t.isBias, ", iterateOrder ", t.iterateOrder,
                                     " >= 0 (TCubeTiling fields default to 0)");
                  });
    twin::Require(t.baseM > 0 && t.baseN > 0 && t.baseK > 0 && t.baseM % 16 == 0 && t.baseN % 16 == 0 &&
                      t.baseK % 16 == 0,
                  [&] {
                    return twin::Cat("Matmul tiling: base block ", t.baseM, " x ", t.baseN, " x ", t.baseK,
                                     " is not whole 16 x 16 fractals (L0A/L0B operands are 512-byte aligned"
                                     " fractals, L0C 64-byte)");
                  });
    const uint64_t a = uint64_t(t.baseM) * t.baseK * sizeof(SrcAT);
    const uint64_t b = uint64_t(t.baseK) * t.baseN * sizeof(SrcBT);
    const uint64_t c = uint64_t(t.baseM) * t.baseN * sizeof(float);
    // L0A and L0B are double-buffered together unless dbL0A or dbL0B is 1, L0C when dbL0C is 2
    // (the buffer factors of the real ShapeValidCheck, matmul_shape_tiling.h).
    const uint64_t db_ab = ((t.dbL0A - 1) & (t.dbL0B - 1)) != 0 ? 2 : 1;
    const uint64_t db_c = t.dbL0C == 2 ? 2 : 1;
    twin::Require(a * db_ab <= cube.l0a && b * db_ab <= cube.l0b && c * db_c <= cube.l0c, [&] {
      return twin::Cat("Matmul tiling: L0 blocks A ", a * db_ab, " B ", b * db_ab, " C ", c * db_c,
                       " bytes exceed L0A ", cube.l0a, " / L0B ", cube.l0b, " / L0C ", cube.l0c, " of NPU arch ",
                       cube.arch);
    });
    twin::Require(uint64_t(t.depthA1) * a + uint64_t(t.depthB1) * b <= cube.l1, [&] {
      return twin::Cat("Matmul tiling: L1 buffers of ", uint64_t(t.depthA1) * a + uint64_t(t.depthB1) * b,
                       " bytes (depthA1 x A block + depthB1 x B block) exceed the ", cube.l1,
                       " bytes of L1 a mixed kernel has on NPU arch ", cube.arch);
    });
    twin::Require(t.singleCoreM > 0 && t.singleCoreN > 0 && t.singleCoreK > 0 && t.singleCoreM <= t.M &&
                      t.singleCoreN <= t.N && t.singleCoreK <= t.Ka && t.Ka == t.Kb,
                  [&] { return std::string("Matmul tiling: singleCore shape outside M/N/K"); });
    tiling_ = t;
    inited_ = true;
    m_ = t.singleCoreM;
    n_ = t.singleCoreN;
    k_ = t.singleCoreK;
    org_m_ = t.M;
    org_n_ = t.N;
    org_ka_ = t.Ka;
    org_kb_ = t.Kb;
  }

  void SetOrgShape(int orgM, int orgN, int orgK) { SetOrgShape(orgM, orgN, orgK, orgK); }
  void SetOrgShape(int orgM, int orgN, int orgKa, int orgKb, int orgKc = 0) {
    (void)orgKc;
    twin::Require(orgM > 0 && orgN > 0 && orgKa > 0 && orgKb > 0,
                  [] { return std::string("Matmul::SetOrgShape needs positive sizes"); });
    org_m_ = orgM;
    org_n_ = orgN;
    org_ka_ = orgKa;
    org_kb_ = orgKb;
  }
  void SetSingleShape(int singleM, int singleN, int singleK) {
    m_ = singleM;
    n_ = singleN;
    k_ = singleK;
  }
  void SetTail(int tailM = -1, int tailN = -1, int tailK = -1) {
    if (tailM > 0) m_ = tailM;
    if (tailN > 0) n_ = tailN;
    if (tailK > 0) k_ = tailK;
  }
  void SetTensorA(const GlobalTensor<SrcAT>& gm, bool isTransposeA = false) {
    twin::Require(!isTransposeA || A_TYPE::isTrans, [] {
      return std::string("Matmul::SetTensorA(isTransposeA = true) on a MatmulType A declared without ISTRANS "
                         "(abnormal precision on the device)");
    });
    a_ = gm;
    trans_a_ = isTransposeA;
    has_a_ = true;
  }
  void SetTensorB(const GlobalTensor<SrcBT>& gm, bool isTransposeB = false) {
    twin::Require(!isTransposeB || B_TYPE::isTrans, [] {
      return std::string("Matmul::SetTensorB(isTransposeB = true) on a MatmulType B declared without ISTRANS "
                         "(abnormal precision on the device)");
    });
    b_ = gm;
    trans_b_ = isTransposeB;
    has_b_ = true;
  }

  template <bool sync = true>
  void IterateAll(const GlobalTensor<DstT>& gm, uint8_t enAtomic = 0, bool enSequentialWrite = false,
                  bool waitIterateAll = false, bool fakeMsg = false) {
    static_assert(sync, "the twin models synchronous IterateAll only");
    (void)enSequentialWrite;
    (void)waitIterateAll;
    (void)fakeMsg;
    const char* op = "Matmul::IterateAll";
    auto& mix = CheckCaller(op);
    twin::Require(inited_, [] { return std::string("Matmul::IterateAll before REGIST_MATMUL_OBJ / Init"); });
    twin::Require(!ended_, [] { return std::string("Matmul::IterateAll after End()"); });
    twin::Require(has_a_ && has_b_, [] { return std::string("Matmul::IterateAll before SetTensorA/B"); });
    twin::Require(m_ > 0 && n_ > 0 && k_ > 0 && m_ <= tiling_.singleCoreM && n_ <= tiling_.singleCoreN &&
                      k_ <= tiling_.singleCoreK,
                  [&] {
                    return twin::Cat(op, ": single shape ", m_, " x ", n_, " x ", k_,
                                     " outside the tiling's singleCore shape ", tiling_.singleCoreM, " x ",
                                     tiling_.singleCoreN, " x ", tiling_.singleCoreK);
                  });
    twin::Require(m_ <= org_m_ && n_ <= org_n_ && k_ <= org_ka_ && k_ <= org_kb_, [&] {
      return twin::Cat(op, ": single shape ", m_, " x ", n_, " x ", k_, " exceeds the org shape ", org_m_, " x ",
                       org_n_, " x ", org_ka_);
    });
    const Job job{a_, b_, gm, m_, n_, k_, trans_a_ ? org_m_ : org_ka_, trans_b_ ? org_kb_ : org_n_, org_n_,
                  trans_a_, trans_b_, enAtomic != 0};
    mix.Request(twin::t_agent, [job] { Compute(job); });
  }

  void End() {
    auto& mix = CheckCaller("Matmul::End");
    twin::Require(!ended_, [] { return std::string("Matmul::End() called twice"); });
    ended_ = true;
    mix.EndMatmul(twin::t_agent);
  }

 private:
  struct Job {
    GlobalTensor<SrcAT> a;
    GlobalTensor<SrcBT> b;
    GlobalTensor<DstT> c;
    int m, n, k;
    int lda, ldb, ldc;
    bool trans_a, trans_b, atomic;
  };

  static twin::MixLaunch& CheckCaller(const char* op) {
    auto& mix = twin::CurrentMix(op);
    twin::Require(twin::Current().kind == twin::CoreKind::kAiv, [&] {
      return twin::Cat(op, " called on the AIC: in a mixed kernel the AIV calls Matmul and the AIC serves it "
                           "inside REGIST_MATMUL_OBJ");
    });
    return mix;
  }

  // Reads a stored [rows, cols] block with leading dimension ld as float (checking the reads).
  template <typename S>
  static std::vector<float> Load(const GlobalTensor<S>& g, int rows, int cols, int ld, const char* what) {
    const S* base = g.TwinSpan(uint64_t(rows - 1) * ld + cols, what);
    std::vector<float> out(size_t(rows) * cols);
    for (int r = 0; r < rows; ++r) {
      twin::GmRegistry::Instance().NoteRead(base + uint64_t(r) * ld, uint64_t(cols) * sizeof(S), what);
      for (int c = 0; c < cols; ++c) out[size_t(r) * cols + c] = static_cast<float>(base[uint64_t(r) * ld + c]);
    }
    return out;
  }

  static void Compute(const Job& j) {
    // On the AIC serving the request: its counters get the cube work (the operand and result
    // bytes are counted by the GM accesses below).
    twin::CountWork(std::is_same_v<SrcAT, half> ? twin::Counter::kCubeMacsF16 : twin::Counter::kCubeMacsBf16,
                uint64_t(j.m) * j.n * j.k);
    twin::CountWork(twin::Counter::kMatmulCalls);
    // a: [m, k] (stored [k, m] when transposed), b: [k, n] (stored [n, k] when transposed).
    const std::vector<float> sa = j.trans_a ? Load(j.a, j.k, j.m, j.lda, "Matmul A (GM -> L1)")
                                            : Load(j.a, j.m, j.k, j.lda, "Matmul A (GM -> L1)");
    const std::vector<float> sb = j.trans_b ? Load(j.b, j.n, j.k, j.ldb, "Matmul B (GM -> L1)")
                                            : Load(j.b, j.k, j.n, j.ldb, "Matmul B (GM -> L1)");
    std::vector<float> bk(size_t(j.k) * j.n);
    for (int kk = 0; kk < j.k; ++kk) {
      for (int c = 0; c < j.n; ++c) {
        bk[size_t(kk) * j.n + c] = j.trans_b ? sb[size_t(c) * j.k + kk] : sb[size_t(kk) * j.n + c];
      }
    }
    std::vector<float> acc(size_t(j.n));
    std::vector<DstT> row(size_t(j.n));
    DstT* c_base = j.c.TwinSpan(uint64_t(j.m - 1) * j.ldc + j.n, "Matmul C (Fixpipe -> GM)");
    for (int r = 0; r < j.m; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int kk = 0; kk < j.k; ++kk) {
        const float av = j.trans_a ? sa[size_t(kk) * j.m + r] : sa[size_t(r) * j.k + kk];
        const float* brow = &bk[size_t(kk) * j.n];
        for (int c = 0; c < j.n; ++c) acc[c] += av * brow[c];
      }
      for (int c = 0; c < j.n; ++c) row[c] = DstT(acc[c]);
      twin::StoreGm(c_base + uint64_t(r) * j.ldc, row.data(), uint64_t(j.n), "Matmul C (Fixpipe -> GM)", j.atomic);
    }
  }

  TCubeTiling tiling_{};
  bool inited_ = false;
  bool ended_ = false;
  int m_ = 0, n_ = 0, k_ = 0;
  int org_m_ = 0, org_n_ = 0, org_ka_ = 0, org_kb_ = 0;
  GlobalTensor<SrcAT> a_;
  GlobalTensor<SrcBT> b_;
  bool has_a_ = false, has_b_ = false, trans_a_ = false, trans_b_ = false;
};

namespace twin {

inline int CountMatmuls() { return 0; }
template <typename MM, typename Tiling, typename... Rest>
int CountMatmuls(MM&, Tiling, Rest&&... rest) {
  return 1 + CountMatmuls(rest...);
}
inline void InitMatmuls() {}
template <typename MM, typename... Rest>
void InitMatmuls(MM& mm, const TCubeTiling* tiling, Rest&&... rest) {
  mm.Init(tiling);
  InitMatmuls(rest...);
}

// REGIST_MATMUL_OBJ: on the AIC, serve the AIVs' requests until they End() every object; on
// an AIV, register the objects (before any InitBuffer, at most four) with their tilings.
// Returns true on the AIC once it has served every request (the macro then returns).
template <typename... Args>
bool RegistMatmulObj(TPipe* pipe, GM_ADDR workspace, Args&&... args) {
  (void)pipe;
  (void)workspace;
  auto& mix = CurrentMix("REGIST_MATMUL_OBJ");
  auto& ctx = Current();
  if (ctx.kind == CoreKind::kAic) {
    mix.Serve(t_agent);
    return true;
  }
  Require(ctx.UbUsed() == 0, [&] {
    return Cat("REGIST_MATMUL_OBJ after TPipe::InitBuffer (", ctx.UbUsed(),
               " UB bytes already allocated): it must come first");
  });
  mix.RegisterMatmuls(t_agent, CountMatmuls(args...));
  InitMatmuls(args...);
  return false;
}

}  // namespace twin
}  // namespace AscendC

// A global function in the real API (include/basic_api/kernel_operator_swap_mem_intf.h), outside
// namespace AscendC.
inline GM_ADDR GetSysWorkSpacePtr() { return AscendC::twin::SysWorkspace(); }

// On the device REGIST_MATMUL_OBJ (impl/adv_api/detail/kfc/kfc_register_obj.h) is a run of
// statements: it declares locals (the Matmul client lives to the end of the enclosing scope) and
// on the AIC serves the AIVs and then returns from the enclosing function. So does the twin's:
// it is a statement, once per scope, in a function returning void, and the AIC does not get past
// it.
#define REGIST_MATMUL_OBJ(tpipe, workspace, ...)                                                       \
  const bool regist_matmul_obj_served_twin_ = ::AscendC::twin::RegistMatmulObj(tpipe, workspace, __VA_ARGS__); \
  if (regist_matmul_obj_served_twin_) return
