// ops.h — what the two paths of the boxed kernel share: fallback.cpp has the
// entry point, the per-operator registry and the CPU path; native.cpp the
// native path (Meta kernel, tpuc_args, tpuc_op_run).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tpuc_torch.h"

namespace tpuc_torch {

// How an argument of the schema is passed to the core.
enum class Kind {
  Unsupported, Tensor, TensorList, OptTensorList, Int, Float, Scalar, Bool,
  IntList, BoolList, String, Generator, Device
};

Kind kind_of(const c10::TypePtr& declared);

// What the boxed kernel knows of one operator (made once, cached by schema).
struct OpInfo {
  std::string name;               // "aten::add.Tensor"
  const tpuc_op* native = nullptr;
  bool cpu_only = false;          // never try the native path
  bool accepts_cpu_tensors = false;  // indexing takes CPU indices, as on CUDA
  std::vector<bool> mutates;         // per argument: the op writes it
  std::vector<int> unmarked_writes;  // written although the schema does not say (a!)
  bool writes(size_t j) const { return j < mutates.size() && mutates[j]; }
  std::vector<Kind> kinds;        // per schema argument
  int generator_arg = -1;
  bool appends_rng = false;       // draws from the default generator without a Generator arg
  std::atomic<int64_t> fallbacks{0};
  // Meta results by call signature (native.cpp): a repeated call skips the
  // Meta kernel (often Python) entirely.
  struct MetaResult {
    bool ok = false;            // false: no Meta kernel for these arguments
    torch::jit::Stack results;  // Meta tensors (metadata only, never written)
  };
  std::mutex meta_mu;
  // shared: a hit takes a reference instead of copying the results
  std::unordered_map<std::string, std::shared_ptr<const MetaResult>> meta_cache;
  // From the schema, made once (fallback.cpp, info_for): per return, the
  // argument a mutable return aliases (-1: none); the arguments the op
  // writes without returning them, in argument order.
  std::vector<int> ret_alias_arg;
  std::vector<int> unreturned_writes;
  bool meta_uses_scalar_values = false;  // arange/linspace: Scalars shape the output
  bool pointwise = false;  // tagged pointwise: TensorIterator's overlap checks apply (operands.cpp)
  // Special handling, decided once per operator (never by name per call):
  int mask_indices_arg = -1;  // index ops: `indices` (Tensor?[]) whose masks become long indices
  int output_size_arg = -1;   // repeat_interleave.Tensor: output_size, filled from the repeats
  // _grouped_mm: its Meta kernel states CUDA's rules (bf16 inputs, 16-byte
  // aligned strides); the CPU kernel and the core's lowering take every
  // floating dtype and layout, so tpuc computes its output metadata itself
  // (native.cpp, grouped_mm_meta).
  bool own_grouped_mm_meta = false;
  // Backwards PyTorch gives no Meta kernel whose one output is shaped and typed
  // like an input (multi_margin_loss_backward: like self): that input's index.
  int like_arg_meta = -1;
  // The arithmetic ops taken whole (arith.cpp's unboxed kernels: add, sub,
  // mul, div and their in-place forms, whose misses reach the boxed kernel
  // with their stack): their metadata comes from PyTorch's
  // C++ structured meta (at::meta::add, ...), as the composite kernel they
  // replace computed it, not from the Meta dispatch entry (a Python ref whose
  // errors read differently from the CPU's). Null for every other op.
  void (*cpp_meta)(torch::jit::Stack& stack) = nullptr;
  // batch norm whose save_mean/save_invstd are empty in eval mode: eval when
  // argument `bn_eval_arg` is false (training) / a defined tensor (running stats)
  enum class BnEval { None, WhenNotTraining, Always, WhenRunningStats } bn_eval = BnEval::None;
  int bn_eval_arg = -1;
};

// native.cpp: the C++ structured meta of `name` ("aten::add.Tensor"), or null.
void (*cpp_meta_for(const std::string& name))(torch::jit::Stack&);
// Batch norm in eval mode: the Meta results of save_mean/save_invstd made
// what PyTorch's CPU kernels return (fallback.cpp; used by native.cpp).
void eval_batch_norm_stats(const c10::FunctionSchema& schema, const OpInfo& info,
                           const torch::jit::Stack& stack, size_t begin, torch::jit::Stack& meta);

// The tpu generator an op with a `Generator?` argument draws from (None: the
// device's default one), or an undefined generator for another device's.
at::Generator tpu_generator(const c10::IValue& v, c10::DeviceIndex device);

// dynamic.cpp: bool/uint8 masks in an index op's `indices` become long
// indices (through the device's nonzero), and repeat_interleave gets its
// output_size (the repeats' sum), in place on the stack. Only for ops whose
// OpInfo says so (mask_indices_arg / output_size_arg).
void prepare_dynamic_args(const OpInfo& info, const c10::OperatorHandle& op,
                          torch::jit::Stack* stack);

// The core's description of a tpu tensor; false when it cannot take it.
bool describe(const at::Tensor& t, tpuc_tensor* out);

// Runs the op on the device; false (stack untouched, `why` set) when it must
// go to the CPU. *compiling: the core answered TPUC_ERR_NOT_COMPILED
// (TPUC_HOST_FIRST=1): the op runs on the host this time, not as a fallback.
bool run_native(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack,
                std::string& why, bool* compiling);

// fallback.cpp: the operator's OpInfo (made on first use), and the boxed
// kernel itself (native path, else the CPU), for the unboxed kernels of
// arith.cpp to hand a call to when their fast path does not apply.
OpInfo& info_for(const c10::OperatorHandle& op);
void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The core has just answered this thread TPUC_ERR_NOT_COMPILED for an op
// whose unboxed kernel now hands it to tpu_fallback: run it on the host at
// once (host-first) instead of asking the core again.
void note_compiling();
// Runs the op on the host as a host-first op (its program is compiling): as
// the CPU fallback does, but not counted as one (foreach.cpp's programs).
void run_host_first(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The bookkeeping of a run on the CPU (also sparse.cpp's): an error under
// TPUC_FALLBACK=error, else counted in the op's fallbacks, warned once.
void note_cpu_fallback(OpInfo& info, const std::string& why);

// native.cpp, for arith.cpp: the Meta-result cache's entry for the call
// (a, b[, alpha]) of a binary arithmetic op, keyed as the boxed path keys
// that stack (one cache for both); null on a miss, a key the cache does not
// take (a host tensor of several elements, a symbolic alpha) or a call
// without a Meta result. `device`: the call's tpu device (-1: none).
std::shared_ptr<const OpInfo::MetaResult> cached_binary_meta(OpInfo& info, const at::Tensor& a,
                                                             const at::Tensor& b,
                                                             const at::Scalar* alpha, int& device);
// A fresh tpu tensor for a Meta result: its strides when dense, else contiguous.
at::Tensor allocate_like_meta(const at::Tensor& m, c10::DeviceIndex device);
// Makes a mutated argument's metadata what the Meta kernel made it.
void follow_meta(const at::Tensor& real, const at::Tensor& m);
// operands.cpp: a host operand of an op (a 0-dim CPU tensor, CPU indices) on
// the device. A wrapped number (the 0.5 of `loss * 0.5`, a double) ranks below
// every tensor in PyTorch's type promotion, a 0-dim one too, but the core sees
// only tensors: uploaded as float64, `f32 0-dim * 0.5` computed in float64, one
// rounding off the CPU's and CUDA's result and a float64 program (which a TPU
// emulates); `int tensor * 0.1` computed in float64 too, where PyTorch
// computes in the default dtype. So a wrapped float (complex) number goes up
// as float32 (complex64) when `common`, the promoted dtype of the op's tpu
// tensors, is float32 or complex64, or, for `arithmetic` ops (add, sub, mul,
// div, whose kernels compute 16-bit types in float32), float16 or bfloat16;
// with integer or bool tensors, when the default dtype is float32: the
// conversion the CPU kernel makes. Anything else goes up as it is.
c10::ScalarType host_operand_dtype(const at::Tensor& host, c10::ScalarType common, bool arithmetic);
// `common` for a boxed call: the promoted dtype of its tpu Tensor arguments
// (Undefined when there are none, or one is uint16/32/64).
c10::ScalarType tpu_tensors_dtype(const OpInfo& info, const torch::jit::Stack& stack, size_t begin,
                                  size_t nargs);
at::Tensor upload_host_operand(const at::Tensor& host, c10::ScalarType common, bool arithmetic,
                               c10::DeviceIndex device);
// operands.cpp: the overlap errors a pointwise op's TensorIterator raises on
// the CPU and CUDA (its Meta kernel does not: Meta tensors have no memory): a
// written tensor must not hold one element twice (an expand), nor overlap an
// input in part (x[1:].add_(x[:-1])). tpuc computes from the values before
// the op, so without the check such a call gives a clone's result where
// PyTorch raises.
void check_written_overlap(const at::Tensor& written, const at::Tensor* inputs, size_t n);
// The same for a boxed call of an op tagged pointwise: each argument it writes
// against the others.
void check_pointwise_writes(const OpInfo& info, const torch::jit::Stack& stack, size_t begin,
                            size_t nargs);

// arith.cpp: tpuc's PrivateUse1 kernels of the arithmetic ops (the unboxed
// fast path, else the boxed kernel), for arith_autograd.cpp to call directly.
namespace arith {
at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
at::Tensor& add_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
at::Tensor sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
at::Tensor& sub_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha);
at::Tensor mul(const at::Tensor& a, const at::Tensor& b);
at::Tensor& mul_(at::Tensor& a, const at::Tensor& b);
at::Tensor div(const at::Tensor& a, const at::Tensor& b);
at::Tensor& div_(at::Tensor& a, const at::Tensor& b);
}  // namespace arith

}  // namespace tpuc_torch
