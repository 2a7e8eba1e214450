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
};

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
  return s;
}

}  // namespace

extern "C" {

// Comma-separated snippet names, so the Python test can check it covers every one.
int twin_snippet_names(char* buf, int64_t len) {
  harness::CopyMessage(harness::JoinNames(Snippets()), buf, len);
  return harness::kOk;
}

// Runs one snippet; 0 = clean, 1 = an Ascend rule fired (message in err), 4 = unknown name.
// `expect` receives the substring the snippet's message must contain ("" for clean ones).
int twin_snippet(const char* name, int64_t ub_bytes, char* expect, int64_t expect_len, char* err,
                 int64_t err_len) {
  const auto all = Snippets();
  const auto it = all.find(name);
  if (it == all.end()) return 4;
  harness::CopyMessage(it->second.expect, expect, expect_len);
  return harness::Guarded(err, err_len, [&]() -> int {
    SnippetGm gm;
    harness::GmScope scope;
    scope.Input(gm.in.data(), gm.in.size() * sizeof(half), "in");
    scope.Output(gm.out.data(), gm.out.size() * sizeof(half), "out");
    twin::Launch(it->second.blocks, 0, static_cast<uint64_t>(ub_bytes), [&] { it->second.body(gm); });
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

// Each block writes its GetBlockIdx()/GetBlockNum() into out[2*idx], out[2*idx+1].
int twin_block_ids(int64_t blocks, int64_t* out, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    harness::GmScope scope;
    scope.Output(out, static_cast<uint64_t>(2 * blocks) * sizeof(int64_t), "out");
    twin::Launch(blocks, 0, twin::kDefaultUbBytes, [&] {
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
    twin::Launch(1, 0, twin::kDefaultUbBytes, [&] {
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

}  // extern "C"
