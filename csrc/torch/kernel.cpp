// kernel.cpp — user kernels (tpuc.kernel): a StableHLO module run on tpu
// tensors' buffers. The module is compiled through the core's executable
// cache (keyed by its text, so a kernel compiles once per process, and once
// per machine with the disk cache); each input is passed as a buffer of
// exactly its tensor's shape (a reshaping program when the storage's buffer
// holds its elements in another shape, a contiguous copy for a view); the
// results become new tensors. Ops pending in fused mode or in a
// torch.compile graph are run first (the kernel is a boundary of the fused
// program: it runs eagerly).
#include "tpuc_torch.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace tpuc_torch {
namespace {

c10::ScalarType torch_dtype(tpuc_dtype d) {
  static const c10::ScalarType all[] = {
      c10::kBool, c10::kChar, c10::kShort, c10::kInt, c10::kLong, c10::kByte,
      c10::ScalarType::UInt16, c10::ScalarType::UInt32, c10::ScalarType::UInt64, c10::kHalf,
      c10::kBFloat16, c10::kFloat, c10::kDouble, c10::kComplexFloat, c10::kComplexDouble};
  for (c10::ScalarType t : all) {
    tpuc_dtype x;
    if (to_tpuc_dtype(t, &x) && x == d) return t;
  }
  TORCH_CHECK(false, "tpuc.kernel: a kernel result of an element type torch has no dtype for");
}

// The storage's buffer when `t` is the whole storage, dense, in the buffer's
// dtype (in whatever dims); nullptr otherwise (a view, a part, another dtype).
tpuc_buffer* whole_buffer(const at::Tensor& t) {
  tpuc_dtype dt;
  if (!to_tpuc_dtype(t.scalar_type(), &dt) || !t.is_contiguous() || t.storage_offset() != 0)
    return nullptr;
  tpuc_storage* s = storage_of(t);
  if (tpuc_storage_nbytes(s) != static_cast<size_t>(t.numel()) * t.element_size()) return nullptr;
  tpuc_buffer* b = tpuc_storage_get_buffer(s);
  if (b && tpuc_buffer_dtype(b) != dt) {
    tpuc_buffer_release(b);
    return nullptr;
  }
  return b;
}

// The storage's buffer when it is exactly `t` (whole_buffer in t's dims); nullptr otherwise.
tpuc_buffer* exact_buffer(const at::Tensor& t) {
  tpuc_buffer* b = whole_buffer(t);
  if (!b) return nullptr;
  bool same = tpuc_buffer_ndim(b) == t.dim();
  for (int64_t d = 0; same && d < t.dim(); ++d) same = tpuc_buffer_dims(b)[d] == t.size(d);
  if (same) return b;
  tpuc_buffer_release(b);
  return nullptr;
}

// The storage's buffer given `t`'s dims: it holds t's elements in another
// shape (TPUC_FLAT_BUFFERS, the default, keeps storages' buffers rank 1), so
// a one-op program reshapes it (a copy at most; compiled once per shape,
// cached).
tpuc_buffer* reshaped_buffer(tpuc_runtime* rt, int device, const at::Tensor& t) {
  tpuc_buffer* b = whole_buffer(t);
  if (!b) return nullptr;
  tpuc_dtype dt = tpuc_buffer_dtype(b);
  auto type = [&](int ndim, const int64_t* dims) {
    std::string r = "tensor<";
    for (int d = 0; d < ndim; ++d) r += std::to_string(dims[d]) + "x";
    return r + tpuc_dtype_mlir_name(dt) + ">";
  };
  const std::string from = type(tpuc_buffer_ndim(b), tpuc_buffer_dims(b));
  const std::string to = type(static_cast<int>(t.dim()), t.sizes().data());
  const std::string text = "module @tpuc_kernel_reshape {\n  func.func public @main(%a: " + from +
                           ") -> (" + to + ") {\n    %r = \"stablehlo.reshape\"(%a) : (" + from +
                           ") -> " + to + "\n    \"func.return\"(%r) : (" + to +
                           ") -> ()\n  }\n}\n";
  tpuc_executable* exe = nullptr;
  tpuc_buffer* out = nullptr;
  tpuc_status* st = tpuc_compile(rt, text.data(), text.size(), &exe);
  if (!st) st = tpuc_execute(exe, device, &b, 1, &out, false);
  tpuc_executable_release(exe);
  tpuc_buffer_release(b);
  check(st, "tpuc.kernel: passing an input in its shape");
  return out;
}

}  // namespace

std::vector<at::Tensor> kernel_run(const std::string& text, const std::vector<at::Tensor>& inputs) {
  tpuc_runtime* rt = runtime();
  int device = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    TORCH_CHECK_VALUE(t.defined() && t.is_privateuseone(), "tpuc.kernel: input ", i,
                      " is not a tpu tensor (", t.defined() ? t.device().str() : "undefined",
                      "); move it with .to('tpu')");
    if (device < 0) device = t.device().index();
    TORCH_CHECK_VALUE(t.device().index() == device, "tpuc.kernel: inputs on tpu:", device,
                      " and tpu:", static_cast<int>(t.device().index()));
  }
  if (device < 0) device = current_device();
  check_device(static_cast<c10::DeviceIndex>(device));

  tpuc_executable* exe = nullptr;
  check(tpuc_compile(rt, text.data(), text.size(), &exe), "tpuc.kernel: compiling the kernel");
  std::vector<tpuc_buffer*> bufs;
  auto cleanup = [&] {
    for (tpuc_buffer* b : bufs) tpuc_buffer_release(b);
    tpuc_executable_release(exe);
  };
  try {
    std::vector<at::Tensor> dense;
    for (const at::Tensor& t : inputs) dense.push_back(t.resolve_conj().resolve_neg().contiguous());
    check(tpuc_flush(rt, device), "tpuc.kernel: running pending ops");
    for (at::Tensor& t : dense) {
      tpuc_buffer* b = exact_buffer(t);
      if (!b) b = reshaped_buffer(rt, device, t);
      if (!b) {  // a part of the storage, or another dtype: a fresh copy
        t = t.clone(at::MemoryFormat::Contiguous);
        check(tpuc_flush(rt, device), "tpuc.kernel: running pending ops");
        b = exact_buffer(t);
      }
      if (!b) b = reshaped_buffer(rt, device, t);
      TORCH_CHECK(b, "tpuc.kernel: could not pass an input of shape ", t.sizes(),
                  " as one buffer");
      bufs.push_back(b);
    }
    const int nout = tpuc_executable_num_outputs(exe);
    std::vector<tpuc_buffer*> outs(static_cast<size_t>(nout), nullptr);
    check(tpuc_execute(exe, device, bufs.data(), static_cast<int>(bufs.size()), outs.data(),
                       launch_blocking()),
          "tpuc.kernel: running the kernel");
    std::vector<at::Tensor> results;
    for (int i = 0; i < nout; ++i) {
      std::vector<int64_t> dims(tpuc_executable_output_dims(exe, i),
                                tpuc_executable_output_dims(exe, i) + tpuc_executable_output_ndim(exe, i));
      at::Tensor r = empty_tpu(dims, {}, torch_dtype(tpuc_executable_output_dtype(exe, i)),
                               static_cast<c10::DeviceIndex>(device));
      tpuc_status* st = tpuc_storage_set_buffer(storage_of(r), outs[i]);
      tpuc_buffer_release(outs[i]);
      outs[i] = nullptr;
      if (st) {
        for (int j = i + 1; j < nout; ++j) tpuc_buffer_release(outs[j]);
        check(st, "tpuc.kernel: binding a result");
      }
      results.push_back(r);
    }
    cleanup();
    return results;
  } catch (...) {
    cleanup();
    throw;
  }
}

}  // namespace tpuc_torch
