// The one OpDef body: DefineOp<Host> declares an op to CANN from the table, so no op writes its
// OpDef by hand. `Host` is the op's hand-written `<OpType>Host` (op_host/<op>.cpp: Tile, and Infer
// where the shape rule needs a CANN-side touch), derived from its generated `<OpType>Def`
// (op_host_table.h):
//   Table     mgo::table::<OpType> (infer_shape/op_table.h): input/output/attribute names, which
//             inputs are OPTIONAL, the attributes' defaults (Table::Attrs{}) and fields in
//             attribute order (Table::kAttrs; their types pick the setter/reader);
//   kDtypes   the dtype combinations the kernel takes (the table's ascend_dtypes), one per OpDef
//             column, each over inputs then outputs; every format is ND;
//   kSocs     the SoCs to register (the table's ascend_socs);
//   Infer     the shape rule (infer_shape/<op>.h).
// The shared adapter (op_host_adapter.h) runs the Host.
//
// CANN-only like op_host_adapter.h; tests/ascend/test_ascendc_op_host.py registers every op against
// tests/ascend/cann_stub and compares the registered OpDef with ms_grad_ops/_specs.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "op_host_adapter.h"
#include "op_host_table.h"

namespace mgo::op_host {

// An attribute's type and default, by the C++ type of its Table::Attrs field; a choice by its raw
// value, a str choice by its name (a literal: the OpDef's String() may keep the pointer). A
// required attribute's value-initialised field stands for "none", as CANN's own OpDefs give their
// REQUIRED attributes a value too.
inline void SetDefault(ops::OpAttrDef& d, int64_t v) { d.Int(v); }
inline void SetDefault(ops::OpAttrDef& d, double v) { d.Float(static_cast<float>(v)); }
inline void SetDefault(ops::OpAttrDef& d, bool v) { d.Bool(v); }
template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
void SetDefault(ops::OpAttrDef& d, E v) {
  if constexpr (std::is_same_v<typename mgo::table::Choice<E>::Raw, std::string>) {
    d.String(mgo::table::Choice<E>::Name(v));
  } else {
    SetDefault(d, mgo::table::Choice<E>::Value(v));
  }
}

// Column `slot` (an input, or kNumInputs + an output) of every dtype combination.
template <typename Op>
void DefineParam(ops::OpParamDef& param, size_t slot, bool optional) {
  std::vector<ge::DataType> dtypes;
  for (const auto& combination : Op::kDtypes) dtypes.push_back(combination[slot]);
  param.ParamType(optional ? ops::OPTIONAL : ops::REQUIRED)
      .DataType(dtypes)
      .Format(std::vector<ge::Format>(dtypes.size(), ge::FORMAT_ND));
}

template <typename Op>
void DefineOp(ops::OpDef& def) {
  using Table = typename Op::Table;
  constexpr size_t inputs = Table::kNumInputs, outputs = Table::kNumOutputs;
  for (size_t i = 0; i < inputs; ++i) DefineParam<Op>(def.Input(Table::kInputNames[i]), i, Table::kOptional[i]);
  for (size_t o = 0; o < outputs; ++o) DefineParam<Op>(def.Output(Table::kOutputNames[o]), inputs + o, false);
  [[maybe_unused]] const typename Table::Attrs& defaults = Table::kDefaults;  // unused by ops without attributes
  size_t a = 0;
  const auto attr = [&def, &a]() -> ops::OpAttrDef& {
    const size_t i = a++;
    return def.Attr(Table::kAttrNames[i]).AttrType(Table::kAttrRequired[i] ? ops::REQUIRED : ops::OPTIONAL);
  };
  std::apply([&](auto... field) { (SetDefault(attr(), defaults.*field), ...); }, Table::kAttrs);
  def.SetInferShape(InferShape<Op>).SetInferDataType(InferDataType<Op>);
  def.AICore().SetTiling(Tiling<Op>);
  for (const char* soc : Op::kSocs) def.AICore().AddConfig(soc);
}

}  // namespace mgo::op_host
