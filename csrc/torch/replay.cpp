// replay.cpp — compiled graphs launched again without recording their ops
// (python/tpuc/dynamo.py drives it).
//
// A graph is recorded once as its own program (tpuc_flush_capture). Capture
// maps each storage slot of that program onto the graph's arguments (a slot
// read or updated in place is an input's storage) and outputs (a slot the
// program computes is a fresh output storage, an output may also be a view
// of an input), and notes the guards: every input's dtype, sizes, strides,
// offset, storage size and which inputs share a storage, non-tensor inputs'
// values, and how far the recorded ops advanced the device generator.
// Launch checks the guards, makes the output storages, gives the program the
// generator states that recording would have drawn (advancing the generator
// by the same amount), and runs the captured executable. Anything capture
// cannot map (an op that fell back to the CPU, a tensor made outside the
// recorded ops, a flush in the middle of the graph) makes the graph one that
// is recorded on every call; capture says why.
#include "tpuc_torch.h"

#include <c10/core/StorageImpl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace tpuc_torch {
namespace {

std::string dims_str(c10::IntArrayRef d) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < d.size(); ++i) o << (i ? ", " : "") << d[i];
  o << "]";
  return o.str();
}

struct InputGuard {
  bool tensor = false;
  py::object value;  // a non-tensor input: its value
  c10::ScalarType dtype{};
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  size_t nbytes = 0;
  int alias_of = -1;  // the first input sharing this one's storage
};

struct OutputSpec {
  enum Kind { Value, Alias, Fresh } kind = Value;
  py::object value;  // Value: returned as captured (None, an int)
  int index = -1;    // Alias: input number; Fresh: group number
  c10::ScalarType dtype{};
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

struct Replay {
  tpuc_replay* r = nullptr;  // nullptr: the graph ran no op
  int device = 0;
  std::vector<InputGuard> inputs;
  int distinct_storages = 0;
  std::vector<size_t> group_nbytes;  // fresh output storages
  // per slot: >= 0 an input's storage; <= -2 fresh group (-2 - g); -1 none
  std::vector<int> slot_src;
  std::vector<uint64_t> rng_delta;  // per generator state: offset - offset at capture
  uint64_t rng_advance = 0;
  bool tuple_out = true;
  std::vector<OutputSpec> outputs;
  int64_t launches = 0;

  ~Replay() { tpuc_replay_destroy(r); }
};

bool is_tpu_tensor(py::handle h, at::Tensor* out) {
  if (!THPVariable_Check(h.ptr())) return false;
  *out = THPVariable_Unpack(h.ptr());
  return out->defined();
}

// What a mismatch of input k is, in words ("" when it matches).
std::string check_input(const InputGuard& g, py::handle h, int k, at::Tensor* slot) {
  at::Tensor t;
  bool tensor = is_tpu_tensor(h, &t);
  if (!g.tensor) {
    if (tensor) return "input " + std::to_string(k) + " is a tensor now";
    if (!h.equal(g.value)) return "input " + std::to_string(k) + " changed value";
    return "";
  }
  if (!tensor) return "input " + std::to_string(k) + " is no tensor now";
  if (t.device().type() != kTpu) return "input " + std::to_string(k) + " is not on tpu";
  if (t.scalar_type() != g.dtype)
    return "input " + std::to_string(k) + " dtype " + std::string(c10::toString(g.dtype)) +
           " -> " + c10::toString(t.scalar_type());
  if (!t.sizes().equals(g.sizes))
    return "input " + std::to_string(k) + " shape " + dims_str(g.sizes) + " -> " +
           dims_str(t.sizes());
  if (!t.strides().equals(g.strides) || t.storage_offset() != g.offset)
    return "input " + std::to_string(k) + " strides " + dims_str(g.strides) + " -> " +
           dims_str(t.strides());
  if (t.storage().nbytes() != g.nbytes)
    return "input " + std::to_string(k) + " storage size changed";
  *slot = t;
  return "";
}

at::Tensor view_of(const c10::Storage& st, const OutputSpec& o) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(st), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(o.dtype));
  impl->set_sizes_and_strides(o.sizes, o.strides, o.offset);
  return at::Tensor(std::move(impl));
}

// Returns the outputs, or a str saying why the graph must be recorded again.
py::object launch(Replay& rp, py::sequence args) {
  if (static_cast<size_t>(py::len(args)) != rp.inputs.size())
    return py::str("the number of inputs changed");
  std::vector<at::Tensor> ts(rp.inputs.size());
  std::unordered_set<const void*> distinct;
  for (size_t k = 0; k < rp.inputs.size(); ++k) {
    const InputGuard& g = rp.inputs[k];
    std::string why = check_input(g, args[k], static_cast<int>(k), &ts[k]);
    if (!why.empty()) return py::str(why);
    if (!g.tensor) continue;
    const void* sp = ts[k].storage().unsafeGetStorageImpl();
    distinct.insert(sp);
    if (g.alias_of != static_cast<int>(k) &&
        sp != ts[g.alias_of].storage().unsafeGetStorageImpl())
      return py::str("input " + std::to_string(k) + " no longer shares input " +
                     std::to_string(g.alias_of) + "'s storage");
  }
  if (static_cast<int>(distinct.size()) != rp.distinct_storages)
    return py::str("inputs share storages differently");
  std::vector<at::Tensor> groups;
  groups.reserve(rp.group_nbytes.size());
  for (size_t nb : rp.group_nbytes)
    groups.push_back(empty_tpu({static_cast<int64_t>(nb)}, {}, c10::kByte,
                               static_cast<c10::DeviceIndex>(rp.device)));
  if (rp.r) {
    std::vector<tpuc_storage*> slots(rp.slot_src.size(), nullptr);
    for (size_t i = 0; i < slots.size(); ++i) {
      int src = rp.slot_src[i];
      if (src >= 0) slots[i] = storage_of(ts[src]);
      else if (src <= -2) slots[i] = storage_of(groups[-2 - src]);
    }
    at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(rp.device));
    std::vector<uint64_t> rng(2 * rp.rng_delta.size() + 2);
    uint64_t seed = 0, offset = 0;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      seed = gen.current_seed();
      offset = gen.get_offset();
    }
    for (size_t i = 0; i < rp.rng_delta.size(); ++i) {
      rng[2 * i] = seed;
      rng[2 * i + 1] = offset + rp.rng_delta[i];
    }
    bool mismatch = false;
    {
      py::gil_scoped_release nogil;
      check(tpuc_replay_launch(rp.r, slots.data(), rng.data(), &mismatch), "replaying a graph");
    }
    if (mismatch) return py::str("an input's buffer no longer has the type the program reads");
    if (rp.rng_advance) {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_offset(offset + rp.rng_advance);
    }
  }
  ++rp.launches;
  py::list out;
  for (const OutputSpec& o : rp.outputs) {
    if (o.kind == OutputSpec::Value) out.append(o.value);
    else if (o.kind == OutputSpec::Alias)
      out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(view_of(ts[o.index].storage(), o))));
    else
      out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(view_of(groups[o.index].storage(), o))));
  }
  if (rp.tuple_out) return py::tuple(out);
  return std::move(out);
}

// Runs what is pending on `device` (the graph just recorded) as one program
// and maps it onto args/outputs. Returns a Replay, or a str (why not).
py::object capture(int device, py::sequence args, py::object outputs, uint64_t seed0,
                   uint64_t offset0) {
  tpuc_runtime* rt = runtime();
  auto rp = std::make_unique<Replay>();
  rp->device = device;
  {
    py::gil_scoped_release nogil;
    check(tpuc_flush_capture(rt, device, &rp->r), "running a compiled graph");
  }
  if (tpuc_pending_ops(rt, -1) != 0) return py::str("the graph recorded ops on another device");
  // inputs
  std::unordered_map<tpuc_storage*, int> input_of;
  std::vector<at::Tensor> ts(py::len(args));
  for (size_t k = 0; k < ts.size(); ++k) {
    InputGuard g;
    at::Tensor t;
    if (!is_tpu_tensor(args[k], &t)) {
      if (THPVariable_Check(args[k].ptr())) return py::str("an input is an undefined tensor");
      g.value = py::reinterpret_borrow<py::object>(args[k]);
      rp->inputs.push_back(std::move(g));
      continue;
    }
    if (t.device().type() != kTpu)
      return py::str("input " + std::to_string(k) + " is a " + t.device().str() + " tensor");
    ts[k] = t;
    g.tensor = true;
    g.dtype = t.scalar_type();
    g.sizes = t.sizes().vec();
    g.strides = t.strides().vec();
    g.offset = t.storage_offset();
    g.nbytes = t.storage().nbytes();
    auto [it, fresh] = input_of.emplace(storage_of(t), static_cast<int>(k));
    g.alias_of = it->second;
    if (fresh) rp->distinct_storages++;
    rp->inputs.push_back(std::move(g));
  }
  // outputs
  py::list outs;
  rp->tuple_out = py::isinstance<py::tuple>(outputs);
  if (py::isinstance<py::tuple>(outputs) || py::isinstance<py::list>(outputs)) {
    for (py::handle h : outputs) outs.append(h);
  } else {
    return py::str("the graph returned a " + std::string(py::str(outputs.get_type())));
  }
  std::unordered_map<tpuc_storage*, int> group_of;
  std::vector<tpuc_storage*> group_storage;
  for (py::handle h : outs) {
    OutputSpec o;
    at::Tensor t;
    if (!is_tpu_tensor(h, &t)) {
      if (THPVariable_Check(h.ptr())) return py::str("an output is an undefined tensor");
      o.value = py::reinterpret_borrow<py::object>(h);
      rp->outputs.push_back(std::move(o));
      continue;
    }
    if (t.device().type() != kTpu) return py::str("an output is a " + t.device().str() + " tensor");
    if (t.device().index() != device) return py::str("an output is on another device");
    o.dtype = t.scalar_type();
    o.sizes = t.sizes().vec();
    o.strides = t.strides().vec();
    o.offset = t.storage_offset();
    tpuc_storage* s = storage_of(t);
    if (auto in = input_of.find(s); in != input_of.end()) {
      o.kind = OutputSpec::Alias;
      o.index = in->second;
    } else {
      o.kind = OutputSpec::Fresh;
      auto [it, fresh] = group_of.emplace(s, static_cast<int>(group_storage.size()));
      if (fresh) {
        group_storage.push_back(s);
        rp->group_nbytes.push_back(t.storage().nbytes());
      }
      o.index = it->second;
    }
    rp->outputs.push_back(std::move(o));
  }
  if (!rp->r) {  // no op: outputs are inputs' views or storages never written
    for (tpuc_storage* s : group_storage) {
      tpuc_buffer* b = tpuc_storage_get_buffer(s);
      tpuc_buffer_release(b);
      if (b) return py::str("an output was made outside the recorded ops");
    }
    return py::cast(rp.release(), py::return_value_policy::take_ownership);
  }
  // slots
  int nslots = tpuc_replay_slot_count(rp->r);
  rp->slot_src.assign(nslots, -1);
  std::vector<bool> group_computed(group_storage.size(), false);
  for (int i = 0; i < nslots; ++i) {
    tpuc_replay_slot sl{};
    tpuc_replay_slot_info(rp->r, i, &sl);
    if (sl.constant) continue;
    if (auto in = input_of.find(sl.storage); in != input_of.end()) {
      rp->slot_src[i] = in->second;
    } else if (auto gr = group_of.find(sl.storage); gr != group_of.end()) {
      rp->slot_src[i] = -2 - gr->second;
      if (sl.param)  // read as zeros (never written) is what a fresh storage does too
        return py::str("the graph reads an output's storage before writing it");
      group_computed[gr->second] = sl.result;
    } else if (sl.param && !sl.result) {
      // a constant of the graph: an uploaded CPU scalar (scalar_tensor runs
      // on the CPU), a tensor attribute; kept, and checked at each launch
      check(tpuc_replay_hold_constant(rp->r, i), "capturing a graph");
    } else if (sl.read && !sl.result) {
      // never written when recorded (zeros, compiled into the program): a
      // constant too (scalar_tensor(0) leaves its storage unwritten)
    } else if (sl.result) {
      return py::str("the graph writes a tensor that is neither an input nor an output");
    }
  }
  for (size_t g = 0; g < group_storage.size(); ++g) {
    if (group_computed[g]) continue;
    tpuc_buffer* b = tpuc_storage_get_buffer(group_storage[g]);
    tpuc_buffer_release(b);
    if (b) return py::str("an output was made outside the recorded ops");
  }
  // generator
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  uint64_t seed1 = 0, offset1 = 0;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    seed1 = gen.current_seed();
    offset1 = gen.get_offset();
  }
  if (seed1 != seed0 || offset1 < offset0) return py::str("the graph reseeded the generator");
  rp->rng_advance = offset1 - offset0;
  for (int i = 0, n = tpuc_replay_rng_count(rp->r); i < n; ++i) {
    uint64_t s = 0, o = 0;
    tpuc_replay_rng(rp->r, i, &s, &o);
    if (s != seed0 || o < offset0 || o >= offset1)
      return py::str("the graph draws from a generator other than the device's default one");
    rp->rng_delta.push_back(o - offset0);
  }
  return py::cast(rp.release(), py::return_value_policy::take_ownership);
}

}  // namespace

void register_replay(py::module_& m) {
  py::class_<Replay>(m, "_Replay")
      .def("launch", &launch, py::arg("args"),
           "Runs the captured program on new arguments: the outputs, or a str saying why the "
           "graph must be recorded again.")
      .def_readonly("launches", &Replay::launches)
      .def_property_readonly("num_inputs", [](const Replay& r) { return r.inputs.size(); });
  m.def("_replay_capture", &capture, py::arg("device"), py::arg("args"), py::arg("outputs"),
        py::arg("seed"), py::arg("offset"),
        "Runs the graph just recorded as one program and keeps it for launching again: a "
        "_Replay, or a str saying why it cannot be replayed.");
}

}  // namespace tpuc_torch
