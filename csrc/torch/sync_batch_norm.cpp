// sync_batch_norm.cpp — the five per-channel kernels nn.SyncBatchNorm calls on "tpu".
//
// With more than one rank, nn.SyncBatchNorm (torch/nn/modules/_functions.py) computes each
// rank's channel statistics, all-gathers them, combines them, normalizes, and in the
// backward all-reduces two channel sums. The ops it calls have CUDA kernels only (not even
// the CPU has them), so on "tpu" the boxed kernel found nothing to fall back to. Here they
// are compositions of ATen ops over dim 1 (channels), in the accumulation dtype (float32
// for 16-bit inputs, as CUDA's kernels), with CUDA's output dtypes:
//
//   batch_norm_stats(x, eps)                       -> mean, invstd = 1/sqrt(var_biased + eps)
//   batch_norm_gather_stats_with_counts(x, mean[W,C], invstd[W,C], running_mean?, running_var?,
//       momentum, eps, counts[W])                  -> the whole batch's mean and invstd (the
//       ranks' statistics pooled by their counts); the running statistics are updated in
//       place with the unbiased variance, as batch norm's are
//   batch_norm_elemt(x, w?, b?, mean, invstd, eps) -> (x - mean) * invstd * w + b
//   batch_norm_backward_reduce(dy, x, mean, invstd, w?, input_g, weight_g, bias_g)
//                                                  -> sum dy, sum dy (x - mean), grad w, grad b
//   batch_norm_backward_elemt(dy, x, mean, invstd, w?, sum_dy, sum_dy_xmu, count[W])
//                                                  -> dx, with the totals over all ranks
#include "tpuc_torch.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpuc_torch {
namespace {

at::ScalarType acc_type(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
}

// every dim but the channels (1)
std::vector<int64_t> reduce_dims(const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 2, "SyncBatchNorm: expected an input with a channel dimension (at least "
              "2 dims), got ", x.sizes());
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < x.dim(); i++) d.push_back(i);
  return d;
}

// a [C] tensor shaped to broadcast against x ([1, C, 1, ...])
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

std::tuple<at::Tensor, at::Tensor> stats(const at::Tensor& input, double eps) {
  at::Tensor x = input.to(acc_type(input));
  auto dims = reduce_dims(x);
  at::Tensor mean = x.mean(dims);
  at::Tensor var = x.sub(per_channel(mean, x)).square().mean(dims);
  return {mean, var.add(eps).rsqrt()};
}

std::tuple<at::Tensor, at::Tensor> gather_stats(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    double momentum, double eps, const at::Tensor& counts) {
  TORCH_CHECK(mean.dim() == 2 && invstd.sizes() == mean.sizes() && counts.numel() == mean.size(0),
              "batch_norm_gather_stats_with_counts: expected mean and invstd [world, C] and "
              "counts [world], got ", mean.sizes(), ", ", invstd.sizes(), " and ", counts.sizes());
  at::Tensor c = counts.to(mean.scalar_type()).unsqueeze(1);  // [W, 1]
  at::Tensor n = c.sum(0);                                    // [1]
  at::Tensor m = mean.mul(c).sum(0).div(n);
  // each rank's biased variance, back from its invstd; pooled with its mean's spread
  at::Tensor var_k = invstd.square().reciprocal().sub(eps);
  at::Tensor var = var_k.add(mean.sub(m).square()).mul(c).sum(0).div(n);
  if (running_mean && running_mean->defined()) {
    at::NoGradGuard no_grad;
    running_mean->mul_(1 - momentum).add_(m.to(running_mean->scalar_type()), momentum);
  }
  if (running_var && running_var->defined()) {
    at::NoGradGuard no_grad;
    at::Tensor unbiased = var.mul(n).div(n.sub(1));
    running_var->mul_(1 - momentum).add_(unbiased.to(running_var->scalar_type()), momentum);
  }
  return {m, var.add(eps).rsqrt()};
}

at::Tensor elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                 const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                 const at::Tensor& invstd, double eps) {
  at::Tensor x = input.to(acc_type(input));
  at::Tensor y = x.sub(per_channel(mean, x)).mul(per_channel(invstd, x));
  if (weight && weight->defined()) y = y.mul(per_channel(weight->to(y.scalar_type()), x));
  if (bias && bias->defined()) y = y.add(per_channel(bias->to(y.scalar_type()), x));
  return y.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& invstd, const std::optional<at::Tensor>& weight, bool input_g,
    bool weight_g, bool bias_g) {
  auto dims = reduce_dims(input);
  at::Tensor dy = grad_out.to(acc_type(input));
  at::Tensor xmu = input.to(dy.scalar_type()).sub(per_channel(mean, input));
  at::Tensor sum_dy = dy.sum(dims);
  at::Tensor sum_dy_xmu = dy.mul(xmu).sum(dims);
  at::ScalarType wt = weight && weight->defined() ? weight->scalar_type() : mean.scalar_type();
  at::Tensor grad_weight = weight_g ? sum_dy_xmu.mul(invstd).to(wt) : at::Tensor();
  at::Tensor grad_bias = bias_g ? sum_dy.to(wt) : at::Tensor();
  if (!input_g) return {at::Tensor(), at::Tensor(), grad_weight, grad_bias};
  return {sum_dy.to(mean.scalar_type()), sum_dy_xmu.to(mean.scalar_type()), grad_weight,
          grad_bias};
}

at::Tensor backward_elemt(const at::Tensor& grad_out, const at::Tensor& input,
                          const at::Tensor& mean, const at::Tensor& invstd,
                          const std::optional<at::Tensor>& weight, const at::Tensor& sum_dy,
                          const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  at::ScalarType at_ = acc_type(input);
  at::Tensor total = count.to(at_).sum();  // the elements per channel over every rank
  at::Tensor mean_dy = sum_dy.to(at_).div(total);
  at::Tensor mean_dy_xmu = sum_dy_xmu.to(at_).div(total);
  at::Tensor x = input.to(at_);
  at::Tensor is = per_channel(invstd.to(at_), x);
  at::Tensor xmu = x.sub(per_channel(mean.to(at_), x));
  at::Tensor g = grad_out.to(at_)
                     .sub(per_channel(mean_dy, x))
                     .sub(xmu.mul(is.square()).mul(per_channel(mean_dy_xmu, x)))
                     .mul(is);
  if (weight && weight->defined()) g = g.mul(per_channel(weight->to(at_), x));
  return g.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_stats", TORCH_FN(tpuc_torch::stats));
  m.impl("batch_norm_gather_stats_with_counts", TORCH_FN(tpuc_torch::gather_stats));
  m.impl("batch_norm_elemt", TORCH_FN(tpuc_torch::elemt));
  m.impl("batch_norm_backward_reduce", TORCH_FN(tpuc_torch::backward_reduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(tpuc_torch::backward_elemt));
}
