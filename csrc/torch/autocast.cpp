// autocast.cpp — torch.autocast("tpu"): PyTorch's own per-op cast policies
// (the lists it shares between backends: matmuls and convolutions in the
// lower precision, numerically sensitive ops in fp32, mixed-input ops at the
// widest type), registered for AutocastPrivateUse1; every other op passes
// through. The only TU with the heavy ATen headers autocast_mode.h needs.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {
using namespace at;  // the op lists name Tensor, ScalarType, ... unqualified

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPUC_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TPUC_LOWER_PRECISION_FP)
#define TPUC_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TPUC_FP32)
#define TPUC_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPUC_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define TPUC_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TPUC_PROMOTE)
}

}  // namespace
