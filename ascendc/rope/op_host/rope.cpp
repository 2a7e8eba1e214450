// Rope (forward): OpDef, tiling adapter, infer adapters. CANN-only, NOT compiled in this
// repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it. Thin by design:
// the rules live in infer_shape/rope.h and ascendc/rope/rope_tiling.h, tested on CPU.
#include "../../common/op_host_common.h"
#include "../../../infer_shape/rope.h"
#include "../rope_tiling.h"

namespace optiling {

static ge::graphStatus RopeTilingFunc(gert::TilingContext* ctx) {
  mgo::tiling::DType dtype;
  if (!mgo::op_host::KernelDtype(ctx->GetInputDesc(0)->GetDataType(), &dtype)) return ge::GRAPH_FAILED;
  const auto& q = ctx->GetInputShape(0)->GetStorageShape();    // [n_tokens, hidden]
  const auto& cos = ctx->GetInputShape(2)->GetStorageShape();  // [max_seq_len, 128]
  const auto& lens = ctx->GetInputShape(4)->GetStorageShape(); // [batch]
  const mgo::tiling::RopeShape shape{static_cast<uint64_t>(q.GetDim(0)), static_cast<uint64_t>(q.GetDim(1)),
                                     static_cast<uint64_t>(cos.GetDim(0)), static_cast<uint64_t>(lens.GetDim(0))};
  const auto platform = mgo::op_host::QueryPlatform(ctx);
  const auto t = mgo::tiling::ComputeRopeTiling(shape, dtype, platform.coreNum, platform.ubBytes);
  if (!t.result.ok) {
    mgo::op_host::LogError("Rope", t.result.error);
    return ge::GRAPH_FAILED;
  }
  return mgo::op_host::Publish(ctx, t.result.data, t.result.data.usedCoreNum, t.tilingKey, platform.sysWorkspace);
}

}  // namespace optiling

namespace ge {

static graphStatus RopeInferShape(gert::InferShapeContext* ctx) {
  mgo::infer::InferResult r;
  const auto status = mgo::op_host::RunRule("Rope", [&] { r = mgo::infer::rope(mgo::op_host::InputShapes(ctx, 5)); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteShapes(ctx, r) : status;
}

static graphStatus RopeInferDataType(gert::InferDataTypeContext* ctx) {
  mgo::infer::InferResult r;
  const auto status = mgo::op_host::RunRule("Rope", [&] { r = mgo::infer::rope(mgo::op_host::InputDtypes(ctx, 5)); });
  return status == GRAPH_SUCCESS ? mgo::op_host::WriteDtypes(ctx, r) : status;
}

}  // namespace ge

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["rope"] (tests/test_ascendc_op_host.py).
class Rope : public OpDef {
 public:
  explicit Rope(const char* name) : OpDef(name) {
    this->Input("q").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("k").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("cos").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("sin").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    // Lengths are a device tensor, not an attribute: new lengths need no recompilation.
    this->Input("q_seq_len").ParamType(REQUIRED).DataType({ge::DT_INT32, ge::DT_INT32}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("q_embed").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("k_embed").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
    this->SetInferShape(ge::RopeInferShape).SetInferDataType(ge::RopeInferDataType);
    this->AICore().SetTiling(optiling::RopeTilingFunc);
    this->AICore().AddConfig("ascend910b");    // Atlas A2
    this->AICore().AddConfig("ascend910_93");  // Atlas A3
  }
};

OP_ADD(Rope);

}  // namespace ops
