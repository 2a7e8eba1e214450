// RopeGrad: OpDef and the shared op_host adapter (common/op_host_adapter.h) over the rules in
// infer_shape/rope_grad.h and ascendc/rope_grad/rope_grad_tiling.h, tested on CPU. CANN-only,
// NOT compiled in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/rope_grad.h"
#include "../rope_grad_tiling.h"

namespace mgo::op_host {

struct RopeGradHost {
  static constexpr const char* kName = "RopeGrad";
  static constexpr std::array<bool, 5> kOptional{};  // every input REQUIRED
  struct Attrs {
    std::string mode;
  };
  static Attrs ReadAttrs(const gert::RuntimeAttrs* a) { return {StrAttr(a, 0, "mode")}; }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs& a) {
    return mgo::infer::rope_grad(in, {a.mode});
  }
  // Inputs: q_grad [n_tokens, hidden], k_grad, cos [max_seq_len, 128], sin, q_seq_len [batch].
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs& a,
                   const Platform& p) {
    const mgo::tiling::RopeShape shape{Dim(in[0], 0), Dim(in[0], 1), Dim(in[2], 0), Dim(in[4], 0)};
    const auto mode = a.mode == "vjp" ? mgo::tiling::RopeGradMode::kVjp : mgo::tiling::RopeGradMode::kAtb;
    const auto t = mgo::tiling::ComputeRopeGradTiling(shape, dtype, mode, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

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
    using Host = mgo::op_host::RopeGradHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    this->AICore().AddConfig("ascend910b");    // Atlas A2 (the seed's products)
    this->AICore().AddConfig("ascend910_93");  // Atlas A3
  }
};

OP_ADD(RopeGrad);

}  // namespace ops
