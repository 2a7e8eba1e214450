// SparseLightningIndexerGradKLLoss: OpDef and the shared op_host adapter (common/op_host_adapter.h)
// over the rules in infer_shape/sparse_lightning_indexer_grad_kl_loss.h and the pure tiling in
// ascendc/sparse_lightning_indexer_grad_kl_loss/sparse_lightning_indexer_grad_kl_loss_tiling.h,
// tested on CPU. CANN-only, NOT compiled with CANN in this repository's CI (no CANN toolkit here);
// scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_indexer.h"
#include "../../../infer_shape/sparse_lightning_indexer_grad_kl_loss.h"
#include "../sparse_lightning_indexer_grad_kl_loss_tiling.h"

namespace mgo::op_host {

struct SparseLightningIndexerGradKlLossHost {
  static constexpr const char* kName = "SparseLightningIndexerGradKLLoss";
  // query, key, query_index, key_index, weights, sparse_indices, softmax_max, softmax_sum,
  // query_rope, key_rope, actual_seq_lengths_query/_key
  static constexpr std::array<bool, 12> kOptional{false, false, false, false, false, false,
                                                  false, false, true, true, true, true};
  struct Attrs {
    double scale_value;
    std::string layout;
    int64_t sparse_mode;
    bool deterministic;
  };
  static Attrs ReadAttrs(const gert::RuntimeAttrs* a) {
    return Attrs{FloatAttr(a, 0, "scale_value"), StrAttr(a, 1, "layout"), IntAttr(a, 2, "sparse_mode"),
                 BoolAttr(a, 3, "deterministic")};
  }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs& a) {
    return mgo::infer::sparse_lightning_indexer_grad_kl_loss(in, {a.scale_value, a.layout, a.sparse_mode, a.deterministic});
  }
  // The pure tiling's view of the shapes; TND without lengths (one sequence) is batch 0. The
  // lengths' values live on the device, so rows are balanced by count. The key pass waits for
  // every core's row pass (SyncAll): all cores must start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs& a,
                   const Platform& p) {
    const mgo::infer::TensorDesc &q = in[0], &k = in[1], &qi = in[2], &si = in[5], &qr = in[8];
    const size_t r = IndexerRank(a.layout, {&q, &k, &qi, &si}, "query/key/query_index/sparse_indices");
    const IndexerTokens tok = ReadIndexerTokens(a.layout, q, k, in[10]);
    const uint64_t dr = mgo::infer::is_absent(qr.shape) ? 0 : Dim(qr, r - 1);
    const mgo::tiling::SliShape s{tok.layout,    tok.batch,     tok.s1, tok.s2,         tok.t1,
                                  tok.t2,        Dim(q, r - 2), Dim(q, r - 1), dr, Dim(qi, r - 2),
                                  Dim(qi, r - 1), Dim(si, r - 1)};
    const mgo::tiling::SliAttrs attrs{static_cast<float>(a.scale_value), static_cast<uint32_t>(a.sparse_mode),
                                      a.deterministic};
    const mgo::tiling::CubePlatform cube{p.aicNum, p.ubBytes, p.l1Bytes, p.l0aBytes, p.l0bBytes, p.l0cBytes};
    const auto t = mgo::tiling::ComputeSparseLightningIndexerGradKlLossTiling(
        s, attrs, dtype, in[4].dtype == mgo::infer::DType::kFloat32, mgo::tiling::SfaSeqLengths{nullptr, nullptr, 0},
        cube);
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["sparse_lightning_indexer_grad_kl_loss"]
// (tests/test_ascendc_op_host.py). Optional inputs may be omitted or be the zero-size placeholder.
// Columns: float16/bfloat16 inputs x weights (and d_weights) of the same dtype or float32.
class SparseLightningIndexerGradKLLoss : public OpDef {
 public:
  explicit SparseLightningIndexerGradKLLoss(const char* name) : OpDef(name) {
    this->Input("query").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("key").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("query_index").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("key_index").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("weights").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("sparse_indices").ParamType(REQUIRED).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("softmax_max").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("softmax_sum").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("query_rope").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("key_rope").ParamType(OPTIONAL).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("actual_seq_lengths_query").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("actual_seq_lengths_key").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("d_query_index").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("d_key_index").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("d_weights").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("loss").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("scale_value").AttrType(OPTIONAL).Float(1.0);
    this->Attr("layout").AttrType(OPTIONAL).String("BSND");
    this->Attr("sparse_mode").AttrType(OPTIONAL).Int(3);
    this->Attr("deterministic").AttrType(OPTIONAL).Bool(false);
    using Host = mgo::op_host::SparseLightningIndexerGradKlLossHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    // Mixed cube/vector kernel tiled from the platform's core count and UB/L1/L0 sizes; the seed
    // op's products are Atlas A2 and A3.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
  }
};

OP_ADD(SparseLightningIndexerGradKLLoss);

}  // namespace ops
