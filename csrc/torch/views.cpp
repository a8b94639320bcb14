// views.cpp — metadata-only kernels: views share the storage and change
// sizes, strides and offset (PyTorch's own implementations, which never touch
// data); resize_ and set_ rebind or grow storages through the core.
#include "tpuc_torch.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace tpuc_torch {
namespace {

// Grows the storage of `self` when its sizes/strides/offset reach past it.
void ensure_storage(const at::Tensor& self) {
  if (self.numel() == 0) return;
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                   self.element_size(), self.storage_offset());
  if (needed > self.storage().nbytes()) resize_storage(self.storage(), needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  at::detail::check_size_nonnegative(size);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->sizes().equals(size)) impl->set_sizes_contiguous(size);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format",
                *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  restride_tpu(self, size, stride.data() ? stride : c10::IntArrayRef());
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  auto n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceIndex prev = current_device();
  set_current_device(self.device().index());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), /*resizable=*/true);
  set_current_device(prev);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

}  // namespace

void restride_tpu(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  at::detail::check_size_nonnegative(sizes);
  auto* impl = self.unsafeGetTensorImpl();
  if (!strides.empty() && strides.size() == sizes.size()) {
    impl->set_sizes_and_strides(sizes, strides);
  } else {
    impl->set_sizes_contiguous(sizes);
  }
  ensure_storage(self);
}

}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("alias", TORCH_FN(at::native::alias));
  m.impl("is_set_to", TORCH_FN(at::native::is_set_to));
  m.impl("resize_", TORCH_FN(tpuc_torch::resize_));
  m.impl("set_.source_Storage", TORCH_FN(tpuc_torch::set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(tpuc_torch::set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(tpuc_torch::set_source_tensor));
  m.impl("set_", TORCH_FN(tpuc_torch::set_empty));
}
