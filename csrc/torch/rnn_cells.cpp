// rnn_cells.cpp — the fused LSTM and GRU cells that nn.LSTM and nn.GRU call on "tpu".
//
// ATen's recurrent layers (aten/src/ATen/native/RNN.cpp, LSTMCell and GRUCell) take a
// fused cell kernel for every input on CUDA, XPU or a PrivateUse1 device:
// _thnn_fused_lstm_cell and _thnn_fused_gru_cell, whose backward autograd computes
// with _thnn_fused_lstm_cell_backward_impl and _thnn_fused_gru_cell_backward. Those
// four have CUDA kernels only, so on "tpu" the boxed fallback found no CPU kernel
// either and nn.LSTM / nn.GRU raised. Here they are compositions of ATen ops on the
// device (each op then runs as strict, fused or debug mode runs it):
//
//   LSTM  gates = input_gates + hidden_gates (+ both biases), chunked i, f, g, o;
//         i, f, o = sigmoid, g = tanh; cy = f * cx + i * g; hy = o * tanh(cy).
//         workspace: the activated gates [i f g o] (the meta kernel's shape, that of
//         input_gates), which the backward reads instead of recomputing.
//   GRU   r = sigmoid(ir + hr), z = sigmoid(iz + hz), n = tanh(in + r * hn);
//         hy = n + z * (hx - n). workspace: [r z n hx hn], 5 x hidden wide.
//
// The formulas are those of ATen's unfused cells (the CPU's); float16 and bfloat16
// inputs compute in float32 and round the results once, as CUDA's kernels do (the
// CPU's unfused cell rounds every step, and its cell state drifts over a sequence;
// the workspace keeps the inputs' dtype, as on CUDA). Double backward (create_graph)
// does not come here: autograd then uses ATen's differentiable composites
// (_thnn_differentiable_*_cell_backward).
#include "tpuc_torch.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpuc_torch {
namespace {

// float32 for 16-bit floats (the cells' arithmetic), the tensor itself otherwise
at::Tensor up(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

at::Tensor add_bias(at::Tensor gates, const std::optional<at::Tensor>& bias) {
  return bias && bias->defined() ? gates.add(up(*bias)) : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() &&
                  input_gates.size(1) == 4 * cx.size(-1),
              "_thnn_fused_lstm_cell: expected input_gates and hidden_gates of shape "
              "[batch, 4 * hidden] matching cx, got ", input_gates.sizes(), ", ",
              hidden_gates.sizes(), " and ", cx.sizes());
  auto dt = cx.scalar_type();
  at::Tensor gates =
      add_bias(add_bias(up(input_gates).add(up(hidden_gates)), input_bias), hidden_bias);
  auto chunks = gates.chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(),
             o = chunks[3].sigmoid();
  at::Tensor cy = f.mul(up(cx)).add(i.mul(g));
  at::Tensor hy = o.mul(cy.tanh());
  return {hy.to(dt), cy.to(dt), at::cat({i, f, g, o}, 1).to(input_gates.scalar_type())};
}

// d sigmoid(x) / dx from its value s: s * (1 - s); d tanh(x) / dx from t: 1 - t^2
at::Tensor dsigmoid(const at::Tensor& s) { return s.mul(s.neg().add(1)); }
at::Tensor dtanh(const at::Tensor& t) { return t.mul(t).neg().add(1); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  bool has_hy = grad_hy && grad_hy->defined(), has_cy = grad_cy && grad_cy->defined();
  if (!has_hy && !has_cy) return {at::Tensor(), at::Tensor(), at::Tensor()};
  auto w = up(workspace).chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  at::Tensor tcy = up(cy).tanh();
  // the gradient reaching cy: its own, and through hy = o * tanh(cy)
  at::Tensor gcy = has_cy ? up(*grad_cy) : at::zeros_like(tcy);
  at::Tensor go;
  if (has_hy) {
    at::Tensor ghy = up(*grad_hy);
    gcy = gcy.add(ghy.mul(o).mul(dtanh(tcy)));
    go = ghy.mul(tcy).mul(dsigmoid(o));
  } else {
    go = at::zeros_like(o);
  }
  at::Tensor gi = gcy.mul(g).mul(dsigmoid(i));
  at::Tensor gf = gcy.mul(up(cx)).mul(dsigmoid(f));
  at::Tensor gg = gcy.mul(i).mul(dtanh(g));
  at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  at::Tensor grad_cx = gcy.mul(f).to(cx.scalar_type());
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0).to(workspace.scalar_type()) : at::Tensor();
  return {grad_gates.to(workspace.scalar_type()), grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() &&
                  input_gates.size(1) == 3 * hx.size(-1),
              "_thnn_fused_gru_cell: expected input_gates and hidden_gates of shape "
              "[batch, 3 * hidden] matching hx, got ", input_gates.sizes(), ", ",
              hidden_gates.sizes(), " and ", hx.sizes());
  auto ig = add_bias(up(input_gates), input_bias).chunk(3, 1);
  auto hg = add_bias(up(hidden_gates), hidden_bias).chunk(3, 1);
  at::Tensor h = up(hx);
  at::Tensor r = ig[0].add(hg[0]).sigmoid();
  at::Tensor z = ig[1].add(hg[1]).sigmoid();
  at::Tensor n = ig[2].add(r.mul(hg[2])).tanh();
  at::Tensor hy = n.add(z.mul(h.sub(n)));
  return {hy.to(hx.scalar_type()),
          at::cat({r, z, n, h.expand_as(n), hg[2]}, 1).to(input_gates.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto dt = workspace.scalar_type();
  auto w = up(workspace).chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  at::Tensor g = up(grad_hy);
  at::Tensor grad_hx = g.mul(z);
  at::Tensor gn = g.mul(z.neg().add(1)).mul(dtanh(n));
  at::Tensor gz = g.mul(hx.sub(n)).mul(dsigmoid(z));
  at::Tensor gr = gn.mul(hn).mul(dsigmoid(r));
  at::Tensor grad_input = at::cat({gr, gz, gn}, 1);
  at::Tensor grad_hidden = at::cat({gr, gz, gn.mul(r)}, 1);
  at::Tensor bi = has_bias ? grad_input.sum(0).to(dt) : at::Tensor();
  at::Tensor bh = has_bias ? grad_hidden.sum(0).to(dt) : at::Tensor();
  return {grad_input.to(dt), grad_hidden.to(dt), grad_hx.to(grad_hy.scalar_type()), bi, bh};
}

}  // namespace
}  // namespace tpuc_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(tpuc_torch::lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(tpuc_torch::lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(tpuc_torch::gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(tpuc_torch::gru_cell_backward));
}
