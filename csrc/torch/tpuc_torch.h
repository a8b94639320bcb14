// tpuc_torch.h — what the glue's translation units share: the process-wide
// runtime, status -> c10 exception conversion, dtype mapping, storages of
// tensors, the current device, generators and the fallback registry.
//
// Kept light on purpose (c10 and ATen/core only): every TU includes it.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tpuc.h"

namespace tpuc_torch {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- runtime (runtime.cpp) -------------------------------------------------

// Where the plugin comes from, set by Python before the runtime exists.
// `path` empty: the core reads $TPUC_PJRT_PLUGIN. A non-empty
// `discovery_error` says why no plugin could be found: the runtime then
// reports it instead of trying.
void set_plugin(const std::string& path, const std::string& discovery_error);
// The runtime, created on first use; raises c10::Error naming the reason
// when it cannot be created (the reason is remembered, never retried).
tpuc_runtime* runtime();
// The same, or nullptr on failure; never throws.
tpuc_runtime* runtime_or_null() noexcept;
// True once creation has been attempted and succeeded (never creates).
bool runtime_started() noexcept;
// Why the runtime is unavailable ("" when it is available). Creates it.
std::string runtime_error() noexcept;
// Number of devices; 0 when the runtime is unavailable. Never throws.
int device_count() noexcept;
// Raises RuntimeError when `index` is not a usable device index.
void check_device(c10::DeviceIndex index);

// Debug mode (TPUC_LAUNCH_BLOCKING=1): every op waits for the device.
bool launch_blocking() noexcept;
void set_launch_blocking(bool on) noexcept;
// TPUC_NATIVE=0 runs every op through the CPU fallback (to tell a lowering's
// bug from a glue bug); on by default.
bool native_enabled() noexcept;
// The unboxed arithmetic kernels (arith.cpp, arith_autograd.cpp); TPUC_UNBOXED=0 turns them off
// (every call takes PyTorch's autograd kernel and the boxed path), docs/execution.md "Switches".
bool unboxed_enabled() noexcept;
void set_native_enabled(bool on) noexcept;

// ---- status ------------------------------------------------------------------

// Throws the c10 error matching the status' code (freeing it); no-op on NULL.
// `what` (may be null) prefixes the message.
void check(tpuc_status* s, const char* what);

// ---- dtypes -------------------------------------------------------------------

// The core's dtype of a torch dtype; false when the core has none.
bool to_tpuc_dtype(c10::ScalarType t, tpuc_dtype* out) noexcept;

// ---- current device (per thread) ----------------------------------------------

c10::DeviceIndex current_device() noexcept;
void set_current_device(c10::DeviceIndex index) noexcept;

// ---- allocator and storages (allocator.cpp) -----------------------------------

c10::Allocator* allocator();
// The storage behind a tpu tensor / storage.
tpuc_storage* storage_of(const c10::Storage& s);
inline tpuc_storage* storage_of(const at::TensorBase& t) { return storage_of(t.storage()); }
// Changes a storage's size in bytes, keeping the first min(old, new) bytes.
void resize_storage(const c10::Storage& s, size_t nbytes);
// Device of a live storage pointer; nullopt when `p` is not one.
std::optional<c10::DeviceIndex> device_of_storage_ptr(const void* p);
// Waits for every buffer of every live storage on `device` (-1: all);
// raises the first device error.
void synchronize(int device);

// ---- pinned host memory (pinned.cpp) ---------------------------------------------

// The allocator behind Tensor.pin_memory() for "tpu": page-aligned, tracked host blocks.
c10::Allocator* pinned_allocator();
// True when `p` points into a live pinned block.
bool is_pinned_ptr(const void* p);

// ---- generators (device.cpp) ---------------------------------------------------

const at::Generator& default_generator(c10::DeviceIndex index);
// Reserves `count` random values of `gen` (a tpu generator): returns the
// (seed, offset) to draw them from and advances the offset by `count`
// rounded up to a multiple of 4.
std::pair<uint64_t, uint64_t> reserve_random(at::Generator gen, uint64_t count);
// A seed for a CPU generator standing in for a tpu generator at (seed, offset).
uint64_t mix_seed(uint64_t seed, uint64_t offset);
// Seeds every default generator (now, or at creation when none exists yet).
void manual_seed_all(uint64_t seed);

// ---- fallback registry (fallback.cpp) ------------------------------------------

// op name -> number of times it ran on the CPU instead of the device.
std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();
// A Python kernel of tpuc that runs an op's CPU kernel itself (python/tpuc/embedding_bag.py's
// mode max) counts it as the boxed fallback does: stats()['fallbacks'], the warning, and an
// error under TPUC_FALLBACK=error.
void note_kernel_fallback(const std::string& name, const std::string& overload,
                          const std::string& why);

// ---- events (observe.cpp) ---------------------------------------------------------

// Sets the runtime's event observer (profiler ranges, doctor statistics).
void install_observer(tpuc_runtime* rt);
// A CPU fallback of `op`, as a profiler range and a doctor event, for its scope.
class FallbackScope {
 public:
  FallbackScope(const std::string& op, const std::string& why);
  ~FallbackScope();
  FallbackScope(const FallbackScope&) = delete;
  FallbackScope& operator=(const FallbackScope&) = delete;

 private:
  std::string op_;
};

// ---- copies and storages' geometry (copy.cpp, views.cpp, native.cpp) ---------------

// dst <- src through the core's "aten::copy_" on the device; false when the
// core cannot take the pair (the caller copies through the host).
bool core_copy(const at::Tensor& dst, const at::Tensor& src);

// A CPU tensor with `t`'s dtype, sizes, strides, offset and conj/neg bits,
// viewing a fresh host copy of t's whole storage.
at::Tensor host_view(const at::Tensor& t);
// A new tpu tensor on `device` with these sizes and strides (strides of
// another length, e.g. {}: contiguous).
at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                     c10::DeviceIndex device);
// Resizes `self` (a tpu tensor) to `sizes` with `strides` (empty: contiguous),
// growing its storage when needed.
void restride_tpu(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides);

}  // namespace tpuc_torch
