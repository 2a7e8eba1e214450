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

#include "twin_arch.h"
#include "twin_error.h"

namespace AscendC::twin {

inline constexpr uint64_t kUbAlign = 32;            // UB addresses and DataCopy lengths
inline constexpr int kEventIdsPerType = 8;

// Which core of an AI core runs the code: kVector for vector-only launches (twin_launch.h),
// kAic / kAiv for the cores of a mixed launch (twin_mix.h).
enum class CoreKind { kVector, kAic, kAiv };

// Atomic mode of a core's GM writes (SetAtomicAdd<T>() / SetAtomicNone()).
enum class AtomicType { kNone, kFloat, kHalf, kBf16, kInt32 };

// ---------------------------------------------------------------- work counters
// What one core did, for the cost estimate on paper (scripts/bench/ascend_roofline.py): counted
// as the APIs run and never consulted by a rule, so counting changes no result. The unit of each:
//   cube_macs_f16/bf16  Matmul multiply-adds by operand dtype, M * N * K per IterateAll (on the AIC);
//   matmul_calls        IterateAll calls served (on the AIC);
//   vector_elems        elements per vector API call: count for element-wise ops, Cast and
//                       Duplicate, the source count of a reduction, 32 per Sort32 repeat;
//   vector_calls        vector API calls that did work (count > 0);
//   gm_read_bytes       GM bytes read: DataCopy(Pad) GM->UB, Matmul A and B (each operand once: the
//                       traffic a Matmul cannot avoid), scalar GetValue;
//   gm_write_bytes      GM bytes written: DataCopy(Pad) UB->GM, Matmul C, scalar SetValue;
//   gm_atomic_bytes     the part of gm_write_bytes written as atomic adds;
//   gm_workspace_read_bytes / gm_workspace_write_bytes
//                       the part of gm_read_bytes / gm_write_bytes in workspaces (the kernel's own
//                       scratch GM: on a device it may stay in L2; inputs and outputs are the rest);
//   gm_scalar_accesses  scalar GlobalTensor GetValue / SetValue calls;
//   queue_waits         TQue::DeQue calls (a pipe waits for the producing pipe);
//   flag_waits          WaitFlag calls (intra-core pipe events);
//   pipe_barriers       PipeBarrier calls;
//   cross_core_waits    CrossCoreWaitFlag calls;
//   sync_alls           SyncAll calls;
//   matmul_waits        IterateAll calls an AIV waited for (the AIC computes, the AIV blocks).
enum class Counter : int {
  kCubeMacsF16, kCubeMacsBf16, kMatmulCalls, kVectorElems, kVectorCalls, kGmReadBytes, kGmWriteBytes,
  kGmAtomicBytes, kGmWorkspaceReadBytes, kGmWorkspaceWriteBytes, kGmScalarAccesses, kQueueWaits, kFlagWaits,
  kPipeBarriers, kCrossCoreWaits, kSyncAlls, kMatmulWaits, kCount
};
inline constexpr const char* kCounterNames[] = {
    "cube_macs_f16", "cube_macs_bf16", "matmul_calls", "vector_elems", "vector_calls", "gm_read_bytes",
    "gm_write_bytes", "gm_atomic_bytes", "gm_workspace_read_bytes", "gm_workspace_write_bytes",
    "gm_scalar_accesses", "queue_waits", "flag_waits", "pipe_barriers", "cross_core_waits", "sync_alls",
    "matmul_waits"};
static_assert(sizeof(kCounterNames) / sizeof(kCounterNames[0]) == static_cast<size_t>(Counter::kCount));

struct Counters {
  uint64_t value[static_cast<int>(Counter::kCount)] = {};
};

// The running core's counters (set with the current block, twin_launch.h); null outside a launch.
inline thread_local Counters* t_counters = nullptr;

inline void CountWork(Counter c, uint64_t n = 1) {
  if (t_counters != nullptr) t_counters->value[static_cast<int>(c)] += n;
}

// One core's counters at the end of a launch: kind (twin::CoreKind as int) and GetBlockIdx().
struct CoreCounters {
  int kind = 0;
  int64_t block_idx = 0;
  Counters counters;
};

// The counters of the last launch started on this thread, one entry per core (vector launches:
// per block; mixed launches: AIC 0, AIV 0, AIV 1, AIC 1, ...). Replaced by every launch.
inline std::vector<CoreCounters>& LastLaunchCounters() {
  static thread_local std::vector<CoreCounters> last;
  return last;
}

// ---------------------------------------------------------------- global memory
// Every GM buffer a kernel may touch is registered by the launcher's caller with its exact size,
// so any access outside an allocation throws instead of reading a neighbour. Output buffers can
// count writes per byte, which proves each element is written exactly once across all cores.
//
// In a mixed launch (twin_mix.h) every access is also checked against the cores' ordering: per
// 2-byte granule the registry keeps the last writer (a core of the launch), that core's clock at
// the write and whether it was an atomic add. A read or write by another core must be ordered
// after it by a cross-core flag, SyncAll or Matmul hand-off (a vector clock, SyncOracle), else it
// is a race; a workspace or output granule nobody wrote must not be read (fresh memory is
// poisoned on the device too), and an atomic add needs a target somebody wrote (zeroed) first.
enum class GmKind { kInput, kOutput, kWorkspace };

// What the mixed launcher knows about the order between its cores.
class SyncOracle {
 public:
  virtual ~SyncOracle() = default;
  // Whether `writer`'s accesses up to its clock value `clock` happen before `reader`'s next one.
  virtual bool Ordered(int reader, int writer, uint32_t clock) const = 0;
  virtual uint32_t ClockOf(int agent) const = 0;
  // SyncAll barriers `agent` has passed / barriers completed by the launch so far.
  virtual uint32_t BarriersPassed(int agent) const = 0;
  virtual uint32_t BarriersCompleted() const = 0;
  virtual std::string Name(int agent) const = 0;
};

inline thread_local SyncOracle* t_oracle = nullptr;
inline thread_local int t_agent = -1;

inline constexpr uint64_t kGranule = 2;        // every GM access is whole 16-bit elements or wider
inline constexpr uint64_t kMetaPage = 4096;    // metadata is allocated per touched 4 KiB page
inline constexpr int16_t kNoWriter = -1;
inline constexpr int16_t kManyAtomic = -2;     // atomic adds of several unordered cores

struct GranuleMeta {
  int16_t writer = kNoWriter;
  uint8_t atomic = 0;
  uint32_t clock = 0;  // writer's clock, or for kManyAtomic the barriers completed at the write
};

struct GmBuffer {
  const uint8_t* base = nullptr;
  uint64_t bytes = 0;
  std::string name;
  bool track_writes = false;
  GmKind kind = GmKind::kInput;
  std::vector<uint8_t> write_count;  // saturates at 255
  std::vector<std::unique_ptr<GranuleMeta[]>> pages;  // race metadata, lazily per page

  GranuleMeta& Meta(uint64_t offset) {
    const uint64_t page = offset / kMetaPage;
    if (pages.empty()) pages.resize((bytes + kMetaPage - 1) / kMetaPage);
    if (!pages[page]) pages[page] = std::make_unique<GranuleMeta[]>(kMetaPage / kGranule);
    return pages[page][(offset % kMetaPage) / kGranule];
  }
};

class GmRegistry {
 public:
  static GmRegistry& Instance() {
    static thread_local GmRegistry registry;
    return t_shared != nullptr ? *t_shared : registry;
  }
  // The cores of a mixed launch run on their own threads and share the launching thread's GM.
  static inline thread_local GmRegistry* t_shared = nullptr;

  void Add(const void* base, uint64_t bytes, std::string name, bool track_writes,
           GmKind kind = GmKind::kInput) {
    GmBuffer b;
    b.base = static_cast<const uint8_t*>(base);
    b.bytes = bytes;
    b.name = std::move(name);
    b.track_writes = track_writes;
    b.kind = track_writes && kind == GmKind::kInput ? GmKind::kOutput : kind;
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
  void NoteWrite(const void* p, uint64_t bytes, const char* what = "GM write", bool atomic = false) {
    GmBuffer& b = Find(p, bytes, what);
    CountWork(Counter::kGmWriteBytes, bytes);
    if (atomic) CountWork(Counter::kGmAtomicBytes, bytes);
    if (b.kind == GmKind::kWorkspace) CountWork(Counter::kGmWorkspaceWriteBytes, bytes);
    const auto first = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - b.base);
    if (t_oracle != nullptr) CheckWrite(b, first, bytes, what, atomic);
    if (!b.track_writes) return;
    for (uint64_t i = first; i < first + bytes; ++i) {
      if (b.write_count[i] < 255) ++b.write_count[i];
    }
  }
  void NoteRead(const void* p, uint64_t bytes, const char* what) {
    GmBuffer& b = Find(p, bytes, what);
    CountWork(Counter::kGmReadBytes, bytes);
    if (b.kind == GmKind::kWorkspace) CountWork(Counter::kGmWorkspaceReadBytes, bytes);
    if (t_oracle == nullptr || b.kind == GmKind::kInput) return;
    const auto first = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - b.base);
    const int me = t_agent;
    for (uint64_t off = first / kGranule * kGranule; off < first + bytes; off += kGranule) {
      const GranuleMeta& m = b.Meta(off);
      Require(m.writer != kNoWriter, [&] {
        return Cat(what, " by ", t_oracle->Name(me), " reads ", b.name, " byte ", off,
                   " that nobody wrote (fresh GM is garbage: NaN-poisoned on the twin)");
      });
      Require(Ordered(m, me), [&] {
        return Cat(what, " by ", t_oracle->Name(me), " reads ", b.name, " byte ", off, " written by ",
                   WriterName(m), " with no cross-core flag or SyncAll ordering them (race)");
      });
    }
  }

 private:
  static bool Ordered(const GranuleMeta& m, int me) {
    if (m.writer == kManyAtomic) return t_oracle->BarriersPassed(me) > m.clock;
    return m.writer == me || t_oracle->Ordered(me, m.writer, m.clock);
  }
  static std::string WriterName(const GranuleMeta& m) {
    return m.writer == kManyAtomic ? std::string("atomic adds of several cores") : t_oracle->Name(m.writer);
  }

  void CheckWrite(GmBuffer& b, uint64_t first, uint64_t bytes, const char* what, bool atomic) {
    const int me = t_agent;
    Require(b.kind != GmKind::kInput, [&] {
      return Cat(what, " by ", t_oracle->Name(me), " writes the input buffer ", b.name);
    });
    for (uint64_t off = first / kGranule * kGranule; off < first + bytes; off += kGranule) {
      GranuleMeta& m = b.Meta(off);
      const GranuleMeta mine{static_cast<int16_t>(me), static_cast<uint8_t>(atomic ? 1 : 0), t_oracle->ClockOf(me)};
      if (atomic) {
        Require(m.writer != kNoWriter, [&] {
          return Cat(what, " by ", t_oracle->Name(me), ": atomic add into ", b.name, " byte ", off,
                     " that was never written (zero the target first)");
        });
        if (Ordered(m, me)) {
          m = mine;
        } else {
          Require(m.atomic != 0, [&] {
            return Cat(what, " by ", t_oracle->Name(me), ": atomic add into ", b.name, " byte ", off,
                       " races with the plain write of ", WriterName(m),
                       " (e.g. zeroing) without a flag or SyncAll between them");
          });
          m = GranuleMeta{kManyAtomic, 1, t_oracle->BarriersCompleted()};
        }
      } else {
        Require(m.writer == kNoWriter || Ordered(m, me), [&] {
          return Cat(what, " by ", t_oracle->Name(me), " writes ", b.name, " byte ", off, " also written by ",
                     WriterName(m), " with no atomics and no flag or SyncAll ordering them (race)");
        });
        m = mine;
      }
    }
  }

  std::vector<GmBuffer> buffers_;
};

// ---------------------------------------------------------------- pipe hazards
// One bit per 32-byte UB block and producer->consumer pipe pair. A producer op marks the blocks
// it wrote; the matching sync (queue EnQue/DeQue, SetFlag/WaitFlag, PipeBarrier<PIPE_ALL>)
// clears them; a consumer touching a marked block read data the hardware may not have written.
enum class Hazard { kMte2ToV, kVToMte3, kVToS, kSToV, kMte2ToMte3, kCount };

inline const char* HazardName(Hazard h) {
  switch (h) {
    case Hazard::kMte2ToV: return "MTE2 (GM->UB copy) -> V (vector op) without EnQue/DeQue or MTE2_V flag";
    case Hazard::kVToMte3: return "V (vector op) -> MTE3 (UB->GM copy) without EnQue/DeQue or V_MTE3 flag";
    case Hazard::kVToS: return "V (vector op) -> S (scalar GetValue) without V_S flag";
    case Hazard::kSToV: return "S (scalar SetValue) -> V (vector op) without S_V flag";
    case Hazard::kMte2ToMte3: return "MTE2 (GM->UB copy) -> MTE3 (UB->GM copy) without a queue or MTE2_MTE3 flag";
    default: return "?";
  }
}

struct UbDeleter {
  void operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t{64}); }
};

class BlockContext {
 public:
  // `ub_bytes`: the UB this core may allocate (the launcher derives it from `spec`).
  BlockContext(int64_t block_idx, int64_t block_num, uint64_t tiling_key, const ArchSpec& spec, uint64_t ub_bytes)
      : block_idx_(block_idx), block_num_(block_num), tiling_key_(tiling_key), spec_(&spec),
        ub_capacity_(ub_bytes),
        ub_(static_cast<uint8_t*>(::operator new(ub_bytes, std::align_val_t{64}))) {
    // 0xFF bytes read as NaN in every float type: a kernel reading UB it never filled shows it.
    std::fill(ub_.get(), ub_.get() + ub_bytes, uint8_t{0xFF});
    for (auto& bits : hazards_) bits.assign(ub_bytes / kUbAlign + 1, 0);
  }

  int64_t BlockIdx() const { return block_idx_; }
  int64_t BlockNum() const { return block_num_; }
  uint64_t TilingKey() const { return tiling_key_; }
  const ArchSpec& Spec() const { return *spec_; }
  uint64_t UbCapacity() const { return ub_capacity_; }
  uint64_t UbUsed() const { return ub_used_; }
  uint8_t* Ub() const { return ub_.get(); }
  Counters counters;  // what this core did (twin::CountWork)

  // Bump allocation of UB as TPipe::InitBuffer does; returns the byte offset. `what` names the
  // buffer in the message ("TQue VECIN", "TBuf").
  uint64_t AllocUb(uint64_t bytes, const char* who, const char* what) {
    RequireVector(who);
    const uint64_t rounded = (bytes + kUbAlign - 1) / kUbAlign * kUbAlign;
    Require(ub_used_ + rounded <= ub_capacity_, [&] {
      return Cat(who, ": unified buffer overflow on NPU arch ", spec_->name, ": ", what, " needs ", rounded,
                 " bytes with ", ub_used_, " in use; capacity ", ub_capacity_, " bytes",
                 kind == CoreKind::kAiv && ub_capacity_ < spec_->ub ? " (a mixed kernel's AIV: the Matmul keeps "
                                                                      "the end of UB)" : "");
    });
    const uint64_t offset = ub_used_;
    ub_used_ += rounded;
    return offset;
  }

  // Buffers a TPipe manages: every TQue buffer and every TBuf counts one (QBUF_MAX_LEN); TQue
  // buffers also take a per-position event id (2201) or a buffer id (3510).
  void CountPipeBuffers(int buffers, int queue_position, const char* who, const char* what) {
    pipe_buffers_ += buffers;
    Require(pipe_buffers_ <= spec_->max_pipe_buffers, [&] {
      return Cat(who, ": ", what, " brings the TPipe to ", pipe_buffers_, " buffers; NPU arch ", spec_->name,
                 " allows at most ", spec_->max_pipe_buffers, " (TQue buffers + TBufs)");
    });
    if (queue_position < 0) return;
    queue_buffers_ += buffers;
    queue_buffers_at_[queue_position] += buffers;
    Require(spec_->queue_buffers_per_position == 0 ||
                queue_buffers_at_[queue_position] <= spec_->queue_buffers_per_position,
            [&] {
              return Cat(who, ": ", what, " brings its TPosition to ", queue_buffers_at_[queue_position],
                         " TQue buffers; NPU arch ", spec_->name, " has ", spec_->queue_buffers_per_position,
                         " event ids per position, one per TQue buffer (use TBuf or fewer buffers)");
            });
    Require(spec_->queue_buffer_ids == 0 || queue_buffers_ <= spec_->queue_buffer_ids, [&] {
      return Cat(who, ": ", what, " brings the core to ", queue_buffers_, " TQue buffers; NPU arch ", spec_->name,
                 " has ", spec_->queue_buffer_ids, " buffer ids, one per TQue buffer (use TBuf or fewer buffers)");
    });
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
    CountWork(Counter::kFlagWaits);
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

  // --- mixed launches
  CoreKind kind = CoreKind::kVector;
  int64_t sub_idx = 0;     // GetSubBlockIdx(): which AIV of its core
  AtomicType atomic = AtomicType::kNone;
  int matmul_objs = 0;     // Matmul objects registered on this core

  // Vector / UB APIs exist only on vector cores (on an AIC they are silent no-ops on the device).
  void RequireVector(const char* op) const {
    Require(kind != CoreKind::kAic, [&] {
      return Cat(op, " called on the AIC (cube core): vector and UB APIs run only on an AIV");
    });
  }

 private:
  static void CheckEventId(int id, const char* name) {
    Require(id >= 0 && id < kEventIdsPerType,
            [&] { return Cat("event id ", id, " of ", name, " outside [0, ", kEventIdsPerType, ")"); });
  }

  int64_t block_idx_;
  int64_t block_num_;
  uint64_t tiling_key_;
  const ArchSpec* spec_;
  uint64_t ub_capacity_;
  int pipe_buffers_ = 0;
  int queue_buffers_ = 0;
  std::map<int, int> queue_buffers_at_;  // TQue buffers per TPosition
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
