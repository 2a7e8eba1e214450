// Twin of a kernel launch `kernel<<<blockDim, ...>>>`: runs the blocks one after another on the
// calling thread, each with a fresh UB, and checks what must hold when a block ends (every
// queue tensor freed, every SetFlag waited, the TPipe gone).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "twin_context.h"

namespace AscendC {

inline int64_t GetBlockIdx() { return twin::Current().BlockIdx(); }
inline int64_t GetBlockNum() { return twin::Current().BlockNum(); }

namespace twin {

inline constexpr int64_t kMaxBlockDim = 65535;

struct LaunchStats {
  uint64_t ub_peak_bytes = 0;  // the largest UB allocation of any block
  int64_t blocks = 0;
};

// Makes `ctx` the current block for the guard's lifetime, also when the kernel throws.
class CurrentBlockGuard {
 public:
  explicit CurrentBlockGuard(BlockContext& ctx) {
    t_current_block = &ctx;
    t_counters = &ctx.counters;
  }
  CurrentBlockGuard(const CurrentBlockGuard&) = delete;
  CurrentBlockGuard& operator=(const CurrentBlockGuard&) = delete;
  ~CurrentBlockGuard() {
    t_current_block = nullptr;
    t_counters = nullptr;
  }
};

inline void CheckBlockEnd(const BlockContext& ctx) {
  const auto fail = [&](const std::string& what) {
    throw TwinError(Cat("block ", ctx.BlockIdx(), ": Ascend C rule violated: ", what));
  };
  for (const auto& leak : ctx.Leaks()) fail(leak);
  for (const auto& flag : ctx.PendingFlags()) fail(flag + " never waited before the kernel ended");
  if (ctx.live_pipes != 0) fail("TPipe outlived the kernel");
}

// Runs `kernel` on `block_dim` vector cores of NPU architecture `arch` (its UB capacity and
// rules, twin_arch.h).
template <typename Kernel>
LaunchStats Launch(int64_t block_dim, uint64_t tiling_key, Arch arch, Kernel&& kernel) {
  Require(block_dim >= 1 && block_dim <= kMaxBlockDim,
          [&] { return Cat("launch with blockDim ", block_dim, " outside [1, ", kMaxBlockDim, "]"); });
  const ArchSpec& spec = SpecOf(arch);
  LaunchStats stats;
  auto& counters = LastLaunchCounters();
  counters.assign(static_cast<size_t>(block_dim), CoreCounters{});
  for (int64_t idx = 0; idx < block_dim; ++idx) {
    BlockContext ctx(idx, block_dim, tiling_key, spec, spec.ub);
    {
      CurrentBlockGuard guard(ctx);
      try {
        kernel();
      } catch (const TwinError& e) {
        throw TwinError(Cat("block ", idx, ": ", e.what()));
      }
    }
    CheckBlockEnd(ctx);
    counters[static_cast<size_t>(idx)] = CoreCounters{static_cast<int>(ctx.kind), idx, ctx.counters};
    stats.ub_peak_bytes = std::max(stats.ub_peak_bytes, ctx.UbUsed());
    ++stats.blocks;
  }
  return stats;
}

// What GET_TILING_DATA does on the device: copy the host-written struct out of GM.
template <typename Tiling>
Tiling LoadTiling(const uint8_t* tiling) {
  Require(tiling != nullptr, [] { return std::string("GET_TILING_DATA with a null tiling pointer"); });
  Tiling t;
  std::memcpy(&t, tiling, sizeof(Tiling));
  return t;
}

}  // namespace twin
}  // namespace AscendC
