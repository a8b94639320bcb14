// dynamic.cpp — ops whose result size depends on the data (nonzero,
// masked_select, repeat_interleave without output_size), built from ops the device runs: the number of selected
// elements is read back (one host sync, as on CUDA), and the positions come
// from a stable sort that moves the selected elements to the front in order.
// Boolean indexing (x[mask]) goes through nonzero, so it stays on the device.
// Also equal, whose result is a host bool: the device compares, the host
// reads back one element.
#include <ATen/ATen.h>

#include "ops.h"
#include <torch/library.h>

namespace tpuc_torch {
namespace {

// Flat indices (int64, ascending) of the true elements of a bool tensor.
at::Tensor selected_flat_indices(const at::Tensor& mask) {
  at::Tensor flat = mask.reshape({-1});
  int64_t n = flat.sum().item<int64_t>();
  // key 0 for selected, 1 for the rest: a stable sort keeps each group in order
  at::Tensor key = at::logical_not(flat).to(at::kByte);
  at::Tensor order = std::get<1>(at::sort(key, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  return order.narrow(0, 0, n);
}

at::Tensor nonzero_tpu(const at::Tensor& self) {
  if (self.dim() == 0)  // a scalar: [1, 0] or [0, 0]
    return at::empty({self.ne(0).item<bool>() ? 1 : 0, 0}, self.options().dtype(at::kLong));
  if (self.numel() == 0) return at::empty({0, self.dim()}, self.options().dtype(at::kLong));
  at::Tensor idx = selected_flat_indices(self.ne(0));
  std::vector<at::Tensor> coords(static_cast<size_t>(self.dim()));
  at::Tensor rest = idx;
  for (int64_t d = self.dim() - 1; d >= 0; d--) {
    int64_t size = self.size(d);
    coords[static_cast<size_t>(d)] = at::remainder(rest, size);
    rest = at::div(rest, size, "floor");
  }
  return at::stack(coords, 1);
}

at::Tensor masked_select_tpu(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_select: expected BoolTensor for mask");
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor values = self.expand(shape).reshape({-1});
  if (values.numel() == 0) return at::empty({0}, self.options());
  at::Tensor idx = selected_flat_indices(mask.expand(shape));
  return values.index_select(0, idx);
}

// equal(self, other): PyTorch's CPU answer (cpu_equal) — an error for two
// devices, false for other sizes, else every element == after promotion to
// a common dtype (NaN is never equal, the same tensor included).
bool equal_tpu(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.is_same_size(other)) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

}  // namespace

// repeat_interleave(repeats) without output_size gets the sum of the repeats
// (read back once), so that the op and its Meta kernel can run; masks among
// an index op's `indices` become the long indices of their true elements, one
// per mask dimension, as PyTorch's expandTensors does — so x[mask] and
// x[mask] = v run on the device.
void prepare_dynamic_args(const OpInfo& info, const c10::OperatorHandle& op,
                          torch::jit::Stack* stack) {
  size_t begin = stack->size() - op.schema().arguments().size();
  if (info.output_size_arg >= 0) {
    c10::IValue& size = (*stack)[begin + info.output_size_arg];
    const c10::IValue& r = (*stack)[begin];
    if (size.isNone() && r.isTensor() && r.toTensor().dim() == 1)
      size = c10::IValue(r.toTensor().sum().item<int64_t>());
  }
  if (info.mask_indices_arg < 0) return;
  c10::IValue& v = (*stack)[begin + info.mask_indices_arg];
  if (!v.isList()) return;
  auto list = v.toList();
  bool any = false;
  for (const c10::IValue& e : list) {
    if (e.isTensor()) {
      auto st = e.toTensor().scalar_type();
      any = any || st == at::kBool || st == at::kByte;
    }
  }
  if (!any) return;
  c10::List<std::optional<at::Tensor>> out;
  for (const c10::IValue& e : list) {
    if (!e.isTensor()) {
      out.push_back(std::nullopt);
      continue;
    }
    at::Tensor t = e.toTensor();
    if (t.scalar_type() != at::kBool && t.scalar_type() != at::kByte) {
      out.push_back(t);
      continue;
    }
    at::Tensor nz = nonzero_tpu(t.scalar_type() == at::kByte ? t.ne(0) : t);
    for (int64_t d = 0; d < t.dim(); d++) out.push_back(nz.select(1, d));
  }
  v = c10::IValue(out);
}

}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", TORCH_FN(tpuc_torch::nonzero_tpu));
  m.impl("masked_select", TORCH_FN(tpuc_torch::masked_select_tpu));
  m.impl("equal", TORCH_FN(tpuc_torch::equal_tpu));
}
