// observe.cpp — the core's events seen from PyTorch. One observer is set on
// the runtime when it is created; it
// - turns compiles, launches, transfers and CPU fallbacks into
//   at::RecordFunction ranges ("tpuc::compile aten::mm", "tpuc::execute
//   fused chunk", "tpuc::to_host", "tpuc::cpu_fallback aten::foo"), so that
//   torch.profiler traces and their Chrome export show them nested under the
//   aten op that caused them (no cost while no profiler is active);
// - when `tpuc doctor` asks (_observe_start), sums time per kind and per op
//   (device time from launch to ready, serialised per device), and calls a
//   Python function at each recompile and fallback so that it can record the
//   user's file:line.
#include "tpuc_torch.h"

#include <ATen/record_function.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace tpuc_torch {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// One open range of this thread: the RecordFunction and the name it shows.
struct Range {
  int kind;
  std::string name;
  std::unique_ptr<at::RecordFunction> rf;
  double t0;
};
thread_local std::vector<Range> t_ranges;

struct Totals {
  int64_t count = 0;
  double seconds = 0;
  int64_t bytes = 0;
};

struct Collector {
  std::mutex mu;
  std::atomic<bool> on{false};
  std::map<std::string, Totals> by_kind;               // "compile", "execute", "to_host", ...
  std::map<std::string, Totals> compile_by_name;       // op / "fused chunk"
  std::map<std::string, Totals> device_by_name;        // device time per program name
  std::map<std::string, Totals> fallback_by_name;      // CPU time per op that fell back
  std::unordered_map<uint64_t, std::pair<double, const char*>> launched;  // id -> (t, name)
  std::map<int, double> last_done;                     // per device
  py::object* callback = nullptr;                      // owned; set with the GIL held
};

Collector& collector() {
  static Collector* c = new Collector();  // leaked on purpose (exit order)
  return *c;
}

const char* kind_name(int kind) {
  switch (kind) {
    case TPUC_EVENT_COMPILE: return "compile";
    case TPUC_EVENT_EXECUTE: return "execute";
    case TPUC_EVENT_DEVICE_DONE: return "device";
    case TPUC_EVENT_TO_DEVICE: return "to_device";
    case TPUC_EVENT_TO_HOST: return "to_host";
    case TPUC_EVENT_RECOMPILE: return "recompile";
    default: return "fallback";
  }
}
constexpr int kFallback = 100;

void notify_python(const char* what, const std::string& name, const std::string& detail) {
  Collector& c = collector();
  if (!c.on.load() || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (!c.callback) return;
  try {
    (*c.callback)(what, name, detail);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("tpuc observer");
  }
}

void begin_range(int kind, std::string name) {
  Range r{kind, std::move(name), nullptr, collector().on.load() ? now_s() : 0.0};
  auto rf = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (rf->isActive()) {
    rf->before(std::string_view(r.name));
    r.rf = std::move(rf);
  }
  t_ranges.push_back(std::move(r));
}

void end_range(int kind, int64_t bytes, const char* op_name) {
  std::vector<Range>& ranges = t_ranges;  // one thread-local lookup
  if (ranges.empty() || ranges.back().kind != kind) return;  // observer set mid-range
  if (!ranges.back().rf && ranges.back().t0 == 0.0) {  // nobody was watching its BEGIN
    ranges.pop_back();
    return;
  }
  Range r = std::move(ranges.back());
  ranges.pop_back();
  r.rf.reset();  // ends the profiler's range
  Collector& c = collector();
  if (!c.on.load() || r.t0 == 0.0) return;
  double dt = now_s() - r.t0;
  std::lock_guard<std::mutex> lock(c.mu);
  Totals& k = c.by_kind[kind_name(kind)];
  k.count++, k.seconds += dt, k.bytes += bytes;
  if (kind == TPUC_EVENT_COMPILE) {
    Totals& t = c.compile_by_name[op_name];
    t.count++, t.seconds += dt;
  }
  if (kind == kFallback) {
    Totals& t = c.fallback_by_name[op_name];
    t.count++, t.seconds += dt;
  }
}

std::string range_name(const tpuc_event* ev) {
  std::string n = std::string("tpuc::") + kind_name(ev->kind);
  if (ev->name && *ev->name) n += std::string(" ") + ev->name;
  return n;
}

void on_event(const tpuc_event* ev, void*) {
  Collector& c = collector();
  switch (ev->phase) {
    case TPUC_EVENT_BEGIN:
      // Nobody watching (no profiler, no doctor): an empty range, so that the
      // END still pairs, without building its name or a RecordFunction (that
      // cost more than half a microsecond on every launch).
      if (!c.on.load() && !at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE)) {
        t_ranges.emplace_back().kind = ev->kind;  // built in place: no name, no start
        return;
      }
      begin_range(ev->kind, range_name(ev));
      if (ev->kind == TPUC_EVENT_EXECUTE && c.on.load()) {
        std::lock_guard<std::mutex> lock(c.mu);
        if (c.launched.size() < 100000) c.launched[ev->id] = {now_s(), ev->name};
      }
      return;
    case TPUC_EVENT_END:
      end_range(ev->kind, ev->bytes, ev->name);
      return;
    case TPUC_EVENT_INSTANT:
      if (ev->kind == TPUC_EVENT_DEVICE_DONE) {
        if (!c.on.load()) return;
        double t = now_s();
        std::lock_guard<std::mutex> lock(c.mu);
        auto it = c.launched.find(ev->id);
        if (it == c.launched.end()) return;
        double& last = c.last_done[ev->device];
        double start = std::max(it->second.first, last);
        Totals& d = c.device_by_name[it->second.second];
        d.count++;
        d.seconds += std::max(0.0, t - start);
        last = std::max(last, t);
        c.launched.erase(it);
        return;
      }
      if (ev->kind == TPUC_EVENT_RECOMPILE) {
        RECORD_USER_SCOPE(range_name(ev));  // an instant mark in traces
        notify_python("recompile", ev->name, ev->detail);
      }
      return;
  }
}

py::dict totals_dict(const std::map<std::string, Totals>& m) {
  py::dict d;
  for (const auto& [k, t] : m) {
    py::dict e;
    e["count"] = t.count;
    e["seconds"] = t.seconds;
    e["bytes"] = t.bytes;
    d[py::str(k)] = e;
  }
  return d;
}

// A launch is reported only while someone would see it (the doctor, or a
// profiler: what on_event's BEGIN asks): otherwise its BEGIN and END cost two
// calls and an empty range pushed and popped, about 0.3k instructions per op.
bool launch_watched(void*) {
  return collector().on.load() || at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
}

}  // namespace

void install_observer(tpuc_runtime* rt) {
  tpuc_set_event_hook(rt, &on_event, nullptr);
  tpuc_set_event_gate(rt, &launch_watched);
}

FallbackScope::FallbackScope(const std::string& op, const std::string& why) : op_(op) {
  begin_range(kFallback, "tpuc::cpu_fallback " + op);
  notify_python("fallback", op, why);
}
FallbackScope::~FallbackScope() { end_range(kFallback, 0, op_.c_str()); }

void observe_start(py::object callback) {
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  delete c.callback;
  c.callback = callback.is_none() ? nullptr : new py::object(std::move(callback));
  c.by_kind.clear(), c.compile_by_name.clear(), c.device_by_name.clear();
  c.fallback_by_name.clear(), c.launched.clear(), c.last_done.clear();
  c.on.store(true);
  if (tpuc_runtime* rt = runtime_or_null()) tpuc_set_event_device_done(rt, true);
}

py::dict observe_stop() {
  Collector& c = collector();
  c.on.store(false);
  if (tpuc_runtime* rt = runtime_or_null()) tpuc_set_event_device_done(rt, false);
  std::lock_guard<std::mutex> lock(c.mu);
  delete c.callback;
  c.callback = nullptr;
  py::dict d;
  d["by_kind"] = totals_dict(c.by_kind);
  d["compile_by_name"] = totals_dict(c.compile_by_name);
  d["device_by_name"] = totals_dict(c.device_by_name);
  d["fallback_by_name"] = totals_dict(c.fallback_by_name);
  return d;
}

}  // namespace tpuc_torch
