// ClaGateMerge: OpDef, tiling adapter, infer adapters. CANN-only, NOT compiled in this
// repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it. Thin by design:
// the rules live in infer_shape/cla_gate_merge.h and
// ascendc/cla_gate_merge/cla_gate_merge_tiling.h, tested on CPU.
#include "../../common/op_host_common.h"
#include "../../../infer_shape/cla_gate_merge.h"
#include "../cla_gate_merge_tiling.h"

namespace optiling {

static ge::graphStatus ClaGateMergeTilingFunc(gert::TilingContext* ctx) {
  mgo::tiling::DType dtype;
  if (!mgo::op_host::KernelDtype(ctx->GetInputDesc(0)->GetDataType(), &dtype)) return ge::GRAPH_FAILED;
  const auto& o = ctx->GetInputShape(0)->GetStorageShape();  // global_attn [T, N, D]
  const mgo::tiling::ClaGateShape shape{static_cast<uint64_t>(o.GetDim(0)), static_cast<uint64_t>(o.GetDim(1)),
                                        static_cast<uint64_t>(o.GetDim(2))};
  const auto platform = mgo::op_host::QueryPlatform(ctx);
  const auto t = mgo::tiling::ComputeClaGateMergeTiling(shape, dtype, platform.coreNum, platform.ubBytes);
  if (!t.result.ok) {
    mgo::op_host::LogError("ClaGateMerge", t.result.error);
    return ge::GRAPH_FAILED;
  }
  return mgo::op_host::Publish(ctx, t.result.data, t.result.data.usedCoreNum, t.tilingKey, platform.sysWorkspace);
}

}  // namespace optiling

namespace ge {

static graphStatus ClaGateMergeInferShape(gert::InferShapeContext* ctx) {
  mgo::infer::InferResult r;
  const auto status = mgo::op_host::RunRule(
      "ClaGateMerge", [&] { r = mgo::infer::cla_gate_merge(mgo::op_host::InputShapes(ctx, 4)); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteShapes(ctx, r) : status;
}

static graphStatus ClaGateMergeInferDataType(gert::InferDataTypeContext* ctx) {
  mgo::infer::InferResult r;
  const auto status = mgo::op_host::RunRule(
      "ClaGateMerge", [&] { r = mgo::infer::cla_gate_merge(mgo::op_host::InputDtypes(ctx, 4)); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteDtypes(ctx, r) : status;
}

}  // namespace ge

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["cla_gate_merge"] (tests/test_ascendc_op_host.py).
class ClaGateMerge : public OpDef {
 public:
  explicit ClaGateMerge(const char* name) : OpDef(name) {
    this->Input("global_attn").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("local_attn").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("global_gate_logits").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("local_gate_logits").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("merged").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->SetInferShape(ge::ClaGateMergeInferShape).SetInferDataType(ge::ClaGateMergeInferDataType);
    this->AICore().SetTiling(optiling::ClaGateMergeTilingFunc);
    // Vector-only kernel sized from the platform UB: valid on A2, A3 and 950 alike.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    this->AICore().AddConfig("ascend950");
  }
};

OP_ADD(ClaGateMerge);

}  // namespace ops
