// ClaGateBackward: OpDef and the shared op_host adapter (common/op_host_adapter.h) over the
// rules in infer_shape/cla_gate_backward.h and ascendc/cla_gate_backward/cla_gate_backward_tiling.h,
// tested on CPU. CANN-only, NOT compiled in this repository's CI (no CANN toolkit here);
// scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/cla_gate_backward.h"
#include "../cla_gate_backward_tiling.h"

namespace mgo::op_host {

struct ClaGateBackwardHost {
  static constexpr const char* kName = "ClaGateBackward";
  static constexpr std::array<bool, 5> kOptional{};  // every input REQUIRED
  struct Attrs {
    std::string input_attn_layout;
  };
  static Attrs ReadAttrs(const gert::RuntimeAttrs* a) { return {StrAttr(a, 0, "input_attn_layout")}; }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs& a) {
    return mgo::infer::cla_gate_backward(in, {a.input_attn_layout});
  }
  // Input 0: grad_merged [T, N, D].
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs&,
                   const Platform& p) {
    const mgo::tiling::ClaGateShape shape{Dim(in[0], 0), Dim(in[0], 1), Dim(in[0], 2)};
    const auto t = mgo::tiling::ComputeClaGateBackwardTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

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
    using Host = mgo::op_host::ClaGateBackwardHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    // The seed op ships for Ascend 950 only; this kernel uses only the vector API subset common
    // to A2/A3/950 and sizes its tiles from the platform's UB, so it is registered for all three.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
    this->AICore().AddConfig("ascend950");
  }
};

OP_ADD(ClaGateBackward);

}  // namespace ops
