// device.cpp — what makes "tpu" a device to PyTorch: the device guard
// (per-thread current device; one in-order stream per device; events that
// complete when the device is synchronized, and timing events that place a
// marker, runtime/marker.c), the PrivateUse1 hooks, and the
// per-device random generator (a seed and an offset, as counter-based RNGs
// on accelerators use them).
#include "tpuc_torch.h"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

namespace tpuc_torch {
namespace {

// ---- device guard -------------------------------------------------------------

struct TpuEvent {
  c10::DeviceIndex device;
  tpuc_marker* marker = nullptr;  // the last record's, for torch.Event(enable_timing=True)
  ~TpuEvent() { tpuc_marker_release(marker); }
};

int64_t marker_stamp(const TpuEvent* e) {
  TORCH_CHECK(e->marker, "tpuc: the event was not recorded with enable_timing=True");
  int64_t ns = 0;
  check(tpuc_marker_wait(e->marker, &ns), "timing event");
  return ns;
}

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "tpuc: expected a tpu device, got ", d);
    c10::DeviceIndex index = d.has_index() ? d.index() : current_device();
    check_device(index);
    set_current_device(index);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) set_current_device(d.index());
  }

  // One in-order stream per device: the device runs ops in launch order.
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  bool queryStream(const c10::Stream&) const override { return false; }
  void synchronizeStream(const c10::Stream& s) const override { synchronize(s.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex index) const override { synchronize(index); }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag flag) const override {
    c10::DeviceIndex d = index >= 0 ? index : stream.device_index();
    tpuc_marker* marker = nullptr;
    if (flag == c10::EventFlag::BACKEND_DEFAULT)  // what enable_timing=True asks for
      check(tpuc_marker_record(runtime(), d, &marker), "recording a timing event");
    auto* e = static_cast<TpuEvent*>(*event);
    if (!e) {
      *event = new TpuEvent{d, marker};
      return;
    }
    e->device = d;
    tpuc_marker_release(e->marker);
    e->marker = marker;
  }
  void block(void*, const c10::Stream&) const override {}  // a single in-order stream
  // Whether the work before the record has finished: a timing event asks its marker; any
  // other waits for the device (it has nothing to ask), so a polling loop ends.
  bool queryEvent(void* event) const override {
    auto* e = static_cast<TpuEvent*>(event);
    if (!e) return true;
    if (e->marker) return tpuc_marker_done(e->marker);
    synchronize(e->device);
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }
  void synchronizeEvent(void* event) const override {
    auto* e = static_cast<TpuEvent*>(event);
    if (!e) return;
    if (e->marker) (void)marker_stamp(e);  // the work before this event only
    else synchronize(e->device);
  }
  // Milliseconds of device time between the two records, as CUDA events give them (PyTorch
  // checks first that both are timing events, recorded and complete).
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "tpuc: both events must be recorded before elapsed_time");
    int64_t a = marker_stamp(static_cast<TpuEvent*>(start));
    int64_t b = marker_stamp(static_cast<TpuEvent*>(end));
    return static_cast<double>(b - a) / 1e6;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// ---- generator --------------------------------------------------------------------

constexpr size_t kStateBytes = 16;  // seed (u64), offset (u64), little endian

struct TpuGenerator final : c10::GeneratorImpl {
  explicit TpuGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        seed_(seed) {}

  static c10::DeviceType device_type() { return kTpu; }

  void set_current_seed(uint64_t seed) override { seed_ = seed; offset_ = 0; }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    at::detail::check_rng_state(state);
    TORCH_CHECK(state.numel() == static_cast<int64_t>(kStateBytes),
                "tpuc: a tpu RNG state is ", kStateBytes, " bytes (seed, offset), got ",
                state.numel());
    const auto* p = static_cast<const unsigned char*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::TensorBase t = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, c10::kByte);
    auto* p = static_cast<unsigned char*>(t.mutable_data_ptr());
    std::memcpy(p, &seed_, 8);
    std::memcpy(p + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }

 private:
  TpuGenerator* clone_impl() const override {
    auto* g = new TpuGenerator(device_.index(), seed_);
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_;
  uint64_t offset_ = 0;
};

struct Generators {
  std::mutex mu;
  std::deque<at::Generator> defaults;  // deque: references stay valid as it grows
  std::optional<uint64_t> pending_seed;
};

Generators& generators() {
  static Generators* g = new Generators();
  return *g;
}

// ---- hooks ------------------------------------------------------------------------------

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return runtime_started(); }
  void init() const override { runtime_or_null(); }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_device(index);
    set_current_device(index);
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    c10::DeviceIndex old = current_device();
    if (index != old) setCurrentDevice(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device();
    return at::make_generator<TpuGenerator>(index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto d = device_of_storage_ptr(data);
    return c10::Device(kTpu, d ? *d : current_device());
  }
  // Tensor.pin_memory() / is_pinned() on "tpu": tracked page-aligned host blocks (pinned.cpp).
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage(storage, nbytes);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
} g_register_hooks;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  check_device(index);
  auto& g = generators();
  std::lock_guard<std::mutex> lock(g.mu);
  while (g.defaults.size() <= static_cast<size_t>(index)) {
    auto i = static_cast<c10::DeviceIndex>(g.defaults.size());
    g.defaults.push_back(
        at::make_generator<TpuGenerator>(i, g.pending_seed.value_or(c10::default_rng_seed_val)));
  }
  return g.defaults[index];
}

std::pair<uint64_t, uint64_t> reserve_random(at::Generator gen, uint64_t count) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  uint64_t seed = gen.current_seed();
  uint64_t offset = gen.get_offset();
  gen.set_offset(offset + ((count + 3) / 4) * 4);
  return {seed, offset};
}

void manual_seed_all(uint64_t seed) {
  auto& g = generators();
  std::lock_guard<std::mutex> lock(g.mu);
  g.pending_seed = seed;
  for (at::Generator& gen : g.defaults) {
    std::lock_guard<std::mutex> glock(gen.mutex());
    gen.set_current_seed(seed);
  }
}

// A 64-bit seed for a CPU generator standing in for (seed, offset).
uint64_t mix_seed(uint64_t seed, uint64_t offset) { return splitmix64(seed ^ splitmix64(offset)); }

}  // namespace tpuc_torch
