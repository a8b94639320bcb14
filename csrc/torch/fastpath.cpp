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
//       other. Three of those have CPU and CUDA kernels only, and are composed here:
//   _transform_bias_rescale_qkv(qkv [B, T, 3D], bias [3D], heads)
//       -> q, k, v [B, heads, T, D / heads]: the bias added, q scaled by 1/sqrt(D / heads)
//   _masked_softmax(x, mask, dim?, mask_type?)
//       softmax over dim (default the last) with the masked (true) entries left out; a
//       row with every entry masked gives NaN, as the CPU's. mask_type 0: an [L, L]
//       attention mask of an [B, H, L, L] input, 1: a [B, L] padding mask, 2 (or any
//       other shape): the input's shape, as the CPU kernel reads them
//   _addmm_activation(self, mat1, mat2, beta, alpha, use_gelu) (and .out)
//       relu or gelu (exact) of addmm
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
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

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

std::tuple<at::Tensor, at::Tensor, at::Tensor> transform_bias_rescale_qkv(
    const at::Tensor& qkv, const at::Tensor& qkv_bias, int64_t num_heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0 && qkv_bias.dim() == 1 &&
                  qkv_bias.size(0) == qkv.size(2) && num_heads > 0 &&
                  (qkv.size(2) / 3) % num_heads == 0,
              "_transform_bias_rescale_qkv: expected qkv [B, T, 3 D], a bias [3 D] and D "
              "divisible by the heads, got ", qkv.sizes(), ", ", qkv_bias.sizes(), " and ",
              num_heads, " heads");
  int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / 3, dh = d / num_heads;
  // [B, T, 3, heads, dh] -> [3, B, heads, T, dh]
  at::Tensor x = qkv.add(qkv_bias).view({b, t, 3, num_heads, dh}).permute({2, 0, 3, 1, 4});
  at::Tensor q = x.select(0, 0).mul(1.0 / std::sqrt(static_cast<double>(dh)));
  return {q.contiguous(), x.select(0, 1).contiguous(), x.select(0, 2).contiguous()};
}

at::Tensor masked_softmax(const at::Tensor& input, const at::Tensor& mask_in,
                          std::optional<int64_t> dim_opt, std::optional<int64_t> mask_type) {
  TORCH_CHECK(mask_in.scalar_type() == at::kBool, "_masked_softmax: the mask must be bool");
  at::Tensor mask = mask_in;
  int64_t type = (mask.dim() != 2 || input.dim() != 4) ? 2 : mask_type.value_or(2);
  if (type == 1) {
    TORCH_CHECK(input.size(0) == mask.size(0) && input.size(2) == mask.size(1),
                "_masked_softmax: a padding mask [B, L] for an input [B, H, L, L], got ",
                mask.sizes(), " and ", input.sizes());
    mask = mask.view({input.size(0), 1, 1, input.size(2)});
  } else if (type == 0) {
    TORCH_CHECK(input.size(2) == mask.size(0) && input.size(2) == mask.size(1),
                "_masked_softmax: an attention mask [L, L] for an input [B, H, L, L], got ",
                mask.sizes(), " and ", input.sizes());
    mask = mask.view({1, 1, input.size(2), input.size(2)});
  } else {
    TORCH_CHECK(type == 2 && mask.sizes() == input.sizes(), "_masked_softmax: mask_type ",
                type, " with a mask ", mask.sizes(), " for an input ", input.sizes());
  }
  mask = mask.expand(input.sizes());
  int64_t dim = c10::maybe_wrap_dim(dim_opt.value_or(input.dim() - 1), input.dim());
  at::Tensor x = input.to(at::isReducedFloatingType(input.scalar_type()) ? at::kFloat
                                                                          : input.scalar_type());
  at::Tensor neg_inf = at::full({}, -std::numeric_limits<double>::infinity(), x.options());
  return at::where(mask, neg_inf, x).softmax(dim).to(input.scalar_type());
}

at::Tensor addmm_activation(const at::Tensor& self, const at::Tensor& mat1,
                            const at::Tensor& mat2, const at::Scalar& beta,
                            const at::Scalar& alpha, bool use_gelu) {
  at::Tensor r = at::addmm(self, mat1, mat2, beta, alpha);
  return use_gelu ? at::gelu(r) : at::relu(r);
}

at::Tensor& addmm_activation_out(const at::Tensor& self, const at::Tensor& mat1,
                                 const at::Tensor& mat2, const at::Scalar& beta,
                                 const at::Scalar& alpha, bool use_gelu, at::Tensor& out) {
  at::Tensor r = addmm_activation(self, mat1, mat2, beta, alpha, use_gelu);
  if (!out.sizes().equals(r.sizes())) out.resize_(r.sizes());
  out.copy_(r);
  return out;
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(at::native::transformer_encoder_layer_forward));
  m.impl("_native_multi_head_attention", TORCH_FN(at::native::native_multi_head_attention_cpu));
  m.impl("_nested_tensor_from_mask_left_aligned",
         TORCH_FN(tpuc_torch::not_left_aligned_on_tpu));
  m.impl("_transform_bias_rescale_qkv", TORCH_FN(tpuc_torch::transform_bias_rescale_qkv));
  m.impl("_masked_softmax", TORCH_FN(tpuc_torch::masked_softmax));
  m.impl("_addmm_activation", TORCH_FN(tpuc_torch::addmm_activation));
  m.impl("_addmm_activation.out", TORCH_FN(tpuc_torch::addmm_activation_out));
}
