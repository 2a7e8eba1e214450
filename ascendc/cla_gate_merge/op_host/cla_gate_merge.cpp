// ClaGateMerge: OpDef and the shared op_host adapter (common/op_host_adapter.h) over the rules
// in infer_shape/cla_gate_merge.h and ascendc/cla_gate_merge/cla_gate_merge_tiling.h, tested on
// CPU. CANN-only, NOT compiled in this repository's CI (no CANN toolkit here);
// scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/cla_gate_merge.h"
#include "../cla_gate_merge_tiling.h"

namespace mgo::op_host {

struct ClaGateMergeHost {
  static constexpr const char* kName = "ClaGateMerge";
  static constexpr std::array<bool, 4> kOptional{};  // every input REQUIRED
  struct Attrs {};
  static Attrs ReadAttrs(const gert::RuntimeAttrs*) { return {}; }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs&) {
    return mgo::infer::cla_gate_merge(in, {});
  }
  // Input 0: global_attn [T, N, D].
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs&,
                   const Platform& p) {
    const mgo::tiling::ClaGateShape shape{Dim(in[0], 0), Dim(in[0], 1), Dim(in[0], 2)};
    const auto t = mgo::tiling::ComputeClaGateMergeTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

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
    using Host = mgo::op_host::ClaGateMergeHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    // Vector-only kernel sized from the platform UB: valid on A2, A3 and 950 alike.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    this->AICore().AddConfig("ascend950");
  }
};

OP_ADD(ClaGateMerge);

}  // namespace ops
