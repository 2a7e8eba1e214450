// Twin of the Ascend C scalar types `half` and `bfloat16_t` and of `RoundMode`.
// Both 16-bit types are stored as raw bits; every float -> 16-bit conversion goes through
// RoundToBits so each Cast round mode is implemented once and exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace AscendC {

// uint8_t underlying, as in the real API (impl/basic_api/utils/kernel_utils_mode.h).
enum class RoundMode : uint8_t { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

namespace twin {

inline const char* RoundModeName(RoundMode m) {
  switch (m) {
    case RoundMode::CAST_NONE: return "CAST_NONE";
    case RoundMode::CAST_RINT: return "CAST_RINT";
    case RoundMode::CAST_FLOOR: return "CAST_FLOOR";
    case RoundMode::CAST_CEIL: return "CAST_CEIL";
    case RoundMode::CAST_ROUND: return "CAST_ROUND";
    case RoundMode::CAST_TRUNC: return "CAST_TRUNC";
    case RoundMode::CAST_ODD: return "CAST_ODD";
  }
  return "?";
}

// An IEEE-like binary format: mantissa bits, smallest normal exponent, largest exponent, bias.
struct FloatFormat {
  int mant_bits;
  int emin;
  int emax;
  int bias;
};
inline constexpr FloatFormat kHalfFormat{10, -14, 15, 15};
inline constexpr FloatFormat kBf16Format{7, -126, 127, 127};

inline uint16_t ExpMask(const FloatFormat& f) {
  return static_cast<uint16_t>(((1u << (15 - f.mant_bits)) - 1u) << f.mant_bits);
}

// Rounds the integer part of `scaled` (a non-negative double holding an exact float multiple of
// the format quantum) following `mode`; `negative` matters for the directed modes.
inline double RoundScaled(double scaled, bool negative, RoundMode mode) {
  double r = std::floor(scaled);
  const double frac = scaled - r;
  const bool odd = std::fmod(r, 2.0) != 0.0;
  switch (mode) {
    case RoundMode::CAST_NONE:  // float -> half: CAST_NONE means round-to-nearest-even
    case RoundMode::CAST_RINT:
      if (frac > 0.5 || (frac == 0.5 && odd)) r += 1.0;
      break;
    case RoundMode::CAST_ROUND:
      if (frac >= 0.5) r += 1.0;
      break;
    case RoundMode::CAST_TRUNC:
      break;
    case RoundMode::CAST_FLOOR:
      if (negative && frac > 0.0) r += 1.0;
      break;
    case RoundMode::CAST_CEIL:
      if (!negative && frac > 0.0) r += 1.0;
      break;
    case RoundMode::CAST_ODD:
      if (frac > 0.0 && !odd) r += 1.0;
      break;
  }
  return r;
}

// Whether an overflowing magnitude becomes infinity (otherwise the largest finite value).
inline bool OverflowToInf(bool negative, RoundMode mode) {
  switch (mode) {
    case RoundMode::CAST_TRUNC:
    case RoundMode::CAST_ODD:
      return false;
    case RoundMode::CAST_FLOOR:
      return negative;
    case RoundMode::CAST_CEIL:
      return !negative;
    default:
      return true;
  }
}

inline uint16_t RoundToBits(float x, const FloatFormat& f, RoundMode mode) {
  uint32_t xb = 0;
  std::memcpy(&xb, &x, sizeof(xb));
  const bool negative = (xb >> 31) != 0;
  const uint16_t sign = negative ? 0x8000 : 0;
  const uint16_t exp_mask = ExpMask(f);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | exp_mask | (1u << (f.mant_bits - 1)));
  if (std::isinf(x)) return static_cast<uint16_t>(sign | exp_mask);
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);
  e = (e - 1 < f.emin) ? f.emin : e - 1;  // below the normal range the quantum stops shrinking
  const double quantum = std::ldexp(1.0, e - f.mant_bits);
  const double v = RoundScaled(a / quantum, negative, mode) * quantum;  // a / quantum is exact
  const double max_finite = (2.0 - std::ldexp(1.0, -f.mant_bits)) * std::ldexp(1.0, f.emax);
  if (v > max_finite) {
    if (OverflowToInf(negative, mode)) return static_cast<uint16_t>(sign | exp_mask);
    return static_cast<uint16_t>(sign | (exp_mask - (1u << f.mant_bits)) | ((1u << f.mant_bits) - 1u));
  }
  if (v == 0.0) return sign;
  int ve = 0;
  std::frexp(v, &ve);
  ve -= 1;
  if (ve < f.emin) {
    const auto mant = static_cast<uint32_t>(v / std::ldexp(1.0, f.emin - f.mant_bits));
    return static_cast<uint16_t>(sign | mant);
  }
  const auto exp_field = static_cast<uint32_t>(ve + f.bias);
  const auto mant =
      static_cast<uint32_t>(v / std::ldexp(1.0, ve - f.mant_bits)) - (1u << f.mant_bits);
  return static_cast<uint16_t>(sign | (exp_field << f.mant_bits) | mant);
}

inline float BitsToFloat(uint16_t bits, const FloatFormat& f) {
  const bool negative = (bits & 0x8000) != 0;
  const uint32_t exp_field = (bits & ExpMask(f)) >> f.mant_bits;
  const uint32_t mant = bits & ((1u << f.mant_bits) - 1u);
  const uint32_t exp_all = ExpMask(f) >> f.mant_bits;
  double v = 0.0;
  if (exp_field == exp_all) {
    v = mant != 0 ? std::nan("") : HUGE_VAL;
  } else if (exp_field == 0) {
    v = std::ldexp(static_cast<double>(mant), f.emin - f.mant_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mant_bits),
                   static_cast<int>(exp_field) - f.bias);
  }
  return static_cast<float>(negative ? -v : v);
}

}  // namespace twin
}  // namespace AscendC

// On the device these are compiler-provided types in the global namespace; kernels name them
// unqualified, so the twin does too. Construction from float rounds to nearest even. The bits
// are private: the device types have no such member (the twin's Cast writes them by memcpy).
class half {
 public:
  half() = default;
  half(float v)  // NOLINT(google-explicit-constructor): mirrors the device type
      : bits_(AscendC::twin::RoundToBits(v, AscendC::twin::kHalfFormat, AscendC::RoundMode::CAST_RINT)) {}
  explicit operator float() const { return AscendC::twin::BitsToFloat(bits_, AscendC::twin::kHalfFormat); }

 private:
  uint16_t bits_ = 0;
};

class bfloat16_t {
 public:
  bfloat16_t() = default;
  bfloat16_t(float v)  // NOLINT(google-explicit-constructor): mirrors the device type
      : bits_(AscendC::twin::RoundToBits(v, AscendC::twin::kBf16Format, AscendC::RoundMode::CAST_RINT)) {}
  explicit operator float() const { return AscendC::twin::BitsToFloat(bits_, AscendC::twin::kBf16Format); }

 private:
  uint16_t bits_ = 0;
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage types");
static_assert(std::is_trivially_copyable_v<half> && std::is_trivially_copyable_v<bfloat16_t>, "raw GM/UB bits");
