// The op_host sources on CANN's REAL host libraries: a driver built by scripts/check_ascend_host.py
// (never by CI, which has no CANN sources) and linked with every op_host source compiled three
// times, once per expansion of CANN's OP_ADD (default: the OpDef, OpDefFactory; OP_PROTO_LIB:
// InferShape and InferDataType; OP_TILING_LIB: Tiling, TilingParse and the op-check hooks; the
// last two land in gert::OpImplRegistry). It reads each op back from where CANN put it and runs it
// through contexts made by CANN's own builders (gert::OpInferShapeContextBuilder,
// OpInferDataTypeContextBuilder, OpTilingContextBuilder) over the fe::PlatFormInfos CANN's
// PlatformInfoManager loads from runtime's SoC .ini files (<bin>/../data/platform_config).
//
// Built with -fno-access-control, as CANN's own op unit tests are: the OpDef getters
// (OpDefFactory::OpDefCreate, OpDef::GetInputs, ...) are private to CANN's generators.
//
// Protocol: that of the stand-in's driver (tests/ascend/cann_stub/op_host_driver.cpp), so
// tests/ascend/test_ascendc_op_host.py runs the same cases on both, with the same context knobs:
// MGO_SOC (default Ascend910B1), MGO_TILING_BYTES (default: the max_tiling_data_size the op
// registered, 2048 from OP_ADD), MGO_WORKSPACES (default 1), MGO_OUTPUTS (default the OpDef's).
// Two more passes: "registered" prints "ok <InferShape> <InferDataType> <Tiling> <TilingParse>", 1
// where the registry holds the function; "platform" (no case) prints what the op_host's
// QueryPlatform reads from the SoC's platform (ok aiv= aic= ub= l1= l0a= l0b= l0c= sys_workspace=).
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/context_builder/op_infer_datatype_context_builder.h"
#include "base/context_builder/op_infer_shape_context_builder.h"
#include "base/context_builder/op_tiling_context_builder.h"
#include "exe_graph/runtime/continuous_vector.h"
#include "exe_graph/runtime/infer_datatype_context.h"
#include "exe_graph/runtime/infer_shape_context.h"
#include "exe_graph/runtime/runtime_tensor.h"
#include "exe_graph/runtime/tiling_context.h"
#include "platform/platform_info.h"
#include "register/op_def_registry.h"
#include "register/op_impl_registry_base.h"

#include "../common/op_host_platform.h"
#include "driver_print.h"

namespace {

using mgo::host_check::Case;
using mgo::host_check::EnvSize;

std::string Str(const ge::AscendString& s) { return s.GetString() == nullptr ? "" : s.GetString(); }

// The OpDef as CANN's OpDefFactory stores it, in the syntax of a hand-written one.
void PrintDef(const std::string& op) {
  ops::OpDef def = ops::OpDefFactory::OpDefCreate(op.c_str());
  std::cout << "class " << Str(def.GetOpType()) << " : public OpDef\n";
  for (auto& p : def.GetInputs()) {
    mgo::host_check::PrintParam("Input", Str(p.GetParamName()), p.GetParamType() == ops::Option::OPTIONAL,
                                p.GetDataTypes(), p.GetFormats());
  }
  for (auto& p : def.GetOutputs()) {
    mgo::host_check::PrintParam("Output", Str(p.GetParamName()), p.GetParamType() == ops::Option::OPTIONAL,
                                p.GetDataTypes(), p.GetFormats());
  }
  for (auto& a : def.GetAttrs()) {
    mgo::host_check::PrintAttr(Str(a.GetName()), a.IsRequired(), Str(a.GetProtoDataType()),
                               Str(a.GetAttrDefaultVal("[]")));
  }
  for (auto& [soc, config] : def.AICore().GetAICoreConfigs()) {
    (void)config;
    std::cout << "this->AICore().AddConfig(\"" << Str(soc) << "\");\n";
  }
  std::cout << "OP_ADD(" << op << ");\n";
}

// Attributes in OpDef order, as the builders take them (AppendAttr).
template <typename Builder>
void AppendAttrs(Builder& b, const Case& c) {
  for (const auto& a : c.attrs) {
    if (a.kind == 's') b.AppendAttr(ge::AscendString(a.value.c_str()));
    if (a.kind == 'i') b.AppendAttr(static_cast<int64_t>(std::stoll(a.value)));
    if (a.kind == 'f') b.AppendAttr(std::stof(a.value));
    if (a.kind == 'b') b.AppendAttr(a.value == "1");
  }
}

// Per IR input: 1 instance, 0 for an omitted OPTIONAL input (its instance indices then shift).
std::vector<uint32_t> Instances(const Case& c) {
  std::vector<uint32_t> n;
  for (const auto& x : c.inputs) n.push_back(x.present ? 1 : 0);
  return n;
}

gert::Shape ShapeOf(const std::vector<int64_t>& dims) {
  gert::Shape s;
  for (int64_t d : dims) s.AppendDim(d);
  return s;
}

// The present inputs as tensors (ND, the given dtype and shape as origin and storage shape).
std::vector<std::unique_ptr<gert::Tensor>> Tensors(const Case& c) {
  std::vector<std::unique_ptr<gert::Tensor>> t;
  for (const auto& x : c.inputs) {
    if (!x.present) continue;
    t.push_back(std::make_unique<gert::Tensor>(gert::StorageShape(), gert::StorageFormat(), x.dtype));
    t.back()->MutableOriginShape() = ShapeOf(x.dims);
    t.back()->MutableStorageShape() = ShapeOf(x.dims);
    t.back()->SetOriginFormat(ge::FORMAT_ND);
    t.back()->SetStorageFormat(ge::FORMAT_ND);
  }
  return t;
}

std::vector<gert::Tensor*> Pointers(const std::vector<std::unique_ptr<gert::Tensor>>& t) {
  std::vector<gert::Tensor*> p;
  for (const auto& x : t) p.push_back(x.get());
  return p;
}

int Failed(const char* why) {
  std::cerr << "driver: " << why << "\n";
  return 2;
}

int InferShape(const std::string& op, const gert::OpImplRegistry::OpImplFunctionsV2& f, const Case& c,
               size_t outputs) {
  if (f.infer_shape == nullptr) return Failed("no InferShape registered (OP_PROTO_LIB)");
  const auto in = Tensors(c);
  gert::OpInferShapeContextBuilder b;
  b.OpType(op.c_str()).OpName(op.c_str()).IOInstanceNum(Instances(c), std::vector<uint32_t>(outputs, 1));
  AppendAttrs(b, c);
  for (size_t o = 0; o < outputs; ++o) b.OutputTensorDesc(o, ge::DT_UNDEFINED, ge::FORMAT_ND, ge::FORMAT_ND);
  auto holder = b.InputTensors(Pointers(in)).Build();
  gert::InferShapeContext* ctx = holder.GetContext();
  if (ctx == nullptr) return Failed("OpInferShapeContextBuilder::Build returned no context");
  if (f.infer_shape(ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
  std::cout << "ok " << outputs;
  for (size_t o = 0; o < outputs; ++o) {
    const gert::Shape* s = ctx->GetOutputShape(o);
    std::cout << " " << s->GetDimNum();
    for (size_t d = 0; d < s->GetDimNum(); ++d) std::cout << " " << s->GetDim(d);
  }
  std::cout << "\n";
  return 0;
}

int InferDataType(const std::string& op, const gert::OpImplRegistry::OpImplFunctionsV2& f, const Case& c,
                  size_t outputs) {
  if (f.infer_datatype == nullptr) return Failed("no InferDataType registered (OP_PROTO_LIB)");
  gert::OpInferDataTypeContextBuilder b;
  b.OpType(op.c_str()).OpName(op.c_str()).IOInstanceNum(Instances(c), std::vector<uint32_t>(outputs, 1));
  AppendAttrs(b, c);
  size_t instance = 0;
  for (const auto& x : c.inputs) {
    if (x.present) b.InputTensorDesc(instance++, x.dtype, ge::FORMAT_ND, ge::FORMAT_ND);
  }
  for (size_t o = 0; o < outputs; ++o) b.OutputTensorDesc(o, ge::FORMAT_ND, ge::FORMAT_ND);
  auto holder = b.Build();
  gert::InferDataTypeContext* ctx = holder.GetContext();
  if (ctx == nullptr) return Failed("OpInferDataTypeContextBuilder::Build returned no context");
  if (f.infer_datatype(ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
  std::cout << "ok " << outputs;
  for (size_t o = 0; o < outputs; ++o) std::cout << " " << static_cast<int>(ctx->GetOutputDataType(o));
  std::cout << "\n";
  return 0;
}

// The SoC's platform as CANN's PlatformInfoManager loads it from the SoC's .ini.
bool LoadPlatform(fe::PlatFormInfos& platform) {
  fe::OptionalInfos optional;
  auto& manager = fe::PlatformInfoManager::Instance();
  return manager.InitializePlatformInfo() == 0U &&
         manager.GetPlatformInfos(mgo::host_check::EnvSoc(), platform, optional) == 0U;
}

int Platform(const std::string& op) {
  fe::PlatFormInfos platform;
  if (!LoadPlatform(platform)) return Failed(("PlatformInfoManager has no SoC " + mgo::host_check::EnvSoc()).c_str());
  const int placeholder = 0;
  gert::Tensor in(gert::StorageShape(), gert::StorageFormat(), ge::DT_FLOAT16);  // Build refuses 0 inputs
  gert::Tensor out(gert::StorageShape(), gert::StorageFormat(), ge::DT_FLOAT16);
  gert::OpTilingContextBuilder b;
  auto holder = b.OpType(op.c_str()).OpName(op.c_str()).IONum(1, 1).InputTensors({&in}).OutputTensors({&out})
                    .CompileInfo(&placeholder).PlatformInfo(&platform).Build();
  gert::TilingContext* ctx = holder.GetContext();
  if (ctx == nullptr) return Failed("OpTilingContextBuilder::Build returned no context");
  mgo::host_check::PrintPlatform(mgo::op_host::QueryPlatform(ctx));
  return 0;
}

int Tiling(const std::string& op, const gert::OpImplRegistry::OpImplFunctionsV2& f, const Case& c,
           size_t outputs) {
  if (f.tiling == nullptr) return Failed("no Tiling registered (OP_TILING_LIB)");
  if (f.tiling_parse == nullptr) return Failed("no TilingParse registered (OP_TILING_LIB)");
  fe::PlatFormInfos platform;
  if (!LoadPlatform(platform)) return Failed(("PlatformInfoManager has no SoC " + mgo::host_check::EnvSoc()).c_str());
  const auto in = Tensors(c);
  std::vector<std::unique_ptr<gert::Tensor>> out;
  for (size_t o = 0; o < outputs; ++o) {
    out.push_back(std::make_unique<gert::Tensor>(gert::StorageShape(), gert::StorageFormat(), ge::DT_UNDEFINED));
  }
  const size_t room = EnvSize("MGO_WORKSPACES", 1);
  const auto workspace = gert::ContinuousVector::Create<size_t>(room);
  const int placeholder = 0;  // OP_ADD's TilingParse keeps no compile info; Build needs a pointer
  gert::OpTilingContextBuilder b;
  b.OpType(op.c_str()).OpName(op.c_str()).IOInstanceNum(Instances(c), std::vector<uint32_t>(outputs, 1));
  AppendAttrs(b, c);  // the tensors carry dtypes, shapes and formats
  b.InputTensors(Pointers(in)).OutputTensors(Pointers(out)).CompileInfo(&placeholder).PlatformInfo(&platform);
  b.TilingDataSize(EnvSize("MGO_TILING_BYTES", f.max_tiling_data_size));
  if (room > 0) b.Workspace(reinterpret_cast<const gert::ContinuousVector*>(workspace.get()));
  auto holder = b.Build();
  gert::TilingContext* ctx = holder.GetContext();
  if (ctx == nullptr) return Failed("OpTilingContextBuilder::Build returned no context");
  if (f.tiling(ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
  const auto* sizes = reinterpret_cast<const gert::TypedContinuousVector<size_t>*>(workspace.get());
  mgo::host_check::PrintTiling(op, ctx->GetRawTilingData()->GetData(), ctx->GetBlockDim(), ctx->GetTilingKey(),
                               sizes->GetSize() > 0 ? sizes->GetData()[0] : 0, ctx->GetScheduleMode());
  return 0;
}

}  // namespace

int main() {
  std::string op, pass;
  std::cin >> op >> pass;
  ops::OpDef def = ops::OpDefFactory::OpDefCreate(op.c_str());
  if (Str(def.GetOpType()) != op) return Failed(("no OpDef registered for " + op + " (OP_ADD)").c_str());
  const auto* f = gert::OpImplRegistry::GetInstance().GetOpImpl(op.c_str());
  if (f == nullptr) return Failed(("no op impl registered for " + op).c_str());
  const size_t outputs = EnvSize("MGO_OUTPUTS", def.GetOutputs().size());
  if (pass == "def") {
    PrintDef(op);
    return 0;
  }
  if (pass == "platform") return Platform(op);
  if (pass == "registered") {
    std::cout << "ok " << (f->infer_shape != nullptr) << " " << (f->infer_datatype != nullptr) << " "
              << (f->tiling != nullptr) << " " << (f->tiling_parse != nullptr) << "\n";
    return 0;
  }
  const Case c = mgo::host_check::ReadCase(std::cin);
  if (pass == "shape") return InferShape(op, *f, c, outputs);
  if (pass == "dtype") return InferDataType(op, *f, c, outputs);
  if (pass == "tiling") return Tiling(op, *f, c, outputs);
  return Failed(("unknown pass " + pass).c_str());
}
