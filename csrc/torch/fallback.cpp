// fallback.cpp — the boxed kernel behind every aten op without an explicit
// kernel (and behind convolution). Per operator (looked up once, cached by
// schema): the native path (native.cpp) when the core has a lowering, else
// the CPU: PyTorch's cpu_fallback runs the op on the host (in-place and out=
// included); each op is counted, warned about once (saying why), and an
// error under TPUC_FALLBACK=error. Tensors on two devices raise PyTorch's
// error first, whichever path runs.
#include "ops.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/transformers/attention.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>
#include <unordered_map>

namespace tpuc_torch {
namespace {

// OpInfo::cpp_meta of _native_batch_norm_legit.out, which PyTorch gives no
// Meta kernel: the functional op's Meta results (the out arguments then
// follow them, as for any out= op).
void bn_legit_out_meta(torch::jit::Stack& s) {
  auto r = at::_native_batch_norm_legit(s[0].toTensor(), s[1].toOptional<at::Tensor>(),
                                        s[2].toOptional<at::Tensor>(), s[3].toTensor(),
                                        s[4].toTensor(), s[5].toBool(), s[6].toDouble(),
                                        s[7].toDouble());
  s.clear();
  s.emplace_back(std::get<0>(r));
  s.emplace_back(std::get<1>(r));
  s.emplace_back(std::get<2>(r));
}

// OpInfo::cpp_meta of geqrf and geqrf.a, which PyTorch 2.13 gives no Meta
// kernel: a [..., M, N] (the factorisation, in the input's shape) and tau
// [..., min(M, N)] (the out arguments follow them).
void geqrf_meta(torch::jit::Stack& s) {
  const at::Tensor& a = s[0].toTensor();
  TORCH_CHECK(a.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  std::vector<int64_t> tau(a.sizes().begin(), a.sizes().end() - 2);
  tau.push_back(std::min(a.size(-2), a.size(-1)));
  at::Tensor r = at::empty(a.sizes(), a.options());
  at::Tensor t = at::empty(tau, a.options());
  s.clear();
  s.emplace_back(r);
  s.emplace_back(t);
}

// OpInfo::cpp_meta of pow with a Scalar exponent: PyTorch's C++ structured
// meta (what the CPU's kernel follows). The Python Meta kernel (torch._refs'
// pow) promotes bool ** bool to int64 and then refuses to write it to a bool
// output, where the CPU returns bool (pow(b, True) is b, pow(b, False) ones).
void pow_scalar_meta(torch::jit::Stack& s) {
  at::Tensor r = at::meta::pow(s[0].toTensor(), s[1].toScalar());
  s.clear();
  s.emplace_back(std::move(r));
}
void pow_scalar_meta_(torch::jit::Stack& s) {
  at::Tensor self = s[0].toTensor();
  at::meta::pow_(self, s[1].toScalar());
  s.clear();
  s.emplace_back(std::move(self));
}

struct Registry {
  std::mutex mu;
  std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> ops;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

OpInfo& make_info(const c10::FunctionSchema* key, const c10::OperatorHandle& op);

}  // namespace

// Per thread, the operators it called last (OpInfos live as long as the
// process): a hit takes neither the registry's lock nor its hash lookup.
OpInfo& info_for(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  struct Slot {
    const c10::FunctionSchema* key = nullptr;
    OpInfo* info = nullptr;
  };
  thread_local Slot recent[64];
  Slot& slot = recent[(reinterpret_cast<uintptr_t>(key) >> 4) % 64];
  if (slot.key == key) return *slot.info;
  OpInfo& info = make_info(key, op);
  slot.key = key;
  slot.info = &info;
  return info;
}

namespace {

OpInfo& make_info(const c10::FunctionSchema* key, const c10::OperatorHandle& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(key);
  if (it != r.ops.end()) return *it->second;

  auto info = std::make_unique<OpInfo>();
  const auto& schema = op.schema();
  info->name = c10::toString(schema.operator_name());
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    Kind k = kind_of(schema.arguments()[i].real_type());
    info->kinds.push_back(k);
    if (k == Kind::Generator) info->generator_arg = static_cast<int>(i);
  }
  bool returns_ok = true;
  for (const auto& ret : schema.returns()) {
    Kind k = kind_of(ret.real_type());
    if (k != Kind::Tensor && k != Kind::TensorList) returns_ok = false;
    if (ret.alias_info() && !ret.alias_info()->isWrite()) returns_ok = false;  // a view
  }
  // A seeded op without a Generator argument takes the default one, except
  // PyTorch's CPU flash attention: it supports no dropout (nor does its
  // lowering, lower/nn_attn.c), so it draws nothing. Without a generator it
  // reserves no offset (the tpu generator advances as the CPU's does) and,
  // under TPUC_HOST_FIRST=1, may run on the host while its program compiles.
  // (python/tpuc/dynamo.py's _draws_random_bits judges a compiled graph's node so.)
  info->appends_rng = info->generator_arg < 0 && op.hasTag(at::Tag::nondeterministic_seeded) &&
                      info->name != "aten::_scaled_dot_product_flash_attention_for_cpu";
  // Factories whose Scalars give the output's shape: their values key the
  // Meta cache; for every other op only a Scalar's kind does.
  for (const char* n : {"arange", "range", "linspace", "logspace", "full"})
    info->meta_uses_scalar_values |= info->name.find(n) != std::string::npos;
  info->pointwise = op.hasTag(at::Tag::pointwise);
  static const char* const kCpuIndexOps[] = {
      "aten::index.Tensor", "aten::index.Tensor_out", "aten::_unsafe_index.Tensor",
      "aten::index_put", "aten::index_put_", "aten::index_put.out", "aten::_index_put_impl_",
      "aten::_index_put_impl", "aten::_index_put_impl.out", "aten::_unsafe_index_put"};
  for (const char* n : kCpuIndexOps) info->accepts_cpu_tensors |= info->name == n;
  for (const auto& a : schema.arguments())
    info->mutates.push_back(a.alias_info() && a.alias_info()->isWrite());
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& a = schema.arguments()[i];
    if (a.name() == "indices" && info->kinds[i] == Kind::OptTensorList)
      info->mask_indices_arg = static_cast<int>(i);
    if (a.name() == "output_size" && info->name == "aten::repeat_interleave.Tensor")
      info->output_size_arg = static_cast<int>(i);
  }
  info->own_grouped_mm_meta = info->name == "aten::_grouped_mm";
  if (info->name == "aten::multi_margin_loss_backward" ||
      info->name == "aten::multilabel_margin_loss_backward" ||
      info->name == "aten::fractional_max_pool3d_backward")
    info->like_arg_meta = 1;
  info->cpp_meta = cpp_meta_for(info->name);
  if (info->name == "aten::_native_batch_norm_legit.out") info->cpp_meta = &bn_legit_out_meta;
  if (info->name == "aten::geqrf" || info->name == "aten::geqrf.a") info->cpp_meta = &geqrf_meta;
  if (info->name == "aten::pow.Tensor_Scalar" || info->name == "aten::pow.Tensor_Scalar_out")
    info->cpp_meta = &pow_scalar_meta;
  if (info->name == "aten::pow_.Scalar") info->cpp_meta = &pow_scalar_meta_;
  using BnEval = OpInfo::BnEval;
  for (const char* n : {"aten::native_batch_norm", "aten::native_batch_norm.out",
                        "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit.out"})
    if (info->name == n) info->bn_eval = BnEval::WhenNotTraining, info->bn_eval_arg = 5;
  for (const char* n : {"aten::_native_batch_norm_legit_no_training",
                        "aten::_native_batch_norm_legit_no_training.out"})
    if (info->name == n) info->bn_eval = BnEval::Always;
  for (const char* n : {"aten::_batch_norm_no_update", "aten::_batch_norm_no_update.out"})
    if (info->name == n) info->bn_eval = BnEval::WhenRunningStats, info->bn_eval_arg = 3;
  // native_batch_norm updates running_mean and running_var in training, but
  // its schema does not mark them mutable.
  if (info->name == "aten::native_batch_norm" || info->name == "aten::native_batch_norm.out") {
    info->unmarked_writes = {3, 4};
    info->mutates[3] = info->mutates[4] = true;
  }
  // What run_native needs of the schema on every call, made once here.
  {
    const auto& args = schema.arguments();
    std::vector<bool> returned(args.size(), false);
    for (const auto& ret : schema.returns()) {
      int j = -1;
      if (ret.alias_info() && ret.alias_info()->isWrite())
        for (size_t a = 0; a < args.size() && j < 0; ++a)
          if (args[a].alias_info() && *args[a].alias_info() == *ret.alias_info())
            j = static_cast<int>(a);
      info->ret_alias_arg.push_back(j);
      if (j >= 0) returned[j] = true;
    }
    for (size_t j = 0; j < args.size(); ++j)
      if (!returned[j] && info->writes(j)) info->unreturned_writes.push_back(static_cast<int>(j));
  }
  info->cpu_only = !returns_ok;
  if (!info->cpu_only) {
    if (tpuc_runtime* rt = runtime_or_null()) info->native = tpuc_op_find(rt, info->name.c_str());
  }
  auto& ref = *info;
  r.ops.emplace(key, std::move(info));
  return ref;
}

// ---- the CPU path ----------------------------------------------------------------------

enum class FallbackPolicy { Warn, Silent, Error };

FallbackPolicy fallback_policy() {
  const char* v = std::getenv("TPUC_FALLBACK");
  if (!v || !*v || std::strcmp(v, "warn") == 0) return FallbackPolicy::Warn;
  if (std::strcmp(v, "error") == 0) return FallbackPolicy::Error;
  if (std::strcmp(v, "silent") == 0 || std::strcmp(v, "allow") == 0) return FallbackPolicy::Silent;
  return FallbackPolicy::Warn;
}

c10::DeviceIndex first_tpu_device(const torch::jit::Stack& stack, size_t begin) {
  for (size_t i = begin; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone())
      return v.toTensor().device().index();
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector())
        if (t.defined() && t.is_privateuseone()) return t.device().index();
    }
    if (v.isDevice() && v.toDevice().is_privateuseone() && v.toDevice().has_index())
      return v.toDevice().index();
  }
  return current_device();
}

int64_t max_numel(const torch::jit::Stack& stack, size_t begin, size_t end) {
  int64_t n = 0;
  for (size_t i = begin; i < end; ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().defined()) n = std::max(n, v.toTensor().numel());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector())
        if (t.defined()) n = std::max(n, t.numel());
  }
  return n;
}

}  // namespace

void note_cpu_fallback(OpInfo& info, const std::string& why) {
  FallbackPolicy policy = fallback_policy();
  TORCH_CHECK(policy != FallbackPolicy::Error, "tpuc: ", info.name,
              " cannot run on the device (", why, ") and TPUC_FALLBACK=error forbids running it "
              "on the CPU. Unset TPUC_FALLBACK to let it run on the CPU (counted in "
              "torch.tpu.stats()['fallbacks']).");
  if (info.fallbacks.fetch_add(1) == 0 && policy == FallbackPolicy::Warn) {
    TORCH_WARN("tpuc: ", info.name, " runs on the CPU (", why,
               "): correct, but slow, data moves to the host and back. Counted in "
               "torch.tpu.stats()['fallbacks']; TPUC_FALLBACK=error makes this an error, "
               "TPUC_FALLBACK=silent hides this warning.");
  }
}

namespace {

// host_first: the op has a lowering whose program is still compiling
// (TPUC_HOST_FIRST=1): it runs here as on the CPU, but it is no fallback
// (not counted, no warning, TPUC_FALLBACK=error allows it); the core counts
// it in torch.tpu.stats()['host_first_ops'].
void run_on_cpu(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack,
                const std::string& why, bool host_first = false) {
  if (!host_first) note_cpu_fallback(info, why);
  const size_t nargs = op.schema().arguments().size();
  const size_t begin = stack->size() - nargs;
  std::optional<FallbackScope> observed;  // profiler range, doctor event: fallbacks only
  if (!host_first) observed.emplace(info.name, why);

  // A random op draws from a CPU generator standing in for the tpu
  // generator's (seed, offset), so torch.tpu.manual_seed governs it too.
  at::Generator tpu_gen;
  if (info.generator_arg >= 0) {
    c10::IValue& g = (*stack)[begin + info.generator_arg];
    tpu_gen = tpu_generator(g, first_tpu_device(*stack, begin));
    if (tpu_gen.defined()) {
      uint64_t seed, offset;
      {
        std::lock_guard<std::mutex> lock(tpu_gen.mutex());
        seed = tpu_gen.current_seed();
        offset = tpu_gen.get_offset();
      }
      g = c10::IValue(at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, offset)));
    }
  }
  // Arguments written although the schema does not say so: hand the CPU
  // kernel host copies (cpu_fallback keeps CPU tensors as they are) and copy
  // them back after.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  for (int j : info.unmarked_writes) {
    c10::IValue& v = (*stack)[begin + j];
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_privateuseone()) continue;
    at::Tensor dev = v.toTensor();
    at::Tensor host = dev.cpu();
    written.emplace_back(dev, host);
    v = host;
  }
  try {
    at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
  } catch (const c10::NotImplementedError& e) {
    // The CPU lacks a kernel the device's should have (a dtype CUDA runs and
    // the CPU does not, as histc of ints before count.c): that is a missing
    // lowering in tpuc, not the user's error; say so, keeping the type.
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpuc: ", info.name, " cannot run on the device (", why,
                                ") and its CPU fallback does not support these arguments: ",
                                e.what_without_backtrace(), ". This is a gap in tpuc (the op "
                                "may run on CUDA); please report it. Until then, convert the "
                                "inputs to a dtype the CPU kernel supports.");
  }
  for (auto& [dev, host] : written) dev.copy_(host);
  if (tpu_gen.defined()) {
    const size_t nret = op.schema().returns().size();
    int64_t draws = max_numel(*stack, stack->size() - nret, stack->size());
    reserve_random(tpu_gen, static_cast<uint64_t>(draws));
  }
}

void check_same_device(const OpInfo& info, const torch::jit::Stack& stack, size_t nargs) {
  if (info.accepts_cpu_tensors) return;
  bool cpu = false;
  int tpu = -1;
  auto see = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.is_privateuseone()) tpu = t.device().index();
    else if (t.dim() > 0) cpu = true;
  };
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor()) see(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorVector()) see(t);
    else if (v.isOptionalTensorList())
      for (const auto& t : v.toOptionalTensorVector()) if (t) see(*t);
  }
  TORCH_CHECK(!cpu || tpu < 0, "Expected all tensors to be on the same device, but found at least "
              "two devices, tpu:", tpu, " and cpu! (in ", info.name, ")");
}

}  // namespace

thread_local bool t_compiling = false;

void note_compiling() { t_compiling = true; }

void run_host_first(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_cpu(op, info_for(op), stack, "its program is compiling", true);
}

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo& info = info_for(op);
  if (info.mask_indices_arg >= 0 || info.output_size_arg >= 0)
    prepare_dynamic_args(info, op, stack);  // dynamic.cpp: x[mask] through nonzero
  check_same_device(info, *stack, op.schema().arguments().size());
  std::string why;
  bool compiling = std::exchange(t_compiling, false);  // note_compiling: arith.cpp's fast path
  if (compiling) {
    run_on_cpu(op, info, stack, "its program is compiling", true);
    return;
  }
  if (!info.native) {
    why = info.cpu_only ? "it returns a non-tensor value or a view" : "the core has no lowering";
  } else if (!native_enabled()) {
    why = "TPUC_NATIVE=0";
  } else if (run_native(op, info, stack, why, &compiling)) {
    return;
  }
  run_on_cpu(op, info, stack, why, compiling);
}

at::Generator tpu_generator(const c10::IValue& v, c10::DeviceIndex device) {
  if (v.isNone()) return default_generator(device);
  at::Generator g = v.toGenerator();
  if (g.device().type() == kTpu) return g;
  return at::Generator();
}

std::map<std::string, int64_t> fallback_counts() {
  std::map<std::string, int64_t> out;
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [key, info] : r.ops) {
    int64_t n = info->fallbacks.load();
    if (n > 0) out[info->name] = n;
  }
  return out;
}

void note_kernel_fallback(const std::string& name, const std::string& overload,
                          const std::string& why) {
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(op.has_value(), "tpuc: no operator ", name, ".", overload);
  note_cpu_fallback(info_for(*op), why);
}

void reset_fallback_counts() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [key, info] : r.ops) info->fallbacks.store(0);
}

// scaled_dot_product_attention on tpu: the fused CPU "flash" op
// (_scaled_dot_product_flash_attention_for_cpu and its backward), which the
// core lowers to one attention computation, whenever it applies: 4-D inputs
// with equal head counts, a floating dtype, no dropout (the op has none) and
// no gradient wanted for the mask. Otherwise the math backend, which
// decomposes into ops the device runs (matmul, softmax, dropout, ...).
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool,
                         std::optional<double>, bool) {
  constexpr int64_t kMath = 0, kFlash = 1;  // at::SDPBackend
  bool ok = dropout_p == 0.0 && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
            at::isFloatingType(q.scalar_type()) && k.scalar_type() == q.scalar_type() &&
            v.scalar_type() == q.scalar_type() && q.size(0) == k.size(0) &&
            k.size(0) == v.size(0) && q.size(1) == k.size(1) && k.size(1) == v.size(1) &&
            q.size(3) == k.size(3) && k.size(2) == v.size(2) &&
            !(mask.has_value() && mask->defined() && mask->requires_grad());
  return ok ? kFlash : kMath;
}

// Batch norm in eval mode: PyTorch's CPU (and CUDA) kernels return save_mean
// and save_invstd as empty tensors [0], and leave out= ones as they are; the
// Meta kernels give them [C]. (The lowering passes out= ones through.)
void eval_batch_norm_stats(const c10::FunctionSchema& schema, const OpInfo& info,
                           const torch::jit::Stack& stack, size_t begin, torch::jit::Stack& meta) {
  using BnEval = OpInfo::BnEval;
  if (info.bn_eval == BnEval::None) return;
  bool eval = info.bn_eval == BnEval::Always;
  if (info.bn_eval == BnEval::WhenNotTraining) eval = !stack[begin + info.bn_eval_arg].toBool();
  if (info.bn_eval == BnEval::WhenRunningStats) {  // running stats given
    const c10::IValue& v = stack[begin + info.bn_eval_arg];
    eval = v.isTensor() && v.toTensor().defined();
  }
  if (!eval || meta.size() < 3 || schema.returns().size() < 3) return;
  for (size_t i = 1; i < 3; ++i) {
    if (!meta[i].isTensor()) continue;
    int j = info.ret_alias_arg[i];  // made once from the schema (fallback.cpp)
    if (j >= 0 && stack[begin + j].isTensor()) {
      const at::Tensor& t = stack[begin + j].toTensor();
      meta[i] = at::Tensor(at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type()));
    } else {
      meta[i] = at::Tensor(at::detail::empty_meta({0}, meta[i].toTensor().options()));
    }
  }
}

}  // namespace tpuc_torch

// at::scaled_dot_product_attention asks the device's dispatch stub (not the
// _fused_sdp_choice operator, which tracing and meta code call) for a backend.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpuc_torch::fused_sdp_choice)
}  // namespace at::native

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpuc_torch::tpu_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(tpuc_torch::fused_sdp_choice));
  // CompositeExplicitAutograd ops that would otherwise decompose into
  // convolution_overrideable (whose default kernel throws): the boxed kernel
  // runs them by their own name (the core lowers both; the CPU has kernels).
  // _grouped_mm (MoE experts): its composite splits into one mm per group
  // with a data-dependent row count (a compile per routing); the core lowers
  // it whole (lower/grouped_mm.c).
  // CompositeExplicitAutograd ops whose composite calls a CPU-only helper
  // without a Meta kernel (_cummax_helper, _logcumsumexp): taken whole, the
  // core lowers them. mode.values: its composite rejects devices other than
  // CPU/CUDA/XPU; the boxed kernel runs it (on the CPU).
  // native_layer_norm: its composite (math_native_layer_norm) normalizes
  // through batch norm and then applies weight and bias with addcmul in the
  // input's dtype, rounding the normalized value to float16/bfloat16 first
  // (4 ulp from float64 where the CPU's kernel, all in float32, gives 2.7);
  // the core lowers it whole, in float32 (lower/nn_norm.c).
  for (const char* name : {"convolution", "convolution_backward", "cummax", "cummax.out", "cummin",
                           "cummin.out", "logcumsumexp", "logcumsumexp.out", "mode.values",
                           "_grouped_mm", "native_layer_norm"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&tpuc_torch::tpu_fallback>());
}