// sparse.cpp — sparse layouts on "tpu" (COO under SparsePrivateUse1; CSR,
// CSC, BSR, BSC under SparseCsrPrivateUse1). A sparse tpu tensor is
// PyTorch's own sparse TensorImpl whose members (indices, values, ...) are
// dense tpu tensors. Its metadata, member accessors and factories are
// PyTorch's device-generic kernels (the ones it registers for SparseMeta);
// every other op runs on the CPU: a boxed fallback moves the tensor
// arguments to the host (sparse ones member by member), runs the op there,
// writes mutated arguments back and moves the results to the device (sparse
// ones stay sparse). Each such op counts as a fallback (stats, warning once,
// an error under TPUC_FALLBACK=error), as the dense CPU path does.
#include "ops.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_compressed_tensor_unsafe.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <torch/library.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tpuc_torch {
namespace {

bool on_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

bool is_compressed(const at::Tensor& t) {
  auto l = t.layout();
  return l == at::kSparseCsr || l == at::kSparseCsc || l == at::kSparseBsr || l == at::kSparseBsc;
}

// t (dense or sparse) on `device`; a sparse tensor is rebuilt from its
// members moved there (its coalesced flag kept).
at::Tensor move_to(const at::Tensor& t, c10::Device device) {
  if (!t.defined() || t.device() == device) return t;
  if (t.layout() == at::kSparse) {
    auto* impl = at::sparse::get_sparse_impl(t);
    return at::_sparse_coo_tensor_with_dims_and_tensors(
        impl->sparse_dim(), impl->dense_dim(), t.sizes(), impl->indices().to(device),
        impl->values().to(device), t.options().device(device), impl->coalesced());
  }
  if (is_compressed(t)) {
    auto* impl = at::sparse_csr::get_sparse_csr_impl(t);
    return at::_sparse_compressed_tensor_unsafe(
        impl->compressed_indices().to(device), impl->plain_indices().to(device),
        impl->values().to(device), t.sizes(), t.options().device(device));
  }
  return t.to(device);
}

// A mutated device argument takes the host result's contents.
void write_back(const at::Tensor& dev, const at::Tensor& host) {
  if (!on_tpu(dev) || !host.defined() || host.is_same(dev)) return;
  const c10::Device d = dev.device();
  if (dev.layout() == at::kSparse && host.layout() == at::kSparse) {
    auto* src = at::sparse::get_sparse_impl(host);
    auto* dst = at::sparse::get_sparse_impl(dev);
    dst->raw_resize_(src->sparse_dim(), src->dense_dim(), host.sizes());
    dst->set_indices_and_values_unsafe(src->indices().to(d), src->values().to(d));
    dst->set_coalesced(src->coalesced());
    return;
  }
  if (is_compressed(dev) && host.layout() == dev.layout()) {
    auto* src = at::sparse_csr::get_sparse_csr_impl(host);
    at::sparse_csr::get_sparse_csr_impl(dev)->set_member_tensors(
        src->compressed_indices().to(d), src->plain_indices().to(d), src->values().to(d),
        host.sizes());
    return;
  }
  TORCH_CHECK(dev.layout() == host.layout(), "tpuc: a sparse op on the CPU changed the layout "
              "of an argument it writes, from ", dev.layout(), " to ", host.layout());
  if (dev.sizes() != host.sizes()) dev.resize_(host.sizes());
  dev.copy_(host);
}

void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = info_for(op);
  const std::string why = "sparse layout: tpuc has no sparse kernels";
  note_cpu_fallback(info, why);
  FallbackScope observed(info.name, why);
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t begin = stack->size() - nargs;
  const c10::Device cpu(c10::kCPU);

  std::optional<c10::Device> device;
  // Host copies keep requires_grad (nothing is recorded down here): CPU
  // kernels read it, as _sparse_mm_reduce_impl, which returns the argmax
  // indices its backward needs only when a gradient is wanted.
  auto host = [&](const at::Tensor& t) {
    if (!on_tpu(t)) return t;
    if (!device) device = t.device();
    at::Tensor h = move_to(t, cpu);
    if (t.requires_grad() && !h.requires_grad() && h.is_leaf()) h.set_requires_grad(true);
    return h;
  };
  // Per argument, the device tensors it held (to write mutated ones back).
  std::vector<std::vector<at::Tensor>> originals(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[begin + i];
    if (v.isTensor()) {
      originals[i].push_back(v.toTensor());
      v = host(v.toTensor());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts = v.toTensorVector();
      originals[i] = ts;
      for (auto& t : ts) t = host(t);
      v = c10::IValue(ts);
    } else if (v.isOptionalTensorList()) {
      auto ts = v.toOptionalTensorVector();
      for (auto& t : ts)
        if (t) *t = host(*t);
      v = c10::IValue(ts);
    } else if (v.isDevice() && v.toDevice().type() == kTpu) {
      if (!device) device = v.toDevice();
      v = c10::IValue(cpu);
    }
  }
  if (!device) device = c10::Device(kTpu, current_device());

  // The host arguments, to match the results aliasing them.
  std::vector<c10::IValue> host_args(stack->end() - nargs, stack->end());
  op.callBoxed(stack);

  for (size_t i = 0; i < nargs; ++i) {
    const auto& a = schema.arguments()[i];
    if (!a.alias_info() || !a.alias_info()->isWrite()) continue;
    const c10::IValue& h = host_args[i];
    if (h.isTensor() && !originals[i].empty()) write_back(originals[i][0], h.toTensor());
    if (h.isTensorList()) {
      auto hs = h.toTensorVector();
      for (size_t k = 0; k < hs.size() && k < originals[i].size(); ++k)
        write_back(originals[i][k], hs[k]);
    }
  }
  const size_t nret = schema.returns().size();
  for (size_t r = 0; r < nret; ++r) {
    c10::IValue& v = (*stack)[stack->size() - nret + r];
    const auto* alias = schema.returns()[r].alias_info();
    int j = -1;  // the written argument this return is, if any
    if (alias && alias->isWrite())
      for (size_t a = 0; a < nargs && j < 0; ++a)
        if (schema.arguments()[a].alias_info() && *schema.arguments()[a].alias_info() == *alias)
          j = static_cast<int>(a);
    if (j >= 0 && v.isTensor() && !originals[j].empty() && on_tpu(originals[j][0])) {
      v = originals[j][0];
    } else if (v.isTensor()) {
      v = move_to(v.toTensor(), *device);
    } else if (v.isTensorList()) {
      auto ts = v.toTensorVector();
      for (auto& t : ts) t = move_to(t, *device);
      v = c10::IValue(ts);
    }
  }
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpuc_torch::sparse_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpuc_torch::sparse_fallback>());
}

// Metadata, member accessors (views of the members, as on the CPU) and
// factories: PyTorch's kernels for these work on any device.
namespace tpuc_torch {
namespace {

const std::set<std::string>& generic_coo() {
  static const std::set<std::string> names = {
      "_sparse_coo_tensor_with_dims_and_tensors", "_sparse_coo_tensor_with_dims",
      "empty.memory_format", "sparse_resize_", "sparse_resize_and_clear_", "sparse_dim",
      "dense_dim", "_dimI", "_dimV", "_nnz", "is_coalesced", "_coalesced_", "_indices", "_values",
      "indices", "values"};
  return names;
}

const std::set<std::string>& generic_compressed() {
  static const std::set<std::string> names = {
      "empty.memory_format", "sparse_dim", "dense_dim", "_nnz", "values", "crow_indices",
      "col_indices", "ccol_indices", "row_indices"};
  return names;
}

// Every other op with a kernel for the CPU's sparse key gets the boxed CPU
// path as its kernel for the device's: a backend fallback alone is not
// enough, since the dispatcher prefers composite kernels to it (mm's
// structured composite would make a sparse `out` and call mm.out with it).
void route_to_cpu(torch::Library& m, c10::DispatchKey cpu_key,
                  const std::set<std::string>& generic) {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::string full = name.name.substr(6);  // without "aten::"
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    if (generic.count(full)) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(cpu_key)) continue;
    m.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
  }
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  using namespace at::native;
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(new_with_dims_and_tensor_sparse_symint));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(new_with_dims_sparse));
  m.impl("empty.memory_format", TORCH_FN(empty_sparse_symint));
  m.impl("sparse_resize_", TORCH_FN(sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(sparse_resize_and_clear_));
  m.impl("sparse_dim", TORCH_FN(sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(_coalesced_sparse_));
  m.impl("_indices", TORCH_FN(_indices_sparse));
  m.impl("_values", TORCH_FN(_values_sparse));
  m.impl("indices", TORCH_FN(indices_sparse));
  m.impl("values", TORCH_FN(values_sparse));
  tpuc_torch::route_to_cpu(m, c10::DispatchKey::SparseCPU, tpuc_torch::generic_coo());
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  using namespace at::native;
  m.impl("empty.memory_format", TORCH_FN(empty_sparse_compressed_symint));
  m.impl("sparse_dim", TORCH_FN(sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(dense_dim_sparse_csr));
  m.impl("_nnz", TORCH_FN(_nnz_sparse_csr));
  m.impl("values", TORCH_FN(values_sparse_csr));
  m.impl("crow_indices", TORCH_FN(crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(row_indices_sparse_csr));
  tpuc_torch::route_to_cpu(m, c10::DispatchKey::SparseCsrCPU, tpuc_torch::generic_compressed());
}
