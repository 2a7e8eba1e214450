// What the op_host test drivers print, shared by the stand-in's (tests/ascend/cann_stub/op_host_driver.cpp)
// and the real libraries' (op_host_driver.cpp here, built by scripts/check_ascend_host.py), so the
// same test cases read both: the case read from stdin, the OpDef in the syntax of a hand-written
// one, and every op's tiling data. Needs the op's tiling headers (the op_host sources include them)
// and ge::DataType / ge::Format.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../infer_shape/op_table.h"
#include "../cla_gate_backward/cla_gate_backward_tiling.h"
#include "../cla_gate_merge/cla_gate_merge_tiling.h"
#include "../dense_lightning_indexer_grad_kl_loss/dense_lightning_indexer_grad_kl_loss_tiling.h"
#include "../dense_lightning_indexer_softmax_lse/dense_lightning_indexer_softmax_lse_tiling.h"
#include "../lightning_indexer/lightning_indexer_tiling.h"
#include "../lightning_indexer_grad/lightning_indexer_grad_tiling.h"
#include "../rope/rope_tiling.h"
#include "../rope_grad/rope_grad_tiling.h"
#include "../sparse_flash_attention/sparse_flash_attention_tiling.h"
#include "../sparse_flash_attention_grad/sparse_flash_attention_grad_tiling.h"
#include "../sparse_flash_mla/sparse_flash_mla_tiling.h"
#include "../sparse_lightning_indexer_grad_kl_loss/sparse_lightning_indexer_grad_kl_loss_tiling.h"
#include "../sparse_lightning_indexer_kl_loss_grad/sparse_lightning_indexer_kl_loss_grad_tiling.h"

namespace mgo::host_check {

// A case from stdin (see the drivers): attributes by OpDef index, inputs by IR index.
struct CaseAttr {
  size_t index;
  char kind;  // s, i, f, b
  std::string value;
};
struct CaseInput {
  bool present;
  ge::DataType dtype;
  std::vector<int64_t> dims;
};
struct Case {
  std::vector<CaseAttr> attrs;
  std::vector<CaseInput> inputs;
};

inline Case ReadCase(std::istream& in) {
  Case c;
  size_t n = 0;
  in >> n;
  c.attrs.resize(n);
  for (auto& a : c.attrs) in >> a.index >> a.kind >> a.value;
  in >> n;
  c.inputs.resize(n);
  for (auto& x : c.inputs) {
    int present = 0, dtype = 0;
    size_t rank = 0;
    in >> present >> dtype >> rank;
    x.present = present != 0;
    x.dtype = static_cast<ge::DataType>(dtype);
    x.dims.resize(rank);
    for (auto& d : x.dims) in >> d;
  }
  return c;
}

// A size from the environment (the context knobs), else `fallback`.
inline size_t EnvSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::stoul(v) : fallback;
}

// The SoC a tiling context is built for: MGO_SOC, default Ascend910B1.
inline std::string EnvSoc() {
  const char* v = std::getenv("MGO_SOC");
  return v != nullptr && *v != '\0' ? v : "Ascend910B1";
}

inline void Describe(const mgo::tiling::RopeTilingData& t) {
  std::cout << " tokens=" << t.nTokens << " hidden=" << t.hidden << " max_seq_len=" << t.maxSeqLen
            << " batch=" << t.batch << " used_cores=" << t.usedCoreNum;
}

inline void Describe(const mgo::tiling::ClaGateTilingData& t) {
  std::cout << " tokens=" << t.tokens << " heads=" << t.heads << " head_dim=" << t.headDim
            << " used_cores=" << t.usedCoreNum;
}

inline void Describe(const mgo::tiling::SfaTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " block_size=" << t.blockSize
            << " has_rope=" << t.hasRope << " has_value=" << t.hasValue << " has_sinks=" << t.hasSinks
            << " seq_lens_int64=" << t.seqLensInt64 << " batch=" << t.batch
            << " s1=" << t.s1 << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n1=" << t.n1
            << " n2=" << t.n2 << " d=" << t.d << " dr=" << t.dr << " k=" << t.k << " scale=" << t.scaleValue
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::SparseFlashMlaTilingData& t) {
  const mgo::tiling::SmlaGeo& g = t.geo;
  std::cout << " layout=" << g.layout << " batch=" << g.batch << " t1=" << g.t1 << " t2=" << g.t2 << " t3=" << g.t3
            << " s1=" << g.s1 << " s2=" << g.s2 << " s3=" << g.s3 << " n1=" << g.n1 << " n2=" << g.n2
            << " d=" << g.d << " k_ori=" << g.kOri << " k_cmp=" << g.kCmp << " has_cmp=" << g.hasCmp
            << " has_sinks=" << g.hasSinks << " len_mask=" << g.lenMask << " key_chunk=" << t.keyChunk
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::SliTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " has_rope=" << t.hasRope
            << " has_sinks=" << t.hasSinks << " cmp_residual=" << t.cmpResidual << " batch=" << t.batch << " s1=" << t.s1 << " s2=" << t.s2
            << " t1=" << t.t1 << " t2=" << t.t2 << " n1=" << t.n1 << " d=" << t.d << " dr=" << t.dr
            << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx << " k=" << t.k << " scale=" << t.scaleValue
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::LiTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " k=" << t.k << " cmp_residual=" << t.cmpResidual << " used_aic=" << t.usedAicNum
            << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::LigTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " k=" << t.k << " cmp_residual=" << t.cmpResidual << " used_aic=" << t.usedAicNum
            << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::SlkgTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " k=" << t.k << " cmp_residual=" << t.cmpResidual << " used_aic=" << t.usedAicNum
            << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::DliTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " batch=" << t.batch << " s1=" << t.s1
            << " s2=" << t.s2 << " t1=" << t.t1 << " t2=" << t.t2 << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx
            << " cmp_residual=" << t.cmpResidual << " used_aic=" << t.usedAicNum
            << " user_workspace=" << t.workspaceBytes;
}

inline void Describe(const mgo::tiling::DlgTilingData& t) {
  std::cout << " layout=" << t.layout << " sparse_mode=" << t.sparseMode << " has_rope=" << t.hasRope
            << " cmp_residual=" << t.cmpResidual << " batch=" << t.batch << " s1=" << t.s1 << " s2=" << t.s2
            << " t1=" << t.t1 << " t2=" << t.t2 << " n1=" << t.n1 << " n2=" << t.n2 << " d=" << t.d << " dr=" << t.dr
            << " n_idx=" << t.nIdx << " d_idx=" << t.dIdx << " scale=" << t.scaleValue << " q_group=" << t.qGroup
            << " used_aic=" << t.usedAicNum << " user_workspace=" << t.workspaceBytes;
}

inline const char* GeName(ge::DataType t) {
  switch (t) {
    case ge::DT_FLOAT16: return "ge::DT_FLOAT16";
    case ge::DT_BF16: return "ge::DT_BF16";
    case ge::DT_FLOAT: return "ge::DT_FLOAT";
    case ge::DT_INT32: return "ge::DT_INT32";
    case ge::DT_INT64: return "ge::DT_INT64";
    default: return "ge::DT_UNSUPPORTED";
  }
}

// One line of the printed OpDef: an input or output.
inline void PrintParam(const char* kind, const std::string& name, bool optional, const std::vector<ge::DataType>& dtypes,
                       const std::vector<ge::Format>& formats) {
  std::cout << "this->" << kind << "(\"" << name << "\").ParamType(" << (optional ? "OPTIONAL" : "REQUIRED")
            << ").DataType({";
  for (size_t i = 0; i < dtypes.size(); ++i) std::cout << (i ? ", " : "") << GeName(dtypes[i]);
  std::cout << "}).Format({";
  for (size_t i = 0; i < formats.size(); ++i) {
    std::cout << (i ? ", " : "") << (formats[i] == ge::FORMAT_ND ? "ge::FORMAT_ND" : "ge::FORMAT_OTHER");
  }
  std::cout << "});\n";
}

// An attribute: `setter` String/Int/Float/Bool, `value` as the setter's argument.
inline void PrintAttr(const std::string& name, bool required, const std::string& setter, const std::string& value) {
  std::cout << "this->Attr(\"" << name << "\").AttrType(" << (required ? "REQUIRED" : "OPTIONAL") << ")." << setter
            << "(" << (setter == "String" ? "\"" + value + "\"" : value) << ");\n";
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

// Whether a tiling data has the sequence ops' bsndLens (seq_tiling_common.h SetSeqFields).
template <typename Data, typename = void>
struct HasBsndLens : std::false_type {};
template <typename Data>
struct HasBsndLens<Data, std::void_t<decltype(std::declval<Data>().bsndLens)>> : std::true_type {};

template <typename Data, typename Table = void>
void PrintTilingOf(const void* bytes) {
  Data data;
  std::memcpy(&data, bytes, sizeof(Data));
  Describe(data);
  if constexpr (HasBsndLens<Data>::value) std::cout << " bsnd_lens=" << data.bsndLens;
  if constexpr (!std::is_void_v<Table>) DescribeAttrs<Table>(data.attrs);
}

// "ok block_dim=.. tiling_key=.. workspace=.. schedule_mode=.." and op `op`'s tiling data at `bytes`.
inline void PrintTiling(const std::string& op, const void* bytes, uint32_t block_dim, uint64_t tiling_key,
                        uint64_t workspace, uint32_t schedule_mode) {
  std::cout << "ok block_dim=" << block_dim << " tiling_key=" << tiling_key << " workspace=" << workspace
            << " schedule_mode=" << schedule_mode;
  using namespace mgo;  // NOLINT: the table and tiling types below
  if (op == "Rope" || op == "RopeGrad") PrintTilingOf<tiling::RopeTilingData>(bytes);
  else if (op == "ClaGateMerge" || op == "ClaGateBackward") PrintTilingOf<tiling::ClaGateTilingData>(bytes);
  else if (op == "SparseLightningIndexerGradKLLoss") {
    PrintTilingOf<tiling::SliTilingData, table::SparseLightningIndexerGradKLLoss>(bytes);
  } else if (op == "LightningIndexer") {
    PrintTilingOf<tiling::LiTilingData, table::LightningIndexer>(bytes);
  } else if (op == "LightningIndexerGrad") {
    PrintTilingOf<tiling::LigTilingData, table::LightningIndexerGrad>(bytes);
  } else if (op == "SparseLightningIndexerKLLossGrad") {
    PrintTilingOf<tiling::SlkgTilingData, table::SparseLightningIndexerKLLossGrad>(bytes);
  } else if (op == "DenseLightningIndexerSoftmaxLse") {
    PrintTilingOf<tiling::DliTilingData, table::DenseLightningIndexerSoftmaxLse>(bytes);
  } else if (op == "DenseLightningIndexerGradKLLoss") {
    PrintTilingOf<tiling::DlgTilingData, table::DenseLightningIndexerGradKLLoss>(bytes);
  } else if (op == "SparseFlashMla") {
    PrintTilingOf<tiling::SparseFlashMlaTilingData, table::SparseFlashMla>(bytes);
  } else if (op == "SparseFlashAttention") {
    PrintTilingOf<tiling::SparseFlashAttentionTilingData, table::SparseFlashAttention>(bytes);
  } else {
    PrintTilingOf<tiling::SparseFlashAttentionGradTilingData, table::SparseFlashAttentionGrad>(bytes);
  }
  std::cout << "\n";
}

// What the op_host's QueryPlatform read (op_host_platform.h).
template <typename Platform>
void PrintPlatform(const Platform& p) {
  std::cout << "ok aiv=" << p.aivNum << " aic=" << p.aicNum << " ub=" << p.ubBytes << " l1=" << p.l1Bytes
            << " l0a=" << p.l0aBytes << " l0b=" << p.l0bBytes << " l0c=" << p.l0cBytes
            << " sys_workspace=" << p.sysWorkspace << "\n";
}

}  // namespace mgo::host_check
