// Twin of GlobalTensor (a view of GM) and LocalTensor (a view of UB).
// LocalTensor keeps its UB byte offset (alignment is an offset property on the device) and a
// handle on the queue slot it came from, so use after FreeTensor is detected.
#pragma once

#include <cstdint>
#include <memory>

#include "twin_context.h"

namespace AscendC {

namespace twin {
// Liveness of one queue buffer: FreeTensor bumps `generation`, invalidating older handles.
struct SlotState {
  uint64_t generation = 0;
  bool allocated = false;
};
class QueueCore;
}  // namespace twin

// Defined in twin_pipe.h; only queues and TBufs make LocalTensors (a kernel cannot make one up
// from an offset, as it cannot on the device).
enum class TPosition : uint8_t;
template <TPosition Pos>
class TBuf;

template <typename T>
class GlobalTensor {
 public:
  void SetGlobalBuffer(T* ptr, uint64_t size) {
    twin::GmRegistry::Instance().Find(ptr, size * sizeof(T), "GlobalTensor::SetGlobalBuffer");
    ptr_ = ptr;
    size_ = size;
  }
  GlobalTensor operator[](uint64_t offset) const {
    twin::Require(offset <= size_, [&] {
      return twin::Cat("GlobalTensor[", offset, "] beyond its ", size_, " elements");
    });
    GlobalTensor sub;
    sub.ptr_ = ptr_ + offset;
    sub.size_ = size_ - offset;
    return sub;
  }
  T GetValue(uint64_t i) const {
    CheckIndex(i, "GetValue");
    twin::GmRegistry::Instance().NoteRead(ptr_ + i, sizeof(T), "GlobalTensor::GetValue");
    twin::CountWork(twin::Counter::kGmScalarAccesses);
    return ptr_[i];
  }
  // Not const, as in the real API (include/basic_api/kernel_tensor.h): a const GlobalTensor is
  // read-only.
  void SetValue(uint64_t i, T v) {
    CheckIndex(i, "SetValue");
    twin::GmRegistry::Instance().NoteWrite(ptr_ + i, sizeof(T), "GlobalTensor::SetValue");
    twin::CountWork(twin::Counter::kGmScalarAccesses);
    ptr_[i] = v;
  }
  uint64_t GetSize() const { return size_; }
  // A pointer to const, as in the real API: writes go through SetValue or DataCopy.
  const T* GetPhyAddr() const { return ptr_; }

  // Twin-only: the checked span [offset, offset + count) for a DataCopy (bounds only; the copy
  // reports the bytes it reads or writes with NoteRead / StoreGm).
  T* TwinSpan(uint64_t count, const char* op) const {
    twin::Require(count <= size_, [&] {
      return twin::Cat(op, ": ", count, " elements exceed the GlobalTensor's ", size_);
    });
    twin::GmRegistry::Instance().Find(ptr_, count * sizeof(T), op);
    return ptr_;
  }

 private:
  void CheckIndex(uint64_t i, const char* op) const {
    twin::Require(ptr_ != nullptr, [&] { return twin::Cat("GlobalTensor::", op, " before SetGlobalBuffer"); });
    twin::Require(i < size_, [&] {
      return twin::Cat("GlobalTensor::", op, "(", i, ") beyond its ", size_, " elements");
    });
  }

  T* ptr_ = nullptr;
  uint64_t size_ = 0;
};

template <typename T>
class LocalTensor {
 public:
  LocalTensor() = default;

  // A sub-tensor starting `offset` elements in, as `tensor[offset]` on the device.
  LocalTensor operator[](uint32_t offset) const {
    twin::Require(offset <= size_, [&] {
      return twin::Cat("LocalTensor[", offset, "] beyond its ", size_, " elements");
    });
    LocalTensor sub = *this;
    sub.ub_offset_ += uint64_t{offset} * sizeof(T);
    sub.size_ -= offset;
    return sub;
  }
  uint32_t GetSize() const { return size_; }

  T GetValue(uint32_t i) const {
    CheckIndex(i, "GetValue");
    auto& ctx = twin::Current();
    ctx.CheckClear(twin::Hazard::kVToS, ub_offset_ + uint64_t{i} * sizeof(T), sizeof(T),
                   "LocalTensor::GetValue");
    return Data()[i];
  }
  void SetValue(uint32_t i, T v) const {
    CheckIndex(i, "SetValue");
    Data()[i] = v;
    twin::Current().Mark(twin::Hazard::kSToV, ub_offset_ + uint64_t{i} * sizeof(T), sizeof(T));
  }

  template <typename U>
  LocalTensor<U> ReinterpretCast() const {
    return LocalTensor<U>(ub_offset_, static_cast<uint32_t>(uint64_t{size_} * sizeof(T) / sizeof(U)),
                          slot_);
  }

  // ---- twin-only accessors used by the copy and vector ops
  uint64_t TwinUbOffset() const { return ub_offset_; }
  T* TwinData(const char* op) const {
    CheckLive(op);
    return Data();
  }
  bool TwinSameSlot(const std::shared_ptr<const twin::SlotState>& slot) const { return slot_ == slot; }

 private:
  template <typename U>
  friend class LocalTensor;
  friend class twin::QueueCore;
  template <TPosition Pos>
  friend class TBuf;

  LocalTensor(uint64_t ub_offset, uint32_t size, std::shared_ptr<const twin::SlotState> slot)
      : ub_offset_(ub_offset), size_(size), slot_(std::move(slot)),
        generation_(slot_ ? slot_->generation : 0) {}

  T* Data() const { return reinterpret_cast<T*>(twin::Current().Ub() + ub_offset_); }
  void CheckLive(const char* op) const {
    twin::Require(size_ > 0 || slot_ != nullptr, [&] { return twin::Cat(op, ": empty LocalTensor"); });
    if (slot_) {
      twin::Require(slot_->allocated && slot_->generation == generation_, [&] {
        return twin::Cat(op, ": LocalTensor used after FreeTensor (its queue buffer was released)");
      });
    }
  }
  void CheckIndex(uint32_t i, const char* op) const {
    CheckLive(op);
    twin::Require(i < size_, [&] {
      return twin::Cat("LocalTensor::", op, "(", i, ") beyond its ", size_, " elements");
    });
  }

  uint64_t ub_offset_ = 0;
  uint32_t size_ = 0;
  std::shared_ptr<const twin::SlotState> slot_;
  uint64_t generation_ = 0;
};

}  // namespace AscendC
