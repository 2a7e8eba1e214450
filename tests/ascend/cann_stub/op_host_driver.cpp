// Test driver: runs one op_host adapter (InferShape / InferDataType / Tiling of an op registered
// with OP_ADD against this stub) on one case read from stdin and prints the result on stdout.
// Included after the op_host sources by tests/ascend/test_ascendc_op_host.py, which compiles it once.
//
// The context as CANN's builders would make it, set by the environment (the same knobs as the
// real-library driver of scripts/check_ascend_host.py): MGO_SOC (SoC_version, default Ascend910B1),
// MGO_TILING_BYTES (tiling buffer capacity, default 65536), MGO_WORKSPACES (workspace sizes the
// context has room for, default 1), MGO_OUTPUTS (outputs the contexts are built with, default the
// OpDef's).
//
// stdin: <OpType> def                   (the registered OpDef, printed as the C++ that declares it)
//    or: <OpType> <shape|dtype|tiling>
//        <n_attrs> { <index> <s|i|f|b> <value> }
//        <n_inputs> { <present 0|1> <ge dtype> <rank> <dims...> }
// stdout: "failed" (the adapter logged why on stderr), or
//   shape:  ok <n_outputs> { <rank> <dims...> }
//   dtype:  ok <n_outputs> { <ge dtype> }
//   tiling: ok block_dim=.. tiling_key=.. workspace=.. schedule_mode=.. <tiling data fields>
//           [attr.<name>=<value> for every attribute the tiling data carries (a choice by its name)]
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

void Describe(const mgo::tiling::RopeTilingData& t) {
  std::cout << " tokens=" << t.nTokens << " hidden=" << t.hidden << " max_seq_len=" << t.maxSeqLen
            << " batch=" << t.batch << " used_cores=" << t.usedCoreNum;
}

void Describe(const mgo::tiling::ClaGateTilingData& t) {
  std::cout << " tokens=" << t.tokens << " heads=" << t.heads << " head_dim=" << t.headDim
            << " used_cores=" << t.usedCoreNum;
}

void Describe(const mgo::tiling::SfaTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " block_size=" << t.blockSize
            << " has_rope=" << t.hasRope << " has_value=" << t.hasValue << " has_sinks=" << t.hasSinks
            << " seq_lens_int64=" << t.seqLensInt64 << " batch=" << t.batch
            << " s1=" << t.s1 << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n1=" << t.n1
            << " n2=" << t.n2 << " d=" << t.d << " dr=" << t.dr << " k=" << t.k << " scale=" << t.scaleValue
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

void Describe(const mgo::tiling::SliTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " has_rope=" << t.hasRope
            << " has_sinks=" << t.hasSinks << " batch=" << t.batch << " s1=" << t.s1 << " s2=" << t.s2
            << " t1=" << t.t1 << " t2=" << t.t2 << " n1=" << t.n1 << " d=" << t.d << " dr=" << t.dr
            << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx << " k=" << t.k << " scale=" << t.scaleValue
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

void Describe(const mgo::tiling::LiTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " k=" << t.k << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

void Describe(const mgo::tiling::LigTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " k=" << t.k << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

void Describe(const mgo::tiling::DliTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

void Describe(const mgo::tiling::DlgTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " has_rope=" << t.hasRope
            << " batch=" << t.batch << " s1=" << t.s1 << " s2=" << t.s2
            << " t1=" << t.t1 << " t2=" << t.t2 << " n1=" << t.n1 << " d=" << t.d << " dr=" << t.dr
            << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx << " scale=" << t.scaleValue
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

const char* GeName(ge::DataType t) {
  switch (t) {
    case ge::DT_FLOAT16: return "ge::DT_FLOAT16";
    case ge::DT_BF16: return "ge::DT_BF16";
    case ge::DT_FLOAT: return "ge::DT_FLOAT";
    case ge::DT_INT32: return "ge::DT_INT32";
    case ge::DT_INT64: return "ge::DT_INT64";
    default: return "ge::DT_UNSUPPORTED";
  }
}

template <typename List>
void PrintParams(const char* kind, const List& params) {
  for (const auto& [name, p] : params) {
    std::cout << "this->" << kind << "(\"" << name << "\").ParamType(" << (p.param_ == ops::OPTIONAL ? "OPTIONAL" : "REQUIRED")
              << ").DataType({";
    for (size_t i = 0; i < p.dtypes_.size(); ++i) std::cout << (i ? ", " : "") << GeName(p.dtypes_[i]);
    std::cout << "}).Format({";
    for (size_t i = 0; i < p.formats_.size(); ++i) {
      std::cout << (i ? ", " : "") << (p.formats_[i] == ge::FORMAT_ND ? "ge::FORMAT_ND" : "ge::FORMAT_OTHER");
    }
    std::cout << "});\n";
  }
}

// The OpDef as OP_ADD registered it, in the syntax of a hand-written one.
void PrintDef(const std::string& op, const ops::OpDef& def) {
  std::cout << "class " << def.name_ << " : public OpDef\n";
  PrintParams("Input", def.inputs_);
  PrintParams("Output", def.outputs_);
  const std::map<std::string, std::string> setters{{"str", "String"}, {"int", "Int"}, {"float", "Float"},
                                                   {"bool", "Bool"}};
  for (const auto& [name, a] : def.attrs_) {
    const std::string value = a.kind_ == "str" ? "\"" + a.value_ + "\"" : a.value_;
    std::cout << "this->Attr(\"" << name << "\").AttrType(" << (a.param_ == ops::OPTIONAL ? "OPTIONAL" : "REQUIRED")
              << ")." << setters.at(a.kind_) << "(" << value << ");\n";
  }
  for (const auto& soc : def.aicore_.socs_) std::cout << "this->AICore().AddConfig(\"" << soc << "\");\n";
  std::cout << "OP_ADD(" << op << ");\n";
}

template <typename Field>
void PrintValue(const Field& v) {
  if constexpr (std::is_enum_v<Field>) {
    std::cout << mgo::table::Choice<Field>::Name(v);
  } else {
    std::cout << v;
  }
}

// The table attributes the tiling data carries for the kernel (`Table::Attrs attrs`), by name.
template <typename Table>
void DescribeAttrs(const typename Table::Attrs& a) {
  size_t i = 0;
  const auto one = [&](auto field) {
    std::cout << " attr." << Table::kAttrNames[i++] << "=";
    PrintValue(a.*field);
  };
  std::apply([&](auto... field) { (one(field), ...); }, Table::kAttrs);
}

template <typename Data, typename Table = void>
void PrintTiling(gert::TilingContext& ctx) {
  Data data;
  std::memcpy(&data, ctx.tiling_.data(), sizeof(Data));
  std::cout << "ok block_dim=" << ctx.block_dim_ << " tiling_key=" << ctx.tiling_key_
            << " workspace=" << ctx.workspace_.at(0) << " schedule_mode=" << ctx.schedule_mode_;
  Describe(data);
  if constexpr (!std::is_void_v<Table>) DescribeAttrs<Table>(data.attrs);
  std::cout << "\n";
}

void ReadCase(gert::ExtendedKernelContext& ctx) {
  size_t n = 0;
  std::cin >> n;
  for (size_t a = 0; a < n; ++a) {
    size_t index = 0;
    std::string kind, value;
    std::cin >> index >> kind >> value;
    if (kind == "s") ctx.attrs_.strs_[index] = value;
    if (kind == "i") ctx.attrs_.ints_[index] = std::stoll(value);
    if (kind == "f") ctx.attrs_.floats_[index] = std::stof(value);
    if (kind == "b") ctx.attrs_.bools_[index] = value == "1";
  }
  std::cin >> n;
  for (size_t i = 0; i < n; ++i) {
    int present = 0, dtype = 0;
    size_t rank = 0;
    std::cin >> present >> dtype >> rank;
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) std::cin >> d;
    ctx.in_.present.push_back(present != 0);
    ctx.in_.dtypes.push_back(static_cast<ge::DataType>(dtype));
    ctx.in_.shapes.emplace_back(dims);
  }
}

size_t EnvSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::stoul(v) : fallback;
}

}  // namespace

int main() {
  std::string op, pass;
  std::cin >> op >> pass;
  const ops::OpDef def = ops::StubRegistry().at(op)();
  const size_t outputs = EnvSize("MGO_OUTPUTS", def.outputs_.size());
  if (pass == "def") {
    PrintDef(op, def);
  } else if (pass == "shape") {
    gert::InferShapeContext ctx;
    ctx.out_.resize(outputs);
    ReadCase(ctx);
    if (def.infer_shape_(&ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
    std::cout << "ok " << ctx.out_.size();
    for (const auto& s : ctx.out_) {
      std::cout << " " << s.GetDimNum();
      for (size_t d = 0; d < s.GetDimNum(); ++d) std::cout << " " << s.GetDim(d);
    }
    std::cout << "\n";
  } else if (pass == "dtype") {
    gert::InferDataTypeContext ctx;
    ctx.out_.assign(outputs, ge::DT_UNDEFINED);
    ReadCase(ctx);
    if (def.infer_dtype_(&ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
    std::cout << "ok " << ctx.out_.size();
    for (ge::DataType t : ctx.out_) std::cout << " " << static_cast<int>(t);
    std::cout << "\n";
  } else {
    gert::TilingContext ctx;
    const char* soc = std::getenv("MGO_SOC");
    ctx.platform_ = platform_ascendc::FindSoc(soc != nullptr && *soc != '\0' ? soc : "Ascend910B1");
    if (ctx.platform_ == nullptr) return std::cerr << "unknown SoC " << soc << "\n", 2;
    ctx.tiling_capacity_ = EnvSize("MGO_TILING_BYTES", 65536);
    ctx.workspace_capacity_ = EnvSize("MGO_WORKSPACES", 1);
    ReadCase(ctx);
    if (def.aicore_.tiling_(&ctx) != ge::GRAPH_SUCCESS) return std::cout << "failed\n", 0;
    using namespace mgo;  // NOLINT: the table and tiling types below
    if (op == "Rope" || op == "RopeGrad") PrintTiling<tiling::RopeTilingData>(ctx);
    else if (op == "ClaGateMerge" || op == "ClaGateBackward") PrintTiling<tiling::ClaGateTilingData>(ctx);
    else if (op == "SparseLightningIndexerGradKLLoss") {
      PrintTiling<tiling::SliTilingData, table::SparseLightningIndexerGradKLLoss>(ctx);
    } else if (op == "LightningIndexer") {
      PrintTiling<tiling::LiTilingData, table::LightningIndexer>(ctx);
    } else if (op == "LightningIndexerGrad") {
      PrintTiling<tiling::LigTilingData, table::LightningIndexerGrad>(ctx);
    } else if (op == "DenseLightningIndexerSoftmaxLse") {
      PrintTiling<tiling::DliTilingData, table::DenseLightningIndexerSoftmaxLse>(ctx);
    } else if (op == "DenseLightningIndexerGradKLLoss") {
      PrintTiling<tiling::DlgTilingData, table::DenseLightningIndexerGradKLLoss>(ctx);
    } else if (op == "SparseFlashAttention") {
      PrintTiling<tiling::SparseFlashAttentionTilingData, table::SparseFlashAttention>(ctx);
    } else {
      PrintTiling<tiling::SparseFlashAttentionGradTilingData, table::SparseFlashAttentionGrad>(ctx);
    }
  }
  return 0;
}
