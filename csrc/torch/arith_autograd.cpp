// arith_autograd.cpp — tpuc's AutogradPrivateUse1 kernels for add, sub, mul,
// div (.Tensor, functional and in-place): a call autograd has nothing to do
// for goes straight to tpuc's kernel (arith.cpp); every other call goes,
// untouched, to PyTorch's own autograd kernel (VariableType).
//
// Why: PyTorch's autograd kernel of these ops asks `isFwGradDefined` of each
// input through a std::optional<Tensor>, a copy of a tensor Python owns,
// which increfs and decrefs its PyObject under the GIL (~1.2k instructions of
// a cached strict `a + b`; docs/execution.md).
//
// When autograd has nothing to do, exactly: neither input has autograd
// metadata (TensorImpl::autograd_meta() null: no requires_grad, no forward
// gradient, not a view autograd tracks, whatever the grad mode), and the
// next kernel below autograd (and ADInplaceOrView) is tpuc's PrivateUse1
// kernel (no Python, Functionalize, ZeroTensor, Conjugate, Negative or sparse
// key in the call's keys). PyTorch's kernel then does this and nothing else:
// it redispatches below autograd and ADInplaceOrView (which the guard here
// reproduces for anything tpuc's kernel dispatches), and for the in-place
// forms ADInplaceOrView bumps self's version counter after the kernel (its
// check raises PyTorch's error for an inference tensor outside InferenceMode).
// InferenceMode itself excludes the autograd keys: these kernels are not
// reached then.
//
// Otherwise PyTorch's autograd kernel runs: it is registered for the Autograd
// alias key, so the AutogradOther entry of the operator holds it too, and the
// call is redispatched with the keys below autograd plus AutogradOther. That
// kernel masks its keys with after_autograd_keyset, as it does when reached
// through AutogradPrivateUse1, so it runs as before.
#include "ops.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/sub_ops.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

namespace tpuc_torch {
namespace {

// True when PyTorch's autograd kernel would only redispatch to tpuc's kernel.
inline bool autograd_has_nothing_to_do(c10::DispatchKeySet ks, const at::Tensor& a,
                                       const at::Tensor& b) {
  return a.defined() && b.defined() && a.unsafeGetTensorImpl()->autograd_meta() == nullptr &&
         b.unsafeGetTensorImpl()->autograd_meta() == nullptr &&
         (ks & c10::after_ADInplaceOrView_keyset).highestPriorityTypeId() ==
             c10::DispatchKey::PrivateUse1;
}

// The keys that select PyTorch's own autograd kernel (the AutogradOther
// entry): the call's keys below autograd, as that kernel masks them, and
// AutogradOther. Keys above autograd go: a kernel reached through
// callBoxedForDispatchKey (the Python dispatcher of torch.compile's fake
// tensors) gets the call's whole key set, PythonDispatcher included, and
// redispatching with those would come back here without end.
inline c10::DispatchKeySet variable_type_keys(c10::DispatchKeySet ks) {
  return (ks & c10::after_autograd_keyset).add(c10::DispatchKey::AutogradOther);
}

// In-place: what ADInplaceOrView's kernel does after the kernel below it.
inline void bump_version(c10::DispatchKeySet ks, const at::Tensor& self) {
  if (ks.has(c10::DispatchKey::ADInplaceOrView)) torch::autograd::impl::bump_version(self);
}

using AlphaFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Scalar&);
using AlphaFn_ = at::Tensor& (*)(at::Tensor&, const at::Tensor&, const at::Scalar&);
using BinaryFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
using BinaryFn_ = at::Tensor& (*)(at::Tensor&, const at::Tensor&);

template <AlphaFn Tpu, class Op>
at::Tensor alpha(c10::DispatchKeySet ks, const at::Tensor& self, const at::Tensor& other,
                 const at::Scalar& alpha) {
  if (unboxed_enabled() && autograd_has_nothing_to_do(ks, self, other)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return Tpu(self, other, alpha);
  }
  return Op::redispatch(variable_type_keys(ks), self, other, alpha);
}

template <AlphaFn_ Tpu, class Op>
at::Tensor& alpha_(c10::DispatchKeySet ks, at::Tensor& self, const at::Tensor& other,
                   const at::Scalar& alpha) {
  if (unboxed_enabled() && autograd_has_nothing_to_do(ks, self, other)) {
    {
      at::AutoDispatchBelowADInplaceOrView below;
      Tpu(self, other, alpha);
    }
    bump_version(ks, self);
    return self;
  }
  return Op::redispatch(variable_type_keys(ks), self, other, alpha);
}

template <BinaryFn Tpu, class Op>
at::Tensor binary(c10::DispatchKeySet ks, const at::Tensor& self, const at::Tensor& other) {
  if (unboxed_enabled() && autograd_has_nothing_to_do(ks, self, other)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return Tpu(self, other);
  }
  return Op::redispatch(variable_type_keys(ks), self, other);
}

template <BinaryFn_ Tpu, class Op>
at::Tensor& binary_(c10::DispatchKeySet ks, at::Tensor& self, const at::Tensor& other) {
  if (unboxed_enabled() && autograd_has_nothing_to_do(ks, self, other)) {
    {
      at::AutoDispatchBelowADInplaceOrView below;
      Tpu(self, other);
    }
    bump_version(ks, self);
    return self;
  }
  return Op::redispatch(variable_type_keys(ks), self, other);
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  using namespace tpuc_torch;
  namespace ops = at::_ops;
  m.impl("add.Tensor", TORCH_FN((alpha<arith::add, ops::add_Tensor>)));
  m.impl("add_.Tensor", TORCH_FN((alpha_<arith::add_, ops::add__Tensor>)));
  m.impl("sub.Tensor", TORCH_FN((alpha<arith::sub, ops::sub_Tensor>)));
  m.impl("sub_.Tensor", TORCH_FN((alpha_<arith::sub_, ops::sub__Tensor>)));
  m.impl("mul.Tensor", TORCH_FN((binary<arith::mul, ops::mul_Tensor>)));
  m.impl("mul_.Tensor", TORCH_FN((binary_<arith::mul_, ops::mul__Tensor>)));
  m.impl("div.Tensor", TORCH_FN((binary<arith::div, ops::div_Tensor>)));
  m.impl("div_.Tensor", TORCH_FN((binary_<arith::div_, ops::div__Tensor>)));
}
