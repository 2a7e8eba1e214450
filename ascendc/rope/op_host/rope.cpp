// Rope (forward): OpDef and the shared op_host adapter (common/op_host_adapter.h) over the rules
// in infer_shape/rope.h and ascendc/rope/rope_tiling.h, tested on CPU. CANN-only, NOT compiled
// in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/rope.h"
#include "../rope_tiling.h"

namespace mgo::op_host {

struct RopeHost {
  static constexpr const char* kName = "Rope";
  static constexpr std::array<bool, 5> kOptional{};  // every input REQUIRED
  struct Attrs {};
  static Attrs ReadAttrs(const gert::RuntimeAttrs*) { return {}; }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs&) {
    return mgo::infer::rope(in, {});
  }
  // Inputs: q [n_tokens, hidden], k, cos [max_seq_len, 128], sin, q_seq_len [batch].
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs&,
                   const Platform& p) {
    const mgo::tiling::RopeShape shape{Dim(in[0], 0), Dim(in[0], 1), Dim(in[2], 0), Dim(in[4], 0)};
    const auto t = mgo::tiling::ComputeRopeTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

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
    using Host = mgo::op_host::RopeHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    this->AICore().AddConfig("ascend910b");    // Atlas A2
    this->AICore().AddConfig("ascend910_93");  // Atlas A3
  }
};

OP_ADD(Rope);

}  // namespace ops
