// fastpath.cpp — the kernels behind nn.TransformerEncoder's and nn.MultiheadAttention's
// inference fast path on "tpu".
//
// In eval mode without autograd, torch/nn/modules/transformer.py and activation.py call
// fused ops for any device in their list, which names the PrivateUse1 backend:
//
//   _transformer_encoder_layer_fwd, _native_multi_head_attention
//       ATen registers them for CPU and CUDA only, so on "tpu" the boxed kernel ran each
//       whole layer on the CPU (correct, but every layer's weights and activations went to
//       the host and back). ATen's CPU implementations are written with ATen ops, so the
//       same functions are registered here for "tpu": their ops dispatch to "tpu" as any
//       other (one of them, _transform_bias_rescale_qkv, is run by the boxed kernel).
//   _nested_tensor_from_mask_left_aligned
//       With a src_key_padding_mask, nn.TransformerEncoder (enable_nested_tensor=True, the
//       default) first asks this whether the mask is left aligned and, if so, packs the
//       batch into a nested tensor. "tpu" has no nested tensors, so that raised. The answer
//       here is "no" for "tpu" tensors (the mask check is its only caller in PyTorch), which
//       makes the encoder keep the dense batch and pass the mask to each layer, as it does
//       with enable_nested_tensor=False: the unpadded positions get the same values, but the
//       padded ones hold computed values where the CPU's nested path returns zeros (and a
//       decoder that reads that memory without memory_key_padding_mask sees them). A
//       warning says so once. An encoder built with mask_check=False skips the question and
//       still reaches the nested path, which raises.
#include "tpuc_torch.h"

#include <ATen/ATen.h>
#include <ATen/ops/_native_multi_head_attention_native.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_native.h>
#include <torch/library.h>

namespace tpuc_torch {
namespace {

bool not_left_aligned_on_tpu(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(t.dim() == 3 && mask.dim() == 2 && t.size(0) == mask.size(0) &&
                  t.size(1) == mask.size(1),
              "_nested_tensor_from_mask_left_aligned: expected a [batch, seq, ...] tensor and a "
              "[batch, seq] mask, got ", t.sizes(), " and ", mask.sizes());
  TORCH_WARN_ONCE(
      "tpuc: nn.TransformerEncoder keeps the padded batch on tpu (no nested tensors): the "
      "output at padded positions holds computed values, as with enable_nested_tensor=False, "
      "where the CPU's nested fast path returns zeros. Pass memory_key_padding_mask to a "
      "decoder that reads this output, or mask the padded positions.");
  return false;
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(at::native::transformer_encoder_layer_forward));
  m.impl("_native_multi_head_attention", TORCH_FN(at::native::native_multi_head_attention_cpu));
  m.impl("_nested_tensor_from_mask_left_aligned",
         TORCH_FN(tpuc_torch::not_left_aligned_on_tpu));
}
