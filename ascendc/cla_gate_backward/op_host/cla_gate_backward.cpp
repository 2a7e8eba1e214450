// ClaGateBackward: OpDef, tiling adapter, infer adapters. CANN-only, NOT compiled in this
// repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it. Thin by design:
// the rules live in infer_shape/cla_gate_backward.h and
// ascendc/cla_gate_backward/cla_gate_backward_tiling.h, tested on CPU.
#include "../../common/op_host_common.h"
#include "../../../infer_shape/cla_gate_backward.h"
#include "../cla_gate_backward_tiling.h"

namespace optiling {

static ge::graphStatus ClaGateBackwardTilingFunc(gert::TilingContext* ctx) {
  mgo::tiling::DType dtype;
  if (!mgo::op_host::KernelDtype(ctx->GetInputDesc(0)->GetDataType(), &dtype)) return ge::GRAPH_FAILED;
  const auto& g = ctx->GetInputShape(0)->GetStorageShape();  // grad_merged [T, N, D]
  const mgo::tiling::ClaGateShape shape{static_cast<uint64_t>(g.GetDim(0)), static_cast<uint64_t>(g.GetDim(1)),
                                        static_cast<uint64_t>(g.GetDim(2))};
  const auto platform = mgo::op_host::QueryPlatform(ctx);
  const auto t = mgo::tiling::ComputeClaGateBackwardTiling(shape, dtype, platform.coreNum, platform.ubBytes);
  if (!t.result.ok) {
    mgo::op_host::LogError("ClaGateBackward", t.result.error);
    return ge::GRAPH_FAILED;
  }
  return mgo::op_host::Publish(ctx, t.result.data, t.result.data.usedCoreNum, t.tilingKey, platform.sysWorkspace);
}

}  // namespace optiling

namespace ge {

static graphStatus ClaGateBackwardInferShape(gert::InferShapeContext* ctx) {
  mgo::infer::InferResult r;
  const std::string layout = ctx->GetAttrs()->GetStr(0);
  const auto status = mgo::op_host::RunRule(
      "ClaGateBackward", [&] { r = mgo::infer::cla_gate_backward(mgo::op_host::InputShapes(ctx, 5), layout); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteShapes(ctx, r) : status;
}

static graphStatus ClaGateBackwardInferDataType(gert::InferDataTypeContext* ctx) {
  mgo::infer::InferResult r;
  const auto status = mgo::op_host::RunRule(
      "ClaGateBackward", [&] { r = mgo::infer::cla_gate_backward(mgo::op_host::InputDtypes(ctx, 5), "TND"); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteDtypes(ctx, r) : status;
}

}  // namespace ge

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["cla_gate_backward"]
// (tests/test_ascendc_op_host.py).
class ClaGateBackward : public OpDef {
 public:
  explicit ClaGateBackward(const char* name) : OpDef(name) {
    this->Input("grad_merged").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("global_attn").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("local_attn").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("global_gate_logits").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("local_gate_logits").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("grad_global_attn").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("grad_local_attn").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("grad_global_gate_logits").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("grad_local_gate_logits").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("input_attn_layout").AttrType(OPTIONAL).String("TND");
    this->SetInferShape(ge::ClaGateBackwardInferShape).SetInferDataType(ge::ClaGateBackwardInferDataType);
    this->AICore().SetTiling(optiling::ClaGateBackwardTilingFunc);
    // The seed op ships for Ascend 950 only; this kernel uses only the vector API subset common
    // to A2/A3/950 and sizes its tiles from the platform's UB, so it is registered for all three.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    this->AICore().AddConfig("ascend950");
  }
};

OP_ADD(ClaGateBackward);

}  // namespace ops
