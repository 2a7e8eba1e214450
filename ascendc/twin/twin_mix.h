// Twin of a mixed launch (KERNEL_TYPE_MIX_AIC_1_2): per AI core one AIC (cube) and two AIVs
// (vector) run the same kernel function, each on its own thread, because they wait on each
// other (cross-core flags, SyncAll, Matmul requests). The threads are scheduled cooperatively:
// exactly one runs at a time and it hands the turn on only when it blocks or ends, so the twin
// itself never races and a run is reproducible from its seed (seed 0: fixed round-robin; any
// other seed: a random pick among the runnable cores at every hand-off, which shuffles the
// order in which cores do their work). When the running core blocks and no other can run,
// the launch is deadlocked: a TwinError names every core and what it waits for (the device
// would hang).
//
// Ordering between cores is tracked with vector clocks: setting a flag, arriving at SyncAll or
// handing a Matmul request over publishes the core's clock; waiting acquires it. The GM
// registry consults them (SyncOracle) to find unordered accesses of the same bytes.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "twin_context.h"
#include "twin_launch.h"
#include "twin_sync.h"

namespace AscendC::twin {

inline constexpr int kCrossCoreFlags = 16;     // flag ids 0..15
inline constexpr int kFlagCounterMax = 15;     // a 4-bit counter per flag id
inline constexpr int kMaxMatmulObjs = 4;       // REGIST_MATMUL_OBJ: at most four objects
// SyncAll's hardware implementation sets cross-core flags 11..14 (CrossCoreSetFlag API page):
// a kernel that calls SyncAll must leave them alone.
inline constexpr int kSyncAllFirstFlag = 11;
inline constexpr int kSyncAllLastFlag = 14;

// Memory sizes of the cube side of `spec`, checked by Matmul tilings.
struct CubeMemory {
  uint64_t l1;
  uint64_t l0a;
  uint64_t l0b;
  uint64_t l0c;
  const char* arch;
};
inline CubeMemory CubeOf(const ArchSpec& spec) { return {spec.l1_mix, spec.l0a, spec.l0b, spec.l0c, spec.name}; }

// Thrown into the other cores' threads when one core failed: not reported.
struct LaunchAborted {};

class MixLaunch;
inline thread_local MixLaunch* t_mix = nullptr;

// A Matmul computation an AIV hands to the AIC of its core.
struct MatmulRequest {
  std::function<void()> work;
  std::vector<uint32_t> clock;  // requester's vector clock at hand-over, then the AIC's after
  bool done = false;
};

class MixLaunch final : public SyncOracle {
 public:
  MixLaunch(int64_t cores, uint64_t seed, CubeMemory cube)
      : cores_(cores), agents_(static_cast<size_t>(3 * cores)), rng_(seed), seed_(seed), cube_(cube) {
    const size_t n = agents_.size();
    for (size_t a = 0; a < n; ++a) {
      agents_[a].vc.assign(n, 0);
      agents_[a].vc[a] = 1;
      for (auto& f : agents_[a].flag_vc) f.assign(n, 0);
    }
    halves_.assign(static_cast<size_t>(cores), {});
    mode0_.assign(2, {});
    for (auto& kind : mode0_) {
      for (auto& f : kind) f.vc.assign(n, 0);
    }
    requests_.resize(static_cast<size_t>(cores));
  }

  // Agent numbering: core c has AIC 3c, AIV0 3c + 1, AIV1 3c + 2.
  static int Agent(int64_t core, int role) { return static_cast<int>(3 * core + role); }
  static int64_t CoreOf(int agent) { return agent / 3; }
  static int RoleOf(int agent) { return agent % 3; }
  int64_t Cores() const { return cores_; }
  const CubeMemory& Cube() const { return cube_; }
  uint64_t Seed() const { return seed_; }

  // ---------------------------------------------------------------- SyncOracle
  bool Ordered(int reader, int writer, uint32_t clock) const override {
    return agents_[static_cast<size_t>(reader)].vc[static_cast<size_t>(writer)] >= clock;
  }
  uint32_t ClockOf(int agent) const override {
    return agents_[static_cast<size_t>(agent)].vc[static_cast<size_t>(agent)];
  }
  uint32_t BarriersPassed(int agent) const override { return agents_[static_cast<size_t>(agent)].barriers; }
  uint32_t BarriersCompleted() const override { return barriers_done_; }
  std::string Name(int agent) const override {
    const int role = RoleOf(agent);
    return role == 0 ? Cat("AIC ", CoreOf(agent)) : Cat("AIV ", 2 * CoreOf(agent) + role - 1);
  }

  // ---------------------------------------------------------------- scheduling
  // Runs `body` on every core (3 threads per AI core) and returns when all ended; rethrows the
  // first core's TwinError (prefixed with the core's name) or reports a deadlock.
  void Run(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    threads.reserve(agents_.size());
    for (size_t a = 0; a < agents_.size(); ++a) {
      threads.emplace_back([this, a, &body] { Thread(static_cast<int>(a), body); });
    }
    {
      std::unique_lock<std::mutex> lk(mu_);
      PassTurn(-1);
    }
    for (auto& t : threads) t.join();
    if (!error_.empty()) throw TwinError(error_);
    CheckFlagsDrained();
  }

  // Blocks the calling core until `ready()` holds (evaluated only while no core runs).
  void Block(int me, std::function<bool()> ready, std::function<std::string()> what) {
    if (ready()) return;
    std::unique_lock<std::mutex> lk(mu_);
    agents_[static_cast<size_t>(me)].ready = std::move(ready);
    agents_[static_cast<size_t>(me)].what = std::move(what);
    PassTurn(me);
    WaitTurn(lk, me);
  }

  // ---------------------------------------------------------------- vector clocks
  void Tick(int a) { ++agents_[static_cast<size_t>(a)].vc[static_cast<size_t>(a)]; }
  const std::vector<uint32_t>& Clock(int a) const { return agents_[static_cast<size_t>(a)].vc; }
  void Join(int a, const std::vector<uint32_t>& other) {
    auto& vc = agents_[static_cast<size_t>(a)].vc;
    for (size_t i = 0; i < vc.size(); ++i) vc[i] = vc[i] > other[i] ? vc[i] : other[i];
  }

  // ---------------------------------------------------------------- cross-core flags
  void SetFlag(int me, int mode, int id) {
    Require(id >= 0 && id < kCrossCoreFlags, [&] {
      return Cat("CrossCoreSetFlag(", id, "): flag ids are 0..", kCrossCoreFlags - 1);
    });
    CheckMatmulFlagRange(me, id, "CrossCoreSetFlag");
    CheckSyncAllFlagRange(me, id, "CrossCoreSetFlag");
    const int64_t core = CoreOf(me);
    const int role = RoleOf(me);
    const auto raise = [&](int target) {
      Agent_& t = agents_[static_cast<size_t>(target)];
      Require(t.flags[id] < kFlagCounterMax, [&] {
        return Cat("CrossCoreSetFlag(", id, ") by ", Name(me), ": the flag counter of ", Name(target),
                   " would exceed ", kFlagCounterMax, " pending sets (hangs the device)");
      });
      ++t.flags[id];
      JoinInto(t.flag_vc[id], Clock(me));
    };
    switch (mode) {
      case 0: {  // every core of my type sets; then each of them may pass one wait
        auto& f = mode0_[role == 0 ? 0 : 1][id];
        JoinInto(f.vc, Clock(me));
        if (++f.count == (role == 0 ? cores_ : 2 * cores_)) {
          f.count = 0;
          for (int a = 0; a < static_cast<int>(agents_.size()); ++a) {
            if ((RoleOf(a) == 0) == (role == 0)) {
              Require(agents_[static_cast<size_t>(a)].flags[id] < kFlagCounterMax, [&] {
                return Cat("CrossCoreSetFlag<0>(", id, "): the flag counter of ", Name(a), " would exceed ",
                           kFlagCounterMax);
              });
              ++agents_[static_cast<size_t>(a)].flags[id];
              JoinInto(agents_[static_cast<size_t>(a)].flag_vc[id], f.vc);
            }
          }
        }
        break;
      }
      case 1:  // between the two AIVs of one core
        Require(role != 0, [&] { return Cat("CrossCoreSetFlag<1>(", id, ") on the AIC: mode 1 syncs the two AIVs"); });
        raise(Agent(core, role == 1 ? 2 : 1));
        break;
      case 2:
        if (role == 0) {  // AIC -> both AIVs
          raise(Agent(core, 1));
          raise(Agent(core, 2));
        } else {          // AIV -> AIC: the AIC's counter rises once both AIVs have set
          auto& h = halves_[static_cast<size_t>(core)][id];
          ++h.sets[role - 1];
          h.vc.resize(agents_.size(), 0);
          JoinInto(h.vc, Clock(me));
          while (h.sets[0] > 0 && h.sets[1] > 0) {
            --h.sets[0];
            --h.sets[1];
            Agent_& aic = agents_[static_cast<size_t>(Agent(core, 0))];
            Require(aic.flags[id] < kFlagCounterMax, [&] {
              return Cat("CrossCoreSetFlag<2>(", id, "): the flag counter of ", Name(Agent(core, 0)),
                         " would exceed ", kFlagCounterMax);
            });
            ++aic.flags[id];
            JoinInto(aic.flag_vc[id], h.vc);
          }
        }
        break;
      default:
        throw TwinError(Cat("Ascend C rule violated: CrossCoreSetFlag mode ", mode, " is not 0, 1 or 2"));
    }
    Tick(me);
  }

  void WaitFlag(int me, int id) {
    Require(id >= 0 && id < kCrossCoreFlags, [&] {
      return Cat("CrossCoreWaitFlag(", id, "): flag ids are 0..", kCrossCoreFlags - 1);
    });
    CheckMatmulFlagRange(me, id, "CrossCoreWaitFlag");
    CheckSyncAllFlagRange(me, id, "CrossCoreWaitFlag");
    CountWork(Counter::kCrossCoreWaits);
    Agent_& self = agents_[static_cast<size_t>(me)];
    Block(me, [&self, id] { return self.flags[id] > 0; }, [this, me, id] { return FlagWaitText(me, id); });
    --self.flags[id];
    Join(me, self.flag_vc[id]);
  }

  // ---------------------------------------------------------------- SyncAll
  void SyncAll(int me, bool aiv_only) {
    Require(!(aiv_only && RoleOf(me) == 0), [&] {
      return std::string("SyncAll<true>() (AIV only) called on the AIC; use SyncAll<false>() for all cores");
    });
    Require(syncall_flag_user_ < 0, [&] {
      return Cat("SyncAll by ", Name(me), " after ", Name(syncall_flag_user_), " used cross-core flag id ",
                 syncall_flag_id_, ": SyncAll's hardware implementation owns flag ids ", kSyncAllFirstFlag, "..",
                 kSyncAllLastFlag);
    });
    syncall_used_ = true;
    CountWork(Counter::kSyncAlls);
    Barrier& b = aiv_only ? aiv_barrier_ : all_barrier_;
    const int64_t parties = aiv_only ? 2 * cores_ : 3 * cores_;
    JoinInto(b.acc, Clock(me));
    const uint64_t gen = b.generation;
    if (++b.arrived == parties) {
      b.arrived = 0;
      b.released = b.acc;
      b.acc.assign(agents_.size(), 0);
      ++b.generation;
      ++barriers_done_;
    }
    Block(me, [&b, gen] { return b.generation != gen; },
          [aiv_only] { return Cat("SyncAll<", aiv_only ? "true" : "false", ">() (not every core arrived)"); });
    Join(me, b.released);
    agents_[static_cast<size_t>(me)].barriers = barriers_done_;
    Tick(me);
  }

  // ---------------------------------------------------------------- Matmul service
  void RegisterMatmuls(int me, int count) {
    Agent_& self = agents_[static_cast<size_t>(me)];
    self.matmul_objs += count;
    Require(self.matmul_objs <= kMaxMatmulObjs, [&] {
      return Cat("REGIST_MATMUL_OBJ: ", self.matmul_objs, " Matmul objects on ", Name(me), " (at most ",
                 kMaxMatmulObjs, ")");
    });
    self.open_matmuls += count;
  }
  void EndMatmul(int me) {
    Agent_& self = agents_[static_cast<size_t>(me)];
    Require(self.open_matmuls > 0, [] { return std::string("Matmul::End() twice or without REGIST_MATMUL_OBJ"); });
    --self.open_matmuls;
  }

  // AIV side: hands `work` to the AIC of its core and waits until it is done.
  void Request(int me, std::function<void()> work) {
    CountWork(Counter::kMatmulWaits);
    MatmulRequest req;
    req.work = std::move(work);
    req.clock = Clock(me);
    Tick(me);
    requests_[static_cast<size_t>(CoreOf(me))].push_back(&req);
    Block(me, [&req] { return req.done; },
          [this, me] { return Cat("a Matmul result from ", Name(Agent(CoreOf(me), 0)), " (did the AIC call "
                                  "REGIST_MATMUL_OBJ?)"); });
    Join(me, req.clock);
  }

  // AIC side of REGIST_MATMUL_OBJ: serves its AIVs until both ended every Matmul object.
  void Serve(int me) {
    const int64_t core = CoreOf(me);
    auto& queue = requests_[static_cast<size_t>(core)];
    const Agent_& v0 = agents_[static_cast<size_t>(Agent(core, 1))];
    const Agent_& v1 = agents_[static_cast<size_t>(Agent(core, 2))];
    // An AIV is through with the AIC once it ended every Matmul object it registered (an AIV
    // that ends without Matmul::End() leaves the AIC serving: a reported deadlock).
    const auto through = [](const Agent_& v) { return v.open_matmuls == 0 && (v.done || v.matmul_objs > 0); };
    const auto finished = [&v0, &v1, &through] { return through(v0) && through(v1); };
    while (true) {
      Block(me, [&queue, &finished] { return !queue.empty() || finished(); },
            [this, core] { return Cat("Matmul requests or Matmul::End() from the AIVs of core ", core); });
      if (queue.empty()) return;
      MatmulRequest* req = queue.front();
      queue.pop_front();
      Join(me, req->clock);
      req->work();
      req->clock = Clock(me);
      Tick(me);
      req->done = true;
    }
  }

 private:
  struct Agent_ {
    std::vector<uint32_t> vc;
    uint32_t barriers = 0;
    int flags[kCrossCoreFlags] = {};
    std::vector<uint32_t> flag_vc[kCrossCoreFlags];
    int matmul_objs = 0;
    int open_matmuls = 0;
    std::function<bool()> ready;  // set while blocked
    std::function<std::string()> what;
    bool done = false;
  };
  struct HalfSets {
    int sets[2] = {0, 0};
    std::vector<uint32_t> vc;
  };
  struct Mode0 {
    int64_t count = 0;
    std::vector<uint32_t> vc;
  };
  struct Barrier {
    int64_t arrived = 0;
    uint64_t generation = 0;
    std::vector<uint32_t> acc;
    std::vector<uint32_t> released;
  };

  static void JoinInto(std::vector<uint32_t>& dst, const std::vector<uint32_t>& src) {
    if (dst.size() < src.size()) dst.resize(src.size(), 0);
    for (size_t i = 0; i < src.size(); ++i) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
  }

  // The high-level Matmul uses flag ids [0, 2N) for its N objects: a kernel flag there collides.
  void CheckMatmulFlagRange(int me, int id, const char* op) const {
    const int objs = agents_[static_cast<size_t>(me)].matmul_objs;
    Require(id >= 2 * objs, [&] {
      return Cat(op, "(", id, ") on ", Name(me), ": flag ids [0, ", 2 * objs, ") belong to the ", objs,
                 " registered Matmul object(s)");
    });
  }

  // Flag ids 11..14 belong to SyncAll in a kernel that calls it (either order is a collision).
  void CheckSyncAllFlagRange(int me, int id, const char* op) {
    if (id < kSyncAllFirstFlag || id > kSyncAllLastFlag) return;
    Require(!syncall_used_, [&] {
      return Cat(op, "(", id, ") on ", Name(me), ": this kernel calls SyncAll, whose hardware implementation owns "
                 "flag ids ", kSyncAllFirstFlag, "..", kSyncAllLastFlag);
    });
    if (syncall_flag_user_ < 0) {
      syncall_flag_user_ = me;
      syncall_flag_id_ = id;
    }
  }

  std::string FlagWaitText(int me, int id) const {
    std::string s = Cat("CrossCoreWaitFlag(", id, ")");
    if (RoleOf(me) == 0) {
      const auto& h = halves_[static_cast<size_t>(CoreOf(me))][id];
      if (h.sets[0] != h.sets[1]) {
        s += Cat(" [mode-2 flag set by only AIV ", 2 * CoreOf(me) + (h.sets[0] > h.sets[1] ? 0 : 1),
                 " of this core: the AIC's counter rises when both AIVs set]");
      }
    }
    return s;
  }

  void Thread(int me, const std::function<void(int)>& body) {
    t_mix = this;
    t_agent = me;
    t_oracle = this;
    try {
      {
        std::unique_lock<std::mutex> lk(mu_);
        WaitTurn(lk, me);
      }
      body(me);
      std::unique_lock<std::mutex> lk(mu_);
      agents_[static_cast<size_t>(me)].done = true;
      PassTurn(me);
    } catch (const LaunchAborted&) {
    } catch (const std::exception& e) {
      Abort(Cat(Name(me), ": ", e.what()));
    }
    t_mix = nullptr;
    t_agent = -1;
    t_oracle = nullptr;
  }

  void Abort(const std::string& msg) {
    std::unique_lock<std::mutex> lk(mu_);
    if (error_.empty()) error_ = msg;
    aborted_ = true;
    cv_.notify_all();
  }

  void WaitTurn(std::unique_lock<std::mutex>& lk, int me) {
    cv_.wait(lk, [&] { return turn_ == me || aborted_; });
    if (aborted_) throw LaunchAborted{};
  }

  // With mu_ held by the core giving up the turn: picks the next runnable core.
  void PassTurn(int me) {
    std::vector<int> runnable;
    bool all_done = true;
    for (int a = 0; a < static_cast<int>(agents_.size()); ++a) {
      Agent_& ag = agents_[static_cast<size_t>(a)];
      if (ag.done) continue;
      all_done = false;
      if (!ag.ready || ag.ready()) runnable.push_back(a);
    }
    if (all_done) {
      turn_ = -1;
      cv_.notify_all();
      return;
    }
    if (runnable.empty()) {
      std::string msg = "Ascend C rule violated: deadlock: every unfinished core waits forever (the device hangs):";
      for (int a = 0; a < static_cast<int>(agents_.size()); ++a) {
        const Agent_& ag = agents_[static_cast<size_t>(a)];
        if (!ag.done) msg += Cat("\n  ", Name(a), " waits for ", ag.what ? ag.what() : std::string("?"));
      }
      if (error_.empty()) error_ = msg;
      aborted_ = true;
      cv_.notify_all();
      return;
    }
    int pick = runnable.front();
    if (seed_ != 0) {
      pick = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng_)];
    } else {
      for (const int a : runnable) {
        if (a > me) {
          pick = a;
          break;
        }
      }
    }
    agents_[static_cast<size_t>(pick)].ready = nullptr;
    turn_ = pick;
    cv_.notify_all();
  }

  void CheckFlagsDrained() const {
    for (int a = 0; a < static_cast<int>(agents_.size()); ++a) {
      const Agent_& ag = agents_[static_cast<size_t>(a)];
      for (int id = 0; id < kCrossCoreFlags; ++id) {
        Require(ag.flags[id] == 0, [&] {
          return Cat("CrossCoreSetFlag(", id, ") to ", Name(a), " never waited before the kernel ended");
        });
      }
    }
    for (int64_t c = 0; c < cores_; ++c) {
      for (int id = 0; id < kCrossCoreFlags; ++id) {
        const auto& h = halves_[static_cast<size_t>(c)][id];
        Require(h.sets[0] == h.sets[1], [&] {
          return Cat("mode-2 CrossCoreSetFlag(", id, ") of core ", c, " set by only one AIV (",
                     h.sets[0], " vs ", h.sets[1], " sets): the AIC never sees it");
        });
      }
    }
  }

  int64_t cores_;
  std::vector<Agent_> agents_;
  std::vector<std::array<HalfSets, kCrossCoreFlags>> halves_;
  std::vector<std::array<Mode0, kCrossCoreFlags>> mode0_;
  std::vector<std::deque<MatmulRequest*>> requests_;
  Barrier aiv_barrier_;
  Barrier all_barrier_;
  uint32_t barriers_done_ = 0;
  bool syncall_used_ = false;
  int syncall_flag_user_ = -1;  // the first core that used a flag id SyncAll owns, and the id
  int syncall_flag_id_ = -1;
  std::mt19937_64 rng_;
  uint64_t seed_;
  CubeMemory cube_;
  std::mutex mu_;
  std::condition_variable cv_;
  int turn_ = -2;
  bool aborted_ = false;
  std::string error_;
};

inline MixLaunch& CurrentMix(const char* op) {
  Require(t_mix != nullptr, [&] { return Cat(op, " outside a mixed (AIC + AIV) launch"); });
  return *t_mix;
}

struct MixStats {
  uint64_t ub_peak_bytes = 0;
  int64_t cores = 0;
};

// Runs `kernel` as a mixed launch of `block_dim` AI cores (3 threads each) of NPU architecture
// `arch`. Each core gets a fresh BlockContext (UB only on the AIVs, the arch's mixed-kernel
// share); the end-of-kernel checks of vector launches apply to every core, plus: atomic mode
// off, every cross-core flag waited.
template <typename Kernel>
MixStats LaunchMix(int64_t block_dim, uint64_t tiling_key, Arch arch, uint64_t seed, Kernel&& kernel) {
  Require(block_dim >= 1 && block_dim <= kMaxBlockDim,
          [&] { return Cat("launch with blockDim ", block_dim, " outside [1, ", kMaxBlockDim, "]"); });
  const ArchSpec& spec = SpecOf(arch);
  MixLaunch mix(block_dim, seed, CubeOf(spec));
  GmRegistry* gm = &GmRegistry::Instance();
  std::vector<uint64_t> peak(static_cast<size_t>(3 * block_dim), 0);
  auto& counters = LastLaunchCounters();
  counters.assign(static_cast<size_t>(3 * block_dim), CoreCounters{});
  mix.Run([&](int me) {
    GmRegistry::t_shared = gm;
    const int role = MixLaunch::RoleOf(me);
    const int64_t core = MixLaunch::CoreOf(me);
    const int64_t idx = role == 0 ? core : 2 * core + role - 1;
    BlockContext ctx(idx, block_dim, tiling_key, spec, role == 0 ? kUbAlign : spec.ub_mix);
    ctx.kind = role == 0 ? CoreKind::kAic : CoreKind::kAiv;
    ctx.sub_idx = role == 0 ? 0 : role - 1;
    {
      CurrentBlockGuard guard(ctx);
      kernel();
    }
    CheckBlockEnd(ctx);
    Require(ctx.atomic == AtomicType::kNone, [] {
      return std::string("atomic add mode still on when the kernel returned (call SetAtomicNone())");
    });
    peak[static_cast<size_t>(me)] = ctx.UbUsed();
    counters[static_cast<size_t>(me)] = CoreCounters{static_cast<int>(ctx.kind), idx, ctx.counters};
    GmRegistry::t_shared = nullptr;
  });
  MixStats s;
  for (const uint64_t p : peak) s.ub_peak_bytes = p > s.ub_peak_bytes ? p : s.ub_peak_bytes;
  s.cores = block_dim;
  return s;
}

}  // namespace AscendC::twin

namespace AscendC {

namespace twin {
// On a device the two flavours of a mixed kernel are compiled separately and these are
// constants; on the twin they ask the running core.
inline bool IsAic() { return Current().kind == CoreKind::kAic; }
inline bool IsAiv() { return Current().kind != CoreKind::kAic; }
}  // namespace twin

inline int64_t GetSubBlockIdx() { return twin::Current().sub_idx; }
inline int64_t GetTaskRatio() { return twin::Current().kind == twin::CoreKind::kAiv ? 2 : 1; }

// The pipe that sets the flag: modes 0..2 take V, M, MTE1, MTE2, MTE3 or FIX, never S or ALL
// (CrossCoreSetFlag API page).
template <uint8_t modeId, pipe_t pipe>
void CrossCoreSetFlag(uint16_t flagId) {
  twin::Require(pipe != PIPE_S && pipe != PIPE_ALL, [&] {
    return twin::Cat("CrossCoreSetFlag<", int{modeId}, ", ", pipe == PIPE_S ? "PIPE_S" : "PIPE_ALL", ">(", flagId,
                     "): modes 0..2 are set from PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3 or PIPE_FIX");
  });
  twin::CurrentMix("CrossCoreSetFlag").SetFlag(twin::t_agent, modeId, flagId);
}
inline void CrossCoreWaitFlag(uint16_t flagId) {
  twin::CurrentMix("CrossCoreWaitFlag").WaitFlag(twin::t_agent, flagId);
}

// isAIVOnly = true: every AIV of the launch; false: every AIC and AIV.
template <bool isAIVOnly = true>
void SyncAll() {
  twin::CurrentMix("SyncAll").SyncAll(twin::t_agent, isAIVOnly);
}

}  // namespace AscendC

// On the device `ASCEND_IS_AIC` is `constexpr(<core type> == AIC)` (impl/utils/sys_macros.h), so it
// is only ever written as `if ASCEND_IS_AIC { ... }` (an `if constexpr`), never inside an
// expression (`if (ASCEND_IS_AIV && x)`, `bool b = ASCEND_IS_AIC;`). The twin asks at run time
// (one build runs both flavours); as an if-statement with initializer it compiles in exactly the
// places the device form does.
#define ASCEND_IS_AIC (const bool ascend_is_aic_twin_ = ::AscendC::twin::IsAic(); ascend_is_aic_twin_)
#define ASCEND_IS_AIV (const bool ascend_is_aiv_twin_ = ::AscendC::twin::IsAiv(); ascend_is_aiv_twin_)
