// copy.cpp — tensors in and out of the device: the empty kernels, copies in
// every direction (_copy_from, _copy_from_and_resize) and reading a scalar.
//
// Host -> device: when the destination covers its whole storage densely the
// data is converted on the host and uploaded as the storage's new buffer.
// Otherwise a temporary dense tpu tensor is uploaded and the core's
// "aten::copy_" writes it through the strided view; without that op the
// storage is read, modified and written back through the host (correct for
// any view). Device -> host downloads the storage's bytes and views them
// with the tensor's layout.
#include "tpuc_torch.h"

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/neg.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <vector>

namespace tpuc_torch {

namespace {

// Sets the thread's current device for a scope (the allocator allocates there).
struct CurrentDevice {
  explicit CurrentDevice(c10::DeviceIndex index) : prev_(current_device()) {
    set_current_device(index);
  }
  ~CurrentDevice() { set_current_device(prev_); }
  c10::DeviceIndex prev_;
};

c10::DeviceIndex index_of(std::optional<c10::Device> device) {
  if (device && device->has_index()) return device->index();
  return current_device();
}

bool covers_whole_storage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() && !t.is_conj() && !t.is_neg() &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

// Uploads `host` (dense, dst's dtype and sizes) as the whole of dst's storage.
void upload_whole(const at::Tensor& dst, const at::Tensor& host) {
  tpuc_dtype dt;
  tpuc_storage* s = storage_of(dst);
  if (to_tpuc_dtype(dst.scalar_type(), &dt) && dst.dim() <= TPUC_MAX_DIMS) {
    check(tpuc_storage_upload(s, dt, host.sizes().data(), static_cast<int>(host.dim()),
                              host.const_data_ptr()),
          "copying to the device");
  } else {
    int64_t dims[1] = {static_cast<int64_t>(dst.storage().nbytes())};
    check(tpuc_storage_upload(s, TPUC_U8, dims, 1, host.const_data_ptr()), "copying to the device");
  }
}

// Uploads raw storage bytes (as 1-D of `dtype` when the size allows it).
void upload_bytes(tpuc_storage* s, c10::ScalarType dtype, const void* data, size_t nbytes) {
  if (nbytes == 0) return;
  tpuc_dtype dt;
  size_t item = c10::elementSize(dtype);
  int64_t dims[1];
  if (to_tpuc_dtype(dtype, &dt) && nbytes % item == 0) {
    dims[0] = static_cast<int64_t>(nbytes / item);
  } else {
    dt = TPUC_U8;
    dims[0] = static_cast<int64_t>(nbytes);
  }
  check(tpuc_storage_upload(s, dt, dims, 1, data), "copying to the device");
}

// The same view of the same storage, without the conjugate / negative bits.
at::Tensor without_math_bits(const at::Tensor& t) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(t.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

at::Tensor empty_host(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  return at::Tensor(at::detail::empty_cpu(sizes, dtype));
}

// dst (tpu) <- src (a CPU tensor, any dtype, broadcastable to dst).
void copy_to_device(const at::Tensor& dst, const at::Tensor& src) {
  if (covers_whole_storage(dst)) {
    at::Tensor host = empty_host(dst.sizes(), dst.scalar_type());
    host.copy_(src);  // converts, broadcasts and raises PyTorch's own shape errors
    if (dst.numel() > 0) upload_whole(dst, host);
    return;
  }
  if (dst.numel() > 0 && !dst.is_conj() && !dst.is_neg()) {
    at::Tensor tmp = empty_tpu(dst.sizes(), {}, dst.scalar_type(), dst.device().index());
    copy_to_device(tmp, src);
    if (core_copy(dst, tmp)) return;
    // No "aten::copy_" on the device yet: write through the host below.
  }
  at::Tensor view = host_view(dst);
  view.copy_(src);
  if (dst.numel() > 0) {
    upload_bytes(storage_of(dst), dst.scalar_type(), view.storage().data(), view.storage().nbytes());
  }
}

// ---- kernels ------------------------------------------------------------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "tpuc: tpu tensors are strided, got layout ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  c10::DeviceIndex index = index_of(device);
  check_device(index);
  CurrentDevice guard(index);
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "tpuc: tpu tensors are strided, got layout ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  return empty_tpu(size, stride, c10::dtype_or_default(dtype), index_of(device));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool src_dev = self.is_privateuseone(), dst_dev = dst.is_privateuseone();
  TORCH_CHECK(self.layout() == c10::kStrided && dst.layout() == c10::kStrided,
              "tpuc: copies to and from tpu need strided tensors");
  // copy_ hands a tpu copy to _copy_from before the TensorIterator whose
  // checks a CPU or CUDA copy passes: PyTorch's errors for a destination
  // that writes one element twice (an expand) or that overlaps its source
  // in part (x[1:].copy_(x[:-1])), instead of a result.
  if (dst_dev) {
    at::assert_no_internal_overlap(dst);
    if (src_dev) at::assert_no_partial_overlap(dst, self);
  }
  if (src_dev && dst_dev) {
    if (self.device() == dst.device()) {
      if (core_copy(dst, self)) return dst;
      // A lazily conjugated or negated source (x.conj(), autograd's complex
      // gradients): copy its data, then conjugate / negate on the device.
      if ((self.is_conj() || self.is_neg()) && !dst.is_conj() && !dst.is_neg() &&
          core_copy(dst, without_math_bits(self))) {
        at::Tensor d = dst;  // in place through the out= forms (conj_physical_ calls a CPU stub)
        if (self.is_conj() && d.is_complex()) at::conj_physical_out(d, d);
        if (self.is_neg()) at::neg_out(d, d);
        return dst;
      }
    }
    copy_to_device(dst, host_view(self));
  } else if (dst_dev) {
    copy_to_device(dst, self);
  } else if (src_dev) {
    at::Tensor view = host_view(self);
    const_cast<at::Tensor&>(dst).copy_(view, non_blocking);
  } else {
    TORCH_CHECK(false, "tpuc: _copy_from between ", self.device(), " and ", dst.device());
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) restride_tpu(dst, self.sizes(), {});
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  return host_view(self).item();
}

}  // namespace

at::Tensor host_view(const at::Tensor& t) {
  tpuc_storage* s = storage_of(t);
  size_t nbytes = tpuc_storage_nbytes(s);
  at::Tensor bytes = empty_host({static_cast<int64_t>(nbytes)}, c10::kByte);
  if (nbytes) check(tpuc_storage_download(s, bytes.mutable_data_ptr(), nbytes), "copying to the host");
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(bytes.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.is_conj()) impl->_set_conj(true);
  if (t.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                     c10::DeviceIndex device) {
  check_device(device);
  CurrentDevice guard(device);
  auto ks = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  if (strides.size() != sizes.size()) {
    return at::detail::empty_generic(sizes, allocator(), ks, dtype, std::nullopt);
  }
  return at::detail::empty_strided_generic(sizes, strides, allocator(), ks, dtype);
}

}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(tpuc_torch::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(tpuc_torch::empty_strided));
  m.impl("_copy_from", TORCH_FN(tpuc_torch::copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(tpuc_torch::copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(tpuc_torch::local_scalar_dense));
}

// Copies see the conjugate and negative bits themselves (host_view keeps
// them; the core's copy is not used for such tensors). Without this, the
// math-bit fallbacks would resolve the source with clone(), which copies
// through _copy_from again: endless recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
