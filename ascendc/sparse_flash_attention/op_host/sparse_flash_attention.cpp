// SparseFlashAttention (forward): OpDef and the shared op_host adapter (common/op_host_adapter.h)
// over the rules in infer_shape/sparse_flash_attention.h and the pure tiling in
// ascendc/sparse_flash_attention/sparse_flash_attention_tiling.h, tested on CPU. CANN-only, NOT
// compiled with CANN in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh
// builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_sfa.h"
#include "../../../infer_shape/sparse_flash_attention.h"
#include "../sparse_flash_attention_tiling.h"

namespace mgo::op_host {

struct SparseFlashAttentionHost {
  static constexpr const char* kName = "SparseFlashAttention";
  // query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query/_kv
  static constexpr std::array<bool, 8> kOptional{false, false, true, false, true, true, true, true};
  using Attrs = SfaHostAttrs;
  static Attrs ReadAttrs(const gert::RuntimeAttrs* a) { return ReadSfaAttrs(a); }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs& a) {
    return mgo::infer::sparse_flash_attention(
        in, {a.rules.scale_value, a.rules.sparse_block_size, a.rules.layout, a.rules.sparse_mode});
  }
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs& a,
                   const Platform& p) {
    return TileSfa(mgo::tiling::ComputeSparseFlashAttentionTiling, {in[0], in[1], in[2], in[3], in[4], in[6]},
                   dtype, a, p, /*all_cores_at_once=*/false);
  }
};

}  // namespace mgo::op_host

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["sparse_flash_attention"]
// (tests/test_ascendc_op_host.py). Optional inputs may be omitted or be the zero-size placeholder.
class SparseFlashAttention : public OpDef {
 public:
  explicit SparseFlashAttention(const char* name) : OpDef(name) {
    this->Input("query").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("key").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("value").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("sparse_indices").ParamType(REQUIRED).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("query_rope").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("key_rope").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    // Columns: float16/bfloat16 x int32/int64 lengths (both the same). Cumulative lengths stay a
    // device tensor (TND): new lengths need no recompilation.
    this->Input("actual_seq_lengths_query").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("actual_seq_lengths_kv").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT64, ge::DT_INT64})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("out").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("softmax_max").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("softmax_sum").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("scale_value").AttrType(OPTIONAL).Float(1.0);
    this->Attr("sparse_block_size").AttrType(OPTIONAL).Int(1);
    this->Attr("layout").AttrType(OPTIONAL).String("BSND");
    this->Attr("sparse_mode").AttrType(OPTIONAL).Int(3);
    using Host = mgo::op_host::SparseFlashAttentionHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    // Mixed cube/vector kernel tiled from the platform's core count and UB/L1/L0 sizes; the seed
    // op's products are Atlas A2 and A3.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
  }
};

OP_ADD(SparseFlashAttention);

}  // namespace ops
