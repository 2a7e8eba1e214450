// Twin of the vector (V pipe) ops the kernels use, in their "first `count` elements" form.
// Rules checked on every operand: 32-byte aligned UB start, `count` within the tensor, tensor
// still allocated, and no unsynchronised producer (MTE2 copy-in or scalar SetValue) pending;
// between a source and the destination, the address overlap rule of the API's general
// constraints (docs: SIMD-API/通用说明和约束.md, "通用地址重叠约束"; see CheckOverlap); and
// count 0, a NOP on 2201 but not guaranteed one on 3510 (each op's API page).
// Math ops are float-only here because the kernels compute in float32 (Cast first); supporting
// half arithmetic would let a kernel silently compute in 16 bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "twin_tensor.h"
#include "twin_types.h"

namespace AscendC {
namespace twin {

template <typename T>
T* VecSrc(const LocalTensor<T>& t, uint32_t count, const char* op) {
  Current().RequireVector(op);
  Require(t.TwinUbOffset() % kUbAlign == 0, [&] {
    return Cat(op, ": source at UB offset ", t.TwinUbOffset(), " is not 32-byte aligned");
  });
  Require(count <= t.GetSize(), [&] {
    return Cat(op, ": count ", count, " exceeds the source tensor's ", t.GetSize(), " elements");
  });
  auto& ctx = Current();
  const uint64_t bytes = uint64_t{count} * sizeof(T);
  ctx.CheckClear(Hazard::kMte2ToV, t.TwinUbOffset(), bytes, op);
  ctx.CheckClear(Hazard::kSToV, t.TwinUbOffset(), bytes, op);
  return t.TwinData(op);
}

// `align`: the destination's start alignment (32 bytes, but one element for a reduction's
// single result: ReduceRepeat's table of destination alignments).
template <typename T>
T* VecDst(const LocalTensor<T>& t, uint32_t count, const char* op, uint64_t align = kUbAlign) {
  Current().RequireVector(op);
  Require(t.TwinUbOffset() % align == 0, [&] {
    return Cat(op, ": destination at UB offset ", t.TwinUbOffset(), " is not ", align, "-byte aligned");
  });
  Require(count <= t.GetSize(), [&] {
    return Cat(op, ": count ", count, " exceeds the destination tensor's ", t.GetSize(), " elements");
  });
  auto& ctx = Current();
  const uint64_t bytes = uint64_t{count} * sizeof(T);
  ctx.CheckClear(Hazard::kMte2ToV, t.TwinUbOffset(), bytes, op);  // copy-in still landing
  ctx.ClearRange(Hazard::kMte2ToMte3, t.TwinUbOffset(), bytes);   // V is now these bytes' producer
  ctx.Mark(Hazard::kVToS, t.TwinUbOffset(), bytes);
  ctx.Mark(Hazard::kVToMte3, t.TwinUbOffset(), bytes);
  return t.TwinData(op);
}

// Whether an op of `count` elements (or repeats) is a NOP: count 0 is one on 2201; on 3510
// the op runs as a VF function and count 0 is not guaranteed to be a NOP, so the twin rejects it.
inline bool VecNop(uint64_t count, const char* op) {
  Current().RequireVector(op);
  if (count > 0) return false;
  const ArchSpec& spec = Current().Spec();
  Require(spec.zero_count_is_nop, [&] {
    return Cat(op, ": count 0 on NPU arch ", spec.name, " is not guaranteed to be a NOP (skip the call)");
  });
  return true;
}

// The roofline's vector counters (twin_context.h): one call of `elements` elements.
inline void CountVector(uint64_t elements) {
  CountWork(Counter::kVectorCalls);
  CountWork(Counter::kVectorElems, elements);
}

// The address overlap rule between a source and the destination of a count-form op, which the
// hardware runs in repeats of 256 bytes of the wider type: within one repeat a source either
// starts where the destination starts (complete overlap) or does not touch it, and no repeat's
// destination overlaps the source of a later repeat (it would overwrite input not yet read).
// So an in-place Cast float -> half passes and half -> float fails, as Cast's page warns.
// In-place ops of one type and disjoint operands pass at once; other overlaps are checked per
// repeat.
template <typename D, typename S>
void CheckOverlap(const LocalTensor<D>& dst, const LocalTensor<S>& src, uint32_t count, const char* op) {
  const uint64_t d0 = dst.TwinUbOffset();
  const uint64_t s0 = src.TwinUbOffset();
  if (d0 + uint64_t{count} * sizeof(D) <= s0 || s0 + uint64_t{count} * sizeof(S) <= d0) return;
  if (d0 == s0 && sizeof(D) == sizeof(S)) return;
  const uint64_t per = 256 / (sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S));
  const uint64_t repeats = (count + per - 1) / per;
  const auto range = [&](uint64_t base, uint64_t elem, uint64_t r) {
    const uint64_t end = (r + 1) * per < count ? (r + 1) * per : count;
    return std::pair<uint64_t, uint64_t>{base + r * per * elem, base + end * elem};
  };
  const auto meet = [](std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {
    return a.first < b.second && b.first < a.second;
  };
  for (uint64_t i = 0; i < repeats; ++i) {
    const auto d = range(d0, sizeof(D), i);
    const auto own = range(s0, sizeof(S), i);
    Require(!meet(d, own) || d.first == own.first, [&] {
      return Cat(op, ": destination UB [", d.first, ", ", d.second, ") partially overlaps the source [", own.first,
                 ", ", own.second, ") in repeat ", i, " (operands must start together or not overlap)");
    });
    for (uint64_t j = i + 1; j < repeats; ++j) {
      const auto later = range(s0, sizeof(S), j);
      if (later.first >= d.second) break;
      Require(!meet(d, later), [&] {
        return Cat(op, ": destination UB [", d.first, ", ", d.second, ") of repeat ", i, " overlaps the source [",
                   later.first, ", ", later.second, ") of the later repeat ", j, " (input overwritten before it is read)");
      });
    }
  }
}

// The count-form ops take `const int32_t& count`, as in the real API (include/basic_api/
// kernel_operator_vec_*_intf.h); a negative count is rejected as the CPU-debug CheckCalcount does
// (impl/basic_api/kernel_npu_debug.h).
inline uint32_t Count(int32_t count, const char* op) {
  Require(count >= 0, [&] { return Cat(op, ": count ", count, " is negative"); });
  return static_cast<uint32_t>(count);
}

template <typename T>
constexpr void RequireFloat() {
  static_assert(std::is_same_v<T, float>, "the twin implements vector math in float32 only: Cast first");
}

template <typename T, typename F>
void Binary(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b, uint32_t count,
            const char* op, F f) {
  RequireFloat<T>();
  if (VecNop(count, op)) return;
  const T* pa = VecSrc(a, count, op);
  const T* pb = VecSrc(b, count, op);
  T* pd = VecDst(dst, count, op);
  CheckOverlap(dst, a, count, op);
  CheckOverlap(dst, b, count, op);
  CountVector(count);
  for (uint32_t i = 0; i < count; ++i) pd[i] = f(pa[i], pb[i]);
}

template <typename T, typename F>
void Unary(const LocalTensor<T>& dst, const LocalTensor<T>& a, uint32_t count, const char* op, F f) {
  RequireFloat<T>();
  if (VecNop(count, op)) return;
  const T* pa = VecSrc(a, count, op);
  T* pd = VecDst(dst, count, op);
  CheckOverlap(dst, a, count, op);
  CountVector(count);
  for (uint32_t i = 0; i < count; ++i) pd[i] = f(pa[i]);
}

}  // namespace twin

template <typename T>
void Add(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b, const int32_t& count) {
  twin::Binary(dst, a, b, twin::Count(count, "Add"), "Add", [](T x, T y) { return x + y; });
}
template <typename T>
void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b, const int32_t& count) {
  twin::Binary(dst, a, b, twin::Count(count, "Sub"), "Sub", [](T x, T y) { return x - y; });
}
template <typename T>
void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b, const int32_t& count) {
  twin::Binary(dst, a, b, twin::Count(count, "Mul"), "Mul", [](T x, T y) { return x * y; });
}
template <typename T>
void Div(const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b, const int32_t& count) {
  twin::Binary(dst, a, b, twin::Count(count, "Div"), "Div", [](T x, T y) { return x / y; });
}
template <typename T>
void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& a, const T& scalar, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Muls"), "Muls", [scalar](T x) { return x * scalar; });
}
template <typename T>
void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& a, const T& scalar, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Adds"), "Adds", [scalar](T x) { return x + scalar; });
}
template <typename T>
void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& a, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Exp"), "Exp", [](T x) { return std::exp(x); });
}
template <typename T>
void Duplicate(const LocalTensor<T>& dst, const T& scalar, const int32_t& count) {
  twin::RequireFloat<T>();
  const uint32_t n = twin::Count(count, "Duplicate");
  if (twin::VecNop(n, "Duplicate")) return;
  T* pd = twin::VecDst(dst, n, "Duplicate");
  twin::CountVector(n);
  for (uint32_t i = 0; i < n; ++i) pd[i] = scalar;
}

namespace twin {
// Workspace elements ReduceSum needs: one partial per 256-byte repeat, rounded to 32 bytes.
template <typename T>
constexpr uint32_t ReduceSumWorkElems(uint32_t count) {
  const uint32_t per_repeat = 256 / sizeof(T);
  const uint32_t per_block = 32 / sizeof(T);
  const uint32_t partials = (count + per_repeat - 1) / per_repeat;
  return (partials + per_block - 1) / per_block * per_block;
}

// dst[0] = combine over the first `count` elements: one partial per 256-byte repeat into `work`
// first, then the partials, as the device reduces.
template <typename T, typename Combine>
void ReduceRepeats(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work, uint32_t count,
                   const char* op, const char* work_op, Combine combine) {
  RequireFloat<T>();
  if (VecNop(count, op)) return;
  const T* ps = VecSrc(src, count, op);
  T* pw = VecDst(work, ReduceSumWorkElems<T>(count), work_op);
  T* pd = VecDst(dst, 1, op, sizeof(T));
  CountVector(count);
  constexpr uint32_t kPerRepeat = 256 / sizeof(T);
  const uint32_t partials = (count + kPerRepeat - 1) / kPerRepeat;
  for (uint32_t r = 0; r < partials; ++r) {
    T acc = ps[r * kPerRepeat];
    for (uint32_t i = r * kPerRepeat + 1; i < count && i < (r + 1) * kPerRepeat; ++i) acc = combine(acc, ps[i]);
    pw[r] = acc;
  }
  T total = pw[0];
  for (uint32_t r = 1; r < partials; ++r) total = combine(total, pw[r]);
  pd[0] = total;
}
}  // namespace twin

// dst[0] = sum of the first `count` elements; per-repeat partials first, as the device does.
template <typename T>
void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
               const int32_t count) {
  twin::ReduceRepeats(dst, src, work, twin::Count(count, "ReduceSum"), "ReduceSum", "ReduceSum (workspace)",
                      [](T a, T b) { return a + b; });
}

// dst[0] = max of the first `count` elements (value only).
template <typename T>
void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work, const int32_t count,
               bool calIndex = false) {
  twin::Require(!calIndex, [] { return std::string("ReduceMax: the twin does not model calIndex"); });
  twin::ReduceRepeats(dst, src, work, twin::Count(count, "ReduceMax"), "ReduceMax", "ReduceMax (workspace)",
                      [](T a, T b) { return b > a ? b : a; });
}

namespace twin {
// Which (destination, source, round mode) conversions the device's Cast accepts, for the types
// the twin has. 16-bit -> float is exact and takes CAST_NONE only; float -> bfloat16_t has no
// CAST_NONE or CAST_ODD; float -> half treats CAST_NONE as round-to-nearest-even.
template <typename D, typename S>
bool CastSupported(RoundMode mode) {
  if constexpr (std::is_same_v<D, float> && (std::is_same_v<S, half> || std::is_same_v<S, bfloat16_t>)) {
    return mode == RoundMode::CAST_NONE;
  } else if constexpr (std::is_same_v<D, half> && std::is_same_v<S, float>) {
    return true;
  } else if constexpr (std::is_same_v<D, bfloat16_t> && std::is_same_v<S, float>) {
    return mode != RoundMode::CAST_NONE && mode != RoundMode::CAST_ODD;
  } else {
    return false;
  }
}

template <typename D, typename S>
D ConvertOne(S v, RoundMode mode) {
  if constexpr (std::is_same_v<D, float>) {
    return static_cast<float>(v);
  } else {
    const uint16_t bits = RoundToBits(v, std::is_same_v<D, half> ? kHalfFormat : kBf16Format, mode);
    D out;
    std::memcpy(static_cast<void*>(&out), &bits, sizeof(out));  // trivially copyable (twin_types.h)
    return out;
  }
}
}  // namespace twin

template <typename D, typename S>
void Cast(const LocalTensor<D>& dst, const LocalTensor<S>& src, RoundMode mode, uint32_t count) {
  const char* op = "Cast";
  twin::Require(twin::CastSupported<D, S>(mode), [&] {
    return twin::Cat("Cast: round mode ", twin::RoundModeName(mode), " is not supported for this type pair");
  });
  if (twin::VecNop(count, op)) return;
  const S* ps = twin::VecSrc(src, count, op);
  D* pd = twin::VecDst(dst, count, op);
  twin::CheckOverlap(dst, src, count, op);
  twin::CountVector(count);
  for (uint32_t i = 0; i < count; ++i) pd[i] = twin::ConvertOne<D, S>(ps[i], mode);
}

}  // namespace AscendC
