// module.cpp — the Python module tpuc._C: what python/tpuc needs from the
// glue and the core (devices, synchronization, memory and op statistics,
// generators, modes). Plain values cross the boundary; the Python side
// builds torch objects.
#include "tpuc_torch.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <string>

namespace py = pybind11;
using namespace tpuc_torch;

namespace tpuc_torch {
void register_replay(py::module_& m);  // replay.cpp: compiled graphs launched again
}
namespace tpuc_torch {  // observe.cpp
void observe_start(py::object callback);
py::dict observe_stop();
std::vector<at::Tensor> kernel_run(const std::string& text, const std::vector<at::Tensor>& inputs);  // kernel.cpp
}  // namespace tpuc_torch

namespace {

py::dict memory_stats(int device) {
  check_device(static_cast<c10::DeviceIndex>(device));
  // Ops recorded in fused mode have not made their buffers yet: run them, so
  // the numbers describe the program as written.
  check(tpuc_flush(runtime(), device), "memory statistics");
  tpuc_memory_stats m{};
  check(tpuc_memory_stats_get(runtime(), device, &m), "memory statistics");
  py::dict d;
  d["bytes_in_use"] = m.bytes_in_use;
  d["peak_bytes_in_use"] = m.peak_bytes_in_use;
  d["num_buffers"] = m.num_buffers;
  d["num_allocs"] = m.num_allocs;
  d["limit_bytes"] = m.limit_bytes;
  d["num_ooms"] = m.num_ooms;
  return d;
}

py::dict runtime_stats() {
  py::dict d;
  tpuc_runtime* rt = runtime_or_null();
  tpuc_runtime_stats rs{};
  tpuc_op_stats os{};
  if (rt) {
    tpuc_runtime_stats_get(rt, &rs);
    tpuc_op_stats_get(rt, &os);
  }
  d["executions"] = rs.executions;
  d["compiles"] = rs.compiles;
  d["cache_hits"] = rs.cache_hits;
  d["cache_misses"] = rs.cache_misses;
  d["compile_seconds"] = rs.compile_seconds;
  d["cached_executables"] = rs.cached_executables;
  d["op_calls"] = os.op_calls;
  d["fast_hits"] = os.fast_hits;
  d["fast_misses"] = os.fast_misses;
  d["emitted_bytes"] = os.emitted_bytes;
  d["recorded_ops"] = os.recorded_ops;
  d["flushes"] = os.flushes;
  d["chunk_hits"] = os.chunk_hits;
  d["chunk_misses"] = os.chunk_misses;
  d["ahead_ops"] = os.ahead_ops;
  d["host_first_ops"] = os.host_first_ops;
  d["hoisted_fills"] = os.hoisted_fills;
  d["ahead_chunks"] = os.ahead_chunks;
  d["compiles_ahead"] = rs.compiles_ahead;
  d["compile_joins"] = rs.compile_joins;
  d["disk_hits"] = rs.disk_hits;
  d["disk_misses"] = rs.disk_misses;
  d["disk_writes"] = rs.disk_writes;
  d["disk_corrupt"] = rs.disk_corrupt;
  d["disk_evictions"] = rs.disk_evictions;
  d["load_seconds"] = rs.load_seconds;
  d["preloaded"] = rs.preloaded;
  d["preload_seconds"] = rs.preload_seconds;
  d["donations"] = rs.donations;
  d["recompiles"] = os.recompiles;
  int64_t fr[4] = {0, 0, 0, 0};
  if (rt) tpuc_fused_replay_stats(rt, fr);
  d["fused_replays"] = fr[0];
  d["fused_replay_matched_ops"] = fr[1];
  d["fused_replay_fallbacks"] = fr[2];
  d["fused_replay_notes"] = fr[3];
  return d;
}

py::dict runtime_info() {
  tpuc_runtime_info info{};
  tpuc_runtime_info_get(runtime(), &info);
  py::dict d;
  d["plugin_path"] = info.plugin_path ? info.plugin_path : "";
  d["platform_name"] = info.platform_name ? info.platform_name : "";
  d["platform_version"] = info.platform_version ? info.platform_version : "";
  d["pjrt_api_version"] = std::to_string(info.pjrt_api_major) + "." + std::to_string(info.pjrt_api_minor);
  d["device_count"] = info.device_count;
  d["op_xla_options"] = info.op_xla_options ? info.op_xla_options : "";
  d["op_xla_options_from_env"] = info.op_xla_options_from_env;
  d["compile_ahead"] = info.compile_ahead;
  d["compile_threads"] = info.compile_threads;
  d["compile_nice"] = info.compile_nice;
  return d;
}

py::dict device_info(int device) {
  check_device(static_cast<c10::DeviceIndex>(device));
  tpuc_device_info info{};
  check(tpuc_device_info_get(runtime(), device, &info), "device information");
  py::dict d;
  d["id"] = info.id;
  d["local_index"] = info.local_index;
  d["kind"] = info.kind ? info.kind : "";
  d["description"] = info.description ? info.description : "";
  return d;
}

at::Generator generator(int device) {
  return default_generator(static_cast<c10::DeviceIndex>(device));
}

// A core call that writes newline-separated reasons (tpuc_recompile_reasons,
// tpuc_fused_replay_reasons: the size needed when buf is NULL), as a list.
std::vector<std::string> reason_lines(size_t (*read)(tpuc_runtime*, char*, size_t)) {
  std::vector<std::string> out;
  tpuc_runtime* rt = runtime_or_null();
  if (!rt) return out;
  std::string buf(read(rt, nullptr, 0) + 4096, '\0');
  read(rt, buf.data(), buf.size());
  size_t start = 0;
  for (size_t i = 0; i < buf.size() && buf[i]; ++i)
    if (buf[i] == '\n') {
      out.emplace_back(buf, start, i - start);
      start = i + 1;
    }
  return out;
}

// c10::Error -> the Python exception torch itself would raise.
void translate(const c10::Error& e, PyObject* type) { PyErr_SetString(type, e.what_without_backtrace()); }

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tpuc's PyTorch glue (device \"tpu\")";
  // torch.OutOfMemoryError (libtorch_python does not export its C object).
  static PyObject* oom_type =
      py::object(py::module_::import("torch").attr("OutOfMemoryError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::OutOfMemoryError& e) {
      translate(e, oom_type);
    } catch (const c10::IndexError& e) {
      translate(e, PyExc_IndexError);
    } catch (const c10::ValueError& e) {
      translate(e, PyExc_ValueError);
    } catch (const c10::NotImplementedError& e) {
      translate(e, PyExc_NotImplementedError);
    } catch (const c10::Error& e) {
      translate(e, PyExc_RuntimeError);
    }
  });

  m.def("_set_plugin", &set_plugin, py::arg("path"), py::arg("discovery_error"));
  m.def("_runtime_error", &runtime_error, py::call_guard<py::gil_scoped_release>(),
        "Why the device is unavailable ('' when it is available); creates the runtime.");
  m.def("_is_initialized", &runtime_started);
  // The runtime lives until the process ends. A background compile
  // (TPUC_HOST_FIRST, TPUC_COMPILE_AHEAD) still running while the C exit
  // handlers destroy LLVM's statics crashes in LLVM: Python's atexit (which
  // runs before them) stops those compiles first (tpuc/__init__.py).
  m.def("_stop_background_compiles", [] {
    if (runtime_started()) tpuc_stop_background_compiles(runtime_or_null());
  },
        py::call_guard<py::gil_scoped_release>());
  m.def("_device_count", &device_count, py::call_guard<py::gil_scoped_release>());
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int index) {
    check_device(static_cast<c10::DeviceIndex>(index));
    set_current_device(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_synchronize", &synchronize, py::arg("device") = -1,
        py::call_guard<py::gil_scoped_release>());
  m.def("_memory_stats", &memory_stats);
  m.def("_reset_peak_memory_stats", [](int device) {
    check(tpuc_memory_reset_peak(runtime(), device), "resetting peak memory statistics");
  });
  m.def("_set_memory_limit", [](int device, int64_t bytes) {
    check_device(static_cast<c10::DeviceIndex>(device));
    check(tpuc_memory_set_limit(runtime(), device, bytes), "setting the memory limit");
  });
  m.def("_runtime_stats", &runtime_stats);
  m.def("_fallback_counts", &fallback_counts);
  m.def("_reset_fallback_counts", &reset_fallback_counts);
  m.def("_note_kernel_fallback", &note_kernel_fallback);
  m.def("_runtime_info", &runtime_info);
  m.def("_device_info", &device_info);
  m.def("_op_names", [] {
    std::vector<std::string> names;
    tpuc_runtime* rt = runtime();
    for (int i = 0, n = tpuc_op_count(rt); i < n; ++i) names.emplace_back(tpuc_op_name(rt, i));
    return names;
  });
  m.def("_launch_blocking", &launch_blocking);
  m.def("_set_launch_blocking", &set_launch_blocking);
  m.def("_native_enabled", &native_enabled);
  m.def("_set_native_enabled", &set_native_enabled);
  // Execution modes of the core (strict, debug, fused, graph): tpuc/eager.py.
  m.def("_set_mode", [](int mode) {
    TORCH_CHECK_VALUE(mode >= TPUC_MODE_STRICT && mode <= TPUC_MODE_GRAPH,
                      "tpuc: unknown execution mode ", mode);
    check(tpuc_set_mode(runtime(), static_cast<tpuc_mode>(mode)), "switching the eager mode");
  }, py::call_guard<py::gil_scoped_release>());
  m.def("_get_mode", [] {
    tpuc_runtime* rt = runtime_or_null();
    return rt ? static_cast<int>(tpuc_get_mode(rt)) : 0;
  });
  m.def("_recompile_reasons", [] { return reason_lines(tpuc_recompile_reasons); });
  // Fused chunk replay (exec/fused_replay.c): tpuc/eager.py.
  m.def("_set_fused_replay", [](bool on) { tpuc_set_fused_replay(runtime(), on); });
  m.def("_fused_replay_reasons", [] { return reason_lines(tpuc_fused_replay_reasons); });
  // Device-side bounds checks of index values outside debug mode (TPUC_CHECK_BOUNDS).
  m.def("_set_check_bounds", [](bool on) { tpuc_set_check_bounds(runtime(), on); });
  m.def("_check_bounds", [] {
    tpuc_runtime* rt = runtime_or_null();
    return rt ? tpuc_get_check_bounds(rt) : false;
  });
  m.def("_set_donation", [](bool on) { tpuc_set_donation(runtime(), on); });
  m.def("_pending_ops", [] {
    tpuc_runtime* rt = runtime_or_null();
    return rt ? tpuc_pending_ops(rt, -1) : int64_t{0};
  });
  m.def("_flush", [](int device) {
    if (tpuc_runtime* rt = runtime_or_null()) check(tpuc_flush(rt, device), "running fused ops");
  }, py::arg("device") = -1, py::call_guard<py::gil_scoped_release>());
  // the recorded ops as a chunk that may wait in the compile-ahead queue
  // (a compiled graph's first call: python/tpuc/dynamo.py)
  m.def("_flush_cut", [](int device) {
    if (tpuc_runtime* rt = runtime_or_null()) check(tpuc_flush_cut(rt, device), "running fused ops");
  }, py::arg("device") = -1, py::call_guard<py::gil_scoped_release>());

  register_replay(m);
  // tpuc doctor: time per kind/op, and a callback(kind, op, detail) at each
  // recompile and fallback (observe.cpp).
  // What getDeviceFromPtr answers for a storage's data pointer (-1: not a live
  // tpu storage); for the tests of the allocator's registry.
  m.def("_device_of_storage_ptr", [](uintptr_t p) {
    auto d = device_of_storage_ptr(reinterpret_cast<const void*>(p));
    return d ? static_cast<int>(*d) : -1;
  });
  m.def("_observe_start", &observe_start, py::arg("callback"));
  m.def("_observe_stop", &observe_stop);
  // tpuc.kernel: a StableHLO module run on tpu tensors (kernel.cpp).
  m.def("_kernel_run", &kernel_run, py::arg("text"), py::arg("inputs"),
        py::call_guard<py::gil_scoped_release>());

  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(generator(device)));
  });
  m.def("_manual_seed_all", &manual_seed_all);
  m.def("_get_rng_state", [](int device) {
    at::Generator g = generator(device);
    std::lock_guard<std::mutex> lock(g.mutex());
    return std::make_pair(g.current_seed(), g.get_offset());
  });
  m.def("_set_rng_state", [](int device, uint64_t seed, uint64_t offset) {
    at::Generator g = generator(device);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(seed);
    g.set_offset(offset);
  });
}
