// shallow_copy.cpp — aten::_has_compatible_shallow_copy_type for "tpu".
//
// nn.Module._apply (behind .to(), .tpu(), .cpu(), .to(dtype), to_empty) and
// `param.data = t` (Variable::set_data -> TensorImpl::shallow_copy_from) ask
// this operator whether a tensor's TensorImpl may take over another's
// metadata in place. c10's default (TensorImpl::has_compatible_shallow_copy_type)
// lists the dense backends CPU, CUDA, MPS, HIP, XPU, HPU and MTIA only, so
// for a PrivateUse1 tensor the answer was false: _apply then made a new
// Parameter per module, and parameters shared between modules (tied
// embeddings) silently stopped being shared. The c10 header says a
// PrivateUse1 backend may register the operator itself, which is what this
// does: true when both tensors are dense, strided, non-quantized tensors on
// the CPU or on "tpu" (plain TensorImpls whose metadata copy is exact), and
// otherwise c10's own answer.
#include "tpuc_torch.h"

#include <torch/library.h>

namespace tpuc_torch {
namespace {

bool plain_dense(const at::Tensor& t) {
  if (!t.defined() || t.layout() != at::kStrided || t.is_quantized() || t.is_nested()) return false;
  if (!(t.is_cpu() || t.is_privateuseone())) return false;
  // Subclassed impls (functional wrappers, batched tensors) carry their own
  // dispatch keys; only the plain dense impl is known to shallow-copy exactly.
  return t.key_set().has(c10::DispatchKey::Dense) &&
         !t.key_set().has(c10::DispatchKey::Functionalize) &&
         !t.key_set().has(c10::DispatchKey::FuncTorchBatched);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  return plain_dense(self) && plain_dense(from);
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(tpuc_torch::has_compatible_shallow_copy_type));
}
