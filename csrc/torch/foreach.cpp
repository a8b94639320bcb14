// foreach.cpp — the _foreach_* ops (what torch.optim's default foreach
// implementations and clip_grad_norm_ call) as ONE program per call in
// strict mode. PyTorch's device-generic kernels for them
// (CompositeExplicitAutograd, "slow" paths) loop over the list and call the
// per-tensor op for each tensor; in strict mode each of those became its own
// program launch (an AdamW step of the 5M example: ~560 launches). Here the
// device's kernel runs that same composite with the engine recording (GRAPH
// mode: nothing is cut), then runs what it recorded as one cached program.
// Results, errors (raised by the per-tensor op that fails, from its Meta
// kernel, before anything runs) and aliasing are those of the composite. In
// fused and graph modes ops are recorded anyway, and debug mode keeps one
// program per op, so there the composite runs as it is.
#include "tpuc_torch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

namespace tpuc_torch {
namespace {

void foreach_as_one_program(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  tpuc_runtime* rt = runtime();
  if (tpuc_get_mode(rt) != TPUC_MODE_STRICT) {
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
    return;
  }
  check(tpuc_set_mode(rt, TPUC_MODE_GRAPH), "recording a foreach op");
  try {
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
  } catch (...) {
    // what the list recorded before the failing tensor still runs, as the
    // per-tensor launches did
    tpuc_status* s = tpuc_set_mode(rt, TPUC_MODE_STRICT);
    if (s == nullptr) s = tpuc_flush(rt, -1);
    tpuc_status_destroy(s);
    throw;
  }
  check(tpuc_set_mode(rt, TPUC_MODE_STRICT), "recording a foreach op");
  check(tpuc_flush(rt, -1), "running a foreach op");
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::_foreach_", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
      continue;
    std::string full = name.name.substr(6);  // without "aten::"
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    m.impl(full.c_str(),
           torch::CppFunction::makeFromBoxedFunction<&tpuc_torch::foreach_as_one_program>());
  }
}
