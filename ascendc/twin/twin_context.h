// Twin state of one simulated AI core (the "block") and of global memory.
// A launch runs blocks one after another; each gets a fresh BlockContext holding its unified
// buffer (UB), the event-flag state and the pipe-hazard bitmaps the sync checks use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "twin_error.h"

namespace AscendC::twin {

inline constexpr uint64_t kUbAlign = 32;            // UB addresses and DataCopy lengths
inline constexpr uint64_t kDefaultUbBytes = 192 * 1024;  // Atlas A2 AI Core vector UB
inline constexpr int kEventIdsPerType = 8;

// ---------------------------------------------------------------- global memory
// Every GM buffer a kernel may touch is registered by the launcher's caller with its exact size,
// so any access outside an allocation throws instead of reading a neighbour. Output buffers can
// count writes per byte, which proves each element is written exactly once across all cores.
struct GmBuffer {
  const uint8_t* base = nullptr;
  uint64_t bytes = 0;
  std::string name;
  bool track_writes = false;
  std::vector<uint8_t> write_count;  // saturates at 255
};

class GmRegistry {
 public:
  static GmRegistry& Instance() {
    static thread_local GmRegistry registry;
    return registry;
  }
  void Add(const void* base, uint64_t bytes, std::string name, bool track_writes) {
    GmBuffer b;
    b.base = static_cast<const uint8_t*>(base);
    b.bytes = bytes;
    b.name = std::move(name);
    b.track_writes = track_writes;
    if (track_writes) b.write_count.assign(bytes, 0);
    buffers_.push_back(std::move(b));
  }
  void Clear() { buffers_.clear(); }
  const std::vector<GmBuffer>& Buffers() const { return buffers_; }

  // The buffer holding [p, p + bytes); throws when the range leaves every allocation.
  GmBuffer& Find(const void* p, uint64_t bytes, const char* what) {
    const auto* q = static_cast<const uint8_t*>(p);
    for (auto& b : buffers_) {
      if (q >= b.base && q + bytes <= b.base + b.bytes) return b;
    }
    throw TwinError(Cat("Ascend C rule violated: ", what, " touches GM [", p, ", +", bytes,
                        " bytes) outside every allocated GM buffer"));
  }
  void NoteWrite(const void* p, uint64_t bytes) {
    GmBuffer& b = Find(p, bytes, "GM write");
    if (!b.track_writes) return;
    const auto first = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - b.base);
    for (uint64_t i = first; i < first + bytes; ++i) {
      if (b.write_count[i] < 255) ++b.write_count[i];
    }
  }

 private:
  std::vector<GmBuffer> buffers_;
};

// ---------------------------------------------------------------- pipe hazards
// One bit per 32-byte UB block and producer->consumer pipe pair. A producer op marks the blocks
// it wrote; the matching sync (queue EnQue/DeQue, SetFlag/WaitFlag, PipeBarrier<PIPE_ALL>)
// clears them; a consumer touching a marked block read data the hardware may not have written.
enum class Hazard { kMte2ToV, kVToMte3, kVToS, kSToV, kCount };

inline const char* HazardName(Hazard h) {
  switch (h) {
    case Hazard::kMte2ToV: return "MTE2 (GM->UB copy) -> V (vector op) without EnQue/DeQue or MTE2_V flag";
    case Hazard::kVToMte3: return "V (vector op) -> MTE3 (UB->GM copy) without EnQue/DeQue or V_MTE3 flag";
    case Hazard::kVToS: return "V (vector op) -> S (scalar GetValue) without V_S flag";
    case Hazard::kSToV: return "S (scalar SetValue) -> V (vector op) without S_V flag";
    default: return "?";
  }
}

struct UbDeleter {
  void operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t{64}); }
};

class BlockContext {
 public:
  BlockContext(int64_t block_idx, int64_t block_num, uint64_t tiling_key, uint64_t ub_bytes)
      : block_idx_(block_idx), block_num_(block_num), tiling_key_(tiling_key),
        ub_capacity_(ub_bytes),
        ub_(static_cast<uint8_t*>(::operator new(ub_bytes, std::align_val_t{64}))) {
    // 0xFF bytes read as NaN in every float type: a kernel reading UB it never filled shows it.
    std::fill(ub_.get(), ub_.get() + ub_bytes, uint8_t{0xFF});
    for (auto& bits : hazards_) bits.assign(ub_bytes / kUbAlign + 1, 0);
  }

  int64_t BlockIdx() const { return block_idx_; }
  int64_t BlockNum() const { return block_num_; }
  uint64_t TilingKey() const { return tiling_key_; }
  uint64_t UbCapacity() const { return ub_capacity_; }
  uint64_t UbUsed() const { return ub_used_; }
  uint8_t* Ub() const { return ub_.get(); }

  // Bump allocation of UB as TPipe::InitBuffer does; returns the byte offset.
  uint64_t AllocUb(uint64_t bytes, const char* who) {
    const uint64_t rounded = (bytes + kUbAlign - 1) / kUbAlign * kUbAlign;
    Require(ub_used_ + rounded <= ub_capacity_, [&] {
      return Cat(who, ": unified buffer overflow: ", ub_used_, " bytes in use + ", rounded,
                 " requested > capacity ", ub_capacity_, " bytes");
    });
    const uint64_t offset = ub_used_;
    ub_used_ += rounded;
    return offset;
  }

  // --- pipe hazards
  void Mark(Hazard h, uint64_t offset, uint64_t bytes) {
    auto& bits = hazards_[static_cast<int>(h)];
    for (uint64_t blk = offset / kUbAlign; blk * kUbAlign < offset + bytes; ++blk) bits[blk] = 1;
  }
  void ClearRange(Hazard h, uint64_t offset, uint64_t bytes) {
    auto& bits = hazards_[static_cast<int>(h)];
    for (uint64_t blk = offset / kUbAlign; blk * kUbAlign < offset + bytes; ++blk) bits[blk] = 0;
  }
  void ClearAll(Hazard h) {
    auto& bits = hazards_[static_cast<int>(h)];
    std::fill(bits.begin(), bits.end(), uint8_t{0});
  }
  void CheckClear(Hazard h, uint64_t offset, uint64_t bytes, const char* op) const {
    const auto& bits = hazards_[static_cast<int>(h)];
    for (uint64_t blk = offset / kUbAlign; blk * kUbAlign < offset + bytes; ++blk) {
      Require(bits[blk] == 0, [&] {
        return Cat(op, ": pipe hazard at UB offset ", blk * kUbAlign, ": ", HazardName(h));
      });
    }
  }

  // --- event flags: SetFlag<evt>(id) must be matched by exactly one later WaitFlag<evt>(id)
  void SetFlag(int event, int id, const char* name) {
    CheckEventId(id, name);
    auto& state = flags_[{event, id}];
    Require(state.pending == 0, [&] {
      return Cat("SetFlag<", name, ">(", id, ") set twice without a WaitFlag in between");
    });
    state = FlagState{1, name};
  }
  void WaitFlag(int event, int id, const char* name) {
    CheckEventId(id, name);
    auto& state = flags_[{event, id}];
    Require(state.pending == 1, [&] {
      return Cat("WaitFlag<", name, ">(", id, ") without a preceding SetFlag (would hang the core)");
    });
    state.pending = 0;
  }
  bool FlagPending(int event, int id) const {
    const auto it = flags_.find({event, id});
    return it != flags_.end() && it->second.pending != 0;
  }
  // "SetFlag<EVENT>(id)" of every SetFlag not yet waited.
  std::vector<std::string> PendingFlags() const {
    std::vector<std::string> out;
    for (const auto& [key, state] : flags_) {
      if (state.pending) out.push_back(Cat("SetFlag<", state.name, ">(", key.second, ")"));
    }
    return out;
  }

  // --- objects the block must release before it ends (queues report un-freed tensors here,
  // from their destructors, which must not throw)
  void ReportLeak(std::string what) { leaks_.push_back(std::move(what)); }
  const std::vector<std::string>& Leaks() const { return leaks_; }

  int live_pipes = 0;
  void* pipe = nullptr;  // the block's TPipe, for GetTPipePtr()

 private:
  static void CheckEventId(int id, const char* name) {
    Require(id >= 0 && id < kEventIdsPerType,
            [&] { return Cat("event id ", id, " of ", name, " outside [0, ", kEventIdsPerType, ")"); });
  }

  int64_t block_idx_;
  int64_t block_num_;
  uint64_t tiling_key_;
  uint64_t ub_capacity_;
  uint64_t ub_used_ = 0;
  std::unique_ptr<uint8_t, UbDeleter> ub_;
  std::vector<uint8_t> hazards_[static_cast<int>(Hazard::kCount)];
  struct FlagState {
    int pending = 0;
    const char* name = "";
  };
  std::map<std::pair<int, int>, FlagState> flags_;
  std::vector<std::string> leaks_;
};

inline thread_local BlockContext* t_current_block = nullptr;

inline BlockContext& Current() {
  Require(t_current_block != nullptr,
          [] { return std::string("Ascend C API called outside a kernel launch (no current block)"); });
  return *t_current_block;
}

}  // namespace AscendC::twin
