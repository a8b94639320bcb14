// operands.cpp — PyTorch's rules for an op's operands that the Meta kernels
// do not state and the core cannot see: the dtype a host scalar operand goes
// to the device in (a wrapped Python number ranks below every tensor in type
// promotion), and the overlap errors a pointwise op's TensorIterator raises on
// the CPU and CUDA. Used by native.cpp's boxed path and arith.cpp's unboxed
// kernels (ops.h says why each rule exists).
#include "ops.h"

#include <ATen/MemoryOverlap.h>

namespace tpuc_torch {

void check_written_overlap(const at::Tensor& written, const at::Tensor* inputs, size_t n) {
  if (!written.defined() || !written.is_privateuseone()) return;
  at::assert_no_internal_overlap(written);
  for (size_t i = 0; i < n; ++i)
    if (inputs[i].defined() && inputs[i].is_privateuseone())
      at::assert_no_partial_overlap(written, inputs[i]);
}

void check_pointwise_writes(const OpInfo& info, const torch::jit::Stack& stack, size_t begin,
                            size_t nargs) {
  // by reference only: a copy of a tensor Python holds takes the GIL (native.cpp's add_tensor)
  for (size_t j = 0; j < nargs; ++j) {
    const c10::IValue& w = stack[begin + j];
    if (!info.writes(j) || !w.isTensor()) continue;
    const at::Tensor& written = w.toTensor();
    if (!written.defined() || !written.is_privateuseone()) continue;
    at::assert_no_internal_overlap(written);
    for (size_t i = 0; i < nargs; ++i) {
      const c10::IValue& v = stack[begin + i];
      if (info.writes(i) || !v.isTensor()) continue;
      const at::Tensor& input = v.toTensor();
      if (input.defined() && input.is_privateuseone()) at::assert_no_partial_overlap(written, input);
    }
  }
}

c10::ScalarType tpu_tensors_dtype(const OpInfo& info, const torch::jit::Stack& stack, size_t begin,
                                  size_t nargs) {
  c10::ScalarType common = c10::ScalarType::Undefined;
  for (size_t i = 0; i < nargs; ++i) {
    const c10::IValue& v = stack[begin + i];
    if (info.kinds[i] != Kind::Tensor || !v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !t.is_privateuseone()) continue;
    const c10::ScalarType st = t.scalar_type();
    // promoteTypes refuses uint16/32/64 (PyTorch promotes them with nothing): none then
    if (c10::isBarebonesUnsignedType(st)) return c10::ScalarType::Undefined;
    common = common == c10::ScalarType::Undefined ? st : c10::promoteTypes(common, st);
  }
  return common;
}

c10::ScalarType host_operand_dtype(const at::Tensor& host, c10::ScalarType common, bool arithmetic) {
  const c10::ScalarType st = host.scalar_type();
  if (!host.unsafeGetTensorImpl()->is_wrapped_number()) return st;
  const bool half = common == c10::ScalarType::Half || common == c10::ScalarType::BFloat16;
  bool single = common == c10::ScalarType::Float || (arithmetic && half);
  if (c10::isIntegralType(common, /*includeBool=*/true)) {
    // int tensor * 0.1 computes in the default dtype: float32 unless a program set float64
    const c10::ScalarType d = c10::typeMetaToScalarType(c10::get_default_dtype());
    if (d == c10::ScalarType::Double) return st;
    single = d == c10::ScalarType::Float || (arithmetic && (d == c10::ScalarType::Half ||
                                                            d == c10::ScalarType::BFloat16));
  }
  if (st == c10::ScalarType::Double && (single || common == c10::ScalarType::ComplexFloat))
    return c10::ScalarType::Float;
  if (st == c10::ScalarType::ComplexDouble && (single || common == c10::ScalarType::ComplexFloat))
    return c10::ScalarType::ComplexFloat;
  return st;
}

at::Tensor upload_host_operand(const at::Tensor& host, c10::ScalarType common, bool arithmetic,
                               c10::DeviceIndex device) {
  const c10::ScalarType st = host_operand_dtype(host, common, arithmetic);
  at::Tensor dev = empty_tpu(host.sizes(), {}, st, device);
  dev.copy_(host);  // converted on the host (copy.cpp): round to nearest even, as the CPU's cast
  return dev;
}

}  // namespace tpuc_torch
