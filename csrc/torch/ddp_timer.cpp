// ddp_timer.cpp — DDP's per-iteration timer for the device "tpu".
//
// DistributedDataParallel's reducer asks c10d's TimerRegistry for a timer of its parameters'
// device type to time each iteration's forward, backward and communication (the averages in
// `model._get_ddp_logging_data()`). With none registered for PrivateUse1 it had no times and
// printed "Time stats are currently only collected for CPU and CUDA devices" on every rank of
// every DDP run on "tpu". This timer is PyTorch's CPU timer's rule: host timestamps (the
// reducer records them where its hooks run), a difference only when both events were recorded
// and the end is not before the start. tpu ops are asynchronous, so the times are those of the
// host's dispatch, as the CPU timer's are of its kernels; the device's own time is in
// torch.profiler and torch.tpu.stats().
#include "tpuc_torch.h"

#include <optional>

#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace {

class TpuDdpTimer : public c10d::Timer {
 public:
  explicit TpuDdpTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t from = getTimeRef(start);
    const int64_t to = getTimeRef(end);
    if (from == c10d::kUnsetTime || to == c10d::kUnsetTime || to < from) {
      return std::nullopt;
    }
    return to - from;
  }
};

}  // namespace

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, TpuDdpTimer)
}  // namespace c10d
