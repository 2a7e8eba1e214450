// RopeGrad: OpDef, tiling adapter, infer adapters. CANN-only, NOT compiled in this repository's
// CI (no CANN toolkit here); scripts/build_ascend.sh builds it. Thin by design: the rules live
// in infer_shape/rope_grad.h and ascendc/rope_grad/rope_grad_tiling.h, which are tested on CPU.
#include "../../common/op_host_common.h"
#include "../../../infer_shape/rope_grad.h"
#include "../rope_grad_tiling.h"

namespace optiling {

static ge::graphStatus RopeGradTilingFunc(gert::TilingContext* ctx) {
  mgo::tiling::DType dtype;
  if (!mgo::op_host::KernelDtype(ctx->GetInputDesc(0)->GetDataType(), &dtype)) return ge::GRAPH_FAILED;
  const std::string mode = ctx->GetAttrs()->GetStr(0);
  const auto& g = ctx->GetInputShape(0)->GetStorageShape();    // q_grad [n_tokens, hidden]
  const auto& cos = ctx->GetInputShape(2)->GetStorageShape();  // [max_seq_len, 128]
  const auto& lens = ctx->GetInputShape(4)->GetStorageShape(); // [batch]
  const mgo::tiling::RopeShape shape{static_cast<uint64_t>(g.GetDim(0)), static_cast<uint64_t>(g.GetDim(1)),
                                     static_cast<uint64_t>(cos.GetDim(0)), static_cast<uint64_t>(lens.GetDim(0))};
  const auto platform = mgo::op_host::QueryPlatform(ctx);
  const auto t = mgo::tiling::ComputeRopeGradTiling(
      shape, dtype, mode == "vjp" ? mgo::tiling::RopeGradMode::kVjp : mgo::tiling::RopeGradMode::kAtb,
      platform.coreNum, platform.ubBytes);
  if (!t.result.ok) {
    mgo::op_host::LogError("RopeGrad", t.result.error);
    return ge::GRAPH_FAILED;
  }
  return mgo::op_host::Publish(ctx, t.result.data, t.result.data.usedCoreNum, t.tilingKey, platform.sysWorkspace);
}

}  // namespace optiling

namespace ge {

static graphStatus RopeGradInferShape(gert::InferShapeContext* ctx) {
  mgo::infer::InferResult r;
  const std::string mode = ctx->GetAttrs()->GetStr(0);
  const auto status = mgo::op_host::RunRule("RopeGrad", [&] { r = mgo::infer::rope_grad(mgo::op_host::InputShapes(ctx, 5), mode); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteShapes(ctx, r) : status;
}

static graphStatus RopeGradInferDataType(gert::InferDataTypeContext* ctx) {
  mgo::infer::InferResult r;
  const auto status = mgo::op_host::RunRule("RopeGrad", [&] { r = mgo::infer::rope_grad(mgo::op_host::InputDtypes(ctx, 5), "atb"); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteDtypes(ctx, r) : status;
}

}  // namespace ge

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["rope_grad"] (tests/test_ascendc_op_host.py).
class RopeGrad : public OpDef {
 public:
  explicit RopeGrad(const char* name) : OpDef(name) {
    this->Input("q_grad").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("k_grad").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("cos").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("sin").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    // Lengths are a device tensor, not an attribute: new lengths need no recompilation.
    this->Input("q_seq_len").ParamType(REQUIRED).DataType({ge::DT_INT32, ge::DT_INT32}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("q_grad_out").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("k_grad_out").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("mode").AttrType(OPTIONAL).String("atb");
    this->SetInferShape(ge::RopeGradInferShape).SetInferDataType(ge::RopeGradInferDataType);
    this->AICore().SetTiling(optiling::RopeGradTilingFunc);
    this->AICore().AddConfig("ascend910b");    // Atlas A2 (the seed's products)
    this->AICore().AddConfig("ascend910_93");  // Atlas A3
  }
};

OP_ADD(RopeGrad);

}  // namespace ops
