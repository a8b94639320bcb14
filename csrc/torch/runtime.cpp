// runtime.cpp — the process-wide tpuc_runtime (created lazily, once; a
// failure is remembered and reported by every later use), the per-thread
// current device, the debug-mode switch, and tpuc_status -> c10 errors.
#include "tpuc_torch.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <cstring>
#include <mutex>

namespace tpuc_torch {
namespace {

struct RuntimeState {
  std::mutex mu;
  bool attempted = false;
  tpuc_runtime* rt = nullptr;  // never destroyed: storages may outlive everything
  std::string error;
  std::string plugin_path;
  std::string discovery_error;
  std::atomic<int> count{-1};
  // `rt` once created, read without the lock: every op asks for the runtime
  // (4 times per cached a + b, a mutex each: ~250 instructions per op)
  std::atomic<tpuc_runtime*> ready{nullptr};
};

RuntimeState& state() {
  static RuntimeState* s = new RuntimeState();  // leaked on purpose (exit order)
  return *s;
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

std::atomic<bool> g_launch_blocking{env_flag("TPUC_LAUNCH_BLOCKING")};
std::atomic<bool> g_native{!env_is("TPUC_NATIVE", "0")};
thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

void set_plugin(const std::string& path, const std::string& discovery_error) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.attempted) return;  // too late: the runtime is what it is
  s.plugin_path = path;
  s.discovery_error = discovery_error;
}

tpuc_runtime* runtime_or_null() noexcept {
  auto& s = state();
  if (tpuc_runtime* rt = s.ready.load(std::memory_order_acquire)) return rt;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.attempted) {
    s.attempted = true;
    if (!s.discovery_error.empty()) {
      s.error = s.discovery_error;
    } else {
      tpuc_runtime_options opts{};
      opts.plugin_path = s.plugin_path.empty() ? nullptr : s.plugin_path.c_str();
      opts.cpu_device_count = 0;
      tpuc_status* st = tpuc_runtime_create(&opts, &s.rt);
      if (st) {
        s.error = tpuc_status_message(st);
        tpuc_status_destroy(st);
        s.rt = nullptr;
      } else {
        tpuc_runtime_info info{};
        tpuc_runtime_info_get(s.rt, &info);
        s.count.store(info.device_count);
        install_observer(s.rt);
        s.ready.store(s.rt, std::memory_order_release);
      }
    }
    if (!s.rt) s.count.store(0);
  }
  return s.rt;
}

bool runtime_started() noexcept {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.rt != nullptr;
}

std::string runtime_error() noexcept {
  if (runtime_or_null()) return "";
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.error.empty() ? std::string("unknown error") : s.error;
}

tpuc_runtime* runtime() {
  tpuc_runtime* rt = runtime_or_null();
  if (!rt) {
    TORCH_CHECK(false, "tpuc: the device \"tpu\" is not available: ", runtime_error(),
                ". Check `tpuc info`; choose a plugin with TPUC_PJRT_PLUGIN=/path/plugin.so or "
                "TPUC_PLATFORM.");
  }
  return rt;
}

int device_count() noexcept {
  auto& s = state();
  int n = s.count.load();
  if (n >= 0) return n;
  runtime_or_null();
  return s.count.load();
}

void check_device(c10::DeviceIndex index) {
  runtime();  // raises the reason when there is no device at all
  int n = device_count();
  TORCH_CHECK(index >= 0 && index < n, "tpuc: device index ", static_cast<int>(index),
              " is out of range: ", n, " tpu device(s) available (tpu:0 .. tpu:", n - 1,
              "). With the XLA CPU plugin, TPUC_CPU_DEVICE_COUNT sets how many there are.");
}

bool launch_blocking() noexcept { return g_launch_blocking.load(std::memory_order_relaxed); }
void set_launch_blocking(bool on) noexcept { g_launch_blocking.store(on); }
bool native_enabled() noexcept { return g_native.load(std::memory_order_relaxed); }
bool unboxed_enabled() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("TPUC_UNBOXED");
    return !(v && std::string(v) == "0");
  }();
  return on;
}
void set_native_enabled(bool on) noexcept { g_native.store(on); }

c10::DeviceIndex current_device() noexcept { return t_current_device; }
void set_current_device(c10::DeviceIndex index) noexcept { t_current_device = index; }

void check(tpuc_status* st, const char* what) {
  if (!st) return;
  tpuc_code code = tpuc_status_code(st);
  std::string msg = std::string("tpuc: ") + (what ? std::string(what) + ": " : std::string()) +
                    tpuc_status_message(st);
  tpuc_status_destroy(st);
  switch (code) {
    case TPUC_ERR_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPUC_ERR_INVALID_ARGUMENT:
      TORCH_CHECK_VALUE(false, msg);
    case TPUC_ERR_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case TPUC_ERR_INDEX:
      TORCH_CHECK_INDEX(false, msg);
    default:
      TORCH_CHECK(false, msg);
  }
}

bool to_tpuc_dtype(c10::ScalarType t, tpuc_dtype* out) noexcept {
  switch (t) {
    case c10::ScalarType::Bool: *out = TPUC_PRED; return true;
    case c10::ScalarType::Char: *out = TPUC_S8; return true;
    case c10::ScalarType::Short: *out = TPUC_S16; return true;
    case c10::ScalarType::Int: *out = TPUC_S32; return true;
    case c10::ScalarType::Long: *out = TPUC_S64; return true;
    case c10::ScalarType::Byte: *out = TPUC_U8; return true;
    case c10::ScalarType::UInt16: *out = TPUC_U16; return true;
    case c10::ScalarType::UInt32: *out = TPUC_U32; return true;
    case c10::ScalarType::UInt64: *out = TPUC_U64; return true;
    case c10::ScalarType::Half: *out = TPUC_F16; return true;
    case c10::ScalarType::BFloat16: *out = TPUC_BF16; return true;
    case c10::ScalarType::Float: *out = TPUC_F32; return true;
    case c10::ScalarType::Double: *out = TPUC_F64; return true;
    case c10::ScalarType::ComplexFloat: *out = TPUC_C64; return true;
    case c10::ScalarType::ComplexDouble: *out = TPUC_C128; return true;
    default: return false;
  }
}

}  // namespace tpuc_torch
