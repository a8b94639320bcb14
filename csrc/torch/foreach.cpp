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
//
// Lists of more than kChunkBytes (64 MiB) of tensors run as one program per
// run of at most that many bytes (a tensor larger than that is a run of its
// own): XLA CPU gives a list's program scratch memory in proportion to the
// whole list (a _foreach_norm of 256 MiB of gradients peaked at 578 MiB
// above its inputs; for FLUX's 0.96 GiB of gradients, clip_grad_norm_ added
// 2.16 GiB), so over a model the one-program form cost more than the model.
// Per chunk the ops are the same per-tensor ops, so the values are identical.
#include "tpuc_torch.h"
#include "ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>
#include <utility>
#include <vector>

namespace tpuc_torch {
namespace {

constexpr int64_t kChunkBytes = int64_t{64} << 20;

void run_recorded(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  tpuc_runtime* rt = runtime();
  const size_t nargs = op.schema().arguments().size();
  // The call itself, for host-first (below): IValues, so only references.
  torch::jit::Stack call(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
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
  tpuc_status* st = tpuc_flush_host_first(rt, -1);
  if (st && tpuc_status_code(st) == TPUC_ERR_NOT_COMPILED) {
    // TPUC_HOST_FIRST=1 and its program is compiling: nothing ran (the
    // recording was dropped); the op runs on the host this time.
    tpuc_status_destroy(st);
    torch::jit::drop(*stack, op.schema().returns().size());
    for (auto& v : call) stack->push_back(std::move(v));
    run_host_first(op, stack);
    return;
  }
  check(st, "running a foreach op");
}

// [begin, end) runs of the list of tensors `first` of at most kChunkBytes;
// one run when the list is small.
std::vector<std::pair<size_t, size_t>> chunk_bounds(const c10::List<at::Tensor>& first) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t start = 0;
  int64_t size = 0;
  for (size_t i = 0; i < first.size(); i++) {
    const at::Tensor t = first.get(i);
    const int64_t b = t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
    if (i > start && size + b > kChunkBytes) {
      out.emplace_back(start, i);
      start = i;
      size = 0;
    }
    size += b;
  }
  out.emplace_back(start, first.size());
  return out;
}

// Whether the op can run list-chunk by list-chunk: every list argument is
// per tensor (as long as the first tensor list), no tensor argument holds
// per-tensor values (addcdiv's 1-D `scalars`), and it returns nothing or
// tensor lists.
bool chunkable(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t n) {
  const size_t nargs = schema.arguments().size();
  for (size_t i = 0; i < nargs; i++) {
    const c10::IValue& v = stack[stack.size() - nargs + i];
    if (v.isTensorList()) {
      if (v.toTensorList().size() != n) return false;
    } else if (v.isList()) {
      if (v.toListRef().size() != n) return false;
    } else if (v.isTensor()) {
      if (v.toTensor().dim() != 0) return false;
    }
  }
  for (const c10::Argument& r : schema.returns())
    if (!r.type()->isSubtypeOf(*c10::ListType::ofTensors())) return false;
  return true;
}

void foreach_as_one_program(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  tpuc_runtime* rt = runtime();
  if (tpuc_get_mode(rt) != TPUC_MODE_STRICT) {
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
    return;
  }
  const c10::FunctionSchema& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const c10::IValue* first = nullptr;
  for (size_t i = 0; i < nargs && first == nullptr; i++)
    if ((*stack)[stack->size() - nargs + i].isTensorList()) first = &(*stack)[stack->size() - nargs + i];
  if (first == nullptr) {
    run_recorded(op, stack);
    return;
  }
  const auto bounds = chunk_bounds(first->toTensorList());
  if (bounds.size() == 1 || !chunkable(schema, *stack, first->toTensorList().size())) {
    run_recorded(op, stack);
    return;
  }
  const size_t nret = schema.returns().size();
  std::vector<c10::List<at::Tensor>> results(nret);
  for (const auto& [a, b] : bounds) {
    torch::jit::Stack sub;
    sub.reserve(nargs);
    for (size_t i = 0; i < nargs; i++) {
      const c10::IValue& v = (*stack)[stack->size() - nargs + i];
      if (v.isTensorList()) {
        c10::List<at::Tensor> part;
        const auto whole = v.toTensorList();
        for (size_t k = a; k < b; k++) part.push_back(whole.get(k));
        sub.emplace_back(std::move(part));
      } else if (v.isList()) {
        const auto whole = v.toList();
        c10::impl::GenericList part(whole.elementType());
        for (size_t k = a; k < b; k++) part.push_back(whole.get(k));
        sub.emplace_back(std::move(part));
      } else {
        sub.push_back(v);
      }
    }
    run_recorded(op, &sub);
    for (size_t r = 0; r < nret; r++)
      for (const at::Tensor& t : sub[sub.size() - nret + r].toTensorList()) results[r].push_back(t);
  }
  torch::jit::drop(*stack, nargs);
  for (auto& r : results) stack->emplace_back(std::move(r));
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
