// LightningIndexer: OpDef and the shared op_host adapter (common/op_host_adapter.h) over the rules
// in infer_shape/lightning_indexer.h and the pure tiling in
// ascendc/lightning_indexer/lightning_indexer_tiling.h, tested on CPU. CANN-only, NOT compiled with
// CANN in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_indexer.h"
#include "../../../infer_shape/lightning_indexer.h"
#include "../lightning_indexer_tiling.h"

namespace mgo::op_host {

struct LightningIndexerHost {
  static constexpr const char* kName = "LightningIndexer";
  // query_index, key_index, weights, actual_seq_lengths_query/_key
  static constexpr std::array<bool, 5> kOptional{false, false, false, true, true};
  struct Attrs {
    int64_t sparse_count;
    std::string layout;
    int64_t sparse_mode;
  };
  static Attrs ReadAttrs(const gert::RuntimeAttrs* a) {
    return Attrs{IntAttr(a, 0, "sparse_count"), StrAttr(a, 1, "layout"), IntAttr(a, 2, "sparse_mode")};
  }
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Attrs& a) {
    return mgo::infer::lightning_indexer(in, {a.sparse_count, a.layout, a.sparse_mode});
  }
  // TND without lengths (one sequence) is batch 0; the lengths' values live on the device, so
  // tokens are balanced by count.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Attrs& a,
                   const Platform& p) {
    const mgo::infer::TensorDesc &qi = in[0], &ki = in[1];
    const size_t r = IndexerRank(a.layout, {&qi, &ki}, "query_index/key_index");
    if (a.sparse_count <= 0) throw std::invalid_argument("sparse_count must be positive");
    const IndexerTokens tok = ReadIndexerTokens(a.layout, qi, ki, in[3]);
    const mgo::tiling::LiShape s{tok.layout, tok.batch, tok.s1, tok.s2, tok.t1, tok.t2, Dim(qi, r - 2), Dim(qi, r - 1),
                                 static_cast<uint64_t>(a.sparse_count)};
    const mgo::tiling::CubePlatform cube{p.aicNum, p.ubBytes, p.l1Bytes, p.l0aBytes, p.l0bBytes, p.l0cBytes};
    const auto t = mgo::tiling::ComputeLightningIndexerTiling(
        s, static_cast<uint32_t>(a.sparse_mode), dtype, in[2].dtype == mgo::infer::DType::kFloat32,
        mgo::tiling::SfaSeqLengths{nullptr, nullptr, 0}, cube);
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes);
  }
};

}  // namespace mgo::op_host

namespace ops {

// Names must equal ms_grad_ops/_specs.py OP_SPECS["lightning_indexer"] (tests/test_ascendc_op_host.py).
// Optional inputs may be omitted or be the zero-size placeholder.
// Columns: float16/bfloat16 inputs x weights of the same dtype or float32.
class LightningIndexer : public OpDef {
 public:
  explicit LightningIndexer(const char* name) : OpDef(name) {
    this->Input("query_index").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("key_index").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_BF16})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("weights").ParamType(REQUIRED).DataType({ge::DT_FLOAT16, ge::DT_FLOAT, ge::DT_BF16, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("actual_seq_lengths_query").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Input("actual_seq_lengths_key").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("sparse_indices").ParamType(REQUIRED).DataType({ge::DT_INT32, ge::DT_INT32, ge::DT_INT32, ge::DT_INT32})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Output("sparse_values").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT})
        .Format({ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND});
    this->Attr("sparse_count").AttrType(OPTIONAL).Int(2048);
    this->Attr("layout").AttrType(OPTIONAL).String("BSND");
    this->Attr("sparse_mode").AttrType(OPTIONAL).Int(3);
    using Host = mgo::op_host::LightningIndexerHost;
    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);
    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);
    // Mixed cube/vector kernel tiled from the platform's core count and UB/L1/L0 sizes; the seed
    // op's products are Atlas A2 and A3.
    this->AICore().AddConfig("ascend910b");
    this->AICore().AddConfig("ascend910_93");
  }
};

OP_ADD(LightningIndexer);

}  // namespace ops
