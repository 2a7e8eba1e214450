// Twin of the DMA copies between GM and UB.
// DataCopy moves whole 32-byte blocks: the UB address and the byte length must be multiples of
// 32. DataCopyPad moves `blockCount` rows of `blockLen` bytes (any length) and pads each row to
// 32 bytes in UB; strides follow the device units (bytes on the GM side, 32-byte blocks on UB).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "twin_tensor.h"
#include "twin_types.h"

namespace AscendC {

// Both parameter structs have constructors in the real API (include/basic_api/kernel_struct_data_copy.h):
// the default one and one taking every field, so `{count, len}` with fields left out does not
// compile. The widths are 2201's (3510 widens the strides to int64_t).
struct DataCopyExtParams {
  DataCopyExtParams() = default;
  DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                    const uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}

  uint16_t blockCount = 1;
  uint32_t blockLen = 0;   // bytes per row
  uint32_t srcStride = 0;  // gap after each row: bytes in GM, 32-byte blocks in UB
  uint32_t dstStride = 0;  // gap after each row: bytes in GM, 32-byte blocks in UB
  uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams() = default;
  DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}

  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue{};
};

namespace twin {

inline constexpr uint64_t kMaxCopyBlocks = 65535;      // DataCopyParams::blockLen (uint16)
inline constexpr uint32_t kMaxPadBlockCount = 4095;    // 12 bits
inline constexpr uint32_t kMaxPadBlockLen = 2097151;   // 21 bits, bytes
inline constexpr uint32_t kMaxPadBytes = 32;           // leftPadding / rightPadding

template <typename T>
void CheckUbOperand(const LocalTensor<T>& t, uint64_t bytes, const char* op) {
  Current().RequireVector(op);
  Require(t.TwinUbOffset() % kUbAlign == 0, [&] {
    return Cat(op, ": UB address offset ", t.TwinUbOffset(), " is not 32-byte aligned");
  });
  Require(bytes <= uint64_t{t.GetSize()} * sizeof(T), [&] {
    return Cat(op, ": ", bytes, " bytes exceed the LocalTensor's ", uint64_t{t.GetSize()} * sizeof(T));
  });
}

// DataCopy of `count` elements: whole 32-byte blocks (DataCopyCheck in
// kernel_operator_data_copy_intf_impl.h; a partial block is silently dropped on the device), at
// most 65535 blocks (blockLen is 16 bits: CheckDataCopyParamsCommon in
// kernel_operator_data_copy_check.h). Zero is a NOP there; the twin rejects it as a bug.
template <typename T>
void CheckWholeBlocks(uint64_t count, const char* op) {
  const uint64_t bytes = count * sizeof(T);
  Require(count > 0 && bytes % kUbAlign == 0, [&] {
    return Cat(op, ": length ", bytes, " bytes is not a positive multiple of 32 (use DataCopyPad)");
  });
  Require(bytes / kUbAlign <= kMaxCopyBlocks, [&] {
    return Cat(op, ": length ", bytes, " bytes is ", bytes / kUbAlign, " blocks of 32 bytes; one DataCopy moves at "
               "most ", kMaxCopyBlocks, " (split the copy)");
  });
}

// The GM address of a copy is aligned to its element size (the DataCopy API page).
template <typename T>
void CheckGmAligned(const T* p, const char* op) {
  Require(reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0, [&] {
    return Cat(op, ": GM address ", static_cast<const void*>(p), " is not aligned to its ", sizeof(T),
               "-byte elements");
  });
}

// DataCopyPad's parameter ranges (CheckDataCopyPadParamsCommon / CheckDataCopyPadPaddingCommon in
// kernel_operator_data_copy_check.h, and the DataCopyPad API pages): 1 <= blockCount <= 4095,
// 1 <= blockLen <= 2097151 bytes and whole elements, paddings of at most 32 bytes, and on 3510
// a UB-side stride of at most 65535 blocks. Zero counts are NOPs on the device; the twin
// rejects them as bugs.
template <typename T>
void CheckPadParams(const DataCopyExtParams& p, uint32_t ub_stride, const char* op) {
  Require(p.blockCount > 0 && p.blockCount <= kMaxPadBlockCount && p.blockLen > 0 && p.blockLen <= kMaxPadBlockLen &&
              p.blockLen % sizeof(T) == 0,
          [&] {
            return Cat(op, ": blockCount ", p.blockCount, " must be in [1, ", kMaxPadBlockCount, "] and blockLen ",
                       p.blockLen, " bytes in [1, ", kMaxPadBlockLen, "] and whole ", sizeof(T), "-byte elements");
          });
  const uint64_t max_stride = Current().Spec().ub_stride_max;
  Require(max_stride == 0 || ub_stride <= max_stride, [&] {
    return Cat(op, ": UB stride ", ub_stride, " blocks exceeds ", max_stride, " on NPU arch ", Current().Spec().name);
  });
}

template <typename T>
constexpr AtomicType AtomicTypeOf() {
  if constexpr (std::is_same_v<T, float>) return AtomicType::kFloat;
  else if constexpr (std::is_same_v<T, half>) return AtomicType::kHalf;
  else if constexpr (std::is_same_v<T, bfloat16_t>) return AtomicType::kBf16;
  else if constexpr (std::is_same_v<T, int32_t>) return AtomicType::kInt32;
  else return AtomicType::kNone;
}

template <typename T>
T AddOne(T a, T b) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, int32_t>) {
    return a + b;
  } else {
    return T(static_cast<float>(a) + static_cast<float>(b));
  }
}

// Writes `count` elements to GM: a plain store, or element-wise adds while the core's atomic
// mode (SetAtomicAdd<T>) is on. The registry checks the write (bounds, race, zeroed target)
// before any byte changes.
template <typename T>
void StoreGm(T* dst, const T* src, uint64_t count, const char* op, bool atomic) {
  if (atomic) {
    Require(AtomicTypeOf<T>() != AtomicType::kNone, [&] { return Cat(op, ": atomic add of an unsupported type"); });
  }
  GmRegistry::Instance().NoteWrite(dst, count * sizeof(T), op, atomic);
  if (!atomic) {
    std::memcpy(dst, src, count * sizeof(T));
    return;
  }
  for (uint64_t i = 0; i < count; ++i) dst[i] = AddOne(dst[i], src[i]);
}

// The atomic mode of the current core for a UB -> GM copy of T.
template <typename T>
bool CopyOutAtomic(const char* op) {
  const AtomicType mode = Current().atomic;
  if (mode == AtomicType::kNone) return false;
  Require(mode == AtomicTypeOf<T>(), [&] {
    return Cat(op, ": the core's atomic add mode was set for another element type (SetAtomicAdd<T> must match)");
  });
  return true;
}

}  // namespace twin

// Atomic mode of this core's GM writes (DataCopy/DataCopyPad UB -> GM): stays on until
// SetAtomicNone(); still on at kernel end is a TwinError (it would leak into the next kernel).
template <typename T>
void SetAtomicAdd() {
  twin::Require(twin::AtomicTypeOf<T>() != twin::AtomicType::kNone,
                [] { return std::string("SetAtomicAdd of an unsupported type"); });
  twin::Current().atomic = twin::AtomicTypeOf<T>();
}
inline void SetAtomicNone() { twin::Current().atomic = twin::AtomicType::kNone; }

// GM -> UB, `count` elements.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count) {
  twin::CheckWholeBlocks<T>(count, "DataCopy(GM->UB)");
  twin::CheckUbOperand(dst, uint64_t{count} * sizeof(T), "DataCopy(GM->UB)");
  auto& ctx = twin::Current();
  const uint64_t bytes = uint64_t{count} * sizeof(T);
  ctx.CheckClear(twin::Hazard::kVToMte3, dst.TwinUbOffset(), bytes, "DataCopy(GM->UB) overwriting");
  const T* in = src.TwinSpan(count, "DataCopy(GM->UB)");
  twin::CheckGmAligned(in, "DataCopy(GM->UB)");
  twin::GmRegistry::Instance().NoteRead(in, bytes, "DataCopy(GM->UB)");
  std::memcpy(dst.TwinData("DataCopy(GM->UB)"), in, bytes);
  ctx.Mark(twin::Hazard::kMte2ToV, dst.TwinUbOffset(), bytes);
  ctx.Mark(twin::Hazard::kMte2ToMte3, dst.TwinUbOffset(), bytes);
}

// UB -> GM, `count` elements.
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count) {
  twin::CheckWholeBlocks<T>(count, "DataCopy(UB->GM)");
  twin::CheckUbOperand(src, uint64_t{count} * sizeof(T), "DataCopy(UB->GM)");
  auto& ctx = twin::Current();
  const uint64_t bytes = uint64_t{count} * sizeof(T);
  ctx.CheckClear(twin::Hazard::kVToMte3, src.TwinUbOffset(), bytes, "DataCopy(UB->GM)");
  ctx.CheckClear(twin::Hazard::kMte2ToMte3, src.TwinUbOffset(), bytes, "DataCopy(UB->GM)");
  T* out = dst.TwinSpan(count, "DataCopy(UB->GM)");
  twin::CheckGmAligned(out, "DataCopy(UB->GM)");
  twin::StoreGm(out, src.TwinData("DataCopy(UB->GM)"), count, "DataCopy(UB->GM)",
                twin::CopyOutAtomic<T>("DataCopy(UB->GM)"));
}

// GM -> UB, rows of any byte length. Each row lands 32-byte aligned in UB as
// [leftPadding elements][blockLen bytes][rightPadding elements][dummy up to 32 bytes]; the
// paddings hold paddingValue when isPad, else garbage; the dummy is the row's first element
// when both paddings are 0 (the DataCopyPad GM->UB page), else like the paddings.
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                 const DataCopyPadExtParams<T>& pad) {
  const char* op = "DataCopyPad(GM->UB)";
  twin::CheckPadParams<T>(p, p.dstStride, op);
  const uint64_t left = uint64_t{pad.leftPadding} * sizeof(T);
  const uint64_t right = uint64_t{pad.rightPadding} * sizeof(T);
  twin::Require(left <= twin::kMaxPadBytes && right <= twin::kMaxPadBytes, [&] {
    return twin::Cat(op, ": leftPadding ", left, " / rightPadding ", right, " bytes exceed ", twin::kMaxPadBytes);
  });
  const uint64_t row_ub = (left + p.blockLen + right + twin::kUbAlign - 1) / twin::kUbAlign * twin::kUbAlign;
  const uint64_t ub_pitch = row_ub + uint64_t{p.dstStride} * twin::kUbAlign;
  const uint64_t gm_pitch = uint64_t{p.blockLen} + p.srcStride;
  const uint64_t ub_bytes = ub_pitch * (p.blockCount - 1) + row_ub;
  twin::CheckUbOperand(dst, ub_bytes, op);
  const uint64_t gm_elems = (gm_pitch * (p.blockCount - 1) + p.blockLen) / sizeof(T);
  const auto* in = reinterpret_cast<const uint8_t*>(src.TwinSpan(gm_elems, op));
  auto* out = reinterpret_cast<uint8_t*>(dst.TwinData(op));
  auto& ctx = twin::Current();
  ctx.CheckClear(twin::Hazard::kVToMte3, dst.TwinUbOffset(), ub_bytes, op);
  for (uint32_t r = 0; r < p.blockCount; ++r) {
    uint8_t* row = out + r * ub_pitch;
    twin::GmRegistry::Instance().NoteRead(in + r * gm_pitch, p.blockLen, op);
    std::memcpy(row + left, in + r * gm_pitch, p.blockLen);
    const auto fill = [&](uint64_t from, uint64_t to, const T* value) {
      for (uint64_t b = from; b < to; b += sizeof(T)) {
        if (value != nullptr) {
          std::memcpy(row + b, value, sizeof(T));
        } else {
          std::memset(row + b, 0xFF, sizeof(T));  // garbage: NaN in every float type
        }
      }
    };
    const T* pad_value = pad.isPad ? &pad.paddingValue : nullptr;
    fill(0, left, pad_value);
    fill(left + p.blockLen, left + p.blockLen + right, pad_value);
    T first;
    std::memcpy(&first, row + left, sizeof(T));
    fill(left + p.blockLen + right, row_ub, left == 0 && right == 0 ? &first : pad_value);
  }
  ctx.Mark(twin::Hazard::kMte2ToV, dst.TwinUbOffset(), ub_bytes);
  ctx.Mark(twin::Hazard::kMte2ToMte3, dst.TwinUbOffset(), ub_bytes);
}

// UB -> GM, rows of any byte length; only blockLen bytes per row reach GM.
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
  const char* op = "DataCopyPad(UB->GM)";
  twin::CheckPadParams<T>(p, p.srcStride, op);
  const uint64_t row_ub = (uint64_t{p.blockLen} + twin::kUbAlign - 1) / twin::kUbAlign * twin::kUbAlign;
  const uint64_t ub_pitch = row_ub + uint64_t{p.srcStride} * twin::kUbAlign;
  const uint64_t gm_pitch = uint64_t{p.blockLen} + p.dstStride;
  twin::CheckUbOperand(src, ub_pitch * (p.blockCount - 1) + p.blockLen, op);
  auto& ctx = twin::Current();
  ctx.CheckClear(twin::Hazard::kVToMte3, src.TwinUbOffset(), ub_pitch * (p.blockCount - 1) + p.blockLen, op);
  ctx.CheckClear(twin::Hazard::kMte2ToMte3, src.TwinUbOffset(), ub_pitch * (p.blockCount - 1) + p.blockLen, op);
  const uint64_t gm_elems = (gm_pitch * (p.blockCount - 1) + p.blockLen) / sizeof(T);
  auto* out = reinterpret_cast<uint8_t*>(dst.TwinSpan(gm_elems, op));
  const auto* in = reinterpret_cast<const uint8_t*>(src.TwinData(op));
  const bool atomic = twin::CopyOutAtomic<T>(op);
  for (uint32_t r = 0; r < p.blockCount; ++r) {
    twin::StoreGm(reinterpret_cast<T*>(out + r * gm_pitch), reinterpret_cast<const T*>(in + r * ub_pitch),
                  p.blockLen / sizeof(T), op, atomic);
  }
}

}  // namespace AscendC
