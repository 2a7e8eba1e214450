// Test driver: runs one op_host adapter (InferShape / InferDataType / Tiling of an op registered
// with OP_ADD against this stub) on one case read from stdin and prints the result on stdout, in
// the protocol (and through the printing, ascendc/host_check/driver_print.h) of the driver that
// runs the same sources on CANN's real libraries (ascendc/host_check/op_host_driver.cpp).
// Included after the op_host sources by tests/ascend/test_ascendc_op_host.py, which compiles it once.
//
// The context as CANN's builders would make it, set by the environment (the same knobs as the
// real driver): MGO_SOC (SoC_version, default Ascend910B1), MGO_TILING_BYTES (tiling buffer
// capacity, default 2048: what OP_ADD registers), MGO_WORKSPACES (workspace sizes the context has
// room for, default 1), MGO_OUTPUTS (outputs the contexts are built with, default the OpDef's).
//
// stdin: <OpType> def                   (the registered OpDef, printed as the C++ that declares it)
//    or: <OpType> <shape|dtype|tiling>
//        <n_attrs> { <index> <s|i|f|b> <value> }
//        <n_inputs> { <present 0|1> <ge dtype> <rank> <dims...> }
// stdout: "failed" (the adapter logged why on stderr), or
//   shape:  ok <n_outputs> { <rank> <dims...> }
//   dtype:  ok <n_outputs> { <ge dtype> }
//   tiling: ok block_dim=.. tiling_key=.. workspace=.. schedule_mode=.. <tiling data fields>
//           [attr.<name>=<value> for every attribute the tiling data carries (a choice by its name)]
// or, for "<OpType> platform" (no case): ok aiv=.. aic=.. ub=.. l1=.. l0a=.. l0b=.. l0c=.. sys_workspace=..
//   (what the op_host's QueryPlatform reads from the SoC's platform).
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "../../../ascendc/host_check/driver_print.h"

namespace {

using mgo::host_check::EnvSize;

// The OpDef as OP_ADD registered it, in the syntax of a hand-written one.
void PrintDef(const std::string& op, const ops::OpDef& def) {
  std::cout << "class " << def.name_ << " : public OpDef\n";
  for (const auto& [name, p] : def.inputs_) {
    mgo::host_check::PrintParam("Input", name, p.param_ == ops::OPTIONAL, p.dtypes_, p.formats_);
  }
  for (const auto& [name, p] : def.outputs_) {
    mgo::host_check::PrintParam("Output", name, p.param_ == ops::OPTIONAL, p.dtypes_, p.formats_);
  }
  const std::map<std::string, std::string> setters{{"str", "String"}, {"int", "Int"}, {"float", "Float"},
                                                   {"bool", "Bool"}};
  for (const auto& [name, a] : def.attrs_) {
    mgo::host_check::PrintAttr(name, a.param_ == ops::REQUIRED, setters.at(a.kind_), a.value_);
  }
  for (const auto& soc : def.aicore_.socs_) std::cout << "this->AICore().AddConfig(\"" << soc << "\");\n";
  std::cout << "OP_ADD(" << op << ");\n";
}

void Fill(gert::ExtendedKernelContext& ctx, const mgo::host_check::Case& c) {
  for (const auto& a : c.attrs) {
    if (a.kind == 's') ctx.attrs_.strs_[a.index] = a.value;
    if (a.kind == 'i') ctx.attrs_.ints_[a.index] = std::stoll(a.value);
    if (a.kind == 'f') ctx.attrs_.floats_[a.index] = std::stof(a.value);
    if (a.kind == 'b') ctx.attrs_.bools_[a.index] = a.value == "1";
  }
  for (const auto& x : c.inputs) {
    ctx.in_.present.push_back(x.present);
    ctx.in_.dtypes.push_back(x.dtype);
    ctx.in_.shapes.emplace_back(x.dims);
  }
}

}  // namespace

int main() {
  std::string op, pass;
  std::cin >> op >> pass;
  const ops::OpDef def = ops::StubRegistry().at(op)();
  const size_t outputs = EnvSize("MGO_OUTPUTS", def.outputs_.size());
  if (pass == "def") {
    PrintDef(op, def);
    return 0;
  }
  const std::string soc = mgo::host_check::EnvSoc();
  fe::PlatFormInfos* const platform = platform_ascendc::FindSoc(soc.c_str());
  if (platform == nullptr) return std::cerr << "unknown SoC " << soc << "\n", 2;
  if (pass == "platform") {
    gert::TilingContext ctx;
    ctx.platform_ = platform;
    mgo::host_check::PrintPlatform(mgo::op_host::QueryPlatform(&ctx));
    return 0;
  }
  const mgo::host_check::Case c = mgo::host_check::ReadCase(std::cin);
  if (pass == "shape") {
    gert::InferShapeContext ctx;
    ctx.out_.resize(outputs);
    Fill(ctx, c);
    if (def.infer_shape_(&ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
    std::cout << "ok " << ctx.out_.size();
    for (const auto& s : ctx.out_) {
      std::cout << " " << s.GetDimNum();
      for (size_t d = 0; d < s.GetDimNum(); ++d) std::cout << " " << s.GetDim(d);
    }
    std::cout << "\n";
  } else if (pass == "dtype") {
    gert::InferDataTypeContext ctx;
    ctx.out_.assign(outputs, ge::DT_UNDEFINED);
    Fill(ctx, c);
    if (def.infer_dtype_(&ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
    std::cout << "ok " << ctx.out_.size();
    for (ge::DataType t : ctx.out_) std::cout << " " << static_cast<int>(t);
    std::cout << "\n";
  } else {
    gert::TilingContext ctx;
    ctx.platform_ = platform;
    ctx.tiling_capacity_ = EnvSize("MGO_TILING_BYTES", 2048);  // OP_ADD registers 2048 bytes
    ctx.workspace_capacity_ = EnvSize("MGO_WORKSPACES", 1);
    Fill(ctx, c);
    if (def.aicore_.tiling_(&ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
    mgo::host_check::PrintTiling(op, ctx.tiling_.data(), ctx.block_dim_, ctx.tiling_key_, ctx.workspace_.at(0),
                                 ctx.schedule_mode_);
  }
  return 0;
}
