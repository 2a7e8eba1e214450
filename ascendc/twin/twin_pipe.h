// Twin of TPipe, TQue and TBuf: UB allocation and the tensor life cycle
//   AllocTensor -> (write) -> EnQue -> DeQue -> (read) -> FreeTensor
// with the device's failure modes turned into exceptions: UB overflow, allocating from a queue
// whose buffers are all in use or dequeuing an empty queue (both hang a core), enqueuing past
// the queue depth, freeing twice, and tensors still allocated when the block ends.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "twin_sync.h"
#include "twin_tensor.h"

namespace AscendC {

// uint8_t underlying, as in the real API (impl/basic_api/common_types.h); the positions the
// kernels use.
enum class TPosition : uint8_t { GM, VECIN, VECOUT, VECCALC };
using QuePosition = TPosition;
using TEventID = int8_t;  // FetchEventID's return type (impl/basic_api/kernel_tensor_base.h)

namespace twin {

inline const char* PositionName(TPosition pos) {
  switch (pos) {
    case TPosition::VECIN: return "VECIN";
    case TPosition::VECOUT: return "VECOUT";
    case TPosition::VECCALC: return "VECCALC";
    default: return "GM";
  }
}

// The position-independent part of a queue: its buffers and their states.
class QueueCore {
 public:
  QueueCore(TPosition pos, int32_t depth) : pos_(pos), depth_(depth) {}
  QueueCore(const QueueCore&) = delete;
  QueueCore& operator=(const QueueCore&) = delete;
  ~QueueCore() {
    // Runs when the kernel object dies, still inside the block: report, never throw here.
    if (t_current_block == nullptr) return;
    for (const auto& s : slots_) {
      if (s.state->allocated) {
        t_current_block->ReportLeak(Cat("a ", PositionName(), " queue tensor (UB offset ", s.offset,
                                        ") was allocated and never freed with FreeTensor"));
      }
    }
  }

  void Init(uint64_t first_offset, int num, uint64_t len) {
    Require(slots_.empty(), [] { return std::string("InitBuffer called twice on one queue"); });
    Require(num >= 1 && depth_ >= 1,
            [&] { return Cat("queue needs >= 1 buffer and depth >= 1 (got ", num, ", ", depth_, ")"); });
    for (int i = 0; i < num; ++i) {
      slots_.push_back(Slot{first_offset + static_cast<uint64_t>(i) * len, len,
                            std::make_shared<SlotState>(), false});
    }
  }

  template <typename T>
  LocalTensor<T> Alloc() {
    Require(!slots_.empty(), [] { return std::string("AllocTensor before pipe.InitBuffer"); });
    for (auto& s : slots_) {
      if (!s.state->allocated) {
        s.state->allocated = true;
        return LocalTensor<T>(s.offset, static_cast<uint32_t>(s.len / sizeof(T)), s.state);
      }
    }
    throw TwinError(Cat("Ascend C rule violated: AllocTensor on a ", PositionName(), " queue whose ",
                        slots_.size(), " buffers are all in use (the core would wait forever)"));
  }

  template <typename T>
  void EnQue(const LocalTensor<T>& t) {
    Slot& s = SlotOf(t, "EnQue");
    Require(!s.queued, [] { return std::string("EnQue of a tensor already in the queue"); });
    Require(static_cast<int32_t>(fifo_.size()) < depth_, [&] {
      return Cat("EnQue beyond the queue depth ", depth_, " of a ", PositionName(), " queue");
    });
    s.queued = true;
    fifo_.push_back(&s);
  }

  template <typename T>
  LocalTensor<T> DeQue() {
    Require(!fifo_.empty(), [&] {
      return Cat("DeQue on an empty ", PositionName(), " queue (the core would wait forever)");
    });
    CountWork(Counter::kQueueWaits);
    Slot* s = fifo_.front();
    fifo_.pop_front();
    s->queued = false;
    // The queue is the sync between producer and consumer pipe of this buffer.
    auto& ctx = Current();
    ctx.ClearRange(pos_ == TPosition::VECIN ? Hazard::kMte2ToV : Hazard::kVToMte3, s->offset, s->len);
    ctx.ClearRange(Hazard::kMte2ToMte3, s->offset, s->len);
    return LocalTensor<T>(s->offset, static_cast<uint32_t>(s->len / sizeof(T)), s->state);
  }

  template <typename T>
  void Free(const LocalTensor<T>& t) {
    Slot& s = SlotOf(t, "FreeTensor");
    Require(!s.queued, [] { return std::string("FreeTensor of a tensor still in the queue (DeQue it first)"); });
    s.state->allocated = false;
    ++s.state->generation;
  }

 private:
  struct Slot {
    uint64_t offset;
    uint64_t len;
    std::shared_ptr<SlotState> state;
    bool queued;
  };

  const char* PositionName() const { return twin::PositionName(pos_); }

  template <typename T>
  Slot& SlotOf(const LocalTensor<T>& t, const char* op) {
    for (auto& s : slots_) {
      if (t.TwinSameSlot(s.state) && t.TwinUbOffset() == s.offset) {
        Require(s.state->allocated, [&] {
          return Cat(op, " of a tensor that is not allocated (already freed?)");
        });
        t.TwinData(op);  // stale handle after a free + re-alloc
        return s;
      }
    }
    throw TwinError(Cat("Ascend C rule violated: ", op, " of a tensor that is not a whole buffer of this ",
                        PositionName(), " queue"));
  }

  TPosition pos_;
  int32_t depth_;
  std::vector<Slot> slots_;
  std::deque<Slot*> fifo_;
};

}  // namespace twin

template <TPosition Pos, int32_t Depth>
class TQue {
 public:
  TQue() : core_(Pos, Depth) {}
  template <typename T>
  LocalTensor<T> AllocTensor() { return core_.template Alloc<T>(); }
  template <typename T>
  void EnQue(const LocalTensor<T>& t) { core_.EnQue(t); }
  template <typename T>
  LocalTensor<T> DeQue() { return core_.template DeQue<T>(); }
  // A non-const reference, as in the real API (include/basic_api/kernel_tpipe.h): a temporary or
  // a const tensor cannot be freed.
  template <typename T>
  void FreeTensor(LocalTensor<T>& t) { core_.Free(t); }

  twin::QueueCore& TwinCore() { return core_; }

 private:
  twin::QueueCore core_;
};

template <TPosition Pos>
class TBuf {
 public:
  // Not const, as in the real API (include/basic_api/kernel_tpipe.h): a const TBuf hands out no
  // tensor.
  template <typename T>
  LocalTensor<T> Get() {
    twin::Require(len_ > 0, [] { return std::string("TBuf::Get before pipe.InitBuffer"); });
    return LocalTensor<T>(offset_, static_cast<uint32_t>(len_ / sizeof(T)), nullptr);
  }
  // The first `count` elements (kernel_tbuf_impl.h: count > 0, whole 32-byte blocks, within
  // the buffer).
  template <typename T>
  LocalTensor<T> Get(uint32_t count) {
    const uint64_t bytes = uint64_t{count} * sizeof(T);
    twin::Require(len_ > 0, [] { return std::string("TBuf::Get before pipe.InitBuffer"); });
    twin::Require(count > 0 && bytes % twin::kUbAlign == 0 && bytes <= len_, [&] {
      return twin::Cat("TBuf::Get(", count, "): ", bytes, " bytes must be a positive multiple of 32 within the "
                       "buffer's ", len_, " bytes");
    });
    return LocalTensor<T>(offset_, count, nullptr);
  }
  void TwinInit(uint64_t offset, uint64_t len) {
    twin::Require(len_ == 0, [] { return std::string("InitBuffer called twice on one TBuf"); });
    offset_ = offset;
    len_ = len;
  }

 private:
  uint64_t offset_ = 0;
  uint64_t len_ = 0;
};

class TPipe {
 public:
  static constexpr int kMaxBuffersPerInit = 64;  // QBUF_MAX_LEN

  TPipe() {
    auto& ctx = twin::Current();
    twin::Require(ctx.live_pipes == 0, [] { return std::string("a second TPipe on one core"); });
    ++ctx.live_pipes;
    ctx.pipe = this;
  }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;
  ~TPipe() {
    if (twin::t_current_block != nullptr) {
      --twin::t_current_block->live_pipes;
      twin::t_current_block->pipe = nullptr;
    }
  }

  // `num` buffers of `len` bytes each (len rounded up to 32 bytes as on the device). Checked as
  // kernel_tpipe_impl.h does: 1 <= num <= 64, 0 < len, the buffers within UB, and the pipe's
  // buffer counts (twin_arch.h).
  template <TPosition Pos, int32_t Depth>
  bool InitBuffer(TQue<Pos, Depth>& que, uint8_t num, uint32_t len) {
    const char* who = "TPipe::InitBuffer(TQue)";
    auto& ctx = twin::Current();
    const std::string what = twin::Cat("TQue<", twin::PositionName(Pos), "> of ", int{num}, " x ", len, " bytes");
    twin::Require(num >= 1 && num <= kMaxBuffersPerInit && len > 0, [&] {
      return twin::Cat(who, ": ", what, ": num must be in [1, ", kMaxBuffersPerInit, "] and len > 0");
    });
    const uint64_t rounded = (uint64_t{len} + twin::kUbAlign - 1) / twin::kUbAlign * twin::kUbAlign;
    const uint64_t offset = ctx.AllocUb(rounded * num, who, what.c_str());
    ctx.CountPipeBuffers(num, static_cast<int>(Pos), who, what.c_str());
    que.TwinCore().Init(offset, num, rounded);
    return true;
  }
  template <TPosition Pos>
  bool InitBuffer(TBuf<Pos>& buf, uint32_t len) {
    const char* who = "TPipe::InitBuffer(TBuf)";
    auto& ctx = twin::Current();
    const std::string what = twin::Cat("TBuf<", twin::PositionName(Pos), "> of ", len, " bytes");
    twin::Require(len > 0, [&] { return twin::Cat(who, ": ", what, ": len must be > 0"); });
    const uint64_t offset = ctx.AllocUb(len, who, what.c_str());
    ctx.CountPipeBuffers(1, -1, who, what.c_str());
    buf.TwinInit(offset, len);
    return true;
  }

  // The lowest event id of this type with no SetFlag pending. Not const and returning TEventID, as
  // in the real API (include/basic_api/kernel_tpipe.h).
  TEventID FetchEventID(HardEvent e) {
    auto& ctx = twin::Current();
    for (int id = 0; id < twin::kEventIdsPerType; ++id) {
      if (!ctx.FlagPending(static_cast<int>(e), id)) return static_cast<TEventID>(id);
    }
    throw twin::TwinError(twin::Cat("Ascend C rule violated: FetchEventID<", twin::EventName(e),
                                    ">: all event ids are pending"));
  }
};

}  // namespace AscendC

// A global function in the real API (include/basic_api/kernel_common.h), outside namespace AscendC:
// `AscendC::GetTPipePtr()` does not compile there, nor here.
inline AscendC::TPipe* GetTPipePtr() {
  auto& ctx = AscendC::twin::Current();
  AscendC::twin::Require(ctx.pipe != nullptr, [] { return std::string("GetTPipePtr with no live TPipe"); });
  return static_cast<AscendC::TPipe*>(ctx.pipe);
}
