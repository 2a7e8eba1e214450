// Small device-side helpers shared by the kernels. Include after "kernel_operator.h".
#pragma once

#include <cstdint>

namespace mgo::kernel {

// Waits until every instruction issued so far on the producer pipe of `E` has finished, before
// the consumer pipe goes on (e.g. V_S: a vector result is about to be read by the scalar unit).
template <AscendC::HardEvent E>
__aicore__ inline void SyncPipes() {
  const auto event_id = static_cast<event_t>(GetTPipePtr()->FetchEventID(E));
  AscendC::SetFlag<E>(event_id);
  AscendC::WaitFlag<E>(event_id);
}

// step(done, rows) over consecutive tiles of at most `tile` rows covering rows [0, count): the
// copy-in / compute / copy-out loop of the row-tiled vector kernels.
template <typename Step>
__aicore__ inline void ForEachTile(uint64_t count, uint32_t tile, Step&& step) {
  for (uint64_t done = 0; done < count; done += tile) {
    const uint64_t left = count - done;
    step(done, static_cast<uint32_t>(left < tile ? left : tile));
  }
}

// x <- 1 / (1 + exp(-x)) over `count` float elements; `ones` is scratch of the same size.
// Exp of a large -x gives inf and 1/inf = 0, so saturated logits stay exact (no NaN).
__aicore__ inline void SigmoidInPlace(const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& ones,
                                      uint32_t count) {
  AscendC::Muls(x, x, -1.0f, count);
  AscendC::Exp(x, x, count);
  AscendC::Adds(x, x, 1.0f, count);
  AscendC::Duplicate(ones, 1.0f, count);
  AscendC::Div(x, ones, x, count);
}

}  // namespace mgo::kernel
