// ctypes entry points testing the twin's mixed launches (AIC + 2 AIV per core): the Matmul
// object, cross-core flags, SyncAll, atomics and the GM race / poison rules. Each broken
// snippet must trip exactly the rule it names; the clean ones must pass and compute right.
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness_common.h"

namespace {

using namespace AscendC;

constexpr uint32_t kN = 1024;  // elements of each GM buffer
constexpr int64_t kCores = 2;

// GM of the snippets: a half input, a float output and a NaN-poisoned float workspace.
struct MixGm {
  std::vector<half> in = std::vector<half>(kN);
  std::vector<float> out = std::vector<float>(kN, 0.0f);
  std::vector<float> ws = std::vector<float>(kN, std::nanf(""));
  MixGm() {
    for (uint32_t i = 0; i < kN; ++i) in[i] = half(static_cast<float>(i % 13) - 6.0f);
  }
  GlobalTensor<half> In() {
    GlobalTensor<half> g;
    g.SetGlobalBuffer(in.data(), kN);
    return g;
  }
  GlobalTensor<float> Out() {
    GlobalTensor<float> g;
    g.SetGlobalBuffer(out.data(), kN);
    return g;
  }
  GlobalTensor<float> Ws() {
    GlobalTensor<float> g;
    g.SetGlobalBuffer(ws.data(), kN);
    return g;
  }
};

struct Snippet {
  std::string expect;  // empty: must run clean
  std::function<void(MixGm&)> body;
  std::function<bool(const MixGm&)> check = nullptr;  // clean snippets: the result is right
  twin::Arch arch = twin::Arch::k2201;               // the arch the snippet is written for
};

using A16 = MatmulType<TPosition::GM, CubeFormat::ND, half>;
using B16 = MatmulType<TPosition::GM, CubeFormat::ND, half>;
using B16T = MatmulType<TPosition::GM, CubeFormat::ND, half, true>;
using C32 = MatmulType<TPosition::GM, CubeFormat::ND, float>;

TCubeTiling Tiling16(int m, int n, int k, int base = 16) {
  TCubeTiling t;  // every field 0, as the generated struct
  t.usedCoreNum = 1;
  t.M = t.singleCoreM = m;
  t.N = t.singleCoreN = n;
  t.Ka = t.Kb = t.singleCoreK = k;
  t.baseM = t.baseN = t.baseK = base;
  t.depthA1 = t.depthB1 = 1;
  t.stepM = t.stepN = t.stepKa = t.stepKb = 1;
  t.dbL0A = t.dbL0B = 2;
  t.dbL0C = 1;
  return t;
}

int64_t Aiv() { return GetBlockIdx(); }  // AIV index 0..3 (only meaningful on an AIV)

// The usual mixed-kernel frame: one Matmul object of type MM registered with tiling `t`; the
// AIC serves it, every AIV runs body(mm, gm).
template <typename MM, typename Body>
void WithMatmul(MixGm& gm, const TCubeTiling& t, Body&& body) {
  TPipe pipe;
  MM mm;
  REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
  if ASCEND_IS_AIC {
    return;
  }
  body(mm, gm);
}

// C[16, 16] per AIV = A (16 x 32 of `in` from element 128 v) times B (the first 16 rows of `in` as [16, 32],
// transposed): each AIV its own 256 output elements.
void CleanMatmul(MixGm& gm) {
  WithMatmul<Matmul<A16, B16T, C32>>(gm, Tiling16(16, 16, 32), [](auto& mm, MixGm& g) {
    const int64_t v = Aiv();
    mm.SetOrgShape(16, 16, 32);
    mm.SetTensorA(g.In()[static_cast<uint64_t>(v) * 128]);
    mm.SetTensorB(g.In(), true);
    mm.IterateAll(g.Out()[static_cast<uint64_t>(v) * 256]);
    mm.End();
  });
}

bool CleanMatmulRight(const MixGm& gm) {
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        float want = 0.0f;
        for (int k = 0; k < 32; ++k) {
          want += static_cast<float>(gm.in[v * 128 + i * 32 + k]) * static_cast<float>(gm.in[j * 32 + k]);
        }
        if (gm.out[v * 256 + i * 16 + j] != want) return false;
      }
    }
  }
  return true;
}

// Copies n floats UB <-> GM through one TBuf, with the pipe syncs a device needs.
void FillGm(const GlobalTensor<float>& dst, float value, uint32_t n) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, n * sizeof(float));
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, value, n);
  const auto id = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_MTE3));
  SetFlag<HardEvent::V_MTE3>(id);
  WaitFlag<HardEvent::V_MTE3>(id);
  DataCopy(dst, t, n);
}

// Zero a shared float region (each AIV its quarter), SyncAll, then every AIV atomically adds
// 1 to the whole region: the result is 4 everywhere. Also flags: AIC -> AIVs (mode 2),
// AIVs -> AIC (mode 2) and AIV0 <-> AIV1 (mode 1).
void CleanSync(MixGm& gm) {
  if ASCEND_IS_AIC {
    CrossCoreSetFlag<2, PIPE_FIX>(3);
    CrossCoreWaitFlag(4);
    return;
  }
  CrossCoreWaitFlag(3);
  const int64_t v = Aiv();
  FillGm(gm.Ws()[static_cast<uint64_t>(v) * 64], 0.0f, 64);
  SyncAll();
  SetAtomicAdd<float>();
  FillGm(gm.Ws(), 1.0f, 256);
  SetAtomicNone();
  SyncAll();
  // AIV0 of core c writes the result to out[256c..], AIV1 waits for it (mode 1) and copies
  // it on to out[512 + 256c..].
  const uint64_t core = static_cast<uint64_t>(GetBlockIdx() / 2);
  if (GetSubBlockIdx() == 0) {
    for (uint32_t i = 0; i < 256; ++i) gm.Out().SetValue(256 * core + i, gm.Ws().GetValue(i));
    CrossCoreSetFlag<1, PIPE_MTE3>(5);
  } else {
    CrossCoreWaitFlag(5);
    for (uint32_t i = 0; i < 256; ++i) gm.Out().SetValue(512 + 256 * core + i, gm.Out().GetValue(256 * core + i));
  }
  CrossCoreSetFlag<2, PIPE_MTE3>(4);
}

bool CleanSyncRight(const MixGm& gm) {
  for (uint32_t i = 0; i < kN; ++i) {
    if (gm.out[i] != 4.0f) return false;
  }
  return true;
}

std::map<std::string, Snippet> Snippets() {
  std::map<std::string, Snippet> s;
  s["clean_matmul"] = {"", CleanMatmul, CleanMatmulRight};
  s["clean_sync"] = {"", CleanSync, CleanSyncRight};
  s["vector_api_on_aic"] = {"called on the AIC (cube core)", [](MixGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 256);
  }};
  s["matmul_on_aic"] = {"called on the AIC: in a mixed kernel", [](MixGm& gm) {
    TPipe pipe;
    Matmul<A16, B16T, C32> mm;
    const TCubeTiling t = Tiling16(16, 16, 32);
    if ASCEND_IS_AIV {
      REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
      mm.End();
      return;
    }
    mm.SetTensorA(gm.In());
    mm.SetTensorB(gm.In(), true);
    mm.IterateAll(gm.Out());
  }};
  s["matmul_base_not_fractal"] = {"is not whole 16 x 16 fractals", [](MixGm&) {
    TPipe pipe;
    Matmul<A16, B16T, C32> mm;
    const TCubeTiling t = Tiling16(24, 24, 24, 24);
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
  }};
  // A step left at TCubeTiling's default 0: the real Matmul divides the K loop by it.
  s["matmul_tiling_step_unset"] = {"must be > 0", [](MixGm&) {
    TPipe pipe;
    Matmul<A16, B16T, C32> mm;
    TCubeTiling t = Tiling16(16, 16, 32);
    t.stepKa = 0;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
  }};
  s["matmul_l0_overflow"] = {"exceed L0A", [](MixGm&) {
    TPipe pipe;
    Matmul<A16, B16T, C32> mm;
    const TCubeTiling t = Tiling16(256, 16, 256, 256);  // 2 x 128 KiB A blocks > 64 KiB L0A
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
  }};
  // 256 x 256 float32 accumulator: fits 3510's 256 KiB L0C, not 2201's 128 KiB.
  s["matmul_l0c_2201"] = {"/ L0C 131072", [](MixGm&) {
    TPipe pipe;
    Matmul<A16, B16T, C32> mm;
    TCubeTiling t = Tiling16(256, 256, 16);
    t.baseM = t.baseN = 256;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
    if ASCEND_IS_AIV {
      mm.End();
    }
  }};
  s["mix_ub_reserved"] = {"the Matmul keeps the end of UB", [](MixGm&) {
    if ASCEND_IS_AIC {
      return;
    }
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 192 * 1024);  // all of 2201's UB: a mixed kernel has 256 bytes less
  }};
  s["crosscore_flag_from_pipe_s"] = {"modes 0..2 are set from PIPE_V", [](MixGm&) {
    if ASCEND_IS_AIC {
      CrossCoreSetFlag<2, PIPE_S>(3);
    } else {
      CrossCoreWaitFlag(3);
    }
  }};
  s["flag_collides_with_syncall"] = {"owns flag ids 11..14", [](MixGm&) {
    SyncAll<false>();
    if ASCEND_IS_AIV {
      CrossCoreSetFlag<1, PIPE_MTE3>(12);
      CrossCoreWaitFlag(12);
    }
  }};
  s["matmul_beyond_single_shape"] = {"outside the tiling's singleCore shape", [](MixGm& gm) {
    WithMatmul<Matmul<A16, B16T, C32>>(gm, Tiling16(16, 16, 32), [](auto& mm, MixGm& g) {
      mm.SetOrgShape(32, 16, 32);
      mm.SetSingleShape(32, 16, 32);
      mm.SetTensorA(g.In());
      mm.SetTensorB(g.In(), true);
      mm.IterateAll(g.Out());
      mm.End();
    });
  }};
  s["matmul_transpose_undeclared"] = {"declared without ISTRANS", [](MixGm& gm) {
    WithMatmul<Matmul<A16, B16, C32>>(gm, Tiling16(16, 16, 32),
                                      [](auto& mm, MixGm& g) { mm.SetTensorB(g.In(), true); });
  }};
  s["regist_after_initbuffer"] = {"REGIST_MATMUL_OBJ after TPipe::InitBuffer", [](MixGm&) {
    TPipe pipe;
    Matmul<A16, B16T, C32> mm;
    const TCubeTiling t = Tiling16(16, 16, 32);
    if ASCEND_IS_AIV {
      TBuf<TPosition::VECCALC> b;
      pipe.InitBuffer(b, 256);
    }
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
  }};
  s["too_many_matmuls"] = {"Matmul objects on", [](MixGm&) {
    TPipe pipe;
    Matmul<A16, B16T, C32> m1, m2, m3, m4, m5;
    const TCubeTiling t = Tiling16(16, 16, 32);
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), m1, &t, m2, &t, m3, &t, m4, &t, m5, &t);
  }};
  s["matmul_without_end"] = {"Matmul requests or Matmul::End()", [](MixGm& gm) {
    WithMatmul<Matmul<A16, B16T, C32>>(gm, Tiling16(16, 16, 32), [](auto& mm, MixGm& g) {
      mm.SetTensorA(g.In()[static_cast<uint64_t>(Aiv()) * 128]);
      mm.SetTensorB(g.In(), true);
      mm.IterateAll(g.Out()[static_cast<uint64_t>(Aiv()) * 256]);
    });
  }};
  s["matmul_reads_unwritten"] = {"that nobody wrote", [](MixGm& gm) {
    WithMatmul<Matmul<A16, B16T, C32>>(gm, Tiling16(16, 16, 32), [](auto& mm, MixGm& g) {
      GlobalTensor<half> ws16;
      ws16.SetGlobalBuffer(reinterpret_cast<half*>(g.ws.data()), 2 * kN);  // fresh workspace as A
      mm.SetTensorA(ws16[static_cast<uint64_t>(Aiv()) * 512]);
      mm.SetTensorB(g.In(), true);
      mm.IterateAll(g.Out()[static_cast<uint64_t>(Aiv()) * 256]);
      mm.End();
    });
  }};
  s["read_unwritten_workspace"] = {"that nobody wrote", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      gm.Ws().GetValue(static_cast<uint64_t>(Aiv()));
    }
  }};
  s["atomic_add_unzeroed"] = {"never written (zero the target first)", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      SetAtomicAdd<float>();
      FillGm(gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 1.0f, 64);
      SetAtomicNone();
    }
  }};
  s["atomic_mode_left_on"] = {"atomic add mode still on", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      FillGm(gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 0.0f, 64);
      SetAtomicAdd<float>();
      FillGm(gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 1.0f, 64);
    }
  }};
  s["atomic_type_mismatch"] = {"set for another element type", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      FillGm(gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 0.0f, 64);
      SetAtomicAdd<half>();
      FillGm(gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 1.0f, 64);
    }
  }};
  // CANN 8.5's weakness: one AIV zeroes the accumulator, another adds into it atomically, and
  // no barrier orders the two (the scheduler runs AIV 0 first, so the bytes are zeroed).
  s["atomic_after_zeroing_without_barrier"] = {"races with the plain write", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      if (Aiv() == 0) {
        FillGm(gm.Ws(), 0.0f, 64);
      } else if (Aiv() == 1) {
        SetAtomicAdd<float>();
        FillGm(gm.Ws(), 1.0f, 64);
        SetAtomicNone();
      }
    }
  }};
  s["plain_write_race"] = {"with no atomics and no flag or SyncAll ordering them", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      FillGm(gm.Ws(), static_cast<float>(Aiv()), 64);
    }
  }};
  s["read_without_flag"] = {"with no cross-core flag or SyncAll ordering them", [](MixGm& gm) {
    if ASCEND_IS_AIC {
      return;
    }
    if (GetSubBlockIdx() == 0) {
      FillGm(gm.Ws()[static_cast<uint64_t>(GetBlockIdx()) * 64], 2.0f, 64);
    } else {
      gm.Ws().GetValue(static_cast<uint64_t>(GetBlockIdx() - 1) * 64);
    }
  }};
  s["flag_counter_overflow"] = {"would exceed 15", [](MixGm&) {
    if ASCEND_IS_AIC {
      for (int i = 0; i < 16; ++i) CrossCoreSetFlag<2, PIPE_FIX>(6);
    }
  }};
  s["flag_id_out_of_range"] = {"flag ids are 0..15", [](MixGm&) {
    if ASCEND_IS_AIC {
      CrossCoreSetFlag<2, PIPE_FIX>(16);
    }
  }};
  s["mode2_set_by_one_aiv"] = {"set by only AIV", [](MixGm&) {
    if ASCEND_IS_AIC {
      CrossCoreWaitFlag(7);
    } else if (GetSubBlockIdx() == 0) {
      CrossCoreSetFlag<2, PIPE_MTE3>(7);
    }
  }};
  s["wait_without_set"] = {"deadlock", [](MixGm&) {
    if ASCEND_IS_AIV {
      CrossCoreWaitFlag(8);
    }
  }};
  s["syncall_skipped_by_one_core"] = {"SyncAll<true>() (not every core arrived)", [](MixGm&) {
    if ASCEND_IS_AIV {
      if (GetBlockIdx() != 3) SyncAll();
    }
  }};
  s["flag_never_waited"] = {"never waited before the kernel ended", [](MixGm&) {
    if ASCEND_IS_AIC {
      CrossCoreSetFlag<2, PIPE_FIX>(9);
    }
  }};
  s["flag_collides_with_matmul"] = {"belong to the", [](MixGm& gm) {
    WithMatmul<Matmul<A16, B16T, C32>>(gm, Tiling16(16, 16, 32), [](auto& mm, MixGm&) {
      CrossCoreSetFlag<1, PIPE_MTE3>(1);
      CrossCoreWaitFlag(1);
      mm.End();
    });
  }};
  s["write_input"] = {"writes the input buffer", [](MixGm& gm) {
    if ASCEND_IS_AIV {
      gm.In().SetValue(static_cast<uint64_t>(Aiv()), half(1.0f));
    }
  }};
  s["copy_through_without_sync"] = {"MTE2 (GM->UB copy) -> MTE3", [](MixGm& gm) {
    if ASCEND_IS_AIC {
      return;
    }
    FillGm(gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 3.0f, 64);
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64 * sizeof(float));
    GlobalTensor<float> out = gm.Out()[static_cast<uint64_t>(Aiv()) * 64];
    DataCopy(b.Get<float>(), gm.Ws()[static_cast<uint64_t>(Aiv()) * 64], 64);
    DataCopy(out, b.Get<float>(), 64);
  }};
  return s;
}

}  // namespace

extern "C" {

int twin_mix_snippet_names(char* buf, int64_t len) {
  harness::CopyMessage(harness::JoinNames(Snippets()), buf, len);
  return harness::kOk;
}

// Runs one snippet on a 2-core mixed launch of NPU arch `arch` (0: the arch the snippet is
// written for) with scheduling `seed`; 0 = clean, 1 = a rule fired (message in err), 2 = wrong
// result of a clean snippet, 4 = unknown name.
int twin_mix_snippet(const char* name, int64_t seed, int64_t arch, char* expect, int64_t expect_len, char* err,
                     int64_t err_len) {
  const auto all = Snippets();
  const auto it = all.find(name);
  if (it == all.end()) return 4;
  harness::CopyMessage(it->second.expect, expect, expect_len);
  return harness::Guarded(err, err_len, [&]() -> int {
    MixGm gm;
    harness::GmScope scope;
    scope.Input(gm.in.data(), kN * sizeof(half), "in");
    scope.Output(gm.out.data(), kN * sizeof(float), "out");
    scope.Workspace(gm.ws.data(), kN * sizeof(float), "workspace");
    twin::LaunchMix(kCores, 0, arch == 0 ? it->second.arch : harness::ArchOf(arch), static_cast<uint64_t>(seed),
                    [&] { it->second.body(gm); });
    if (it->second.check && !it->second.check(gm)) throw std::runtime_error(std::string(name) + ": wrong result");
    return harness::kOk;
  });
}

}  // extern "C"
