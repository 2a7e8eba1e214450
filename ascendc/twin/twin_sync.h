// Twin of the inter-pipe synchronisation API. On the device these order the scalar (S), vector
// (V) and DMA (MTE2: GM->UB, MTE3: UB->GM) pipes; on the twin everything already runs in program
// order, so they are no-ops that (1) check SetFlag/WaitFlag pairing and (2) clear the hazard
// bitmaps the copy/vector/scalar ops consult.
#pragma once

#include <cstdint>

#include "twin_context.h"

// Device builtins live in the global namespace.
enum event_t : int32_t {
  EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7
};
enum pipe_t { PIPE_S, PIPE_V, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_M, PIPE_FIX, PIPE_ALL };

namespace AscendC {

// uint8_t underlying, as in the real API (impl/basic_api/kernel_event.h); the values the kernels use.
enum class HardEvent : uint8_t { MTE2_V, V_MTE3, V_S, S_V, MTE3_MTE2, MTE2_S, S_MTE3, V_MTE2, MTE3_V, MTE2_MTE3 };

namespace twin {
inline const char* EventName(HardEvent e) {
  switch (e) {
    case HardEvent::MTE2_V: return "MTE2_V";
    case HardEvent::V_MTE3: return "V_MTE3";
    case HardEvent::V_S: return "V_S";
    case HardEvent::S_V: return "S_V";
    case HardEvent::MTE3_MTE2: return "MTE3_MTE2";
    case HardEvent::MTE2_S: return "MTE2_S";
    case HardEvent::S_MTE3: return "S_MTE3";
    case HardEvent::V_MTE2: return "V_MTE2";
    case HardEvent::MTE3_V: return "MTE3_V";
    case HardEvent::MTE2_MTE3: return "MTE2_MTE3";
  }
  return "?";
}

// Waiting on a producer->consumer event resolves that hazard for the whole UB.
inline void ResolveHazard(BlockContext& ctx, HardEvent e) {
  switch (e) {
    case HardEvent::MTE2_V: ctx.ClearAll(Hazard::kMte2ToV); break;
    case HardEvent::V_MTE3: ctx.ClearAll(Hazard::kVToMte3); break;
    case HardEvent::V_S: ctx.ClearAll(Hazard::kVToS); break;
    case HardEvent::S_V: ctx.ClearAll(Hazard::kSToV); break;
    case HardEvent::MTE2_MTE3: ctx.ClearAll(Hazard::kMte2ToMte3); break;
    default: break;
  }
}
}  // namespace twin

template <HardEvent E>
void SetFlag(int32_t event_id) {
  twin::Current().SetFlag(static_cast<int>(E), event_id, twin::EventName(E));
}

template <HardEvent E>
void WaitFlag(int32_t event_id) {
  auto& ctx = twin::Current();
  ctx.WaitFlag(static_cast<int>(E), event_id, twin::EventName(E));
  twin::ResolveHazard(ctx, E);
}

// PipeBarrier<PIPE_ALL> drains every pipe; a single-pipe barrier orders only within that pipe,
// which the twin's program order already does.
template <pipe_t P>
void PipeBarrier() {
  twin::CountWork(twin::Counter::kPipeBarriers);
  if constexpr (P == PIPE_ALL) {
    auto& ctx = twin::Current();
    for (int h = 0; h < static_cast<int>(twin::Hazard::kCount); ++h) ctx.ClearAll(static_cast<twin::Hazard>(h));
  }
}

}  // namespace AscendC
