// How every reader of raw attribute values (the pybind bindings, the CPU AOT adapter, the op_host
// adapter, the twin harness) turns them into an op's Attrs (op_attrs.h): a choice is parsed into
// its enum (Choice<E>::Parse, generated per choice attribute in op_table.h), the rest copied; then
// the op's CheckAttrs (op_table.h) checks every domain with CheckRange. A value outside is
// DomainError's ValueError, worded once (op_table.h, from the table).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "common.h"

namespace mgo::table {

// The backends a limit is stated for; kAny checks the attributes' own domains only.
enum class Backend { kAny, kAscend };

// Throws the ValueError of `attr` of `op` outside `domain` (the value `got`); defined, with the
// table's one wording, in op_table.h.
[[noreturn]] inline void DomainError(const char* op, const char* attr, const std::string& domain,
                                     const std::string& got);

inline std::string Got(int64_t v) { return std::to_string(v); }
inline std::string Got(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

template <class T>
void CheckRange(const char* op, const char* attr, T value, T lo, T hi, const char* domain) {
  if (!(value >= lo && value <= hi)) DomainError(op, attr, domain, Got(value));  // NaN is outside
}

// Choice<E>: the choice attribute whose enum is E (op_attrs.h): its raw type (what an OpDef,
// MindSpore and Python hold), Name/Value of each enumerator and Parse (a DomainError naming the op).
template <class E>
struct Choice;

// The raw type of an Attrs field: a choice's Raw, else the field's own type.
template <class Field, bool = std::is_enum_v<Field>>
struct RawType {
  using type = Field;
};
template <class Field>
struct RawType<Field, true> {
  using type = typename Choice<Field>::Raw;
};
template <class Field>
using RawOf = typename RawType<Field>::type;

// A raw attribute value into its Attrs field of op `op`: a choice is parsed, the rest copied.
template <class Field>
void SetAttr(const char* op, Field& field, const RawOf<Field>& raw) {
  if constexpr (std::is_enum_v<Field>) {
    field = Choice<Field>::Parse(op, raw);
  } else {
    field = raw;
  }
}

}  // namespace mgo::table
