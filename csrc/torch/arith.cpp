// arith.cpp — unboxed kernels for the arithmetic ops of nearly every step:
// add, sub, mul, div (.Tensor, functional and in-place). They take the
// tensors by reference: the boxed kernel they stand in front of gets its
// arguments as a stack of IValues, and copying a tensor Python owns onto it
// (and dropping it after) takes the GIL, about 1.7k instructions of a cached
// strict op (docs/execution.md). The fast path here is the boxed native
// path's cache hit, step for step: the Meta-result cache entry of the same
// key (the C++ structured meta's result, OpInfo::cpp_meta), a fresh output
// or the in-place argument following the Meta result, tpuc_args in schema
// order, tpuc_op_run. Anything else (a miss, a CPU tensor of several
// elements, a dtype or conj/neg bit the core cannot take, a lowering that
// declines, TPUC_NATIVE=0) hands the call, untouched, to the boxed kernel
// (fallback.cpp), which does what it did before: the Meta kernel and its
// errors, the CPU fallback. Autograd stays above: arith_autograd.cpp's kernels
// call these directly when autograd has nothing to do, else PyTorch's own.
// The C++ structured metas of these ops (OpInfo::cpp_meta, used by both
// paths) are here too.
#include "ops.h"

#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <torch/library.h>

namespace tpuc_torch {
namespace {

// OpInfo::cpp_meta: PyTorch's C++ structured meta of the arithmetic ops the
// boxed kernel takes whole, on the Meta stand-ins (CPU scalars stay: they
// take part in type promotion as in the composite kernel).
template <at::Tensor (*F)(const at::Tensor&, const at::Tensor&, const at::Scalar&)>
void meta_alpha(torch::jit::Stack& s) {
  at::Tensor r = F(s[0].toTensor(), s[1].toTensor(), s[2].toScalar());
  s.clear();
  s.emplace_back(std::move(r));
}
template <at::Tensor& (*F)(at::Tensor&, const at::Tensor&, const at::Scalar&)>
void meta_alpha_(torch::jit::Stack& s) {
  at::Tensor self = s[0].toTensor();
  F(self, s[1].toTensor(), s[2].toScalar());
  s.clear();
  s.emplace_back(std::move(self));
}
template <at::Tensor (*F)(const at::Tensor&, const at::Tensor&)>
void meta_binary(torch::jit::Stack& s) {
  at::Tensor r = F(s[0].toTensor(), s[1].toTensor());
  s.clear();
  s.emplace_back(std::move(r));
}
template <at::Tensor& (*F)(at::Tensor&, const at::Tensor&)>
void meta_binary_(torch::jit::Stack& s) {
  at::Tensor self = s[0].toTensor();
  F(self, s[1].toTensor());
  s.clear();
  s.emplace_back(std::move(self));
}

}  // namespace

void (*cpp_meta_for(const std::string& name))(torch::jit::Stack&) {
  static const std::pair<const char*, void (*)(torch::jit::Stack&)> kMetas[] = {
      {"aten::add.Tensor", &meta_alpha<&at::meta::add>},
      {"aten::add_.Tensor", &meta_alpha_<&at::meta::add_>},
      {"aten::sub.Tensor", &meta_alpha<&at::meta::sub>},
      {"aten::sub_.Tensor", &meta_alpha_<&at::meta::sub_>},
      {"aten::mul.Tensor", &meta_binary<&at::meta::mul>},
      {"aten::mul_.Tensor", &meta_binary_<&at::meta::mul_>},
      {"aten::div.Tensor", &meta_binary<&at::meta::div>},
      {"aten::div_.Tensor", &meta_binary_<&at::meta::div_>},
  };
  for (const auto& [n, f] : kMetas)
    if (name == n) return f;
  return nullptr;
}

namespace {

struct ArithOp {
  c10::OperatorHandle op;
  OpInfo* info;
};

ArithOp arith_op(const char* name, const char* overload) {
  c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  return ArithOp{op, &info_for(op)};
}

// The core's scalar for an alpha, as the boxed path's scalar_arg makes it
// from the IValue of the Scalar; false for a symbolic one.
bool alpha_arg(const at::Scalar& s, tpuc_arg* a) {
  *a = tpuc_arg{};
  a->kind = TPUC_ARG_SCALAR;
  if (s.isSymbolic()) return false;
  if (s.isBoolean()) {
    a->scalar.kind = TPUC_SCALAR_BOOL;
    a->scalar.i = s.toBool();
    a->scalar.re = static_cast<double>(a->scalar.i);
  } else if (s.isIntegral(/*includeBool=*/false)) {
    a->scalar.kind = TPUC_SCALAR_INT;
    a->scalar.i = s.toLong();
    a->scalar.re = static_cast<double>(a->scalar.i);
  } else if (s.isFloatingPoint()) {
    a->scalar.kind = TPUC_SCALAR_FLOAT;
    a->scalar.re = s.toDouble();
  } else if (s.isComplex()) {
    auto c = s.toComplexDouble();
    a->scalar.kind = TPUC_SCALAR_COMPLEX;
    a->scalar.re = c.real();
    a->scalar.im = c.imag();
  } else {
    return false;
  }
  return true;
}

// The boxed native path's cache hit for `self op other[, alpha]`, by
// reference; false (nothing done but perhaps an unused output allocated)
// when the call must go to the boxed kernel. `inplace`: self is written and
// returned; else *result is the fresh output.
bool fast_binary(const ArithOp& a, const at::Tensor& self, const at::Tensor& other,
                 const at::Scalar* alpha, bool inplace, at::Tensor* result) {
  OpInfo& info = *a.info;
  if (!info.native || !native_enabled() || !unboxed_enabled()) return false;
  if (!self.defined() || !other.defined() || !self.is_privateuseone()) return false;
  const bool other_host = !other.is_privateuseone();
  // a host tensor of several elements: the boxed kernel raises the device error
  if (other_host && other.dim() != 0) return false;
  tpuc_arg args[3]{};
  const int nargs = alpha ? 3 : 2;
  if (alpha && !alpha_arg(*alpha, &args[2])) return false;
  int device = -1;
  std::shared_ptr<const OpInfo::MetaResult> hit = cached_binary_meta(info, self, other, alpha, device);
  if (!hit || device < 0 || hit->results.size() != 1 || !hit->results[0].isTensor()) return false;
  const at::Tensor& m = hit->results[0].toTensor();
  tpuc_tensor ts[2]{};
  tpuc_dtype host_dtype;
  if (!describe(self, &ts[0])) return false;
  if (other_host ? (other.is_conj() || other.is_neg() || !to_tpuc_dtype(other.scalar_type(), &host_dtype))
                 : !describe(other, &ts[1]))
    return false;
  const auto dev = static_cast<c10::DeviceIndex>(device);
  // Outputs first, then the arguments (a host scalar uploaded), as the boxed path orders them.
  tpuc_tensor out{};
  at::Tensor fresh;
  if (inplace) {
    if (!other_host) check_written_overlap(self, &other, 1);
    follow_meta(self, m);
    if (!describe(self, &out)) return false;
    ts[0] = out;  // follow_meta may have restrided it
  } else {
    if (!m.defined()) return false;
    fresh = allocate_like_meta(m, dev);
    if (!describe(fresh, &out)) return false;
  }
  at::Tensor uploaded;
  if (other_host) {  // the 2 of x * 2 (a wrapped number), a 0-dim CPU tensor
    uploaded = upload_host_operand(other, self.scalar_type(), true, dev);
    if (!describe(uploaded, &ts[1])) return false;
  }
  for (int i = 0; i < 2; ++i) {
    args[i].kind = TPUC_ARG_TENSOR;
    args[i].tensors.first = i;
    args[i].tensors.count = 1;
  }
  tpuc_op_call c{};
  c.op = info.native;
  c.device = device;
  c.args = args;
  c.nargs = nargs;
  c.tensors = ts;
  c.ntensors = 2;
  c.outputs = &out;
  c.noutputs = 1;
  tpuc_status* st = tpuc_op_run(runtime(), &c, launch_blocking());
  if (st && tpuc_status_code(st) == TPUC_ERR_NOT_COMPILED) {
    tpuc_status_destroy(st);
    note_compiling();  // the boxed kernel runs it on the host (host-first), without asking again
    return false;
  }
  if (st && tpuc_status_code(st) == TPUC_ERR_UNIMPLEMENTED) {
    tpuc_status_destroy(st);
    return false;  // the boxed kernel asks again and runs it on the CPU, saying why
  }
  check(st, nullptr);  // the core's message names the op
  if (!inplace) *result = std::move(fresh);
  return true;
}

at::Tensor boxed(const ArithOp& a, torch::jit::Stack stack) {
  tpu_fallback(a.op, &stack);
  return std::move(stack.back()).toTensor();
}

template <const char* Name>
struct Op {
  static const ArithOp& get() {
    static const ArithOp a = arith_op(Name, "Tensor");
    return a;
  }
  static const ArithOp& get_() {
    static const ArithOp a = arith_op((std::string(Name) + "_").c_str(), "Tensor");
    return a;
  }
  static at::Tensor alpha(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    at::Tensor r;
    if (fast_binary(get(), self, other, &alpha, false, &r)) return r;
    return boxed(get(), {self, other, alpha});
  }
  static at::Tensor& alpha_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    if (!fast_binary(get_(), self, other, &alpha, true, nullptr)) boxed(get_(), {self, other, alpha});
    return self;
  }
  static at::Tensor binary(const at::Tensor& self, const at::Tensor& other) {
    at::Tensor r;
    if (fast_binary(get(), self, other, nullptr, false, &r)) return r;
    return boxed(get(), {self, other});
  }
  static at::Tensor& binary_(at::Tensor& self, const at::Tensor& other) {
    if (!fast_binary(get_(), self, other, nullptr, true, nullptr)) boxed(get_(), {self, other});
    return self;
  }
};

constexpr char kAdd[] = "aten::add", kSub[] = "aten::sub", kMul[] = "aten::mul",
               kDiv[] = "aten::div";

}  // namespace

// The kernels by name, for arith_autograd.cpp to call without a redispatch.
namespace arith {
at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return Op<kAdd>::alpha(a, b, alpha);
}
at::Tensor& add_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return Op<kAdd>::alpha_(a, b, alpha);
}
at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return Op<kSub>::alpha(a, b, alpha);
}
at::Tensor& sub_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return Op<kSub>::alpha_(a, b, alpha);
}
at::Tensor mul(const at::Tensor& a, const at::Tensor& b) { return Op<kMul>::binary(a, b); }
at::Tensor& mul_(at::Tensor& a, const at::Tensor& b) { return Op<kMul>::binary_(a, b); }
at::Tensor div(const at::Tensor& a, const at::Tensor& b) { return Op<kDiv>::binary(a, b); }
at::Tensor& div_(at::Tensor& a, const at::Tensor& b) { return Op<kDiv>::binary_(a, b); }
}  // namespace arith

}  // namespace tpuc_torch

// Without a kernel of ours PyTorch's structured CompositeExplicitAutogradNonFunctional
// kernel would run first (TensorIterator's meta, an empty output through the dispatcher)
// and then call the out= form; and a boxed kernel costs the stack copies above.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace tpuc_torch;
  m.impl("add.Tensor", TORCH_FN(arith::add));
  m.impl("add_.Tensor", TORCH_FN(arith::add_));
  m.impl("sub.Tensor", TORCH_FN(arith::sub));
  m.impl("sub_.Tensor", TORCH_FN(arith::sub_));
  m.impl("mul.Tensor", TORCH_FN(arith::mul));
  m.impl("mul_.Tensor", TORCH_FN(arith::mul_));
  m.impl("div.Tensor", TORCH_FN(arith::div));
  m.impl("div_.Tensor", TORCH_FN(arith::div_));
}
