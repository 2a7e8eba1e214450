// ctypes entry points testing the twin itself: deliberately broken kernel snippets (each must
// trip exactly one Ascend rule), clean controls, the launcher, and Cast's rounding.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness_common.h"

namespace {

using namespace AscendC;

constexpr uint32_t kElems = 256;  // halves in each GM test buffer

// GM shared by the snippets: an input ramp and an output buffer.
struct SnippetGm {
  std::vector<half> in = std::vector<half>(kElems);
  std::vector<half> out = std::vector<half>(kElems);
  SnippetGm() {
    for (uint32_t i = 0; i < kElems; ++i) in[i] = half(static_cast<float>(i % 64));
  }
};

struct Snippet {
  std::string expect;  // empty: must run clean
  int64_t blocks;
  std::function<void(SnippetGm&)> body;
  twin::Arch arch = twin::Arch::k2201;  // the arch the snippet is written for
};

// A clean snippet's own check failed (status 2 for the Python test).
void Expect(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

GlobalTensor<half> Gm(std::vector<half>& v) {
  GlobalTensor<half> g;
  g.SetGlobalBuffer(v.data(), v.size());
  return g;
}

// The canonical pipeline: copy in, x * 2 in float, copy out. Must pass every check.
void CleanPipeline(SnippetGm& gm) {
  TPipe pipe;
  TQue<QuePosition::VECIN, 2> in_q;
  TQue<QuePosition::VECOUT, 2> out_q;
  TBuf<TPosition::VECCALC> f32;
  pipe.InitBuffer(in_q, 2, 64 * sizeof(half));
  pipe.InitBuffer(out_q, 2, 64 * sizeof(half));
  pipe.InitBuffer(f32, 64 * sizeof(float));
  GlobalTensor<half> src = Gm(gm.in);
  GlobalTensor<half> dst = Gm(gm.out);
  for (uint32_t tile = 0; tile < kElems / 64; ++tile) {
    LocalTensor<half> x = in_q.AllocTensor<half>();
    DataCopy(x, src[tile * 64], 64);
    in_q.EnQue(x);
    LocalTensor<half> xi = in_q.DeQue<half>();
    LocalTensor<float> f = f32.Get<float>();
    Cast(f, xi, RoundMode::CAST_NONE, 64);
    in_q.FreeTensor(xi);
    Muls(f, f, 2.0f, 64);
    LocalTensor<half> y = out_q.AllocTensor<half>();
    Cast(y, f, RoundMode::CAST_RINT, 64);
    out_q.EnQue(y);
    LocalTensor<half> yo = out_q.DeQue<half>();
    DataCopy(dst[tile * 64], yo, 64);
    out_q.FreeTensor(yo);
  }
}

std::map<std::string, Snippet> Snippets() {
  std::map<std::string, Snippet> s;
  s["clean_pipeline"] = {"", 2, CleanPipeline};
  s["clean_scalar_sync"] = {"", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 3.0f, 16);
    const auto id = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(id);
    WaitFlag<HardEvent::V_S>(id);
    t.SetValue(1, t.GetValue(0) + 1.0f);
    const auto id2 = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(id2);
    WaitFlag<HardEvent::S_V>(id2);
    Muls(t, t, 2.0f, 16);
  }};
  s["datacopy_unaligned_ub"] = {"is not 32-byte aligned", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 128);
    LocalTensor<half> x = q.AllocTensor<half>();
    DataCopy(x[3], Gm(gm.in), 16);
  }};
  s["datacopy_partial_block"] = {"is not a positive multiple of 32", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 128);
    LocalTensor<half> x = q.AllocTensor<half>();
    DataCopy(x, Gm(gm.in), 10);
  }};
  s["datacopypad_unaligned_ub"] = {"is not 32-byte aligned", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 128);
    LocalTensor<half> x = q.AllocTensor<half>();
    DataCopyPad(x[1], Gm(gm.in), DataCopyExtParams{1, 10, 0, 0, 0}, DataCopyPadExtParams<half>{});
  }};
  s["ub_overflow"] = {"unified buffer overflow", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q;
    pipe.InitBuffer(q, 2, 100 * 1024);  // 200 KiB > 192 KiB
  }};
  s["alloc_exhausted"] = {"buffers are all in use", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q;
    pipe.InitBuffer(q, 2, 64);
    q.AllocTensor<half>();
    q.AllocTensor<half>();
    q.AllocTensor<half>();
  }};
  s["enque_beyond_depth"] = {"beyond the queue depth", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 64);
    LocalTensor<half> a = q.AllocTensor<half>();
    LocalTensor<half> b = q.AllocTensor<half>();
    q.EnQue(a);
    q.EnQue(b);
  }};
  s["deque_empty"] = {"DeQue on an empty", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q;
    pipe.InitBuffer(q, 2, 64);
    q.DeQue<half>();
  }};
  s["tensor_not_freed"] = {"never freed", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECOUT, 2> q;
    pipe.InitBuffer(q, 2, 64);
    LocalTensor<half> a = q.AllocTensor<half>();
    q.EnQue(a);
    q.DeQue<half>();
  }};
  s["double_free"] = {"not allocated", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q;
    pipe.InitBuffer(q, 2, 64);
    LocalTensor<half> a = q.AllocTensor<half>();
    q.FreeTensor(a);
    q.FreeTensor(a);
  }};
  s["free_while_queued"] = {"still in the queue", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q;
    pipe.InitBuffer(q, 2, 64);
    LocalTensor<half> a = q.AllocTensor<half>();
    q.EnQue(a);
    q.FreeTensor(a);
  }};
  s["use_after_free"] = {"used after FreeTensor", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECCALC, 1> q;
    pipe.InitBuffer(q, 1, 64);
    LocalTensor<float> a = q.AllocTensor<float>();
    q.FreeTensor(a);
    Duplicate(a, 1.0f, 16);
  }};
  s["vector_unaligned"] = {"is not 32-byte aligned", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 256);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 0.0f, 64);
    Muls(t[3], t[8], 2.0f, 8);
  }};
  s["vector_count_too_large"] = {"exceeds", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    Duplicate(b.Get<float>(), 1.0f, 24);
  }};
  // The count is an int32_t (as in the real API); the CPU-debug checker rejects a negative one.
  s["vector_count_negative"] = {"is negative", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    Duplicate(b.Get<float>(), 1.0f, -8);
  }};
  s["reduce_sum_small_work"] = {"ReduceSum (workspace)", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> src;
    TBuf<TPosition::VECCALC> work;
    pipe.InitBuffer(src, 1024 * 4);
    pipe.InitBuffer(work, 32);  // 8 partials; 1024 floats need 16
    LocalTensor<float> x = src.Get<float>();
    Duplicate(x, 1.0f, 1024);
    ReduceSum(x, x, work.Get<float>(), 1024);
  }};
  s["waitflag_without_setflag"] = {"without a preceding SetFlag", 1, [](SnippetGm&) {
    TPipe pipe;
    WaitFlag<HardEvent::V_S>(EVENT_ID0);
  }};
  s["setflag_twice"] = {"set twice", 1, [](SnippetGm&) {
    TPipe pipe;
    SetFlag<HardEvent::MTE2_V>(EVENT_ID1);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID1);
  }};
  s["setflag_never_waited"] = {"never waited", 1, [](SnippetGm&) {
    TPipe pipe;
    SetFlag<HardEvent::V_MTE3>(EVENT_ID2);
  }};
  s["scalar_read_without_sync"] = {"V (vector op) -> S", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 3.0f, 16);
    t.GetValue(0);
  }};
  s["vector_after_scalar_write_without_sync"] = {"S (scalar SetValue) -> V", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    LocalTensor<float> t = b.Get<float>();
    t.SetValue(0, 1.0f);
    Muls(t, t, 2.0f, 16);
  }};
  s["copy_in_without_queue_sync"] = {"MTE2 (GM->UB copy) -> V", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> raw;
    TBuf<TPosition::VECCALC> f;
    pipe.InitBuffer(raw, 64 * sizeof(half));
    pipe.InitBuffer(f, 64 * sizeof(float));
    DataCopy(raw.Get<half>(), Gm(gm.in), 64);
    Cast(f.Get<float>(), raw.Get<half>(), RoundMode::CAST_NONE, 64);
  }};
  s["copy_out_without_queue_sync"] = {"V (vector op) -> MTE3", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> f;
    TBuf<TPosition::VECCALC> raw;
    pipe.InitBuffer(f, 64 * sizeof(float));
    pipe.InitBuffer(raw, 64 * sizeof(half));
    Duplicate(f.Get<float>(), 1.0f, 64);
    Cast(raw.Get<half>(), f.Get<float>(), RoundMode::CAST_RINT, 64);
    DataCopy(Gm(gm.out), raw.Get<half>(), 64);
  }};
  s["gm_out_of_bounds"] = {"outside every allocated GM buffer", 1, [](SnippetGm& gm) {
    TPipe pipe;
    GlobalTensor<half> g;
    g.SetGlobalBuffer(gm.in.data() + kElems - 16, 32);  // 16 elements past the allocation
  }};
  s["cast_unsupported_mode"] = {"not supported", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> f;
    TBuf<TPosition::VECCALC> h;
    pipe.InitBuffer(f, 64);
    pipe.InitBuffer(h, 64);
    Duplicate(f.Get<float>(), 1.0f, 16);
    Cast(h.Get<bfloat16_t>(), f.Get<float>(), RoundMode::CAST_NONE, 16);  // bf16 needs an explicit mode
  }};
  s["two_pipes"] = {"a second TPipe", 1, [](SnippetGm&) {
    TPipe a;
    TPipe b;
  }};
  // ---- rules with their source in asc-devkit (docs/ascend.md, "What the twin checks")
  s["initbuffer_zero_len"] = {"len must be > 0", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 0);
  }};
  s["initbuffer_num_out_of_range"] = {"num must be in [1, 64]", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> q;
    pipe.InitBuffer(q, 65, 32);
  }};
  s["too_many_pipe_buffers"] = {"allows at most 64", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b[65];
    for (auto& x : b) pipe.InitBuffer(x, 32);
  }};
  s["too_many_queue_buffers_per_position"] = {"event ids per position", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q[5];  // 10 VECIN buffers; 2201 has 8 MTE2_V event ids
    for (auto& x : q) pipe.InitBuffer(x, 2, 64);
  }};
  s["too_many_queue_buffers_3510"] = {"buffer ids, one per TQue buffer", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> in[8];    // 16 + 14 = 30 TQue buffers; 3510 has 28 buffer ids
    TQue<QuePosition::VECOUT, 2> out[7];
    for (auto& x : in) pipe.InitBuffer(x, 2, 64);
    for (auto& x : out) pipe.InitBuffer(x, 2, 64);
  }, twin::Arch::k3510};
  s["tbuf_get_partial_block"] = {"positive multiple of 32", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    b.Get<half>(10);
  }};
  s["datacopy_too_many_blocks"] = {"one DataCopy moves at most 65535", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    DataCopy(b.Get<half>(), Gm(gm.in), 65536 * 16);  // 65536 blocks of 32 bytes
  }};
  s["datacopy_gm_misaligned"] = {"is not aligned to its 2-byte elements", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    GlobalTensor<half> odd;
    odd.SetGlobalBuffer(reinterpret_cast<half*>(reinterpret_cast<uint8_t*>(gm.in.data()) + 1), 32);
    DataCopy(b.Get<half>(), odd, 16);
  }};
  s["datacopypad_block_count"] = {"must be in [1, 4095]", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    DataCopyPad(b.Get<half>(), Gm(gm.in), DataCopyExtParams{4096, 2, 0, 0, 0}, DataCopyPadExtParams<half>{});
  }};
  s["datacopypad_padding_too_wide"] = {"exceed 32", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 128);
    DataCopyPad(b.Get<half>(), Gm(gm.in), DataCopyExtParams{1, 20, 0, 0, 0},
                DataCopyPadExtParams<half>{true, 17, 0, half(0.0f)});  // 34 bytes of left padding
  }};
  s["datacopypad_ub_stride_3510"] = {"exceeds 65535", 1, [](SnippetGm& gm) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    DataCopyPad(b.Get<half>(), Gm(gm.in), DataCopyExtParams{1, 20, 0, 65536, 0}, DataCopyPadExtParams<half>{});
  }, twin::Arch::k3510};
  s["clean_datacopypad_padding"] = {"", 1, [](SnippetGm& gm) {
    // 5 halves per row: no paddings -> the row's dummy tail is its first element; isPad with
    // paddings -> [1 x -1][5 values][2 x -1][dummy -1] (the DataCopyPad GM->UB page).
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 4 * 32);
    const LocalTensor<half> t = b.Get<half>();
    DataCopyPad(t, Gm(gm.in)[3], DataCopyExtParams{2, 10, 0, 0, 0}, DataCopyPadExtParams<half>{});
    DataCopyPad(t[32], Gm(gm.in)[3], DataCopyExtParams{1, 10, 0, 0, 0},
                DataCopyPadExtParams<half>{true, 1, 2, half(-1.0f)});
    PipeBarrier<PIPE_ALL>();
    for (uint32_t i = 0; i < 16; ++i) {
      Expect(static_cast<float>(t.GetValue(i)) == (i < 5 ? static_cast<float>(3 + i) : 3.0f), "row 0");
      Expect(static_cast<float>(t.GetValue(16 + i)) == (i < 5 ? static_cast<float>(8 + i) : 8.0f), "row 1");
      const float want = i >= 1 && i < 6 ? static_cast<float>(2 + i) : -1.0f;
      Expect(static_cast<float>(t.GetValue(32 + i)) == want, "padded row");
    }
  }};
  s["vector_partial_overlap"] = {"partially overlaps the source", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 512);
    const LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 128);
    Add(t[8], t, t, 64);  // destination 32 bytes into the source
  }};
  s["vector_overlap_later_repeat"] = {"of the later repeat", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 1024);
    const LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 192);
    Muls(t[64], t, 2.0f, 128);  // repeat 0 writes what repeat 1 reads
  }};
  s["cast_widening_in_place"] = {"of the later repeat", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 512);
    Duplicate(b.Get<float>(), 1.0f, 128);
    Cast(b.Get<half>(), b.Get<float>(), RoundMode::CAST_RINT, 128);  // narrowing in place: allowed
    Cast(b.Get<float>(), b.Get<half>(), RoundMode::CAST_NONE, 128);  // widening in place: not
  }};
  s["count_zero_on_3510"] = {"is not guaranteed to be a NOP", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    Muls(b.Get<float>(), b.Get<float>(), 2.0f, 0);
  }, twin::Arch::k3510};
  s["clean_count_zero_on_2201"] = {"", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 64);
    const LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 3.0f, 8);
    Muls(t, t, 2.0f, 0);  // a NOP on 2201: nothing written
    PipeBarrier<PIPE_ALL>();
    Expect(t.GetValue(0) == 3.0f, "count 0 wrote");
  }};
  s["clean_reduce_to_unaligned_element"] = {"", 1, [](SnippetGm&) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> src;
    TBuf<TPosition::VECCALC> dst;
    TBuf<TPosition::VECCALC> work;
    pipe.InitBuffer(src, 256);
    pipe.InitBuffer(dst, 32);
    pipe.InitBuffer(work, 32);
    Duplicate(src.Get<float>(), 0.5f, 64);
    ReduceSum(dst.Get<float>()[3], src.Get<float>(), work.Get<float>(), 64);  // 4-byte aligned dst: allowed
    PipeBarrier<PIPE_ALL>();
    Expect(dst.Get<float>().GetValue(3) == 32.0f, "ReduceSum into element 3");
  }};
  s["ub_overflow_3510"] = {"unified buffer overflow", 1, [](SnippetGm&) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> q;
    pipe.InitBuffer(q, 2, 125 * 1024);  // 250 KiB > 248 KiB
  }, twin::Arch::k3510};
  return s;
}

}  // namespace

extern "C" {

// Comma-separated snippet names, so the Python test can check it covers every one.
int twin_snippet_names(char* buf, int64_t len) {
  harness::CopyMessage(harness::JoinNames(Snippets()), buf, len);
  return harness::kOk;
}

// Runs one snippet on NPU arch `arch` (0: the arch it is written for); 0 = clean, 1 = an
// Ascend rule fired (message in err), 2 = a clean snippet's check failed, 4 = unknown name.
// `expect` receives the substring the snippet's message must contain ("" for clean ones).
int twin_snippet(const char* name, int64_t arch, char* expect, int64_t expect_len, char* err, int64_t err_len) {
  const auto all = Snippets();
  const auto it = all.find(name);
  if (it == all.end()) return 4;
  harness::CopyMessage(it->second.expect, expect, expect_len);
  return harness::Guarded(err, err_len, [&]() -> int {
    SnippetGm gm;
    harness::GmScope scope;
    scope.Input(gm.in.data(), gm.in.size() * sizeof(half), "in");
    scope.Output(gm.out.data(), gm.out.size() * sizeof(half), "out");
    twin::Launch(it->second.blocks, 0, arch == 0 ? it->second.arch : harness::ArchOf(arch),
                 [&] { it->second.body(gm); });
    if (std::string(name) == "clean_pipeline") {
      for (uint32_t i = 0; i < kElems; ++i) {
        if (static_cast<float>(gm.out[i]) != 2.0f * static_cast<float>(gm.in[i])) {
          throw std::runtime_error("clean_pipeline produced a wrong value");
        }
      }
    }
    return harness::kOk;
  });
}

// The UB bytes a kernel may allocate on NPU arch `arch`: a vector kernel's (mixed = 0) or an
// AIV's of a mixed kernel (mixed = 1); -1 for an arch the twin does not model.
int64_t twin_arch_ub(int64_t arch, int mixed) {
  if (!twin::ValidArch(arch)) return -1;
  const twin::ArchSpec& spec = twin::SpecOf(static_cast<twin::Arch>(arch));
  return static_cast<int64_t>(mixed != 0 ? spec.ub_mix : spec.ub);
}

// Each block writes its GetBlockIdx()/GetBlockNum() into out[2*idx], out[2*idx+1].
int twin_block_ids(int64_t blocks, int64_t* out, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    harness::GmScope scope;
    scope.Output(out, static_cast<uint64_t>(2 * blocks) * sizeof(int64_t), "out");
    twin::Launch(blocks, 0, twin::Arch::k2201, [&] {
      GlobalTensor<int64_t> g;
      g.SetGlobalBuffer(out, static_cast<uint64_t>(2 * blocks));
      g.SetValue(static_cast<uint64_t>(2 * GetBlockIdx()), GetBlockIdx());
      g.SetValue(static_cast<uint64_t>(2 * GetBlockIdx() + 1), GetBlockNum());
    });
    return harness::kOk;
  });
}

// Cast float -> 16-bit through a one-block kernel (fmt 0 half, 1 bfloat16; mode = RoundMode).
int twin_cast_from_float(int fmt, int mode, const float* in, uint16_t* out, int64_t n, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto rm = static_cast<RoundMode>(mode);
    std::vector<float> src(in, in + n);
    std::vector<uint16_t> dst(static_cast<size_t>(n));
    twin::Launch(1, 0, twin::Arch::k2201, [&] {
      TPipe pipe;
      TBuf<TPosition::VECCALC> f;
      TBuf<TPosition::VECCALC> h;
      pipe.InitBuffer(f, 4096 * sizeof(float));
      pipe.InitBuffer(h, 4096 * sizeof(uint16_t));
      LocalTensor<float> fl = f.Get<float>();
      for (int64_t start = 0; start < n; start += 4096) {
        const auto count = static_cast<uint32_t>(std::min<int64_t>(4096, n - start));
        for (uint32_t i = 0; i < count; ++i) fl.SetValue(i, src[start + i]);
        const auto id = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::S_V));
        SetFlag<HardEvent::S_V>(id);
        WaitFlag<HardEvent::S_V>(id);
        if (fmt == 0) {
          Cast(h.Get<half>(), fl, rm, count);
        } else {
          Cast(h.Get<bfloat16_t>(), fl, rm, count);
        }
        const auto id2 = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_S));
        SetFlag<HardEvent::V_S>(id2);
        WaitFlag<HardEvent::V_S>(id2);
        const LocalTensor<uint16_t> bits = h.Get<uint16_t>();
        for (uint32_t i = 0; i < count; ++i) dst[start + i] = bits.GetValue(i);
      }
    });
    std::copy(dst.begin(), dst.end(), out);
    return harness::kOk;
  });
}

// The roofline counters (twin_context.h): their names, comma-separated, in column order.
int twin_counter_names(char* buf, int64_t len) {
  std::string names;
  for (const char* n : twin::kCounterNames) names += (names.empty() ? "" : ",") + std::string(n);
  harness::CopyMessage(names, buf, len);
  return harness::kOk;
}

// The counters of the last launch this thread ran: per core one row of `values` (kCount columns),
// its kind (0 vector block, 1 AIC, 2 AIV) and GetBlockIdx(); at most `max_cores` rows are
// written. Returns the launch's core count (0 before any launch).
int64_t twin_last_counters(int64_t* values, int64_t* kinds, int64_t* block_idx, int64_t max_cores) {
  const auto& last = twin::LastLaunchCounters();
  constexpr int kCols = static_cast<int>(twin::Counter::kCount);
  for (size_t c = 0; c < last.size() && static_cast<int64_t>(c) < max_cores; ++c) {
    for (int i = 0; i < kCols; ++i) values[c * kCols + i] = static_cast<int64_t>(last[c].counters.value[i]);
    kinds[c] = last[c].kind;
    block_idx[c] = last[c].block_idx;
  }
  return static_cast<int64_t>(last.size());
}

}  // extern "C"
