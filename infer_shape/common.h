// Shape/dtype rule helpers shared by every op's infer header.
//
// The rules are written once, as pure C++17, and called from the CPU kernel library's exported
// <Op>InferShape/<Op>InferType (GRAPH mode), from the pybind11 validation module (eager Python
// errors) and from the Ascend op_host infer adapters. Unknown dims (-1) and unknown rank (-2)
// appear at GRAPH compile time with dynamic shapes: a rule that needs an unknown value is
// skipped, never guessed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "op_attrs.h"

namespace mgo::infer {

using Shape = std::vector<int64_t>;

constexpr int64_t kUnknownDim = -1;
constexpr int64_t kUnknownRank = -2;
// The largest int32: the index outputs' type (attribute domains are the table's, checked by the
// readers through op_table.h before any rule runs).
constexpr int64_t kMaxInt32 = 2147483647;

// Every MindSpore number dtype has a name here, so a wrong one is reported as what it is (the rules
// accept only a few); kOther is any other dtype name, kUnknown a dtype not known yet (GRAPH infer).
enum class DType {
  kUnknown, kBool, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64,
  kInt8, kInt16, kUInt8, kUInt16, kUInt32, kUInt64, kComplex64, kComplex128, kFloat8E4M3FN, kFloat8E5M2,
  kHiFloat8, kInt4, kOther
};

// Bad shape or attribute: Python sees ValueError.
class ValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Bad dtype: Python sees TypeError.
class TypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One input as the rules see it: either part may be unknown.
struct TensorDesc {
  Shape shape{kUnknownRank};
  DType dtype = DType::kUnknown;
};

struct InferResult {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
};

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kUInt8: return "uint8";
    case DType::kUInt16: return "uint16";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kComplex64: return "complex64";
    case DType::kComplex128: return "complex128";
    case DType::kFloat8E4M3FN: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
    case DType::kHiFloat8: return "hifloat8";
    case DType::kInt4: return "int4";
    case DType::kOther: return "an unsupported dtype";
    case DType::kUnknown: break;
  }
  return "unknown";
}

// The dtype called `name` ("float16", ...); "unknown" (or "") is kUnknown, any other name kOther.
inline DType parse_dtype(const std::string& name) {
  if (name.empty() || name == "unknown") return DType::kUnknown;
  for (int i = static_cast<int>(DType::kBool); i < static_cast<int>(DType::kOther); ++i) {
    if (name == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  }
  return DType::kOther;
}

inline std::string shape_str(const Shape& s) {
  if (s.size() == 1 && s[0] == kUnknownRank) return "[..]";
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  os << ']';
  return os.str();
}

inline bool rank_known(const Shape& s) { return !(s.size() == 1 && s[0] == kUnknownRank); }
inline bool known(int64_t d) { return d >= 0; }

// An absent optional input. ops.Custom AOT inputs cannot be None, so Python passes one kind of
// placeholder for every optional input of every op: a zero-size 1-D tensor (ms_grad_ops.ops.
// _optional.absent). No real optional input has that shape (ropes and value are 3-D/4-D, lengths
// have at least one entry), so it needs no extra attribute. An unknown shape is not absent.
inline bool is_absent(const Shape& s) { return s.size() == 1 && s[0] == 0; }

// Dim `i` of `t`, or kUnknownDim when the rank or the dim is not known (yet).
inline int64_t dim_or_unknown(const TensorDesc& t, size_t i) {
  return rank_known(t.shape) && i < t.shape.size() ? t.shape[i] : kUnknownDim;
}

// Collects the op name so every message starts with it.
class Checker {
 public:
  explicit Checker(std::string op) : op_(std::move(op)) {}

  [[noreturn]] void value_error(const std::string& msg) const { throw ValueError(op_ + ": " + msg); }
  [[noreturn]] void type_error(const std::string& msg) const { throw TypeError(op_ + ": " + msg); }

  void rank(const char* arg, const TensorDesc& t, size_t want) const {
    if (rank_known(t.shape) && t.shape.size() != want) {
      value_error(std::string("argument '") + arg + "' must be " + std::to_string(want) + "-D, got shape " +
                  shape_str(t.shape));
    }
  }

  // The rank of a tensor whose rank the layout decides (TND's [T, ...] or BSND's [B, S, ...]): the
  // message names the layout and the other one, since a wrong rank there is most often a layout not
  // passed (BSND is the default: 3-D [T, N, D] tensors need layout="TND").
  void rank(const char* arg, const TensorDesc& t, size_t want, table::Layout layout) const {
    if (rank_known(t.shape) && t.shape.size() != want) {
      const bool tnd = layout == table::Layout::kTND;
      value_error(std::string("argument '") + arg + "' must be " + std::to_string(want) + "-D (layout " +
                  (tnd ? "\"TND\"; pass layout=\"BSND\" for [B, S, N, D] tensors"
                       : "\"BSND\"; pass layout=\"TND\" for [T, N, D] tensors") +
                  "), got shape " + shape_str(t.shape));
    }
  }

  // Requires dim `i` of `t` to equal `want` when both are known.
  void dim(const char* arg, const TensorDesc& t, size_t i, int64_t want, const std::string& what) const {
    if (!rank_known(t.shape) || !known(want) || !known(t.shape[i])) return;
    if (t.shape[i] != want) {
      value_error(std::string("argument '") + arg + "' dim " + std::to_string(i) + " must be " + what + " = " +
                  std::to_string(want) + ", got shape " + shape_str(t.shape));
    }
  }

  void positive(const char* arg, const TensorDesc& t) const {
    if (!rank_known(t.shape)) return;
    for (int64_t d : t.shape) {
      if (d == 0) value_error(std::string("argument '") + arg + "' must not be empty, got shape " + shape_str(t.shape));
    }
  }

  void same_shape(const char* arg, const TensorDesc& t, const char* ref_arg, const TensorDesc& ref) const {
    if (!rank_known(t.shape) || !rank_known(ref.shape)) return;
    bool ok = t.shape.size() == ref.shape.size();
    for (size_t i = 0; ok && i < t.shape.size(); ++i) {
      ok = !known(t.shape[i]) || !known(ref.shape[i]) || t.shape[i] == ref.shape[i];
    }
    if (!ok) {
      value_error(std::string("argument '") + arg + "' must have the shape of '" + ref_arg + "' " +
                  shape_str(ref.shape) + ", got " + shape_str(t.shape));
    }
  }

  void floating(const char* arg, const TensorDesc& t) const {
    if (t.dtype == DType::kUnknown) return;
    if (t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16 && t.dtype != DType::kFloat32) {
      type_error(std::string("argument '") + arg + "' must be float16, bfloat16 or float32, got " + dtype_name(t.dtype));
    }
  }

  void integer(const char* arg, const TensorDesc& t) const {
    if (t.dtype == DType::kUnknown) return;
    if (t.dtype != DType::kInt32 && t.dtype != DType::kInt64) {
      type_error(std::string("argument '") + arg + "' must be int32 or int64, got " + dtype_name(t.dtype));
    }
  }

  void same_dtype(const char* arg, const TensorDesc& t, const char* ref_arg, const TensorDesc& ref) const {
    if (t.dtype == DType::kUnknown || ref.dtype == DType::kUnknown || t.dtype == ref.dtype) return;
    type_error(std::string("argument '") + arg + "' must have the dtype of '" + ref_arg + "' (" +
               dtype_name(ref.dtype) + "), got " + dtype_name(t.dtype));
  }

  void arity(const std::vector<TensorDesc>& in, size_t want) const {
    if (in.size() != want) {
      value_error("expected " + std::to_string(want) + " inputs, got " + std::to_string(in.size()));
    }
  }

 private:
  std::string op_;
};

}  // namespace mgo::infer
